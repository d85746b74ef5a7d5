"""The merge_states cases: S chunk states of a row, finite garbage in empty ones, any lse magnitude."""
from __future__ import annotations

import dataclasses
import math

import torch
from hypothesis import strategies as st

from ...strategies import (FAMILIES, LIMITS, Layout, batch_shapes, dtypes, flat_layouts, layouts, logits,
                           many_row_logits, many_rows_count, rarely)
from ..merge.strategies import draw_keys
from .case import STATES_LSE_LAYOUTS, StatesCase


def states_case(draw, spec, families=None, max_cols=None):
    """The case of merge_states (OpSpec.cases): a StatesCase (states_cases)."""
    return draw(states_cases(families, max_cols))


def many_row_states_case(draw, spec):
    return draw(states_cases(many_rows=True))


# values in empty states of merge_states cases: finite ones only. The contract leaves an empty
# state's o unspecified, and several attention libraries multiply it by its zero weight, so NaN
# or inf there belongs to the strict law that is about exactly that (merge_states_empty_garbage_ignored)
FINITE_GARBAGE = (0.0, -0.0, 1.0, 1e4)


def lse_shifts(dtype):
    """Shifts added to every score of a merge_states case so that its states' lse reach any
    magnitude the lse dtype holds: +-6e4 (beyond float16's range, and below a running max that
    starts at -5e4), +-1e9, +-1e30, +-finfo.max / 2 and +-(1 - 2**-10) finfo.max."""
    mx = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).max
    out = []
    for v in (6e4, 1e9, 1e30, mx / 2, mx * (1 - 2.0**-10)):
        out += [-v, v]
    return out


def _left_chain(leaves):
    tree = leaves[0]
    for c in leaves[1:]:
        tree = (tree, c)
    return tree


@st.composite
def states_cases(draw, families=None, max_cols=None, many_rows=False):
    """A StatesCase (case.py) for merge_states, drawn like an attention_merge
    MergeCase (scores of the families or q k^T, 0 to max_cols keys, masked and empty chunks, values
    v with dv in {1, 2, 3, 8, 16, 64}) with:

    * S = 1 to 6 states (the chunks), about one case in eight 7 to 24 (split-KV decoding's many
      splits; a kernel may hold a few states' weights and loop over more), stacked in a drawn
      order (the case's tree: a left chain);
    * finite garbage only (FINITE_GARBAGE) in empty states' values;
    * o laid out by layouts() or "states_outer"; lse by STATES_LSE_LAYOUTS;
    * about one case in four an lse_shift (lse_shifts), cut down where the scores are so large that
      the states' lse would round to +-inf in the lse dtype.
    many_rows: thousands of rows of 1 to 8 keys (as merge_cases)."""
    dtype = draw(dtypes(), label="dtype")
    n = draw_keys(draw, many_rows, max_cols)
    k = draw(st.integers(1, 4) if many_rows else rarely(st.integers(7, 24), st.integers(1, 6), 8), label="n_states")
    cuts = tuple(sorted(draw(st.lists(st.integers(0, n), min_size=k - 1, max_size=k - 1), label="cuts")))
    dv = draw(st.sampled_from([1, 2, 3, 8] if many_rows else [1, 2, 3, 8, 16, 64]), label="dv")
    per_row = (max(n, 1) + k) * max(dv, 1)
    if many_rows:
        batch = (draw(many_rows_count(2 * per_row), label="rows"),)
    else:
        batch = draw(batch_shapes(True, max_rows=max(1, LIMITS.max_elems // 4 // per_row)), label="batch")
    kinds = sorted(STATES_LSE_LAYOUTS) if batch else [k_ for k_ in sorted(STATES_LSE_LAYOUTS) if k_ != "broadcast"]
    lse_layout = draw(st.sampled_from(kinds), label="lse_layout")
    rows = math.prod(batch[:-1]) if (lse_layout == "broadcast" and batch) else math.prod(batch)
    scores = draw(many_row_logits(rows, n, dtype) if many_rows else logits(rows, n, dtype, families or FAMILIES),
                  label="scores")
    qk = ()
    if draw(st.booleans(), label="qk"):
        qk = (draw(st.integers(0, 2**16)), draw(st.sampled_from([1, 4, 16, 64])))
    masked = tuple(sorted(set(draw(st.lists(st.integers(0, k - 1), max_size=2), label="masked"))))
    garbage = tuple(draw(st.lists(st.tuples(st.integers(0, k - 1), st.sampled_from(FINITE_GARBAGE)), max_size=2),
                         label="garbage"))
    order = draw(st.permutations(range(k)), label="order")
    layout = draw(st.one_of(flat_layouts() if many_rows else layouts(), st.just(Layout("states_outer"))),
                  label="layout")
    case = StatesCase("merge_states", dtype, scores, tuple(batch), cuts, masked, garbage, _left_chain(list(order)),
                      dv, draw(st.integers(0, 2**16), label="v_seed"), qk, layout, lse_layout)
    shift = draw(rarely(st.sampled_from(lse_shifts(dtype)), st.just(0.0), 4), label="lse_shift")
    if shift:
        # keep |scores + shift| + log(N) inside the lse dtype's range: a state's lse rounded to
        # +-inf would be a different row (an overflow of the inputs, not of the merge)
        s = case.score_values()
        fin = s[torch.isfinite(s)]
        big = float(fin.abs().max()) if fin.numel() else 0.0
        lmax = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).max
        room = lmax * (1 - 2.0**-8) - big - math.log(max(n, 1)) - 1.0
        shift = math.copysign(min(abs(shift), room), shift) if room > 0 else 0.0
        case = dataclasses.replace(case, lse_shift=float(shift))
    return case
