"""Shared launch code for the cross-entropy mutant kernels: one program per row looping over the
classes in tiles of BLOCK columns, validated like the project's launcher (kernels/_cross_entropy.py,
whose helpers compute the per-row lse and reduce the loss). A forward kernel takes
(X, T, LOSS, P, V, sxr, st, ignore_index) and writes each row's loss; a backward kernel takes
(X, T, LSE, SC, DX, P, V, sxr, st, ss, ignore_index) and writes dx. P holds [eps, 1/V] in the compute
dtype (a Python float reaches a kernel as float32, too coarse for float64 rows)."""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels import _cross_entropy as _ce

BLOCK = 64  # classes per loop iteration: small, so CPU runs reach the looped path


@triton.jit
def row_start(T, P, st, ignore_index, F64: tl.constexpr):
    """This program's row and what every kernel reads first: (row, eps, 1/V, target, ignored)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(T + row * st).to(tl.int64)
    return row, tl.load(P).to(CT), tl.load(P + 1).to(CT), t, t == ignore_index


@triton.jit
def store_loss(X, LOSS, row, sxr, V, t, ign, lse, sx, eps, inv_v):
    """loss = (1 - eps)(lse - x_t) + eps (lse - mean x), 0 on an ignored row (a correct finish
    of a forward kernel whose lse and sum of x are given)."""
    tc = tl.where(ign, 0, t)
    xt = tl.load(X + row * sxr + tc, mask=~ign & (tc >= 0) & (tc < V), other=0.0).to(lse.dtype)
    loss = (1.0 - eps) * (lse - xt)
    loss += tl.where(eps > 0, eps * (lse - sx * inv_v), 0.0)
    tl.store(LOSS + row, tl.where(ign, 0.0, loss))


def _params(eps: float, V: int, ct, device) -> torch.Tensor:
    return torch.tensor([float(eps), 1.0 / V], dtype=ct, device=device)


def launch_forward(kernel, logits, target, ignore_index, reduction, label_smoothing):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    _ce.check_targets(target, logits.shape[-1], ignore_index, "cross_entropy")
    x, t = _ce._rows(logits, target)
    N, V = x.shape
    ct = _ce._compute_dtype(logits.dtype)
    loss = torch.empty(N, dtype=ct, device=x.device)
    if N:
        kernel[(N,)](x, t, loss, _params(label_smoothing, V, ct, x.device), V, x.stride(0), t.stride(0), ignore_index,
                     F64=logits.dtype == torch.float64, BLOCK=BLOCK)
    return _ce.reduce_loss(loss, target, ignore_index, reduction, logits.dtype)


def scale_rows(dloss, target, ignore_index, reduction, ct):
    """(per-row scale, its stride): dloss (none), dloss (sum) or dloss / count (mean)."""
    if reduction == "none":
        sc = dloss.reshape(-1)
    elif reduction == "sum":
        sc = dloss.to(ct).reshape(1)
    else:
        sc = (dloss.to(torch.float64) / (target != ignore_index).sum()).to(ct).reshape(1)
    return sc, (sc.stride(0) if sc.numel() > 1 else 0)


def launch_backward(kernel, logits, target, dloss, ignore_index, reduction, label_smoothing):
    name = "cross_entropy_backward"
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, name)
    _ce.check_dloss(dloss, target, logits, reduction, name)
    _ce.check_targets(target, logits.shape[-1], ignore_index, name)
    _, lse = _ce.forward_rows(logits, target, ignore_index, float(label_smoothing))
    x, t = _ce._rows(logits, target)
    N, V = x.shape
    ct = _ce._compute_dtype(logits.dtype)
    dx = torch.empty((N, V), dtype=logits.dtype, device=x.device)
    if N:
        sc, ss = scale_rows(dloss, target, ignore_index, reduction, ct)
        kernel[(N,)](x, t, lse, sc, dx, _params(label_smoothing, V, ct, x.device), V, x.stride(0), t.stride(0), ss,
                     ignore_index, F64=logits.dtype == torch.float64, BLOCK=BLOCK)
    return dx.reshape(logits.shape)
