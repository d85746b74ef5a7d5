"""The kernels' launch tuning in one table: every threshold and default, per path, each with the
reason it has its value, and the environment variables that override them, read here and only
here, under their full names.

The figures behind the GPU defaults are H200 sweeps (``benchmarks/sweep.py``; the functions of
``kernels/_launch.py``, ``_merge.py``, ``_merge_states.py`` and ``_cross_entropy.py`` that apply
them give the measurements in their docstrings; current figures: docs/results.md). The values
under the interpreter exist so that CPU runs reach every path on small shapes.

Overrides are read once, at the first launch (reading os.environ costs ~1-5 us per variable, and
a launch reads up to ten); a process that changes them later calls ``reload()``, as
``benchmarks/sweep.py`` does. This module imports nothing from the package.
"""
from __future__ import annotations

import os

# ----------------------------------------------------------------------------------------------
# softmax, log_softmax, logsumexp and their VJPs (kernels/_launch.py: max_block, row_config,
# _lse_sub, loop_rows, loop_config, bwd_maxnreg, bwd_reload)
# ----------------------------------------------------------------------------------------------
# whole rows: the longest row one program holds
MAX_BLOCK = 16384  # 16/32-bit: the exact fast row sums (_numerics.sum_exp, sum_exact32) hold for rows of at most 2**14
MAX_BLOCK_F64 = 8192  # float64 forward: its exact sums keep fixed-point limbs per element (no spills at 8192)
MAX_BLOCK_F64_BWD = 2048  # float64 backward: row in float64 with scaled sums, 16 warps x 8 elements, no spills (16384 spilled 1.8 KB per thread)
MAX_BLOCK_INTERPRETER = 1024  # under the interpreter: CPU runs reach the looped and split paths on small shapes
ROWS_TILE_INTERPRETER = 8192  # under the interpreter: elements per program of short rows, softmax family and cross-entropy (its time goes per program; thousands of rows are checked)

# whole rows: elements per program (tile) and per warp, 16/32-bit (float64 below)
TILE_BY_ITEMSIZE = {1: 8192, 2: 8192, 4: 4096, 8: 2048}  # short-row tile by element size, before the per-path choices below
FWD16_TILE = 2048  # 16-bit forward: 0.98-0.99 of copy at D = 128 and 1024 (8192-element tiles 0.81-0.98)
FWD16_PER_WARP = 1024  # 16-bit forward: 32 elements per thread
FWD16_PER_WARP_16384 = 2048  # 16-bit whole rows of 16384: 8 warps, not 16 (logsumexp 0.64 -> 0.81, softmax 0.86 -> 0.88)
FWD32_PER_WARP = 1024  # float32 forward: 16 warps at 16384 (0.98 against 0.97 with 8)
BWD_TILE = 2048  # 16/32-bit backward: best or within 0.02 at D = 128 ... 4096 (the forward's 8192 read 0.50-0.88)
BWD_TILE_SHORT = 1024  # backward rows of at most 256 columns (bf16 log_softmax 0.88 -> 0.90-0.91, fp32 D = 128 0.97 -> 1.03)
BWD_TILE_SHORT_MAX_COLS = 256  # ... up to this block width; at 512 and 1024 they lose 0.03-0.08 in bf16
BWD_PER_WARP = 512  # 16/32-bit backward: 16 elements per thread
MIN_WARPS = 4  # fewest warps of a program
F64_FWD_PER_WARP = 1024  # float64 forward
F64_BWD_TILE = 2048  # float64 backward tile (its row in float64)
F64_BWD_PER_WARP = 256  # float64 backward: 8 elements per thread, no spills
LSE16_PER_WARP = 2048  # 16-bit logsumexp of whole rows is issue-bound: fewer threads per row (D = 4096 0.83 -> 0.90)
LSE16_MIN_WARPS = 2  # ... and at least 2 warps (1 warp lost: 0.73-0.86)
LSE16_FEWER_WARPS_FROM = 128  # ... from this block width (rows under 128 not measured)
LSE16_FEWER_WARPS_NOT_AT = 2048  # ... except this width (0.70 with 4 warps, 0.68 with 2)
LSE_SUB = 4  # logsumexp rows of 65 ... 1024 columns held as 4 sub-rows in the same threads (bf16 0.55-0.63 -> 0.84-0.85)
LSE_SUB_MIN_COLS = 128  # ... block widths from
LSE_SUB_MAX_COLS = 1024  # ... to
LSE_SUB_TILE = 4096  # ... in 4096-element tiles

