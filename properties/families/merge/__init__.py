"""The two-state merges: softmax_merge(p_a, lse_a, p_b, lse_b) and attention_merge(o_a, lse_a,
o_b, lse_b), returning the merged (values, lse), drawn as a MergeCase (a row's chunk states and a
merge tree over them).

* ``case.py``: MergeCase and its lse layouts; ``strategies.py``: merge_cases;
* ``bounds.py``: the chunked-merge bounds; ``truth.py``: the FP64 truth of a merged state;
* ``laws.py``: the family's laws.

Importing this package registers the ops and their laws."""
from __future__ import annotations

from softmax_properties import oracles

from ...spec import OpSpec, register, row64, t64
from ...targets import torch as torch_target
from . import strategies as S, truth

COMPOSES = ()


def _merge_rows(column):
    """MERGE_SEMANTICS rows for softmax_merge (column 0: p) or attention_merge (column 1: o)."""
    rows = []
    for what, la, xa, lb, xb, *outs in oracles.MERGE_SEMANTICS:
        values, lse = outs[column], outs[2]
        if values is None:
            continue
        args = (row64(xa), t64([la]), row64(xb), t64([lb]))
        rows.append((what, args, {}, (row64(values), t64([lse]))))
    return tuple(rows)


# merges of two (x, lse) states, returning (x, lse); drawn as a MergeCase (a row's chunk states
# and a merge tree over them)
register(OpSpec("softmax_merge", "merge", ("p_a", "lse_a", "p_b", "lse_b"), oracles.softmax_merge, truth.merge_truth,
                S.merge_case, S.many_row_merge_case, semantics=_merge_rows(0), torch_ref=torch_target.softmax_merge))
register(OpSpec("attention_merge", "merge", ("o_a", "lse_a", "o_b", "lse_b"), oracles.attention_merge,
                truth.merge_truth, S.merge_case, S.many_row_merge_case, semantics=_merge_rows(1),
                torch_ref=torch_target.attention_merge))

from . import laws  # noqa: E402,F401  (the family's laws, registered after its ops)
