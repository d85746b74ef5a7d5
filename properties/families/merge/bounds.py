"""The chunked-merge bounds of (values, lse) states, derived below from the contract of
properties/tolerances.py (the one tolerance table)."""
from __future__ import annotations

import math

import torch

from ...tolerances import ATOL_FTZ, TABLE, U_ORACLE, half_subnormal


# ----------------------------------------------------------------------------------------------
# merges of (softmax / attention output, logsumexp) states
# ----------------------------------------------------------------------------------------------
# One merge step, in the compute precision u = u_c, from stored inputs (x_a, l_a), (x_b, l_b):
#   d = l_min - l_max             rounding: u |d|
#   e = exp(d)                    relative: u |d| (from d) + 4u (exp)
#   w_max = 1 / (1 + e)           relative: <= u (|d| e/(1+e) + 1) + 4u (division) <= u (|d| + 10)
#   w_min = e / (1 + e)           relative: u |d| + 4u + u + 4u              <= u (|d| + 10)
#   y = w_a x_a + w_b x_b         two products and one sum: + 2u of sum w |x|
#   lse = l_max + log(1 + e)      log(1 + e) is off by <= u (|d| e/(1+e) + 1) + 4u log 2 < 8u, the
#                                 addition by u |lse|: <= u (|lse| + 12); |d| <= 2 Lam (below)
# Lam: the largest |lse| in play. Every intermediate lse of a merge tree lies between the row's
# largest chunk lse and its total lse (log-add-exp of a subset), so Lam = max(|lse_c|, |lse|)
# bounds all of them, and |d| <= 2 Lam.
#
# A merge tree of depth H (the most merges on a path from a chunk to the root; a sequential online
# chain over k chunks has H = k - 1). The product of the weights met on a chunk's path telescopes:
# prod_s exp(l_child - lse(l_child, l_sibling)) = exp(l_chunk - l_root + sum_s r_s), r_s the
# rounding of the lse formed at step s (compute u (Lam + 12), stored: another u Lam). So relative
# to the exact exp(l_chunk - lse_total) the weight of a chunk is off by
#   |dl_chunk| + |dl_root| + sum_s r_s + sum_s (weight computation + product + sum, u (2 Lam + 12))
# with |dl_chunk| <= u Lam (the chunk lse rounded to its float32 / float64 dtype) and
# |dl_root| <= u Lam + H u (2 Lam + 12) (a convex combination of its children's errors plus its
# own r). Summed: 2 u Lam + H u (6 Lam + 36). The values add their roundings to the output dtype:
# the chunk's own (half an ulp, 2**-precision relative) and H - 1 intermediate results (the last
# one is total_tolerance's); in the subnormal range each rounding is absolute, 2**(emin-precision),
# and a flushed product moves a value by < tiny_c per step. For attention the relative terms
# apply to A_i = sum_j P_j |v_ji| (P the row's softmax), which bounds sum_c W_c |o_c,i| and every
# intermediate |o|; for softmax to the reference p_i itself.
# The FP64 oracle's own error: relative (4 * 745 + D + 10) * 2**-53 (softmax_bound at U_ORACLE with
# |d|, H <= 745 wherever p > 0; attention adds its D products), far below the rest.
def merge_value_bound(dtype, depth, lam, mag, n_keys=0, leaves=True):
    """Absolute bound on a merged value (softmax p or attention o) before its final rounding.
    depth: merge steps on the worst chunk's path (H); lam: Lam (float64 tensor, per row, with a
    trailing axis); mag: p (softmax) or A (attention); leaves: the chunk states were rounded from
    FP64 truth (False: the inputs are exact, and only the steps' own errors count)."""
    t = TABLE[dtype]
    u = t.u_c
    H = max(int(depth), 1)
    expo = H * u * (6 * lam + 36) + (H if leaves else H - 1) * 2.0 ** -t.precision
    if leaves:
        expo = expo + 2 * u * lam
    # the errors above move a weight's exponent: its relative error is expm1 of their sum, not
    # the sum (expm1(x) >= x; the value roundings, relative, are folded in: e**v >= 1 + v). Where
    # u Lam nears 1 the first-order sum is not a bound: float32 lse near -1e9 are multiples of 64,
    # so two states of weights 0.99993 and 7.5e-5 (scores 9.5 apart) arrive with equal lse, and a
    # correct merge gives them equal weights (test_meta_merges, the case an H200 run drew).
    grow = torch.expm1(expo) if isinstance(expo, torch.Tensor) else math.expm1(expo)
    rel = grow + U_ORACLE * (4 * 745 + n_keys + 10)
    absolute = (H + 1) * (half_subnormal(dtype) + ATOL_FTZ * t.tiny_c)
    return torch.nan_to_num(mag * rel, nan=0.0) + absolute


def merge_lse_bound(dtype, depth, lam, n_keys=0, leaves=True):
    """Absolute bound on the merged lse before its final rounding to its float32 / float64 dtype:
    u Lam (the chunk lses' rounding, when leaves) + H u (2 Lam + 12) (each step's r_s, stored),
    plus the FP64 one-shot logsumexp's own error (logsumexp_bound at U_ORACLE: Lam + D + 4 * 745)."""
    t = TABLE[dtype]
    H = max(int(depth), 1)
    b = H * t.u_c * (2 * lam + 12) + (t.u_c * lam if leaves else 0.0)
    return b + U_ORACLE * (lam + n_keys + 4 * 745)