# rows longer than a block: looped (one program per row, two passes) or split (programs per chunk)
SPLIT_BLOCK = 4096  # 16/32-bit forward split chunks (256 rows of 2**20: bf16 0.53-0.55 against 0.34-0.35 with 16384)
LOOP_ROWS_PER_SM = 2  # looped path from two rows per SM (fewer rows: split, to fill the GPU)
LOOP_ROWS_INTERPRETER = 2  # under the interpreter: a single row takes the split path, two the looped one
LOOP_BLOCK_16 = 8192  # 16-bit looped forward chunk (80 registers with the next chunk in flight, three programs per SM)
LOOP_BLOCK_16_BWD = 4096  # 16-bit looped backward chunk (48-64 registers)
LOOP_BLOCK_32 = 16384  # float32 looped chunk both ways (at 65536 forward 0.67 -> 0.71, backward 0.62 -> 0.68)
LOOP_PER_WARP = 1024  # looped forward: 32 bf16 / 16 fp32 elements per thread
LOOP_PER_WARP_BWD = 512  # looped backward

# the 16/32-bit whole-row backward's registers and row reloads
BWD_MAXNREG = 64  # 16-bit rows of >= 1024 columns: the float64 sum rounding took 66-72 registers; capped, no spills (16384: 0.66 -> 0.77)
BWD_MAXNREG_FROM = 1024  # ... from this block width (rows of 128 hold 32-48)
BWD_RELOAD_FROM = 16384  # 16-bit rows of this width read their row again rather than hold it (one -> two programs per SM)
BWD_RELOAD_SOFTMAX = 2  # softmax: also for y * g after the sum that sets their scaling (0.67 -> 0.79-0.81)
BWD_RELOAD_LOG_SOFTMAX = 1  # log_softmax: for the output only (0.68 -> 0.78)

# ----------------------------------------------------------------------------------------------
# the merges (kernels/_merge.py: _tile; kernels/_merge_states.py: _tile)
# ----------------------------------------------------------------------------------------------
ATTN_MERGE_TILE = 1024  # attention_merge tile (float32 D = 128 1.01 against 0.94 with 2048)
ATTN_MERGE_PER_WARP = 256  # ... one warp per 256 elements
SOFTMAX_MERGE16_TILE = 4096  # softmax_merge, 16-bit (bf16 D = 128 0.94-0.97 against 0.82-0.94 for the other tiles)
SOFTMAX_MERGE16_PER_WARP = 1024  # ... one warp per 1024 elements
SOFTMAX_MERGE32_TILE = 2048  # softmax_merge, 32/64-bit (float32 D = 128 0.97-0.98 against 0.89-0.95)
SOFTMAX_MERGE32_PER_WARP = 512  # ... one warp per 512 elements
STATES_TILE = 1024  # merge_states: attention_merge's tile ([S, rows, cols] tiles and unrolled state loops read lower)
STATES_PER_WARP = 256  # ... one warp per 256 elements
STATES_HELD = 1024  # ... weights held for up to this many (row, state) pairs, 8 per thread (bf16 S = 8: 0.95 against 0.79 looped)
STATES_HELD_INTERPRETER = 128  # under the interpreter: CPU runs reach the looped kernel (short rows of 3 states or more)

# ----------------------------------------------------------------------------------------------
# cross-entropy (kernels/_cross_entropy.py: max_tile, CEConfig)
# ----------------------------------------------------------------------------------------------
CE_TILE = {2: 4096, 4: 4096, 8: 2048}  # columns per iteration by element size: 16 KB of 16-bit logits, 8 warps (forward 0.99-1.03)
CE_TILE_INTERPRETER = 256  # under the interpreter: CPU runs reach the looped and split paths
# narrowest tile on the GPU: rows of up to 128 classes share one width (rows of 16, 32 and 64
# classes each compiled their own variants, per dtype, smoothing, alignment and options). Its
# cost, H200, bf16 forward + backward of 2**20 rows: V = 16 / 32 / 64 +4-5 %, V = 50 1.43x (3.96
# against 2.77 ms: a 128-column tile for a 64-column one), V = 100 / 128 unchanged; a few ms at
# most, on rows that are not a benchmark target
CE_MIN_BLOCK = 128
CE_MAX_ROWS_PER_PROGRAM = 64  # rows per program of short rows
CE_MAX_ROWS_PER_PROGRAM_INTERPRETER = 512  # ... under the interpreter, in tiles of ROWS_TILE_INTERPRETER (2047 rows of 16 columns: 4 programs, not 32)
CE_PROGRAMS_PER_SM = 4  # rows are split across programs only below ~4 programs per SM
CE_PER_WARP = 512  # one warp per 512 elements, 4 to 16 warps (16 warps / 8192 columns took 63 registers: backward 0.83-0.86)

