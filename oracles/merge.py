"""FP64 truth for the merges of (softmax, logsumexp) states, and the one-shot attention they must
reproduce. Written from the definitions (max-subtracted exponentials), independently of the
kernels' sigmoid form. Edge rules: oracles/semantics.py, MERGE_SEMANTICS.

A *state* of a chunk of columns (keys) of one row is (x, lse): x the chunk's softmax p (softmax
merge) or its attention output o = softmax(s) @ v (attention merge), lse its logsumexp. lse = -inf
is an empty or fully masked chunk, whatever x holds.
"""
from __future__ import annotations

import torch

from .reference import logsumexp, softmax

_NAN, _INF = float("nan"), float("inf")


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64)


def merge_weights(lse_a: torch.Tensor, lse_b: torch.Tensor):
    """(w_a, w_b, lse, poison, both_empty, a_empty, b_empty) per row, in float64.
    w = exp(l - M) / (exp(l_a - M) + exp(l_b - M)) with M = max(l_a, l_b); lse = M + log(sum).
    poison: a NaN lse, or a +inf one (NaN values out); both_empty: both -inf; a_empty/b_empty:
    that side alone is -inf and the other finite (the merge is the identity)."""
    la, lb = _f64(lse_a), _f64(lse_b)
    nan = torch.isnan(la) | torch.isnan(lb)
    M = torch.maximum(la, lb)  # propagates NaN
    fin = torch.isfinite(M)
    Ms = torch.where(fin, M, 0.0)
    ea = torch.where(fin & (la > -_INF), torch.exp(la - Ms), 0.0)
    eb = torch.where(fin & (lb > -_INF), torch.exp(lb - Ms), 0.0)
    s = torch.where(fin, ea + eb, 1.0)
    lse = torch.where(fin, Ms + torch.log(s), M)
    lse = torch.where(nan, _NAN, lse)
    poison = nan | (M == _INF)
    both_empty = ~nan & (M == -_INF)
    return ea / s, eb / s, lse, poison, both_empty, fin & (la == -_INF), fin & (lb == -_INF)


def softmax_merge(p_a, lse_a, p_b, lse_b):
    """(p, lse) of the concatenated chunks: p = [w_a p_a, w_b p_b]. An empty side's columns are 0;
    both empty (or a NaN / +inf lse) gives NaN p, as the one-shot softmax of such a row."""
    wa, wb, lse, poison, both_empty, a_empty, b_empty = merge_weights(lse_a, lse_b)
    pa, pb = _f64(p_a), _f64(p_b)
    nan_rows = (poison | both_empty)[..., None]
    qa = torch.where(a_empty[..., None], 0.0, torch.where(b_empty[..., None], pa, wa[..., None] * pa))
    qb = torch.where(b_empty[..., None], 0.0, torch.where(a_empty[..., None], pb, wb[..., None] * pb))
    p = torch.cat([qa, qb], -1)
    return torch.where(nan_rows, _NAN, p), lse


def attention_merge(o_a, lse_a, o_b, lse_b):
    """(o, lse) over the union of the two key sets: o = w_a o_a + w_b o_b. An empty side is never
    read; both empty gives o = 0, lse = -inf; a NaN or +inf lse gives NaN o."""
    wa, wb, lse, poison, both_empty, a_empty, b_empty = merge_weights(lse_a, lse_b)
    oa, ob = _f64(o_a), _f64(o_b)
    o = torch.where(a_empty[..., None], ob, torch.where(b_empty[..., None], oa, wa[..., None] * oa + wb[..., None] * ob))
    o = torch.where(both_empty[..., None], 0.0, o)
    return torch.where(poison[..., None], _NAN, o), lse


def merge_states(o, lse):
    """N-way merge of S states at once (cascade / split-KV attention): o (..., S, Dv), lse (..., S)
    -> (o (..., Dv), lse (...)) with lse = log sum_s exp(lse_s) and o = sum_s exp(lse_s - lse) o_s,
    the max-subtracted form. The same rules as attention_merge, for any S: an empty state
    (lse = -inf) is never read; all empty (or S = 0) gives o = 0, lse = -inf; a NaN lse poisons the
    row (NaN o, lse NaN; NaN beats +inf), else a +inf lse gives NaN o and lse = +inf."""
    x, l = _f64(o), _f64(lse)
    if l.shape[-1] == 0:
        return x.sum(-2), torch.full(l.shape[:-1], -_INF, dtype=torch.float64, device=l.device)
    nan = torch.isnan(l).any(-1)
    M = torch.where(torch.isnan(l), -_INF, l).amax(-1)
    fin = torch.isfinite(M)
    Ms = torch.where(fin, M, 0.0)
    live = (l > -_INF) & fin[..., None]  # NaN compares False
    e = torch.where(live, torch.exp(l - Ms[..., None]), 0.0)
    s = torch.where(fin, e.sum(-1), 1.0)
    w = e / s[..., None]
    out = torch.where(live[..., None], w[..., None] * x, 0.0).sum(-2)
    lse_out = torch.where(fin, Ms + torch.log(s), M)
    lse_out = torch.where(nan, _NAN, lse_out)
    out = torch.where((nan | (M == _INF))[..., None], _NAN, out)
    return out, lse_out


def attention(scores: torch.Tensor, v: torch.Tensor):
    """One-shot attention of each row over all its keys: scores (..., N), v (..., N, Dv) ->
    (o (..., Dv), lse (...)), o = softmax(scores) @ v. A fully masked row (all -inf, or no keys)
    gives o = 0, lse = -inf; a row with NaN or +inf scores gives NaN o (and lse NaN / +inf)."""
    s, v = _f64(scores), _f64(v)
    lse = logsumexp(s)
    p = softmax(s)  # NaN on rows whose max is not finite
    o = torch.einsum("...n,...nd->...d", torch.nan_to_num(p, nan=0.0), v)
    o = torch.where(torch.isnan(p).any(-1, keepdim=True) if s.shape[-1] else torch.zeros_like(o, dtype=torch.bool),
                    _NAN, o)
    return torch.where((lse == -_INF)[..., None], 0.0, o), lse


def attention_abs(scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """sum_j softmax(scores)_j |v_j| per output element (the magnitude attention's error bound
    scales with; 0 on rows without finite softmax)."""
    p = torch.nan_to_num(softmax(_f64(scores)), nan=0.0)
    return torch.einsum("...n,...nd->...d", p, _f64(v).abs())
