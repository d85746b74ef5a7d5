"""The merge cases: a row cut into chunks (empty and fully masked ones included), garbage in empty
states, and any merge tree over the chunks."""
from __future__ import annotations

import math

from hypothesis import strategies as st

from ...strategies import (FAMILIES, LIMITS, batch_shapes, dtypes, flat_layouts, layouts, logits, many_row_logits,
                           many_rows_count, rarely, special_lengths)
from .case import LSE_LAYOUTS, MergeCase


def merge_case(draw, spec, families=None, max_cols=None):
    """The case of a binary merge (OpSpec.cases): a MergeCase (merge_cases)."""
    return draw(merge_cases(spec.name, families, max_cols))


def many_row_merge_case(draw, spec):
    return draw(merge_cases(spec.name, many_rows=True))


# ==============================================================================================
# merges (softmax_merge, attention_merge): a row split into chunks and a merge tree over them
# ==============================================================================================
GARBAGE = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e4)  # x values of empty states (never read)


def merge_trees(leaves):
    """Any binary tree whose leaves, left to right, are `leaves` (at least one): a split point
    at every level. Shrinks towards the left-leaning (sequential online) chain."""
    leaves = list(leaves)
    if len(leaves) == 1:
        return st.just(leaves[0])
    return st.integers(1, len(leaves) - 1).flatmap(
        lambda k: st.tuples(merge_trees(leaves[:k]), merge_trees(leaves[k:])))


def draw_keys(draw, many_rows: bool, max_cols=None) -> int:
    """The keys of a row of chunked or N-way merge cases: 1 to 8 for many rows, else 0 now and
    then, a special length or any up to max_cols (default max(64, LIMITS.max_cols // 4))."""
    if many_rows:
        return draw(st.sampled_from([1, 2, 3, 4, 5, 8]), label="n_keys")
    cap = max_cols if max_cols is not None else max(64, LIMITS.max_cols // 4)
    return draw(rarely(st.just(0), st.one_of(st.sampled_from(special_lengths((), cap)), st.integers(1, cap)), 16),
                label="n_keys")


@st.composite
def merge_cases(draw, op, families=None, max_cols=None, min_chunks=1, max_chunks=5, many_rows=False):
    """A MergeCase for op ("softmax_merge" or "attention_merge"):

    * dtype: any of DTYPES; keys N: 0 to max_cols (default max(64, LIMITS.max_cols // 4));
    * chunks: 1 to 5 cuts of the row, repeated cuts giving empty chunks, some chunks fully masked
      (all -inf) and some empty states' values replaced by garbage (NaN, inf, 0, -0, 1e4);
    * scores: a Logits recipe of the given families (default all), or for attention q k^T of
      seeded normals; values v for attention, dv in {1, 2, 3, 8, 16, 64};
    * tree: a permutation of the chunks and any binary tree over it;
    * layout: strategies.layouts() for every chunk's x, and for its lse one of LSE_LAYOUTS
      (stride-0 "broadcast" along the last batch axis when there is one).
    many_rows: thousands of rows (many_rows_count) of 1 to 8 keys (dv up to 8), scores from
    many_row_logits, no stride-0 layout."""
    dtype = draw(dtypes(), label="dtype")
    n = draw_keys(draw, many_rows, max_cols)
    k = draw(st.integers(min_chunks, max_chunks), label="n_chunks")
    cuts = tuple(sorted(draw(st.lists(st.integers(0, n), min_size=k - 1, max_size=k - 1), label="cuts")))
    dvs = [1, 2, 3, 8] if many_rows else [1, 2, 3, 8, 16, 64]
    dv = draw(st.sampled_from(dvs), label="dv") if op == "attention_merge" else 0
    per_row = max(n, 1) * max(dv, 1)
    if many_rows:
        batch = (draw(many_rows_count(4 * per_row), label="rows"),)
    else:
        batch = draw(batch_shapes(True, max_rows=max(1, LIMITS.max_elems // 4 // per_row)), label="batch")
    lse_layout = draw(st.sampled_from(sorted(LSE_LAYOUTS) if batch else ["contiguous", "offset", "strided"]),
                      label="lse_layout")
    rows = math.prod(batch[:-1]) if (lse_layout == "broadcast" and batch) else math.prod(batch)
    scores = draw(many_row_logits(rows, n, dtype) if many_rows else logits(rows, n, dtype, families or FAMILIES),
                  label="scores")
    qk = ()
    if op == "attention_merge" and draw(st.booleans(), label="qk"):
        qk = (draw(st.integers(0, 2**16)), draw(st.sampled_from([1, 4, 16, 64])))
    masked = tuple(sorted(set(draw(st.lists(st.integers(0, k - 1), max_size=2), label="masked"))))
    garbage = tuple(draw(st.lists(st.tuples(st.integers(0, k - 1), st.sampled_from(GARBAGE)), max_size=2),
                         label="garbage")) if k > 1 else ()  # a lone chunk is never merged: it is its state
    order = draw(st.permutations(range(k)), label="order")
    tree = draw(merge_trees(order), label="tree")
    layout = draw(flat_layouts() if many_rows else layouts(), label="layout")
    return MergeCase(op, dtype, scores, tuple(batch), cuts, masked, garbage, tree, dv,
                     draw(st.integers(0, 2**16), label="v_seed"), qk, layout, lse_layout)