# fused linear cross-entropy (kernels/_linear_cross_entropy.py: chunk_rows). Each chunk of R rows
# reads and writes the float32 d weight accumulator (8 V H bytes) against 6 R V H FLOPs of its
# three matmuls: at the H200's ~700 TFLOP/s of bf16 matmul and ~4.5 TB/s, about 155 FLOP per byte,
# that traffic costs ~207 / R of the matmuls' time (0.8x at R = 256, 0.1x at 2048). Measured, a
# bf16 step at N 8192, H 4096, V 128,256: R 256 79.4 ms, 1024 46.1, 2048 43.7, 4096 43.2 (docs/results.md)
LCE_MIN_CHUNK_ROWS = 2048  # rows per chunk at least, while the chunk's logits (R V s) stay within the accumulator's 4 V H

# ----------------------------------------------------------------------------------------------
# attention (kernels/_attention.py: fwd_config, bwd_config). (BLOCK_M, BLOCK_N, num_warps,
# num_stages) by the padded head dimension. 16-bit forward at head dimensions 64 and 128: the best
# of `python benchmarks/sweep_attention.py` on an H200 (bf16, L 4096, 30 forward candidates,
# docs/results.md); the backward's below; the other dtypes and 256: Triton's fused-attention tutorial
# and flash-attention 2 shapes on Hopper, not swept (ATTN_KERNELS_FWD / _BWD override)
# ----------------------------------------------------------------------------------------------
ATTN_FWD_16 = {64: (128, 64, 8, 3), 128: (128, 64, 8, 3), 256: (64, 64, 8, 2)}  # D 64: 1.39 ms against 1.52 with 4 warps
ATTN_FWD_32 = {64: (64, 32, 4, 2), 128: (64, 32, 4, 2), 256: (32, 32, 4, 1)}  # float32: ieee dots, tiles twice the bytes
ATTN_FWD_64 = {64: (32, 32, 4, 1), 128: (32, 16, 4, 1), 256: (16, 16, 4, 1)}  # float64: no tensor cores, registers bound the tile
# backward: (BLOCK_M1, BLOCK_N1, num_warps, num_stages) of the dk/dv kernel (a key block held,
# query blocks streamed), then (BLOCK_M2, BLOCK_N2, num_warps, num_stages) of the dq kernel (a
# query block held, key blocks streamed): two kernels, each its own launch shape. 16-bit, the
# best of 7 candidates each (of sweep_attention.py's) on an H100 (bf16, L 4096, each kernel's
# own time, full and causal; docs/results.md): dk/dv 32 x 128 (D 64: 2.58 ms against 2.88 at
# 64 x 64 and 3.20 at 32 x 64; D 128: 2.35 against 2.58 at 32 x 64), dq 128 x 64 (D 64: 1.35
# against 1.44 at 64 x 32; D 128: 1.20 against 1.42)
ATTN_BWD_16 = {64: (32, 128, 4, 3, 128, 64, 4, 3), 128: (32, 128, 8, 3, 128, 64, 8, 3),
               256: (16, 64, 8, 1, 64, 16, 8, 1)}
