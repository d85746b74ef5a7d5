"""FP64 truth for scaled dot-product attention: ``attention(q, k, v, ...) -> (o, lse)`` and its VJP
``attention_backward(q, k, v, do, ...) -> (dq, dk, dv)``, written from the definition (not by
calling a library's attention, which a target may wrap). Also the helpers the attention laws
build on: the visibility mask, the weights P, the state of a key range, and the merge of states.

(The module is ``sdpa``, not ``attention``: ``oracles.attention`` is the one-shot attention of
score rows in ``oracles/merge.py``, which the merge cases call; a submodule of that name would
replace the function on the package as soon as it was imported.)

Definition. q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv), Hq a multiple of Hkv: query
head h reads key/value head h // (Hq / Hkv) (grouped-query heads, as flash-attention and
torch's ``enable_gqa`` repeat them). For query i and key j:

    t_ij = scale * q_i . k_j                    scale defaults to 1 / sqrt(D)
    u_ij = c * tanh(t_ij / c)                   with softcap c (after scaling, before masking)
    u_ij = -inf where key j is not visible to query i (``visible``)
    lse_i = log sum_j exp(u_ij),  P_ij = exp(u_ij - lse_i),  o_i = sum_j P_ij v_j

Visibility: with d = Lk - Lq ("bottom_right", flash-attention >= 2.1: the last query sees the
last key) or d = 0 ("top_left", torch SDPA's ``is_causal``), key j is visible to query i when
``j <= i + d`` (causal) and ``i + d - left <= j <= i + d + right`` (``window=(left, right)``; a
side that is None or -1 is unbounded, as flash-attention's -1). Causal and a window together
intersect (causal caps ``right`` at 0).

Edge rows (``ATTENTION_SEMANTICS`` in oracles/semantics.py): a query with no visible key (Lk = 0,
or every key masked) gives o = 0, lse = -inf and zero gradients; a NaN score poisons its row (o
and lse NaN); otherwise a +inf score gives o NaN and lse +inf; huge finite scores do not
overflow. Keys a query cannot see never enter its row: NaN or inf in an invisible key's k (or
v) does not reach it. (A tiled kernel forms P_ij = 0 for a masked pair inside a block and
multiplies it by v_j, so non-finite values of an invisible key's v can reach rows that share its
block there; laws that change invisible keys use finite values.) Everything is computed in
float64 on the inputs' device; the forward is differentiable by torch.autograd on finite inputs.
"""
from __future__ import annotations

import math

import torch

from .merge import merge_states
from .reference import row_sum

ALIGNMENTS = ("bottom_right", "top_left")
_INF, _NAN = float("inf"), float("nan")


# ----------------------------------------------------------------------------------------------
# arguments
# ----------------------------------------------------------------------------------------------
def window_bounds(window, causal: bool = False):
    """(left, right) as ints or None (unbounded) from ``window`` = None or (left, right) with each
    side None, -1 (unbounded) or an int >= 0; causal caps right at 0. Raises TypeError/ValueError
    naming ``window`` for anything else."""
    if window is None:
        left = right = None
    else:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise TypeError(f"window must be None or a pair (left, right), got {window!r}")
        sides = []
        for name, w in zip(("left", "right"), window):
            if w is None:
                sides.append(None)
                continue
            if isinstance(w, bool) or not isinstance(w, int):
                raise TypeError(f"window {name} must be an int >= -1 or None, got {type(w).__name__}")
            if w < -1:
                raise ValueError(f"window {name} must be >= 0, or -1 / None for unbounded, got {w}")
            sides.append(None if w == -1 else w)
        left, right = sides
    if causal:
        right = 0 if right is None else min(right, 0)
    return left, right


def _check_alignment(alignment):
    if alignment not in ALIGNMENTS:
        raise ValueError(f"causal_alignment must be one of {ALIGNMENTS}, got {alignment!r}")


