"""A correct attention written with torch ops (float32, float64 for float64; bottom-right causal
alignment; o = 0, lse = -inf for a query without a key), whose steps the attention mutants
replace one at a time: each mutant is this composition with one bug."""
import math

import torch


def lse_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def visible(Lq, Lk, causal, window, device, off=None):
    """(Lq, Lk) bool: key j visible to query i (bottom-right: offset Lk - Lq)."""
    d = Lk - Lq if off is None else off
    i = torch.arange(Lq, device=device)[:, None]
    j = torch.arange(Lk, device=device)[None, :]
    vis = torch.ones(Lq, Lk, dtype=torch.bool, device=device)
    left, right = (None, None) if window is None else tuple(None if w == -1 else w for w in window)
    if causal:
        right = 0 if right is None else min(right, 0)
    if right is not None:
        vis &= j <= i + d + right
    if left is not None:
        vis &= j >= i + d - left
    return vis


def scores(q, k, causal=False, scale=None, window=None, softcap=None, scale_default=None, vis=None, heads=None):
    ct = lse_dtype(q.dtype)
    g = q.shape[1] // k.shape[1]
    kk = k.to(ct)
    if g > 1:
        kk = kk[:, heads] if heads is not None else kk.repeat_interleave(g, dim=1)
    if scale is None:
        scale = (scale_default or (lambda D: 1 / math.sqrt(D)))(q.shape[-1])
    s = (q.to(ct) @ kk.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if vis is None:
        vis = visible(q.shape[2], k.shape[2], causal, window, q.device)
    return s.masked_fill(~vis, -math.inf), ct, g


def finish(s, v, ct, g, q_dtype, heads=None, normalize=True, shift=True):
    """(o, lse) from masked scores s in the compute dtype."""
    vv = v.to(ct)
    if g > 1:
        vv = vv[:, heads] if heads is not None else vv.repeat_interleave(g, dim=1)
    m = s.amax(-1, keepdim=True) if s.shape[-1] else s.new_full((*s.shape[:-1], 1), -math.inf)
    empty = m == -math.inf
    ms = torch.where(empty, 0.0, m) if shift else torch.zeros_like(m)
    e = torch.exp(s - ms)
    l = e.sum(-1, keepdim=True)
    lse = torch.where(empty, -math.inf, ms + torch.log(l)).squeeze(-1)
    p = e / torch.where(empty, 1.0, l) if normalize else e
    o = torch.where(empty, 0.0, p @ vv)
    return o.to(q_dtype), lse


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    s, ct, g = scores(q, k, causal, scale, window, softcap)
    return finish(s, v, ct, g, q.dtype)


def backward_of(fwd, q, k, v, do, dlse=None, **options):
    """(dq, dk, dv) by autograd through fwd's o (and its lse, with dlse), in the compute dtype,
    rounded to the inputs'."""
    ct = lse_dtype(q.dtype)
    qq, kk, vv = (t.detach().to(ct).requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        o, lse = fwd(qq, kk, vv, **options)
        outs, cots = ((o, lse), (do.to(ct), dlse.to(lse.dtype))) if dlse is not None else ((o,), (do.to(ct),))
        grads = torch.autograd.grad(outs, (qq, kk, vv), cots, allow_unused=True)
    return tuple((torch.zeros_like(t) if gr is None else gr).to(t.dtype) for gr, t in zip(grads, (q, k, v)))


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, window=None, softcap=None):
    return backward_of(attention, q, k, v, do, causal=causal, scale=scale, window=window, softcap=softcap)


def with_backward(bug, drop_dlse=False):
    """attention(q, k, v, ...) as a custom autograd Function: the forward is this composition's,
    the backward its exact (dq, dk, dv) (through o, and lse when lse has a cotangent) passed
    through bug(needs_input_grad, dq, dk, dv), which returns the mutant's (dq, dk, dv)
    (needs_input_grad: autograd's flags for q, k, v); drop_dlse: the backward ignores lse's
    cotangent."""
    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, scale, window, softcap):
            ctx.save_for_backward(q, k, v)
            ctx.opts = dict(causal=causal, scale=scale, window=window, softcap=softcap)
            return attention(q, k, v, **ctx.opts)

        @staticmethod
        def backward(ctx, do, dlse):
            q, k, v = ctx.saved_tensors
            dlse = None if drop_dlse else dlse
            grads = bug(ctx.needs_input_grad[:3], *backward_of(attention, q, k, v, do, dlse, **ctx.opts))
            return (*grads, None, None, None, None)

    def fn(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
        return _Attention.apply(q, k, v, causal, scale, window, softcap)
    return fn