# 16-bit backward over at least ATTN_BWD_LONG_FROM queries, where its launch differs from
# ATTN_BWD_16's: at D 128 the dk/dv kernel takes 64-query steps with OFF32 (below), whose longer
# step pays off once a program's loop has enough of them. Its own time against 32 x 128 (one H100,
# bf16, full / causal, ms; docs/results.md): L 512 0.409 / 0.339 against 0.408 / 0.321; 1024
# 0.642-0.647 / 0.465-0.468 against 0.685-0.686 / 0.462-0.463; 2048 1.126-1.128 / 0.730-0.744
# against 1.229-1.246 / 0.775-0.776. Not with softcap (ATTN_BWD_16_SOFTCAP keeps its launch at
# every length). Keyed on Lq alone: grouped heads (a program loops over G Lq queries) and windows
# (fewer steps) not timed.
ATTN_BWD_LONG_FROM = 1024
ATTN_BWD_16_LONG = {128: (64, 128, 8, 3, 128, 64, 8, 3)}
# the same, causal (no query sees a key past its diagonal, with or without a left window), by
# head-dimension block where it differs. None listed: at D 128 the dk/dv kernel with 64-key blocks,
# 4 warps and 2 stages (64, 64, 4, 2, 128, 64, 8, 3), which halves the masked work on the diagonal,
# measured faster on its own (one H100, bf16, ms: L 1024 0.436 against 0.470, 2048 0.693-0.694
# against 0.737-0.746, 4096 1.208 against 1.281; not causal it loses at 2048), but the one
# forward + backward benchmark of it read the causal L 1024 row a fifth low (docs/results.md,
# source AN); it waits on a benchmark that settles that row.
ATTN_BWD_16_LONG_CAUSAL = {}
# the 16-bit head-dimension blocks whose dk/dv kernel issues dP^T = V dO^T right after S^T = K Q^T,
# before the exponentials (DP_FIRST): the tensor cores then work on dP^T while the exponentials
# run. One H100, bf16, L 4096, the kernel's own time: D 64 2.38 ms against 2.58 (causal 1.41
# against 1.55); D 128 2.41 against 2.31 (causal 1.39 against 1.34), where dP^T's accumulator
# held across the exponentials costs the kernel at 255 registers more than the overlap gains
# (docs/results.md). The dq kernel's dP = dO V^T moved likewise measured 1.40 against 1.36 ms at
# D 64 and the same at 128: it keeps its order.
ATTN_BWD_DP_FIRST = frozenset({64})
# 16-bit backward with softcap, where its launch differs from ATTN_BWD_16's: tanh and its
# derivative hold more of a query block live, so at D 128 the dk/dv kernel keeps 32-query blocks
# (64 x 128 / 8 warps spills 576 bytes, 38 local loads and 29 stores a step, ptxas of Triton 3.6)
ATTN_BWD_16_SOFTCAP = {128: (32, 128, 8, 3, 128, 64, 8, 3)}
# the 16-bit head-dimension blocks whose long-sequence dk/dv launch (ATTN_BWD_16_LONG) carries int32
# query offsets (OFF32) instead of 64-bit pointer tiles, where a head's offsets fit. Compiled
# (ptxas of Triton 3.6, sm_90, bf16): D 128 64 x 128 / 8 warps has no local access in its main
# loop against 9 loads and 9 stores a step without. Timed (one H100, bf16, L 4096, the kernel's
# own time): D 128 64 x 128 with OFF32 2.28 ms (causal 1.34); OFF32 at 32 x 128 2.60 against
# 2.35-2.41 without (causal 1.49 against 1.38), so the other launches keep pointer tiles; D 64
# with OFF32: 32 x 128 2.47 against 2.40, 64 x 128 3.03
ATTN_BWD_OFF32 = frozenset({128})
ATTN_BWD_32 = {64: (16, 64, 4, 2, 64, 16, 4, 2), 128: (16, 64, 4, 1, 64, 16, 4, 1), 256: (16, 32, 4, 1, 32, 16, 4, 1)}
ATTN_BWD_64 = {64: (16, 32, 4, 1, 32, 16, 4, 1), 128: (16, 32, 4, 1, 32, 16, 4, 1), 256: (16, 16, 4, 1, 16, 16, 4, 1)}
# under the interpreter: small, unequal tiles, so CPU runs reach multi-block rows, partial blocks
# and the masked and unmasked loops on short sequences (its time goes per program and operation)
ATTN_FWD_INTERPRETER = (32, 16, 4, 1)
ATTN_BWD_INTERPRETER = (16, 32, 4, 1, 32, 16, 4, 1)

