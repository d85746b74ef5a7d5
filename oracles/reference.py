"""FP64 references over the last axis, computed from the same (already rounded) inputs the kernel
sees. Written out from the definitions rather than calling torch.softmax, so the oracle does not
share code with a library that a target may wrap. Runs on the inputs' device, in float64.

Edge rows (oracles/semantics.py): a row whose max is not finite (it holds NaN or +inf, or only
-inf) gives NaN for softmax and log_softmax; logsumexp gives that max (NaN, +inf or -inf).
"""
from __future__ import annotations

import math

import torch


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64)


def row_sum(t: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """Sum over the last axis by pairwise halving (padding with exact zeros): every sum is a
    binary tree of depth ceil(log2 D), within the tolerance table's depth(D), whatever the
    tensor's layout or device. torch's own sum is not: on a GPU (H200, CUDA torch) it sums a
    246-column row held with column stride 2 in one sequential chain, 42 u off for softmax of
    [10.25, 0, ..., 0] in float64, where the kernel is within half an ulp."""
    n = t.shape[-1]
    if n == 0:
        out = t.new_zeros(t.shape[:-1] + (1,))
    else:
        while n > 1:
            if n % 2:
                t = torch.cat([t, t.new_zeros(t.shape[:-1] + (1,))], -1)
                n += 1
            t = t[..., : n // 2] + t[..., n // 2:]
            n //= 2
        out = t
    return out if keepdim else out[..., 0]


def row_stats(x: torch.Tensor):
    """(m, finite, d, e, s) per row: max, whether it is finite, x - m, exp(x - m), sum of e."""
    x = _f64(x)
    if x.shape[-1] == 0:
        m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64, device=x.device)
    else:
        m = torch.amax(x, dim=-1)  # propagates NaN
        m = torch.where(torch.isnan(x).any(-1), float("nan"), m)
    fin = torch.isfinite(m)
    ms = torch.where(fin, m, 0.0)
    d = x - ms[..., None]
    e = torch.where(fin[..., None], torch.exp(d), 0.0)
    s = row_sum(e)
    return m, fin, d, e, s


def softmax(x: torch.Tensor) -> torch.Tensor:
    m, fin, d, e, s = row_stats(x)
    return torch.where(fin[..., None], e / s[..., None], float("nan"))


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    m, fin, d, e, s = row_stats(x)
    return torch.where(fin[..., None], d - torch.log(s)[..., None], float("nan"))


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    m, fin, d, e, s = row_stats(x)
    return torch.where(fin, torch.where(fin, m, 0.0) + torch.log(s), m)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(y * dy)): the VJP the Jacobian y_i (delta_ij - y_j) gives."""
    y, g = _f64(y), _f64(dy)
    dot = row_sum(y * g, keepdim=True)
    # where the FP64 dot overflows although the row is finite, work on g / s (s a power of two).
    # An overflow can also read NaN: the pairwise sum's halves may reach +inf and -inf (in a
    # finite row a NaN dot can come from nothing else)
    s = _scale(g)
    gs = g / s
    scaled = y * (gs - row_sum(y * gs, keepdim=True)) * s
    # so also where a finite dot and a g of opposite signs, both near the maximum, overflow in
    # g - dot: y = 0 times that is 0, not NaN (y = [1, 0], dy = [-max, max]: dx = [0, 0])
    plain = y * (g - dot)
    return torch.where(~torch.isfinite(plain) & _finite_rows(y, g), scaled, plain)


def log_softmax_backward(z: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
    """dx = dz - exp(z) * sum(dz): the Jacobian of log_softmax is delta_ij - softmax_j."""
    z, g = _f64(z), _f64(dz)
    S = row_sum(g, keepdim=True)
    ez = torch.exp(z)
    s = _scale(g)
    gs = g / s
    scaled = (gs - ez * row_sum(gs, keepdim=True)) * s
    # exp(z) > 0 for every z > -inf, so exp(z) * (+-inf) is +-inf even where exp(z) underflows
    # (float64 below z = -745; a float32 kernel's exp below -103): only exp(-inf) = 0 gives NaN
    ez_inf = torch.where((ez == 0) & (z > -math.inf) & torch.isinf(S), 1.0, ez)
    # (a finite row's overflowing sum may read NaN as well as inf: see softmax_backward)
    dx = torch.where(~torch.isfinite(S) & _finite_rows(z, g), scaled, g - ez_inf * S)
    # exp(z) = 0 exactly: dx = g exactly (0 * a sum that only overflowed is 0)
    return torch.where((ez == 0) & _finite_rows(g, g), g, dx)


def _finite_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rows (keepdim) whose elements of a and b are all free of NaN, and b of infinities."""
    return (~torch.isnan(a).any(-1, keepdim=True)) & torch.isfinite(b).all(-1, keepdim=True)


def _scale(g: torch.Tensor) -> torch.Tensor:
    """Per row, the power of two at or above max |g| (1 for rows of zeros or non-finite values)."""
    a = torch.where(torch.isfinite(g), g.abs(), 0.0).amax(-1, keepdim=True) if g.shape[-1] else \
        torch.zeros(*g.shape[:-1], 1, dtype=g.dtype, device=g.device)
    return torch.where(a > 0, torch.exp2(torch.ceil(torch.log2(a))).clamp_max(2.0**1023), 1.0)


def fd_grad(fn, x: torch.Tensor, g: torch.Tensor, cols, h: float = 1e-5) -> torch.Tensor:
    """Central differences of L(x) = sum(fn(x) * g) in FP64 at the given column of every row
    (h ~ 1e-5): dL/dx[..., j] ~ (L(x + h e_j) - L(x - h e_j)) / 2h. Returns shape (*batch, len(cols))."""
    x, g = _f64(x), _f64(g)
    out = []
    for j in cols:
        xp, xm = x.clone(), x.clone()
        xp[..., j] += h
        xm[..., j] -= h
        lp = (fn(xp) * g).sum(-1)
        lm = (fn(xm) * g).sum(-1)
        out.append((lp - lm) / (2 * h))
    return torch.stack(out, -1)
