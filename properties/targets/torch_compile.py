"""``--target torch_compile``: the ``torch`` target's functions through
``torch.compile`` (inductor): on a GPU, Triton kernels that inductor generates, real Triton code
written by nobody here, calibrating the default tier like torch eager does.

    python -m pytest -m properties --target torch_compile

Each function is compiled once with ``dynamic=True`` (one graph serves every shape; dynamo's
recompile limit is raised so that dtypes, layouts and the ``dim=`` argument still compile rather
than fall back to eager). Meant for a GPU: on a CPU inductor generates C++ and needs a compiler.

``attention`` / ``attention_backward`` are FlexAttention (``torch.nn.attention.flex_attention``,
compiled: inductor's generated Triton attention, forward and backward), with the suite's causal
alignment (bottom-right), windows, softcap and grouped heads mapped to its own mechanisms (the
section below). FlexAttention's limits are the target's declared refusals (NotImplementedError):
head dimensions under 16, float64 on CUDA, empty sequences, the backward on a CPU.
"""
from __future__ import annotations

import torch
import torch._dynamo

from . import torch as _eager

SUITE_REFUSALS = (NotImplementedError,)  # FlexAttention's limits only (_flex_limits)
torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
if hasattr(torch._dynamo.config, "accumulated_cache_size_limit"):
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
# Donated buffers (a memory optimisation of compiled backward graphs, on by default) make a
# backward refuse retain_graph=True with a RuntimeError. They are left on, as users get them: that
# refusal is correct behaviour, which autograd_backward_twice accepts, and gradcheck_float64 runs
# every backward on a graph of its own.

_NAMES = ("softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward",
          "softmax_merge", "attention_merge", "cross_entropy")

for _name in _NAMES:
    globals()[_name] = torch.compile(getattr(_eager, _name), dynamic=True)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Autograd through the compiled cross_entropy (inductor compiles its backward graph too)."""
    x = logits.detach().clone().requires_grad_(True)
    loss = globals()["cross_entropy"](x, target, ignore_index=ignore_index, reduction=reduction,
                                      label_smoothing=label_smoothing)
    (dx,) = torch.autograd.grad(loss, x, dloss.to(loss.dtype))
    return dx


# ---- attention: FlexAttention ------------------------------------------------------------------
# ``attention`` is torch.nn.attention.flex_attention, compiled (inductor generates its Triton
# attention kernels, forward and backward) on CUDA; on a CPU the eager flex_attention (torch's own
# composition of the same masks and score modification) runs, so the mapping below is checked
# there too. The suite's options map to FlexAttention's own mechanisms:
#   causal, window -> a mask_mod (kv <= q + d, q + d - left <= kv <= q + d + right, d = Lk - Lq):
#                     the alignment is the mask the user writes, here the suite's bottom-right one
#   softcap        -> a score_mod, c tanh(s / c) of the scaled score (flex applies the scale first)
#   grouped heads  -> enable_gqa=True
#   lse            -> return_aux=AuxRequest(lse=True) (return_lse=True on versions without it)
# The mask's offsets and the softcap enter as 0-dim tensors, so that a new length or softcap is a
# new input of one compiled graph, not a recompilation (each distinct mask structure, causal and
# window and both, compiles once).
from torch.nn.attention import flex_attention as _flex_api  # noqa: E402

_flex_compiled = torch.compile(_flex_api.flex_attention, dynamic=True)


def _flex(q, *args, **kw):
    fn = _flex_compiled if q.is_cuda else _flex_api.flex_attention
    if hasattr(_flex_api, "AuxRequest"):
        o, aux = fn(q, *args, return_aux=_flex_api.AuxRequest(lse=True), **kw)
        return o, aux.lse
    return fn(q, *args, return_lse=True, **kw)


def _block_mask(causal, window, Lq, Lk, device):
    if not causal and window is None:
        return None
    d = torch.tensor(Lk - Lq, device=device)
    left, right = (None, None) if window is None else window
    lo = None if left is None or left < 0 else torch.tensor(left, device=device)
    hi = None if right is None or right < 0 else torch.tensor(right, device=device)

    def mask_mod(b, h, qi, kv):
        ok = kv >= 0
        if causal:
            ok = ok & (kv <= qi + d)
        if lo is not None:
            ok = ok & (kv >= qi + d - lo)
        if hi is not None:
            ok = ok & (kv <= qi + d + hi)
        return ok

    return _flex_api.create_block_mask(mask_mod, None, None, Lq, Lk, device=device)


def _flex_limits(q, k, v, backward=False):
    """FlexAttention's own limits, declared as refusals (each raises inside FlexAttention): head
    dimensions under 16 ("NYI: embedding dimension of the query, key, and value must be at least
    16"); float64 on CUDA (its generated Triton kernel does not compile); an empty query or key
    sequence (compiled: "Query length must be greater than 0", "Key length must be greater than
    0"; the eager path: IndexError); its backward on a CPU ("FlexAttention does not support
    backward on CPU")."""
    if min(q.shape[-1], v.shape[-1]) < 16:
        raise NotImplementedError(f"FlexAttention needs head dimensions of at least 16: D = {q.shape[-1]}, "
                                  f"Dv = {v.shape[-1]}")
    if q.is_cuda and q.dtype == torch.float64:
        raise NotImplementedError("FlexAttention's generated kernel does not compile for float64")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise NotImplementedError(f"FlexAttention takes no empty sequences: Lq = {q.shape[2]}, Lk = {k.shape[2]}")
    if backward and not q.is_cuda:
        raise NotImplementedError("FlexAttention does not support backward on CPU")


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    Hq, Lq, Lk = q.shape[1], q.shape[2], k.shape[2]
    _flex_limits(q, k, v, backward=q.requires_grad or k.requires_grad or v.requires_grad)
    score_mod = None
    if softcap is not None:
        c = torch.tensor(float(softcap), device=q.device, dtype=torch.float32)

        def score_mod(s, b, h, qi, kv):
            return c * torch.tanh(s / c)
    return _flex(q, k, v, score_mod=score_mod, block_mask=_block_mask(causal, window, Lq, Lk, q.device),
                 scale=scale, enable_gqa=Hq != k.shape[1])


def attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, window=None, softcap=None):
    """Autograd through the (compiled) FlexAttention forward: its generated backward kernels."""
    _flex_limits(q, k, v, backward=True)
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        out, _ = attention(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap)
    return torch.autograd.grad(out, (q, k, v), do)