# ----------------------------------------------------------------------------------------------
# the environment overrides: every variable read, by its full name, and what it replaces
# ----------------------------------------------------------------------------------------------
OVERRIDES = {
    "SOFTMAX_KERNELS_MAX_BLOCK": "the longest whole row, every dtype (a power of two, at most 16384)",
    "SOFTMAX_KERNELS_TILE": "elements per program, 16/32-bit forward of whole rows",
    "SOFTMAX_KERNELS_TILE_BWD": "elements per program, 16/32-bit backward of whole rows",
    "SOFTMAX_KERNELS_TILE_LSE": "elements per program of logsumexp (whole rows and sub-row tiles)",
    "SOFTMAX_KERNELS_PER_WARP": "elements per warp, 16/32-bit forward",
    "SOFTMAX_KERNELS_PER_WARP_BWD": "elements per warp, 16/32-bit backward",
    "SOFTMAX_KERNELS_PER_WARP_LSE": "elements per warp, logsumexp",
    "SOFTMAX_KERNELS_MIN_WARPS": "fewest warps of a 16/32-bit program",
    "SOFTMAX_KERNELS_LSE_SUB": "logsumexp sub-rows per row (1, 2, 4 or 8; 1 turns them off)",
    "SOFTMAX_KERNELS_SPLIT_BLOCK": "chunk of the 16/32-bit split forward",
    "SOFTMAX_KERNELS_LOOP_ROWS": "fewest rows for the looped path",
    "SOFTMAX_KERNELS_LOOP_BLOCK": "chunk of the looped forward (at most 16384)",
    "SOFTMAX_KERNELS_LOOP_BLOCK_BWD": "chunk of the looped backward (at most 16384)",
    "SOFTMAX_KERNELS_BWD_MAXNREG": "register cap of the 16/32-bit whole-row backward (0: none)",
    "SOFTMAX_KERNELS_RELOAD": "row reloads of the 16/32-bit whole-row backward (0, 1 or 2)",
    "MERGE_KERNELS_TILE": "elements per program of attention_merge and softmax_merge",
    "MERGE_KERNELS_PER_WARP": "elements per warp of attention_merge and softmax_merge",
    "MERGE_KERNELS_STATES_TILE": "elements per program of merge_states",
    "MERGE_KERNELS_STATES_PER_WARP": "elements per warp of merge_states",
    "MERGE_KERNELS_STATES_HELD": "merge_states: the most (row, state) weights a program holds (0: always the looped kernel)",
    "CE_KERNELS_MAX_TILE": "cross-entropy columns per iteration (a power of two >= 16)",
    "CE_KERNELS_NUM_WARPS": "cross-entropy warps per program",
    "CE_KERNELS_MIN_BLOCK": "cross-entropy narrowest tile on the GPU (a power of two >= 16)",
    "ATTN_KERNELS_FWD": "attention forward BLOCK_M/BLOCK_N/num_warps/num_stages, every head dimension",
    "ATTN_KERNELS_BWD": "attention backward BLOCK_M1/BLOCK_N1/num_warps1/num_stages1/BLOCK_M2/BLOCK_N2/num_warps2/num_stages2 "
                        "(dk/dv kernel, then dq kernel), every length",
    "ATTN_KERNELS_BWD_DP_FIRST": "attention dk/dv kernel: the head-dimension blocks (e.g. 64,128; empty: none) "
                                 "that issue dP^T's matmul before the exponentials, every dtype",
    "ATTN_KERNELS_BWD_OFF32": "attention dk/dv kernel: the head-dimension blocks (e.g. 64,128; empty: none) whose "
                              "query loops carry int32 offsets where a head's offsets fit, every dtype and launch",
    "LCE_KERNELS_CHUNK_ROWS": "linear_cross_entropy: rows per chunk",
}
# read once, when the package is imported (an A/B switch of the launch path, not a launch shape)
DIRECT_LAUNCH = os.environ.get("KERNELS_DIRECT_LAUNCH", "1") not in ("", "0")  # 0: every launch through Triton's JIT function

_values = None
_on_reload = []  # caches built from these values (_launch's row configurations), cleared by reload()


def knob(name: str, default=None):
    """The override `name` (a key of OVERRIDES) as the environment held it at the first call or the
    last reload(), else default."""
    if name not in OVERRIDES:
        raise KeyError(f"{name} is not a tuning override of kernels/tuning.py (OVERRIDES)")
    if _values is None:
        reload()
    return _values.get(name, default)


def reload() -> None:
    """Read the overrides from os.environ again and clear the caches built from them."""
    global _values
    _values = {k: os.environ[k] for k in OVERRIDES if k in os.environ}
    for clear in _on_reload:
        clear()


def on_reload(clear) -> None:
    """Register a cache's clear function, called by reload()."""
    _on_reload.append(clear)