def _check(q, k, v, scale, softcap):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name}.dtype must be a floating dtype, got {t.dtype}")
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-d (B, H, L, D), got shape {tuple(t.shape)}")
    B, Hq, Lq, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"q, k and v must share the batch size, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    if k.shape[3] != D:
        raise ValueError(f"k's head dimension must be q's ({D}), got shape {tuple(k.shape)}")
    if v.shape[1] != k.shape[1] or v.shape[2] != k.shape[2]:
        raise ValueError(f"v must have k's heads and length {tuple(k.shape[1:3])}, got shape {tuple(v.shape)}")
    Hkv = k.shape[1]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"q's heads ({Hq}) must be a multiple of k's and v's heads ({Hkv})")
    if scale is None:
        if D == 0:
            raise ValueError("scale must be given when the head dimension D is 0")
        scale = 1.0 / math.sqrt(D)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite float or None, got {scale!r}")
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not softcap >= 0 \
                or not math.isfinite(softcap):
            raise ValueError(f"softcap must be None or a finite float >= 0 (0: none), got {softcap!r}")
        softcap = float(softcap) or None
    return float(scale), softcap, Hq // Hkv


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def visible(Lq: int, Lk: int, causal: bool = False, window=None, alignment: str = "bottom_right",
            device=None) -> torch.Tensor:
    """The (Lq, Lk) boolean mask: True where key j is visible to query i (module docstring)."""
    _check_alignment(alignment)
    left, right = window_bounds(window, causal)
    d = Lk - Lq if alignment == "bottom_right" else 0
    i = torch.arange(Lq, device=device)[:, None]
    j = torch.arange(Lk, device=device)[None, :]
    vis = torch.ones(Lq, Lk, dtype=torch.bool, device=device)
    if right is not None:
        vis &= j <= i + d + right
    if left is not None:
        vis &= j >= i + d - left
    return vis


def _expand_heads(t: torch.Tensor, g: int) -> torch.Tensor:
    return t if g == 1 else t.repeat_interleave(g, dim=1)


def _gather_sum(w: torch.Tensor, x: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """out[..., a, :] = sum_b w[..., a, b] x[..., b, :] over the pairs where support[a, b] holds
    (w is zero elsewhere): a non-finite x[b] reaches only the rows a that can see b (0 * NaN is
    never formed outside the support)."""
    bad = ~torch.isfinite(x)
    out = torch.einsum("...ab,...bd->...ad", w, torch.where(bad, 0.0, x))
    if bool(bad.any()):
        prod = w[..., :, :, None] * x[..., None, :, :]
        keep = support[:, :, None] & bad[..., None, :, :]
        out = out + torch.where(keep, prod, 0.0).sum(-2)
    return out


def _scores(q, k, scale, softcap, g):
    """(t, u): the scaled scores and the soft-capped ones (u is t without softcap)."""
    t = torch.einsum("bhid,bhjd->bhij", q, _expand_heads(k, g)) * scale
    u = softcap * torch.tanh(t / softcap) if softcap else t
    return t, u


def _weights(u: torch.Tensor, vis: torch.Tensor):
    """(P, lse) of masked scores u (invisible pairs already -inf): P = 0 on rows without a visible
    key, NaN on rows whose max is NaN or +inf."""
    if u.shape[-1] == 0:
        return u.new_zeros(u.shape), u.new_full(u.shape[:-1], -_INF)
    m = torch.amax(u, -1)
    m = torch.where(torch.isnan(u).any(-1), _NAN, m)
    fin = torch.isfinite(m)
    ms = torch.where(fin, m, 0.0).detach()
    e = torch.where(fin[..., None] & vis, torch.exp(u - ms[..., None]), 0.0)
    s = torch.where(fin, row_sum(e), 1.0)
    lse = torch.where(fin, ms + torch.log(s), m)
    # a poisoned row's P is NaN at its visible pairs; an invisible pair's weight is 0 structurally
    p = torch.where(fin[..., None], e / s[..., None], torch.where((m == -_INF)[..., None] | ~vis, 0.0, _NAN))
    return p, lse


def _prepare(q, k, v, causal, scale, window, softcap, causal_alignment, key_range=None):
    _check_alignment(causal_alignment)
    scale, softcap, g = _check(q, k, v, scale, softcap)
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    Lq, Lk = q.shape[2], k.shape[2]
    vis = visible(Lq, Lk, causal, window, causal_alignment, device=q.device)
    if key_range is not None:
        start, stop = key_range
        j = torch.arange(Lk, device=q.device)[None, :]
        vis = vis & (j >= start) & (j < stop)
    t, u = _scores(q, k, scale, softcap, g)
    u = torch.where(vis, u, -_INF)
    return q, k, v, scale, softcap, g, vis, t, u


def probabilities(q, k, *, causal=False, scale=None, window=None, softcap=None,
                  causal_alignment="bottom_right", v=None) -> torch.Tensor:
    """The attention weights P (B, Hq, Lq, Lk) in float64 (rows as in ``attention``); the error
    bounds of o scale with sum_j P_ij |v_j| (``attention_abs``)."""
    v = k[..., :0] if v is None else v
    prep = _prepare(q, k, v, causal, scale, window, softcap, causal_alignment)
    return _weights(prep[8], prep[6])[0]


# ----------------------------------------------------------------------------------------------
# forward, backward, states
# ----------------------------------------------------------------------------------------------
def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None,
              causal_alignment="bottom_right"):
    """(o (B, Hq, Lq, Dv), lse (B, Hq, Lq)) in float64: see the module docstring."""
    return partial(q, k, v, 0, k.shape[2], causal=causal, scale=scale, window=window, softcap=softcap,
                   causal_alignment=causal_alignment)


