"""The N-way merge, merge_states(o, lse): o (..., S, Dv), lse (..., S), drawn as a StatesCase (a
row's chunk states stacked along a states axis). It composes the two-state merges (``COMPOSES``):
its case is a MergeCase's states stacked, its bounds those of a fold of binary merges, and its
laws judge a state as the merge laws do.

* ``case.py``: StatesCase; ``strategies.py``: states_cases; ``truth.py``: its FP64 truth;
* ``laws.py``: the family's laws.

Importing this package registers the op and its laws."""
from __future__ import annotations

from softmax_properties import oracles

from ...spec import OpSpec, register, t64
from . import strategies as S, truth

COMPOSES = ("merge",)


def _states_rows():
    """attention_merge's rows of MERGE_SEMANTICS as N-way merges of two states (an empty state's
    values are dropped, NaN included: the table's identities)."""
    rows = []
    for what, la, xa, lb, xb, _, o, lse in oracles.MERGE_SEMANTICS:
        if o is None or not xa or not xb:
            continue
        rows.append((what, (t64([[[xa[0]], [xb[0]]]]), t64([[la, lb]])), {}, (t64([[o]]), t64([lse]))))
    return tuple(rows)


# the N-way merge of S states stacked along axis -2 (o) / -1 (lse); drawn as a StatesCase
register(OpSpec("merge_states", "merge_states", ("o", "lse"), oracles.merge_states, truth.states_truth, S.states_case,
                S.many_row_states_case, semantics=_states_rows()))

from . import laws  # noqa: E402,F401  (the family's laws, registered after its ops)
