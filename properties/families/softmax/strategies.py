"""The softmax family's cases: one tensor of logits (an explicit VJP: its forward's logits and a
cotangent), many short rows, and rows past 2**k with whole -inf chunks."""
from __future__ import annotations

import math

from hypothesis import strategies as st

from ...case import Case
from ...strategies import (BOUNDARIES, FAMILIES, LIMITS, MANY_ROW_COLS, MASKED_CHUNKS, Input, Logits, draw_index,
                           dtype_name, dtypes, flat_layouts, inputs, layouts, logits, many_row_logits,
                           many_rows_count, moderate_value, pow2_boundaries)


VJP_SECOND_FAMILIES = ("moderate", "huge", "special", "grid", "bits", "subnormal", "constant")


def logit_case(draw, spec, families=None, max_cols=None):
    """The case of an op of the softmax family (OpSpec.cases): dtype, then its inputs (an explicit
    VJP's first argument is the rounded FP64 forward of drawn logits; its cotangent is drawn on the
    same shape). The marker family MASKED_CHUNKS draws rows past 2**k with whole -inf chunks."""
    dtype = draw(dtypes(), label="dtype")
    if families and MASKED_CHUNKS in families:
        return Case(spec.name, dtype, (draw(masked_chunks_input(dtype), label=spec.args[0]),))
    first = draw(inputs(dtype, BOUNDARIES.values, families or FAMILIES, max_cols=max_cols), label=spec.args[0])
    if not spec.is_vjp:
        return Case(spec.name, dtype, (first,))
    lay = first.layout if first.layout.kind == "expanded" else draw(
        layouts().filter(lambda l: l.kind != "expanded"), label=spec.args[1] + "_layout")
    lg = draw(logits(first.logits.rows, first.logits.cols, dtype, VJP_SECOND_FAMILIES, BOUNDARIES.values),
              label=spec.args[1])
    return Case(spec.name, dtype, (first, Input(lg, first.batch, lay)))


def many_row_logit_case(draw, spec):
    """The many-rows case of an op of the softmax family (OpSpec.many_rows)."""
    dtype = draw(dtypes(), label="dtype")
    cols = draw(st.sampled_from(MANY_ROW_COLS), label="cols")
    n = draw(many_rows_count(cols), label="rows")
    first = Input(draw(many_row_logits(n, cols, dtype), label=spec.args[0]), (n,), draw(flat_layouts(), label="layout"))
    if not spec.is_vjp:
        return Case(spec.name, dtype, (first,))
    lg = draw(logits(n, cols, dtype, VJP_SECOND_FAMILIES, BOUNDARIES.values), label=spec.args[1])
    return Case(spec.name, dtype, (first, Input(lg, (n,), draw(flat_layouts(), label=spec.args[1] + "_layout"))))


# ----------------------------------------------------------------------------------------------
# masked chunks: rows longer than a power of two 2**k (2**9 up to the longest row), with whole
# -inf blocks aligned to powers of two: a kernel that cuts its rows into chunks of 2**j columns
# (a chunked class axis) meets a chunk that holds only -inf
# ----------------------------------------------------------------------------------------------
@st.composite
def masked_chunks_input(draw, dtype):
    """An Input of 1 to 3 rows of length 2**k + r (0 < r <= 2**k; k from 9 up to
    the profile's longest row, pow2_boundaries), a seeded normal fill, and 1 or 2 -inf blocks
    [i 2**j, (i + 1) 2**j) with 9 <= j <= k (in every row or in one), sometimes a -inf tail
    [2**k, end) or a single finite column left in the block, and one of the layouts."""
    ks = [b.bit_length() - 1 for b in pow2_boundaries(LIMITS.long_cols - 1)] or [max(1, LIMITS.long_cols.bit_length() - 2)]
    k = draw(st.sampled_from(ks), label="log2_chunk")
    cols = 2**k + draw(st.integers(1, min(2**k, max(1, LIMITS.long_cols - 2**k))), label="past_chunk")
    n = draw(st.integers(1, max(1, min(3, LIMITS.max_elems // cols))), label="rows")
    seed = draw(st.integers(0, 2**16), label="seed")
    blocks = []
    for _ in range(draw(st.integers(1, 2), label="n_blocks")):
        j = draw(st.integers(min(9, k), k), label="log2_block")
        i = draw(st.integers(0, max(0, (cols - 1) // 2**j)), label="block")
        r = -1 if draw(st.booleans(), label="all_rows") else draw_index(draw, n)
        stop = cols if draw(st.booleans(), label="to_end") and i * 2**j < cols else min(cols, (i + 1) * 2**j)
        blocks.append((r, i * 2**j, stop, -math.inf))
    if draw(st.booleans(), label="keep_one"):  # one finite column inside the first block
        r, a, b, _ = blocks[0]
        c = a + draw_index(draw, b - a)
        blocks.append((r, c, c + 1, draw(moderate_value(dtype))))
    lg = Logits(n, cols, dtype_name(dtype), ("normal", seed, draw(st.sampled_from([1.0, 3.0, 10.0]))), tuple(blocks),
                family=MASKED_CHUNKS)
    return Input(lg, (n,), draw(flat_layouts(), label="layout"))