def partial(q, k, v, start: int, stop: int, *, causal=False, scale=None, window=None, softcap=None,
            causal_alignment="bottom_right"):
    """The state (o, lse) of every query over the keys start <= j < stop alone, with the mask of
    the whole problem (positions are those of the full k): the split-KV piece whose merge over a
    partition of the keys (``merge``) is ``attention``. A query that sees no key of the range
    gets (0, -inf)."""
    q, k, v, scale, softcap, g, vis, t, u = _prepare(q, k, v, causal, scale, window, softcap, causal_alignment,
                                                     (start, stop))
    p, lse = _weights(u, vis)
    o = _gather_sum(p, _expand_heads(v, g), vis)
    return o, lse


def merge(states):
    """The FP64 merge of states (o, lse) over disjoint key sets, e.g. ``partial`` over a partition
    of the keys: oracles.merge.merge_states over the states stacked along S (an empty state, lse =
    -inf, never read; all empty gives (0, -inf))."""
    states = list(states)
    if not states:
        raise ValueError("merge needs at least one state")
    o = torch.stack([s[0].to(torch.float64) for s in states], -2)
    lse = torch.stack([s[1].to(torch.float64) for s in states], -1)
    return merge_states(o, lse)


def attention_abs(q, k, v, **options) -> torch.Tensor:
    """sum_j P_ij |v_j| per output element (B, Hq, Lq, Dv): the magnitude o's rounding errors scale
    with (0 on rows without finite weights)."""
    g = q.shape[1] // max(k.shape[1], 1)
    p = torch.nan_to_num(probabilities(q, k, **options), nan=0.0)
    return torch.einsum("bhij,bhjd->bhid", p, _expand_heads(v.to(torch.float64), g).abs())


def attention_backward(q, k, v, do, *, causal=False, scale=None, window=None, softcap=None,
                       causal_alignment="bottom_right", dlse=None):
    """(dq, dk, dv) in float64, the VJP of ``attention``'s o with cotangent do (B, Hq, Lq, Dv),
    and of its lse with cotangent dlse (B, Hq, Lq) when given:

        dv_j = sum_i P_ij do_i            dP_ij = do_i . v_j        Delta_i = sum_j P_ij dP_ij
        dU_ij = P_ij (dP_ij - Delta_i + dlse_i)    (0 for invisible pairs; d lse_i / d u_ij = P_ij)
        dT_ij = dU_ij (1 - tanh^2(t_ij / c))   with softcap c, else dU_ij
        dq_i = scale sum_j dT_ij k_j      dk_j = scale sum_i dT_ij q_i

    with dk, dv summed over the query heads of each key/value head. A row without a visible key
    contributes nothing; a row whose P is NaN (NaN or +inf scores) gives NaN where it reaches.
    lse's cotangent matters where a merge's weights come from the parts' lse (ring attention,
    split-KV through autograd)."""
    q, k, v, scale, softcap, g, vis, t, u = _prepare(q, k, v, causal, scale, window, softcap, causal_alignment)
    if tuple(do.shape) != tuple(q.shape[:3]) + (v.shape[3],):
        raise ValueError(f"do must have o's shape {tuple(q.shape[:3]) + (v.shape[3],)}, got {tuple(do.shape)}")
    do = do.to(torch.float64)
    B, Hq, Lq, D = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    p, lse = _weights(u, vis)
    ve, ke = _expand_heads(v, g), _expand_heads(k, g)
    visT = vis.transpose(0, 1)
    dv = _gather_sum(p.transpose(-1, -2), do, visT)
    # dP at an invisible pair may be NaN (a non-finite v_j): every use below selects it away
    dp = torch.einsum("bhid,bhjd->bhij", do, ve)
    delta = row_sum(torch.where(vis, p * dp, 0.0), keepdim=True)
    if dlse is not None:
        want = tuple(q.shape[:3])
        if tuple(dlse.shape) != want:
            raise ValueError(f"dlse must have lse's shape {want}, got {tuple(dlse.shape)}")
        delta = delta - dlse.to(torch.float64)[..., None]
    du = torch.where(vis, p * (dp - delta), 0.0)
    dt = du * (1 - torch.tanh(t / softcap) ** 2) if softcap else du
    dt = torch.where(vis, dt, 0.0)
    dq = scale * _gather_sum(dt, ke, vis)
    dk = scale * _gather_sum(dt.transpose(-1, -2), q, visT)
    if g > 1:
        dk = dk.reshape(B, Hkv, g, Lk, D).sum(2)
        dv = dv.reshape(B, Hkv, g, Lk, Dv).sum(2)
    return dq, dk, dv
