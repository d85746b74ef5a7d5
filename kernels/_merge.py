"""Triton kernels that merge two (softmax, logsumexp) states: ``softmax_merge`` and ``attention_merge``.

Both are memory-bound element-wise maps: one read of every input, one write of every output.
Per row, the two logsumexps ``la``, ``lb`` give the merged ``lse = mx + log(1 + e)`` with
``mx = max(la, lb)``, ``e = exp(min - mx)`` (so ``e`` is in [0, 1] and nothing overflows), and the
weights ``w_max = 1 / (1 + e)``, ``w_min = e / (1 + e)`` (the sigmoid form of the eager
online-softmax merge and of ring attention's ``_update_out_and_lse``; it never forms
``exp(la - lse)``, whose argument carries the absolute rounding of a large ``lse``). The weights
are symmetric in (a, b), so the merge is bitwise commutative (up to the column order of softmax
chunks).

* ``attention_merge``: ``o = w_a o_a + w_b o_b``. A program holds a ``[BLOCK_R, BLOCK_D]`` tile
  of rows, loads each row's two lse once, and loops over the value axis in ``BLOCK_D`` columns.
* ``softmax_merge``: output column ``j < Da`` is ``w_a p_a[j]``, column ``Da + j`` is
  ``w_b p_b[j]``: a scaled copy tiled over (rows, column blocks of the concatenated row), each
  program reading both inputs under complementary masks and writing whole runs of output rows;
  column block 0 of each row block also writes the merged lse.

Edge rows (oracles/semantics.py, MERGE_SEMANTICS), consistent with the one-shot ops:

* ``lse = -inf`` is an empty (or fully masked) chunk, and merging with it is the exact identity:
  the other side's values are copied bitwise, whatever the empty side's ``p``/``o`` hold (NaN
  included); an empty softmax chunk's columns become 0 (softmax of ``-inf`` logits).
* both ``-inf``: attention gives ``o = 0``, ``lse = -inf`` (no NaN); softmax gives NaN ``p`` and
  ``lse = -inf``, as the one-shot softmax of an all ``-inf`` row.
* a NaN lse on either side poisons the row: NaN everywhere, ``lse = NaN``. Otherwise a ``+inf``
  lse gives NaN ``p``/``o`` and ``lse = +inf`` (as a ``+inf`` logit does in the one-shot ops).

Arithmetic in float32 (float64 for float64 inputs); the output rounded to nearest-even.
Row offsets are 64-bit; column offsets 32-bit (a row holds fewer than 2**31 elements).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _launch as L
from . import tuning as T
from ._numerics import to_out, widen


@triton.jit
def _row_off(rows, n1, s0, s1, TWO_AXES: tl.constexpr):
    """64-bit element offset of each row: (r // n1) s0 + (r % n1) s1, or r s1 when the batch
    collapsed to one axis (no 64-bit division then)."""
    if TWO_AXES:
        return (rows // n1) * s0 + (rows % n1) * s1
    else:
        return rows * s1


@triton.jit
def _merge_weights(la, lb):
    """Per row: (w_a, w_b, lse, nan_rows, a_empty, b_empty). nan_rows: output NaN (a NaN or +inf
    lse, or, for softmax, both empty); a_empty / b_empty: that side alone is empty (-inf) and the
    other finite, so the merge is the exact identity."""
    nan_in = (la != la) | (lb != lb)
    a_ge = la >= lb
    mx = tl.where(a_ge, la, lb)
    mn = tl.where(a_ge, lb, la)
    fin = (mx > float("-inf")) & (mx < float("inf")) & ~nan_in
    mxs = tl.where(fin, mx, 0.0)
    e = tl.where(fin, tl.exp(tl.where(fin, mn, 0.0) - mxs), 0.0)  # mn = -inf gives exactly 0
    den = 1.0 + e
    w_mx = 1.0 / den
    w_mn = e / den
    wa = tl.where(a_ge, w_mx, w_mn)
    wb = tl.where(a_ge, w_mn, w_mx)
    lse = tl.where(fin, tl.where(mn == float("-inf"), mx, mxs + tl.log(den)), mx)
    lse = tl.where(nan_in, float("nan"), lse)
    poison = nan_in | (mx == float("inf"))
    both_empty = (mx == float("-inf")) & ~nan_in
    a_empty = fin & (la == float("-inf"))
    b_empty = fin & (lb == float("-inf"))
    return wa, wb, lse, poison, both_empty, a_empty, b_empty


# No argument is specialized by value or alignment (every combination of "== 1" / "divisible by 16"
# over the sizes, the 12 strides and the 6 pointers was its own compiled variant); what that bought
# is the constexpr VEC (checked by the launcher, kernels._launch.vec_ok): every row starts 16-byte
# aligned and the row lengths are multiples of 16, so runs of 16 columns are contiguous, aligned
# and uniformly masked, and loads and stores are 16-byte vectors. The hints must be written in the
# kernel bodies (Triton drops hints made in a called jit function).
_INTS = ["n_rows", "n_cols", "n1", "da", "db", "n_cb",
         "soa0", "soa1", "sla0", "sla1", "sob0", "sob1", "slb0", "slb1", "so0", "so1", "slo0", "slo1",
         "spa0", "spa1", "spb0", "spb1", "sp0", "sp1"]
_PTRS = ["OA", "LA", "OB", "LB", "O", "LO", "PA", "PB", "P"]


@triton.jit(do_not_specialize=_INTS, do_not_specialize_on_alignment=_INTS + _PTRS)
def _attention_merge_kernel(
    OA, LA, OB, LB, O, LO,
    n_rows, n_cols, n1,
    soa0, soa1, sla0, sla1, sob0, sob1, slb0, slb1, so0, so1, slo0, slo1,
    F64: tl.constexpr, TWO_AXES: tl.constexpr, VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    la = tl.load(LA + _row_off(rows, n1, sla0, sla1, TWO_AXES), mask=rmask, other=0.0).to(CT)
    lb = tl.load(LB + _row_off(rows, n1, slb0, slb1, TWO_AXES), mask=rmask, other=0.0).to(CT)
    wa, wb, lse, poison, both_empty, a_empty, b_empty = _merge_weights(la, lb)
    tl.store(LO + _row_off(rows, n1, slo0, slo1, TWO_AXES), lse.to(LO.dtype.element_ty), mask=rmask)
    offa = _row_off(rows, n1, soa0, soa1, TWO_AXES)[:, None]
    offb = _row_off(rows, n1, sob0, sob1, TWO_AXES)[:, None]
    offo = _row_off(rows, n1, so0, so1, TWO_AXES)[:, None]
    for start in range(0, n_cols, BLOCK_D):
        cols = (start + tl.arange(0, BLOCK_D))[None, :]
        mask = rmask[:, None] & (cols < n_cols)
        # an empty side's values never matter (the selects below drop them), but they are read:
        # a load masked by the lse would wait for the lse loads, and the two round trips to
        # memory in series left the kernel at 0.8 of copy
        pa = OA + offa + cols
        pb = OB + offb + cols
        po = O + offo + cols
        if VEC:
            pa = tl.max_contiguous(tl.multiple_of(pa, [1, 16]), [1, 16])
            pb = tl.max_contiguous(tl.multiple_of(pb, [1, 16]), [1, 16])
            po = tl.max_contiguous(tl.multiple_of(po, [1, 16]), [1, 16])
            mask = tl.max_constancy(mask, [1, 16])
        oa = tl.load(pa, mask=mask, other=0.0)
        ob = tl.load(pb, mask=mask, other=0.0)
        v = wa[:, None] * widen(oa, F64) + wb[:, None] * widen(ob, F64)
        v = tl.where(poison[:, None], float("nan"), tl.where(both_empty[:, None], 0.0, v))
        out = to_out(v, O.dtype.element_ty)
        out = tl.where(b_empty[:, None], oa, tl.where(a_empty[:, None], ob, out))  # exact identity
        tl.store(po, out, mask=mask)


@triton.jit(do_not_specialize=_INTS, do_not_specialize_on_alignment=_INTS + _PTRS)
def _softmax_merge_kernel(
    PA, LA, PB, LB, P, LO,
    n_rows, n1, da, db,
    spa0, spa1, sla0, sla1, spb0, spb1, slb0, slb1, sp0, sp1, slo0, slo1,
    n_cb,
    F64: tl.constexpr, TWO_AXES: tl.constexpr, VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
    GW: tl.constexpr,
):
    """Output tile (row block, column block pid_c of the concatenated rows): column j < da is
    w_a p_a[j], column da + j is w_b p_b[j].

    * A program writes whole runs of output rows, one contiguous stream: programs that each wrote
      one side (half of every row) read 0.93-0.95 of copy at bf16 D = 128, where this pattern
      reads 0.99-1.01 as a plain copy.
    * The tile is held as [BLOCK_R, groups, GW]: GW columns that all come from one side (da and db
      are multiples of GW; see _group), so the side, the weight and the masks are per (row,
      group); per element there is a multiply, the empty side's zero and the rounding.
    * The edge rows fold into the weights: NaN rows have w = NaN; where the other side is empty,
      w = 1 exactly (e = 0), so w * x is x bitwise (NaN payloads aside); the empty side's columns
      are +0 whatever they hold.
    * The data is loaded first, then a barrier, then the lse: ptxas otherwise placed the data
      loads after the weights' arithmetic, which waits for the lse loads, two round trips to
      memory in series per program (no memory operation moves across the barrier). Measured:
      +0.00-0.01 of copy at bf16 D = 128 (benchmarks/sweep.py on an H200, two sweeps)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    pid = tl.program_id(0)
    pid_r = pid // n_cb
    pid_c = pid % n_cb
    rows = pid_r.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    g0 = (pid_c * BLOCK_D + tl.arange(0, BLOCK_D // GW) * GW)[None, :, None]  # first column of each group
    in_a = g0 < da
    gmask = rmask[:, None, None] & (g0 < da + db)
    c = tl.arange(0, GW)[None, None, :]
    # b's column j sits at j - da (negative under in_a: those lanes are masked, never read)
    spa = (PA + _row_off(rows, n1, spa0, spa1, TWO_AXES))[:, None, None] + (g0 + c)
    spb = (PB + _row_off(rows, n1, spb0, spb1, TWO_AXES))[:, None, None] + ((g0 - da) + c)
    if VEC:
        spa = tl.max_contiguous(tl.multiple_of(spa, [1, 1, 16]), [1, 1, GW])
        spb = tl.max_contiguous(tl.multiple_of(spb, [1, 1, 16]), [1, 1, GW])
    # an empty side's values are read all the same (see attention_merge)
    x = tl.where(in_a, tl.load(spa, mask=gmask & in_a, other=0.0), tl.load(spb, mask=gmask & ~in_a, other=0.0))
    tl.debug_barrier()
    la = tl.load(LA + _row_off(rows, n1, sla0, sla1, TWO_AXES), mask=rmask, other=0.0).to(CT)
    lb = tl.load(LB + _row_off(rows, n1, slb0, slb1, TWO_AXES), mask=rmask, other=0.0).to(CT)
    wa, wb, lse, poison, both_empty, a_empty, b_empty = _merge_weights(la, lb)
    nan_rows = poison | both_empty  # the one-shot softmax of an all -inf row is NaN
    w = tl.where(in_a, tl.where(nan_rows, float("nan"), wa)[:, None, None],
                 tl.where(nan_rows, float("nan"), wb)[:, None, None])
    zero = tl.where(in_a, a_empty[:, None, None], b_empty[:, None, None])
    v = tl.where(zero, 0.0, w * widen(x, F64))
    dp = (P + _row_off(rows, n1, sp0, sp1, TWO_AXES))[:, None, None] + (g0 + c)
    if VEC:
        dp = tl.max_contiguous(tl.multiple_of(dp, [1, 1, 16]), [1, 1, GW])
    tl.store(dp, to_out(v, P.dtype.element_ty), mask=gmask)
    if pid_c == 0:
        tl.store(LO + _row_off(rows, n1, slo0, slo1, TWO_AXES), lse.to(LO.dtype.element_ty), mask=rmask)


JIT_KERNELS = L.register_jit(_attention_merge_kernel, _softmax_merge_kernel)


# ----------------------------------------------------------------------------------------------
# validation and launch
# ----------------------------------------------------------------------------------------------
def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check(op: str, names, tensors, same_last: bool):
    """Validate (x_a, lse_a, x_b, lse_b): float tensors on one device (CUDA, or CPU under the
    interpreter), x_a/x_b of one dtype with at least one axis and one batch shape (and one last
    axis when same_last), each lse of the batch shape in float32 (float64 for float64 x)."""
    xa_n, la_n, xb_n, lb_n = names
    xa, la, xb, lb = tensors
    for n, t in zip(names, tensors):
        L.check_tensor(n, t, op)
    for n, t in ((xa_n, xa), (xb_n, xb)):
        if t.ndim == 0:
            raise ValueError(f"{op}: {n} must have at least one axis (..., D), got a 0-d tensor")
    if same_last and xa.shape != xb.shape:
        raise ValueError(f"{op}: {xa_n} and {xb_n} must have the same shape, got {tuple(xa.shape)} and {tuple(xb.shape)}")
    if xa.shape[:-1] != xb.shape[:-1]:
        raise ValueError(f"{op}: {xa_n} and {xb_n} must have the same leading shape (all but the last axis), "
                         f"got {tuple(xa.shape)} and {tuple(xb.shape)}")
    if xa.dtype != xb.dtype:
        raise TypeError(f"{op}: {xa_n} and {xb_n} must have the same dtype, got {xa.dtype} and {xb.dtype}")
    want = _lse_dtype(xa.dtype)
    batch = tuple(xa.shape[:-1])
    for n, t in ((la_n, la), (lb_n, lb)):
        if t.dtype != want:
            raise TypeError(f"{op}: {n}.dtype must be {want} (the logsumexp dtype for {xa_n}.dtype={xa.dtype}), got {t.dtype}")
        if tuple(t.shape) != batch:
            raise ValueError(f"{op}: {n} must have shape {batch} ({xa_n}.shape without its last axis; use .expand() "
                             f"to broadcast), got {tuple(t.shape)}")
    for n, t in zip(names[1:], tensors[1:]):
        if t.device != xa.device:
            raise ValueError(f"{op}: {xa_n} and {n} must be on the same device, got {xa.device} and {t.device}")


def _plan(batch, row_inputs, lse_inputs, outputs):
    """Row layout for row tensors (last axis unit-stride, copied when not) and per-row lse
    tensors: at most two (size, stride) batch pairs shared by all. Returns (n_rows, n1, row
    tensors, [(s0, s1)] for row_inputs + lse_inputs + outputs) in that order."""
    rows_t = [t if (t.shape[-1] <= 1 or t.stride(-1) == 1) else t.contiguous() for t in row_inputs]
    lses = list(lse_inputs)
    n_rows = 1
    for n in batch:
        n_rows *= n
    for attempt in range(2):
        strides = [list(t.stride()[:-1]) for t in rows_t] + [list(t.stride()) for t in lses]
        strides += [list(o.stride()[:-1]) if per_row is False else list(o.stride()) for o, per_row in outputs]
        dims = L._collapse(list(batch), strides)
        if len(dims) <= 2:
            break
        rows_t = [t.contiguous() for t in rows_t]
        lses = [t.contiguous() for t in lses]
    n1, pairs = L.row_pairs(dims, len(strides))
    return n_rows, n1, rows_t, lses, pairs


def _tile(n_cols: int, n_rows: int, dtype: torch.dtype, attention: bool):
    """([BLOCK_R, BLOCK_D], num_warps): BLOCK_D the row length (at least 16, at most one tile; for
    softmax_merge the concatenated row, Da + Db), BLOCK_R the rest of the tile. BLOCK_R does not
    shrink for few rows: each (BLOCK_D, dtype) is then one compiled variant (shrinking it, a GPU
    run of the suite compiles ~500 softmax_merge variants), and masked rows cost nothing. Tiles and
    warps from benchmarks/sweep.py on the H200 (fraction of copy): the attention merge 1024-element
    tiles with one warp per 256 elements (float32 D=128 1.01 against 0.94 with 2048 / 512, bfloat16
    0.96 against 0.92, D=512 bfloat16 0.97 against 0.93). The softmax merge (whole output rows per
    program, two sweeps): 16-bit 4096 with one warp per 1024 (bfloat16 D=128 0.94-0.95 against
    0.82-0.88 with 8192/2048, 8192/1024, 2048/512; D=256 0.94-0.95 against 0.86-0.92; D=4096 0.98
    against 0.96-0.97); 32-bit and 64-bit 2048 with one per 512 (float32 D=128 0.97 against
    0.93-0.94 with 4096/1024, 8192/2048, 1024/256; D=4096 0.98-0.99, D=65536 0.98-0.99, as
    1024/256). Those sweeps ran with column groups of 16; with groups of 32 (see _group) the same
    tiles stay best: bfloat16 D=128 0.97 / 0.97 against 0.82-0.94 with 8192/2048, 8192/1024,
    2048/512; float32 D=128 0.97 / 0.98 against 0.89-0.95. MERGE_KERNELS_TILE and
    MERGE_KERNELS_PER_WARP override them (tuning knobs)."""
    bd = max(16, triton.next_power_of_2(max(n_cols, 1)))
    if attention:
        te, pw = T.ATTN_MERGE_TILE, T.ATTN_MERGE_PER_WARP
    elif dtype.itemsize == 2:
        te, pw = T.SOFTMAX_MERGE16_TILE, T.SOFTMAX_MERGE16_PER_WARP
    else:
        te, pw = T.SOFTMAX_MERGE32_TILE, T.SOFTMAX_MERGE32_PER_WARP
    te = int(L.knob("MERGE_KERNELS_TILE", te))
    per_warp = int(L.knob("MERGE_KERNELS_PER_WARP", pw))
    bd = min(te, bd)
    br = te // bd
    return br, bd, L._warps(br * bd, per_warp)


@L.on_tensor_device
def attention_merge(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor):
    """Merge two partial attention states over disjoint key sets (ring attention's update):
    ``lse = log(exp(lse_a) + exp(lse_b))``, ``o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b``.
    o_a, o_b: (..., Dv) of one float dtype; lse_a, lse_b: (...) float32 (float64 for float64 o).
    Returns fresh contiguous (o, lse) with o_a's dtype. lse = -inf marks an empty state (its o never
    reaches the output); two empty states give o = 0, lse = -inf."""
    name = "attention_merge"
    _check(name, ("o_a", "lse_a", "o_b", "lse_b"), (o_a, lse_a, o_b, lse_b), same_last=True)
    batch = tuple(o_a.shape[:-1])
    o = torch.empty(o_a.shape, dtype=o_a.dtype, device=o_a.device)
    lse = torch.empty(batch, dtype=lse_a.dtype, device=o_a.device)
    n_rows, n1, (xa, xb), (la, lb), pairs = _plan(batch, [o_a, o_b], [lse_a, lse_b], [(o, False), (lse, True)])
    if n_rows == 0:
        return o, lse
    n_cols = o_a.shape[-1]
    br, bd, warps = _tile(n_cols, n_rows, o_a.dtype, True)
    L.note_variant(name, dtype=str(o_a.dtype), BLOCK_R=br, BLOCK_D=bd, TWO_AXES=n1 < n_rows)
    (sa, sb, sla, slb, so, slo) = pairs
    vec = L.vec_ok(n_cols, (xa, *sa), (xb, *sb), (o, *so))
    _attention_merge_kernel[(triton.cdiv(n_rows, br),)](
        xa, la, xb, lb, o, lse, n_rows, n_cols, n1, *sa, *sla, *sb, *slb, *so, *slo,
        F64=o_a.dtype == torch.float64, TWO_AXES=n1 < n_rows, VEC=vec, BLOCK_R=br, BLOCK_D=bd,
        num_warps=warps, **L.DEFAULT_OPTIONS)
    return o, lse


@L.on_tensor_device
def softmax_merge(p_a: torch.Tensor, lse_a: torch.Tensor, p_b: torch.Tensor, lse_b: torch.Tensor):
    """Softmax and logsumexp of the concatenation [x_a, x_b] of two column chunks of the same rows,
    from each chunk's softmax p and logsumexp lse (an online-softmax merge step):
    ``p = [exp(lse_a - lse) p_a, exp(lse_b - lse) p_b]``, ``lse = log(exp(lse_a) + exp(lse_b))``.
    p_a: (..., Da), p_b: (..., Db) of one float dtype; lse: (...) float32 (float64 for float64 p).
    Returns fresh contiguous (p of shape (..., Da + Db), lse)."""
    name = "softmax_merge"
    _check(name, ("p_a", "lse_a", "p_b", "lse_b"), (p_a, lse_a, p_b, lse_b), same_last=False)
    batch = tuple(p_a.shape[:-1])
    da, db = p_a.shape[-1], p_b.shape[-1]
    p = torch.empty(batch + (da + db,), dtype=p_a.dtype, device=p_a.device)
    lse = torch.empty(batch, dtype=lse_a.dtype, device=p_a.device)
    n_rows, n1, (xa, xb), (la, lb), pairs = _plan(batch, [p_a, p_b], [lse_a, lse_b], [(p, False), (lse, True)])
    if n_rows == 0:
        return p, lse
    br, bd, warps = _tile(da + db, n_rows, p_a.dtype, False)
    n_cb = max(1, triton.cdiv(da + db, bd))  # at least one program per row block writes the lse
    L.note_variant(name, dtype=str(p_a.dtype), BLOCK_R=br, BLOCK_D=bd, TWO_AXES=n1 < n_rows)
    (sa, sb, sla, slb, sp, slo) = pairs
    vec = L.vec_ok(da, (xa, *sa), (p, *sp)) and L.vec_ok(db, (xb, *sb))
    _softmax_merge_kernel[(triton.cdiv(n_rows, br) * n_cb,)](
        xa, la, xb, lb, p, lse, n_rows, n1, da, db, *sa, *sla, *sb, *slb, *sp, *slo, n_cb,
        F64=p_a.dtype == torch.float64, TWO_AXES=n1 < n_rows, VEC=vec, BLOCK_R=br, BLOCK_D=bd,
        GW=_group(da, db, bd, p_a.dtype, vec), num_warps=warps, **L.DEFAULT_OPTIONS)
    return p, lse


def _group(da: int, db: int, bd: int, dtype: torch.dtype, vec: bool) -> int:
    """softmax_merge's column group GW (a divisor of da, db and BLOCK_D, so a group comes from one
    side): 32 for 16- and 32-bit dtypes where it divides them, else 16 under VEC (16-byte vectors),
    else 1. From two sweeps on the H200 (benchmarks/sweep.py, fraction of copy, tiles as in _tile):
    bfloat16 D=128 0.97 / 0.97 with 32 against 0.94 / 0.94 with 16 and 0.90 / 0.90 with 64; D=256
    0.97 / 0.96 (16: 0.94 / 0.94); D=4096 0.98 / 0.99 (0.98 / 0.98); float32 D=128 0.97 / 0.98
    (0.97 / 0.97), D=4096 and 65536 0.98-0.99 either way. float64 keeps 16."""
    if not vec:
        return 1
    if dtype.itemsize <= 4 and da % 32 == 0 and db % 32 == 0 and bd % 32 == 0:
        return 32
    return 16
