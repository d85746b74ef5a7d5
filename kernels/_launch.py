"""Validation, layout planning and launch configuration shared by every kernel launcher.

Rows: every op reduces one axis. The launcher moves that axis last (a view), makes the reduced
axis unit-stride (copying only when it is not: a strided gather is slower than the copy, and a
copy keeps results bitwise equal to the contiguous case), and describes the remaining batch axes
to the kernel as at most two (size, stride) pairs, so row padding, storage offsets, stride-0
(``expand``) batch axes and non-last reduction axes run without copies where possible:

    row r  ->  element offset (r // n1) * s0 + (r % n1) * s1       (64-bit)
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton

from . import tuning as T

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DTYPE_NAMES = "float16, bfloat16, float32 or float64"


def knob(name: str, default=None):
    """The tuning override `name` (kernels/tuning.py, OVERRIDES: every name spelled out there),
    else default."""
    return T.knob(name, default)


def reload_knobs() -> None:
    """Read the tuning overrides from os.environ again (kernels/tuning.py, reload)."""
    T.reload()


_INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1). Read when this
    module is imported: triton.jit reads it when the kernels below it are defined, so a later
    change of the variable would not change how they run either."""
    return _INTERPRETING


def on_tensor_device(fn):
    """Run fn with the CUDA device of its first tensor argument current: Triton launches on the
    current device, so a tensor on cuda:1 while cuda:0 is current would otherwise be read by a
    kernel running on cuda:0."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if t is None or not t.is_cuda or t.get_device() == torch.cuda.current_device():
            return fn(*args, **kwargs)
        with torch.cuda.device(t.get_device()):
            return fn(*args, **kwargs)
    return wrapper


# ----------------------------------------------------------------------------------------------
# validation: every public entry point raises TypeError/ValueError naming the argument
# ----------------------------------------------------------------------------------------------
def check_tensor(name: str, t, op: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: {name}.dtype must be {_DTYPE_NAMES}, got {t.dtype}")
    if t.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"{op}: {name} is on device '{t.device}', but the Triton kernels run on CUDA tensors "
            f"(or on CPU tensors under the Triton interpreter, TRITON_INTERPRET=1 set before "
            f"triton is imported)"
        )


def check_dim(dim, ndim: int, op: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise ValueError(f"{op}: dim={dim} is out of range for a {ndim}-d tensor; expected {lo} <= dim <= {hi}")
    return dim % max(ndim, 1)


def check_pair(op: str, a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    """Explicit VJPs take two tensors of one shape, dtype and device, neither differentiable."""
    check_tensor(a_name, a, op)
    check_tensor(b_name, b, op)
    if a.shape != b.shape:
        raise ValueError(f"{op}: {a_name} and {b_name} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: {a_name} and {b_name} must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{op}: {a_name} and {b_name} must be on the same device, got {a.device} and {b.device}")
    for name, t in ((a_name, a), (b_name, b)):
        if t.requires_grad:
            raise ValueError(
                f"{op}: {name} requires grad; {op} is an explicit VJP, not differentiable. "
                f"Pass {name}.detach(), or differentiate the forward op instead"
            )


# ----------------------------------------------------------------------------------------------
# layout planning
# ----------------------------------------------------------------------------------------------
def _collapse(sizes, stride_lists):
    """Merge adjacent batch axes that every tensor can address as one; drop size-1 axes."""
    dims = [(n, [s[i] for s in stride_lists]) for i, n in enumerate(sizes) if n != 1]
    out = []
    for n, strides in dims:
        if out:
            pn, pstrides = out[-1]
            if all(ps == s * n for ps, s in zip(pstrides, strides)):
                out[-1] = (pn * n, strides)
                continue
        out.append((n, strides))
    return out


def row_pairs(dims, n_tensors: int):
    """(n1, [(s0, s1)] per tensor) from at most two collapsed batch axes (_collapse): row r sits
    at (r // n1) s0 + (r % n1) s1."""
    if len(dims) == 0:
        return 1, [(0, 0)] * n_tensors
    if len(dims) == 1:
        return max(dims[0][0], 1), [(0, s) for s in dims[0][1]]
    return max(dims[1][0], 1), list(zip(dims[0][1], dims[1][1]))


@dataclass
class RowPlan:
    n_rows: int
    n_cols: int
    n1: int
    inputs: list  # input tensors, reduced axis last and unit-stride
    in_strides: list  # (s0, s1) per input
    out_strides: list  # (s0, s1) per output
    out_col_strides: list  # column stride per output (None for per-row outputs)


def plan_rows(inputs, outputs, dim: int) -> RowPlan:
    """inputs: tensors reduced along dim. outputs: (tensor, per_row) pairs; a per-row output has
    the reduced axis removed, the others have the inputs' shape. All outputs are freshly allocated.
    Contiguous inputs reduced along their last axis take a shortcut (_plan_contiguous) that gives
    the same plan as the general path (test_meta.py::test_contiguous_plan_is_the_general_plan)."""
    x0 = inputs[0]
    if dim == x0.ndim - 1 and x0.numel() > 0 and all(t.is_contiguous() for t in inputs) \
            and all(o.is_contiguous() for o, _ in outputs):
        return _plan_contiguous(inputs, outputs)
    return _plan_general(inputs, outputs, dim)


def _plan_contiguous(inputs, outputs) -> RowPlan:
    """plan_rows for non-empty contiguous tensors reduced along the last axis: the batch axes
    collapse into one of n_rows rows, n_cols apart in the inputs and in same-shape outputs, 1
    apart in per-row outputs; a single row has no batch axis left (n1 = 1, strides 0). ~6 us of
    host time less per call than the general path (which takes ~25 us on a slow host)."""
    n_cols = inputs[0].shape[-1]
    n_rows = inputs[0].numel() // n_cols
    if n_rows == 1:
        return RowPlan(1, n_cols, 1, list(inputs), [(0, 0)] * len(inputs), [(0, 0)] * len(outputs),
                       [None if pr else 1 for _, pr in outputs])
    return RowPlan(n_rows, n_cols, n_rows, list(inputs), [(0, n_cols)] * len(inputs),
                   [(0, 1 if pr else n_cols) for _, pr in outputs], [None if pr else 1 for _, pr in outputs])


def _plan_general(inputs, outputs, dim: int) -> RowPlan:
    moved = [t.movedim(dim, -1) for t in inputs]
    n_cols = moved[0].shape[-1]
    batch = list(moved[0].shape[:-1])
    moved = [m if (n_cols <= 1 or m.stride(-1) == 1) else m.contiguous() for m in moved]
    out_views = [(o if per_row else o.movedim(dim, -1)) for o, per_row in outputs]

    def out_batch_strides(v, per_row):
        return list(v.stride()) if per_row else list(v.stride()[:-1])

    n_rows = 1
    for n in batch:
        n_rows *= n
    if n_rows == 0 or n_cols == 0:  # nothing to launch; strides of empty tensors are arbitrary
        return RowPlan(n_rows, n_cols, 1, moved, [(0, 0)] * len(moved), [(0, 0)] * len(outputs), [1] * len(outputs))
    for attempt in range(2):
        strides = [list(m.stride()[:-1]) for m in moved]
        strides += [out_batch_strides(v, pr) for v, (o, pr) in zip(out_views, outputs)]
        dims = _collapse(batch, strides)
        if len(dims) <= 2:
            break
        moved = [m.contiguous() for m in moved]
    else:  # pragma: no cover - outputs are contiguous in the original order, so this cannot happen
        raise AssertionError("row layout needs more than two batch axes after copying the inputs")
    n1, pairs = row_pairs(dims, len(strides))
    k = len(moved)
    col = [None if pr else (v.stride(-1) if n_cols > 1 else 1) for v, (o, pr) in zip(out_views, outputs)]
    return RowPlan(n_rows, n_cols, n1, moved, pairs[:k], pairs[k:], col)


# ----------------------------------------------------------------------------------------------
# launch configuration: a small fixed set of block shapes, chosen from the row length alone
# ----------------------------------------------------------------------------------------------
def vec_ok(n_cols: int, *rows) -> bool:
    """True when rows of n_cols may be accessed in aligned vectors of 16 bytes (a kernel's VEC
    constexpr): n_cols % 16 == 0 and, for each (tensor, s0, s1), the base address and both row
    strides (in bytes) are multiples of 16. (A wrong True would be a misaligned access; the
    kernels trust it.)"""
    if n_cols % 16:
        return False
    return all(t.data_ptr() % 16 == 0 and (s0 * t.element_size()) % 16 == 0 and (s1 * t.element_size()) % 16 == 0
               for t, s0, s1 in rows)


def max_block(dtype: torch.dtype, backward: bool = False) -> int:
    """Longest row one program holds in registers; longer rows are split across programs whose
    partial results are merged. SOFTMAX_KERNELS_MAX_BLOCK overrides it (a power of two, at
    most 16384: the fast exact sums need rows of at most 2**14).
    The float64 backward holds its row in float64 with scaled sums, so its blocks are 4x
    smaller: with 16 warps, 8 elements per thread and no register spills (ptxas -v, triton 3.6,
    sm_90; 16384 columns spilled 1.8 KB per thread). The 16/32-bit backward computes in
    float32 like the forward and takes the forward's blocks (32 elements per thread: with 8, the
    per-row scalar work of the scaled formula was half of its instructions)."""
    env = knob("SOFTMAX_KERNELS_MAX_BLOCK")
    if env:
        return int(env)
    if interpreting():
        return T.MAX_BLOCK_INTERPRETER
    if dtype == torch.float64:
        return T.MAX_BLOCK_F64_BWD if backward else T.MAX_BLOCK_F64
    return T.MAX_BLOCK


def tile_elems(dtype: torch.dtype) -> int:
    """Elements per program of a tile of short rows (row_config refines it)."""
    return T.TILE_BY_ITEMSIZE[dtype.itemsize]


@dataclass(frozen=True)
class Config:
    block_r: int
    block_d: int
    split: bool  # the row is split into n_chunks chunks of block_d
    n_chunks: int
    num_warps: int
    sub: int = 1  # logsumexp: each row held as `sub` sub-rows (the forward kernel's SUB)


def row_config(n_cols: int, dtype: torch.dtype, backward: bool = False, lse: bool = False) -> Config:
    """_row_config, cached (cleared by reload_knobs; interpreting() in the key, since tests patch
    it): building it took ~5 us per launch here."""
    return _row_config(n_cols, dtype, backward, lse, interpreting())


@functools.lru_cache(maxsize=4096)
def _row_config(n_cols: int, dtype: torch.dtype, backward: bool, lse: bool, _interp: bool) -> Config:
    """Defaults: kernels/tuning.py. Overrides for the GPU (benchmarks/sweep.py):
    SOFTMAX_KERNELS_TILE and SOFTMAX_KERNELS_TILE_BWD (elements per program),
    SOFTMAX_KERNELS_PER_WARP and SOFTMAX_KERNELS_PER_WARP_BWD (elements per warp) for 16/32-bit
    rows, SOFTMAX_KERNELS_SPLIT_BLOCK (the 16/32-bit forward's split chunks). logsumexp (lse)
    takes the forward's, then SOFTMAX_KERNELS_TILE_LSE and SOFTMAX_KERNELS_PER_WARP_LSE where set
    (its sub-row tiles, _lse_sub, take SOFTMAX_KERNELS_TILE_LSE only), and
    SOFTMAX_KERNELS_MIN_WARPS (default 4) is the fewest warps of a program: logsumexp reads
    two bytes per exp in bf16 and is issue-bound at short rows, where fewer threads per row
    share the per-row work (ptxas, triton 3.6, sm_90a: bf16 D = 1024, 2 rows per program, 4 / 2
    / 1 warps: 23.0 / 16.5 / 12.9 SASS instructions per element; D = 128: 21.0 / 19.0 / 18.3;
    D = 4096, 4 / 2 warps: 14.5 / 12.4; a full-bandwidth read leaves ~16); 16-bit logsumexp's
    default is 2 warps per 4096 elements (swept, below)."""
    mb = max_block(dtype, backward)
    bd = max(16, triton.next_power_of_2(max(n_cols, 1)))
    if dtype == torch.float64:
        per_warp, tile = (T.F64_BWD_PER_WARP, T.F64_BWD_TILE) if backward else (T.F64_FWD_PER_WARP, tile_elems(dtype))
    elif backward:
        # swept on an H200 (benchmarks/sweep.py): 2048-element tiles with 16 elements per
        # thread were best or within 0.02 of best at D = 128 ... 4096 in bf16 (0.92-0.94 of
        # copy; the forward's 8192-element tiles gave 0.50-0.88) and fp32. Rows of at most 256:
        # 1024-element tiles (two sweeps, against 2048: bf16 log_softmax 0.88 -> 0.90-0.91,
        # softmax 0.91-0.92 -> 0.92-0.93, fp32 log_softmax D=128 0.97 -> 1.03; at 512 and 1024
        # they lose 0.03-0.08 in bf16)
        per_warp, tile = T.BWD_PER_WARP, (T.BWD_TILE_SHORT if bd <= T.BWD_TILE_SHORT_MAX_COLS else T.BWD_TILE)
    elif dtype.itemsize == 2:
        # the same sweep: 2048-element tiles, 32 elements per thread: 0.98-0.99 at D = 128 and
        # 1024 (8192-element tiles: 0.81-0.98). Whole rows of 16384: 8 warps, not 16 (H200,
        # two sweeps each, 16 -> 8 warps: logsumexp 0.64 -> 0.81, softmax 0.86 -> 0.88,
        # log_softmax 0.87 -> 0.89; 4 warps read 0.89 / 0.90 but logsumexp 0.71; float32 keeps
        # 16: 0.98 against 0.97)
        per_warp = T.FWD16_PER_WARP_16384 if 16384 <= bd <= mb else T.FWD16_PER_WARP
        tile = T.FWD16_TILE
    else:
        per_warp, tile = T.FWD32_PER_WARP, tile_elems(dtype)
    lo = T.MIN_WARPS
    if lse and dtype.itemsize == 2 and T.LSE16_FEWER_WARPS_FROM <= bd <= mb and bd != T.LSE16_FEWER_WARPS_NOT_AT:
        # 16-bit logsumexp of whole rows is issue-bound (two bytes per exp): fewer threads per
        # row share its per-row work. H200, 2048 elements per warp and at least 2 warps against
        # 1024 and 4: D = 128 ... 1024 (4 sub-rows, 4096-element tiles, 2 warps) 0.84 -> 0.88 and
        # 4096 (2 warps) 0.83 -> 0.90 in two sweeps, 8192 (4 warps) 0.83 -> 0.89 in one; 16384
        # unchanged (8 warps either way, 0.86); 1 warp lost (0.73-0.86); float32 unchanged
        # (0.98-1.02). Not taken where not measured better: 2048 (0.70 with 4 warps, 0.68 with
        # 2, one sweep) and rows under 128 (not measured).
        per_warp, lo = T.LSE16_PER_WARP, T.LSE16_MIN_WARPS
    if _interp and bd < tile:
        # the interpreter's time goes per program and operation, not per element: short rows in
        # larger tiles by default (2047 rows of 16 columns: 4 programs, not 16); a knob still rules
        tile = max(tile, T.ROWS_TILE_INTERPRETER)
    if dtype != torch.float64:
        if backward:
            per_warp = int(knob("SOFTMAX_KERNELS_PER_WARP_BWD", per_warp))
            tile = int(knob("SOFTMAX_KERNELS_TILE_BWD", tile))
        else:
            per_warp = int(knob("SOFTMAX_KERNELS_PER_WARP", per_warp))
            tile = int(knob("SOFTMAX_KERNELS_TILE", tile))
        if lse:
            per_warp = int(knob("SOFTMAX_KERNELS_PER_WARP_LSE", per_warp))
            tile = int(knob("SOFTMAX_KERNELS_TILE_LSE", tile))
        lo = int(knob("SOFTMAX_KERNELS_MIN_WARPS", lo))
    if bd <= mb:
        sub = _lse_sub(bd) if lse and dtype != torch.float64 else 1
        if sub > 1:
            tile = int(knob("SOFTMAX_KERNELS_TILE_LSE", T.LSE_SUB_TILE))
            br = max(1, tile // bd)
            return Config(br, bd, False, 1, _warps(br * bd, per_warp, lo), sub)
        br = max(1, tile // bd)
        return Config(br, bd, False, 1, _warps(br * bd, per_warp, lo))
    if dtype != torch.float64 and not backward:
        # split rows: the 16/32-bit forward's chunks are 4096 columns (H200, 256 rows of 2**20:
        # bf16 0.53-0.55 of copy against 0.34-0.35 with 16384-column chunks,
        # fp32 0.62 against 0.59; the backward read 0.13-0.26 either way, so it keeps max_block)
        mb = min(mb, int(knob("SOFTMAX_KERNELS_SPLIT_BLOCK", T.SPLIT_BLOCK)))
    return Config(1, mb, True, triton.cdiv(n_cols, mb), _warps(mb, per_warp, lo))


T.on_reload(_row_config.cache_clear)  # the configurations follow a reload of the overrides


def _lse_sub(bd: int) -> int:
    """Sub-rows per row for the 16/32-bit logsumexp of whole rows whose block width bd is 128 ...
    1024 (n_cols 65 ... 1024; 1: a row is one tile row). With 4, a row is held as 4 sub-rows of
    bd / 4 columns in the same threads (4096-element tiles; with 4 warps, 32 elements per thread in
    16-bit and each row's sub-rows in one thread, since the tile's rows, 4096 / bd, are a multiple
    of the rows its 128 threads cover), so fewer threads share a row and its per-row work and
    shuffles. ptxas (triton 3.6, sm_90a), bf16 SASS per element against the 2-D tile's, 4 warps:
    D = 128 13.5 / 21.0, 256 13.5, 512 13.75, 1024 14.0 / 23.0 (47 registers); fp32 D = 128 14.5 /
    26.5; 2 warps (the 16-bit default, row_config): D = 128 12.9, 1024 13.4. A full-bandwidth
    16-bit read leaves ~16 per element. H200 (benchmarks/sweep.py, two sweeps, 4 warps,
    SOFTMAX_KERNELS_LSE_SUB=1 -> 4): bf16 logsumexp D = 128 ... 1024 0.55-0.63 -> 0.84-0.85 of
    copy, float32 D = 128 ... 512 0.77-0.85 -> 0.98-1.01; with 2 warps bf16 reads 0.88.
    SOFTMAX_KERNELS_LSE_SUB overrides (1 turns it off; 1, 2, 4 or 8, and sub-rows of at least 16
    columns)."""
    sub = int(knob("SOFTMAX_KERNELS_LSE_SUB", T.LSE_SUB))
    if sub not in (1, 2, 4, 8):
        raise ValueError(f"SOFTMAX_KERNELS_LSE_SUB must be 1, 2, 4 or 8, got {sub}")
    return sub if T.LSE_SUB_MIN_COLS <= bd <= T.LSE_SUB_MAX_COLS and bd // sub >= 16 else 1


def loop_rows(device) -> int:
    """Fewest rows for the looped long-row kernels: two programs per SM (2 under the
    interpreter, so CPU runs exercise both long-row paths: a single row takes the split path).
    SOFTMAX_KERNELS_LOOP_ROWS overrides."""
    env = knob("SOFTMAX_KERNELS_LOOP_ROWS")
    if env:
        return int(env)
    if interpreting() or device.type != "cuda":
        return T.LOOP_ROWS_INTERPRETER
    return T.LOOP_ROWS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


def loop_config(backward: bool, dtype: torch.dtype) -> tuple:
    """(chunk, num_warps) of the looped long-row kernels: 16-bit, 8192 columns with 32 per thread
    forward, 4096 with 16 per thread backward (ptxas -v, triton 3.6, sm_90: 59-64 and 48-64
    registers, no spills, so three or four programs per SM); float32, 16384 columns both ways (16
    warps). Swept on an H200 (benchmarks/sweep.py, two sweeps of chunks 4096 ... 16384; float32
    against 8192 forward and 4096 backward): at 65536 forward 0.67 -> 0.71, backward 0.62 -> 0.68
    (softmax) and 0.76 -> 0.81 (log_softmax), at 262144 within 0.01, logsumexp 1.00 -> 0.98;
    bfloat16 best or within 0.01 at its defaults, except logsumexp (4096: 0.70 -> 0.74 at 65536;
    not taken, one op). SOFTMAX_KERNELS_LOOP_BLOCK and SOFTMAX_KERNELS_LOOP_BLOCK_BWD override
    the chunk (at most 16384)."""
    if backward:
        chunk = int(knob("SOFTMAX_KERNELS_LOOP_BLOCK_BWD", T.LOOP_BLOCK_32 if dtype.itemsize == 4 else T.LOOP_BLOCK_16_BWD))
        return chunk, _warps(chunk, T.LOOP_PER_WARP_BWD)
    chunk = int(knob("SOFTMAX_KERNELS_LOOP_BLOCK", T.LOOP_BLOCK_32 if dtype.itemsize == 4 else T.LOOP_BLOCK_16))
    return chunk, _warps(chunk, T.LOOP_PER_WARP)


def bwd_maxnreg(dtype: torch.dtype, cfg: Config) -> int:
    """Register cap (ptxas .maxnreg; 0: none) of the 16/32-bit whole-row backward. Its main
    variants hold 48-64 registers (ptxas -v, triton 3.6, sm_90a), which gives 4 warps' programs
    eight per SM, 8 warps' four and 16 warps' two. sum_exact32's float64 rounding cut 3-4 SASS per
    element but took the softmax backward to 72 registers at D = 1024 and 66 at 16384 (one program
    per SM there); capped at 64, ptxas keeps the same instruction count with no spills. H200
    (benchmarks/sweep.py --configs "default;SOFTMAX_KERNELS_BWD_MAXNREG=0"), bf16, capped vs
    uncapped, one sweep: softmax 1024 0.92 vs 0.91, 4096 0.94 vs 0.95, 16384 0.77 vs 0.66;
    log_softmax 1024 0.93 vs 0.96, 4096 0.93 vs 0.92, 16384 0.81 vs 0.80; no single cap (0, 56, 64,
    72, 80) was best everywhere (softmax 16384 read 0.83 at 72). SOFTMAX_KERNELS_BWD_MAXNREG
    overrides (0 turns it off)."""
    env = knob("SOFTMAX_KERNELS_BWD_MAXNREG")
    if dtype == torch.float64 or cfg.split:
        return 0
    if env is not None:
        return int(env)
    # 16-bit rows of 1024 columns and more, which hold exactly 64 without the float64 rounding
    # (float32 at 16384 holds 122-127 on purpose, one program per SM, and spills under a cap of
    # 64; rows of 128 hold 32-48)
    return T.BWD_MAXNREG if dtype.itemsize == 2 and cfg.block_d >= T.BWD_MAXNREG_FROM else 0


def bwd_reload(dtype: torch.dtype, cfg: Config, log_softmax: bool) -> int:
    """How often the 16/32-bit whole-row backward reads its row again instead of holding it in
    float32 across its reductions (the RELOAD constexpr): 0 never; 1 for the output; 2 (softmax)
    also for the products y * g, after the reduction that sets their scaling. Rows of 16384 bf16
    columns took 127 (softmax) and 102 (log_softmax) registers x 512 threads, one program per SM
    (Nsight Compute, softmax: warps active 24 %, 0.67 of copy). ptxas -v (triton 3.6, sm_90a):
    log_softmax at 1: 60 (two programs per SM; on the H200 0.68 -> 0.78); softmax at 1: 97 (still
    one program; 0.67 -> 0.63), at 2: 64 (two programs; 0.67 -> 0.79-0.81, two sweeps).
    SOFTMAX_KERNELS_RELOAD=0/1/2 overrides (whole rows only; the split path never reloads)."""
    if dtype == torch.float64 or cfg.split:
        return 0
    env = knob("SOFTMAX_KERNELS_RELOAD")
    if env:
        return int(env)
    if dtype.itemsize != 2 or cfg.block_d < T.BWD_RELOAD_FROM:
        return 0
    return T.BWD_RELOAD_LOG_SOFTMAX if log_softmax else T.BWD_RELOAD_SOFTMAX


def _warps(elems: int, per_warp: int = 1024, lo: int = T.MIN_WARPS) -> int:
    return max(lo, min(16, elems // per_warp))


def block_boundaries(dtype: torch.dtype = torch.float32) -> list:
    """Row lengths at which the launch configuration changes, forward or backward (for the
    strategies to aim at)."""
    out, b = set(), 16
    while b <= max_block(dtype):
        out.add(b)
        b *= 2
    for mb in {max_block(dtype), max_block(dtype, True)}:
        out |= {2 * mb, 3 * mb}
    return sorted(out)


# ----------------------------------------------------------------------------------------------
# bookkeeping: distinct compiled variants requested (the interpreter compiles nothing, so this is
# counted here rather than read from Triton's cache)
# ----------------------------------------------------------------------------------------------
VARIANTS: set = set()


def note_variant(kernel: str, **constexprs) -> None:
    VARIANTS.add((kernel,) + tuple(sorted(constexprs.items())))


JIT_FUNCTIONS: list = []  # every kernel module's Triton JIT functions (register_jit), for compiled_kernel_count


def register_jit(*fns) -> tuple:
    """Record a kernel module's JIT functions (each kernel module calls it once, at import, so this
    module never imports them). Returns them as a tuple."""
    JIT_FUNCTIONS.extend(fns)
    return fns


def compiled_kernel_count() -> int:
    """Kernels Triton actually compiled in this process, over every registered JIT function (0
    under the interpreter)."""
    total = 0
    for fn in JIT_FUNCTIONS:
        caches = getattr(fn, "device_caches", None)
        if caches is None:
            continue
        for entry in caches.values():
            total += len(entry[0])
    return total


# ----------------------------------------------------------------------------------------------
# launching: the compiled kernel directly, where the host's time per launch matters
# ----------------------------------------------------------------------------------------------
DIRECT_LAUNCH = T.DIRECT_LAUNCH  # KERNELS_DIRECT_LAUNCH=0: every launch through the JIT function

_I32 = (-2**31, 2**31)


def _param_rule(p) -> int:
    """0: no specialization (dtype / integer width only); 1: values (int == 1, % 16 == 0) but no
    alignment; 2: values and alignment (tensor data_ptr % 16 == 0)."""
    if p.do_not_specialize:
        return 0
    return 1 if p.do_not_specialize_on_alignment else 2


def _tag(a, rule: int):
    """What Triton 3.6 / 3.9 specialize a non-constexpr argument on (their native
    specialize_impl: test_meta.py::test_launch_tags_refine_tritons_specialization), or a finer
    key: a tensor's dtype (and, rule 2, whether its address is a multiple of 16); an int's width
    (i32, i64, u64) and, rules 1-2, whether it is 1 or a multiple of 16 (rule 2); float, bool,
    None by type. Anything else: None (the caller launches through the JIT function)."""
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0) if rule == 2 else a.dtype
    t = type(a)
    if t is int:
        w = 0 if _I32[0] <= a < _I32[1] else (1 if a < 2**63 else 2)
        if rule == 0:
            return w
        return (w, a == 1, rule == 2 and a % 16 == 0)
    if t is float:
        return "f"
    if t is bool:
        return "b"
    if a is None:
        return "n"
    return None


# Compile options of every launch unless its kernel sets them: FMA contraction on, the default the
# kernels were tuned and validated with (the same PTX as leaving it out, Triton 3.6 and 3.9), which
# Triton 3.10 turns off (TRITON_DEFAULT_FP_FUSION): off, the attention forward with softcap loses
# 226 of its 250 FMAs. The softmax kernels turn it off themselves (kernels/_softmax.py says why).
DEFAULT_OPTIONS = {"enable_fp_fusion": True}


class Launcher:
    """``fn[grid](*args, **constexprs, num_warps=w)`` at less host cost: the first launch of each
    specialization goes through the JIT function (which compiles it), later ones call the
    compiled kernel with the arguments as they are, skipping Triton's binder and cache lookup.
    The cache key is (device, num_warps, constexprs, _tag of each argument), a refinement of
    Triton's own key, so a hit is the kernel Triton would have picked. args: the kernel's
    non-constexpr parameters in order; constexprs: all its constexpr parameters by name. options:
    compile options beyond num_warps, laid over DEFAULT_OPTIONS (e.g. enable_fp_fusion=False), the
    same for every launch.
    Under the interpreter, or with KERNELS_DIRECT_LAUNCH=0, every launch goes through the JIT
    function. Triton's environment knobs (debug, instrumentation) are taken as fixed per process."""

    def __init__(self, fn, **options):
        self.fn = fn
        self.options = {**DEFAULT_OPTIONS, **options}
        self.cache = {}
        params = getattr(fn, "params", None)  # None under the interpreter (an InterpretedFunction)
        self.direct = params is not None
        if not self.direct:
            return
        self.rules = tuple(_param_rule(p) for p in params if not p.is_constexpr)
        self.const_names = tuple(p.name for p in params if p.is_constexpr)
        if any(p.is_constexpr for p in params[:len(self.rules)]):
            raise TypeError(f"Launcher({fn.__name__}): the constexpr parameters must come last")

    def __call__(self, grid, args, constexprs: dict, num_warps: int):
        if not (DIRECT_LAUNCH and self.direct):
            self.fn[grid](*args, **constexprs, num_warps=num_warps, **self.options)
            return
        consts = tuple(constexprs[n] for n in self.const_names)
        key = (torch.cuda.current_device(), num_warps, consts) + tuple(map(_tag, args, self.rules))
        kernel = self.cache.get(key)
        if kernel is None:
            if len(args) != len(self.rules) or len(constexprs) != len(self.const_names):
                raise TypeError(f"Launcher({self.fn.__name__}): expected {len(self.rules)} arguments and "
                                f"constexprs {self.const_names}, got {len(args)} and {tuple(constexprs)}")
            kernel = self.fn[grid](*args, **constexprs, num_warps=num_warps, **self.options)
            if kernel is not None and None not in key[3:]:
                self.cache[key] = kernel
            return
        g = tuple(grid) + (1, 1)
        kernel[g[:3]](*args, *consts)
