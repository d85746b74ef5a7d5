"""Fused linear cross-entropy: cross_entropy(hidden @ weight.T + bias, target) without the whole
(N, V) logits in memory.

Rows are taken in chunks of R rows (chunk_rows). Per chunk: logits = hidden_chunk @ weight.T
(+ bias) with torch.matmul in the input dtype (cuBLAS on the GPU, float32 accumulation), the
project's cross-entropy forward kernel on them (per-row loss in float64 and lse), and, where the
loss needs a gradient and the reduction is "mean" or "sum", the backward kernel for dloss = 1
writing d logits in place of the chunk's logits; then d hidden_chunk = d logits @ weight and
d weight += d logits.T @ hidden_chunk (d bias += the column sums of d logits). The gradient is
thus computed in the forward, as liger-kernel's fused linear cross-entropy does, and the
backward only multiplies it by dloss.
For reduction "none" the backward gets one dloss per row, which d weight cannot take afterwards,
so the forward only computes the loss and the backward recomputes each chunk's logits (one more
matmul per chunk) and runs the backward kernel with the rows' dloss.

The loss is the reduction of all N per-row losses at once (the mean over the count of all
non-ignored rows, or with class weights (ce_weight) over the sum of their w[t], not a mean of
chunk means); the backward kernel of every chunk reads that divisor, formed once from the whole
target, so chunks compose exactly as one call on all rows would.

Peak extra memory (beyond the inputs and the returned gradients, d hidden N H s and d weight
V H s, s the itemsize):

    R V s                       the chunk's logits, overwritten by their gradient
  + V H 4                       float32 accumulator of d weight (16-bit inputs with more than
                                one chunk only: a 16-bit accumulator would round at every chunk)
  + N (8 + 4) + 8 N [z-loss]    per-row losses (float64) and lse, the z terms
  + V 4                         float32 accumulator of d bias (with a bias; float64 for float64)

with R = chunk_rows(N, H, V, s): the power of two at or above N / ceil(V / H) (the chunk's logits
about as large as hidden, liger-kernel's choice) or, if larger, LCE_MIN_CHUNK_ROWS = 2048
(kernels/tuning.py: the accumulator is read and written once per chunk, 8 V H bytes, which at R
= 256 costs about as much time as the chunk's three matmuls and at 2048 a tenth), at most the
power of two at or below 4 H / s (the chunk's logits never larger than the accumulator) and at
most N. At N = 8192, H = 4096 in bfloat16: R = 2048, four chunks; at V = 262,144 the chunk's
logits are 1 GiB next to the 4 GiB accumulator, where torch's composition holds the whole logits
and their gradient (4 GiB each) and more. LCE_KERNELS_CHUNK_ROWS overrides R (a tuning and
testing knob); under Triton's interpreter R is at most 8, so CPU runs reach several chunks and a
ragged last one on small shapes.
"""
from __future__ import annotations

import torch
import triton

from . import _cross_entropy as _ce
from . import _launch as L
from . import tuning as T

OP = "linear_cross_entropy"
INTERPRETER_CHUNK_ROWS = 8


def chunk_rows(N: int, H: int, V: int, itemsize: int) -> int:
    """Rows per chunk (module docstring)."""
    env = L.knob("LCE_KERNELS_CHUNK_ROWS")
    if env:
        return max(1, int(env))
    r = triton.next_power_of_2(max(1, triton.cdiv(N, triton.cdiv(V, max(H, 1)))))
    cap = 1 << max(0, (4 * max(H, 1) // itemsize).bit_length() - 1)  # logits R V s <= 4 V H
    r = max(r, min(T.LCE_MIN_CHUNK_ROWS, cap))
    if L.interpreting():
        r = min(r, INTERPRETER_CHUNK_ROWS)
    return max(1, min(r, N))


def check_args(hidden, weight, target, bias, ignore_index, reduction, label_smoothing) -> None:
    """Types, shapes, dtypes and devices; no device work."""
    L.check_tensor("hidden", hidden, OP)
    L.check_tensor("weight", weight, OP)
    if hidden.ndim < 1:
        raise ValueError(f"{OP}: hidden must have a feature axis (shape (..., H)), got a 0-d tensor")
    if weight.ndim != 2:
        raise ValueError(f"{OP}: weight must be (V, H), got shape {tuple(weight.shape)}")
    if weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"{OP}: weight must be (V, H) with H = hidden.shape[-1] = {hidden.shape[-1]}, "
                         f"got shape {tuple(weight.shape)}")
    if weight.dtype != hidden.dtype:
        raise TypeError(f"{OP}: weight.dtype must be hidden's dtype {hidden.dtype}, got {weight.dtype}")
    if weight.device != hidden.device:
        raise ValueError(f"{OP}: hidden and weight must be on the same device, got {hidden.device} and {weight.device}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"{OP}: bias must be None or a torch.Tensor, got {type(bias).__name__}")
        if tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"{OP}: bias must have shape (V,) = ({weight.shape[0]},), got {tuple(bias.shape)}")
        if bias.dtype != hidden.dtype:
            raise TypeError(f"{OP}: bias.dtype must be hidden's dtype {hidden.dtype}, got {bias.dtype}")
        if bias.device != hidden.device:
            raise ValueError(f"{OP}: hidden and bias must be on the same device, got {hidden.device} and {bias.device}")
    # the logits' checks (target's dtype, shape and device, ignore_index, reduction, smoothing), on
    # a stand-in of the logits' shape that holds no memory
    _ce.check_args(_stand_in(hidden, weight), target, ignore_index, reduction, label_smoothing, OP)


def _stand_in(hidden, weight):
    """A tensor of the logits' shape, dtype and device that holds one element (the checks of
    kernels/_cross_entropy.py read only those)."""
    V = weight.shape[0]
    return hidden.new_empty(1 if V else 0).expand(*hidden.shape[:-1], V)


def _logits(h, weight, bias):
    """h @ weight.T (+ bias) in the input dtype (float32 accumulation), contiguous (n, V)."""
    if bias is None:
        return torch.mm(h, weight.t())
    return torch.addmm(bias, h, weight.t())


def _acc_mm(acc, a, b, first: bool) -> None:
    """acc += a @ b (acc = a @ b when first), acc float32 or of a's dtype."""
    if acc.dtype == a.dtype:
        if first:
            torch.mm(a, b, out=acc)
        else:
            acc.addmm_(a, b)
        return
    if acc.is_cuda:
        try:  # 16-bit operands, float32 accumulator in place (cuBLAS)
            torch.ops.aten.addmm.dtype_out(acc, a, b, acc.dtype, beta=0 if first else 1, out=acc)
            return
        except (RuntimeError, NotImplementedError, AttributeError):  # pragma: no cover - torch without it
            pass
    acc.addmm_(a.to(acc.dtype), b.to(acc.dtype), beta=0 if first else 1)


class _Grads:
    """d hidden (N, H), d weight, d bias (or None) for dloss = 1, and the accumulators."""

    def __init__(self, hidden2, weight, bias, n_chunks: int):
        self.dh = torch.empty_like(hidden2)
        wide = hidden2.dtype in (torch.float16, torch.bfloat16) and n_chunks > 1
        self.dw_acc = torch.empty(weight.shape, dtype=torch.float32 if wide else weight.dtype, device=weight.device)
        self.db_acc = None if bias is None else torch.zeros(bias.shape, dtype=_ce._compute_dtype(bias.dtype),
                                                            device=bias.device)
        self.first = True

    def add(self, i0, i1, dl, h, weight):
        torch.mm(dl, weight, out=self.dh[i0:i1])
        _acc_mm(self.dw_acc, dl.t(), h, self.first)
        self.first = False
        if self.db_acc is not None:
            self.db_acc += dl.sum(0, dtype=self.db_acc.dtype)

    def finish(self, weight, bias):
        if self.first:  # no rows: every gradient is zero
            self.dw_acc.zero_()
        dw = self.dw_acc if self.dw_acc.dtype == weight.dtype else self.dw_acc.to(weight.dtype)
        db = None if self.db_acc is None else self.db_acc.to(bias.dtype)
        return self.dh, dw, db


@L.on_tensor_device
def forward(hidden, weight, target, bias, ignore_index: int, reduction: str, label_smoothing: float, opts,
            want_grad: bool):
    """(loss, grads or None): the loss and, with want_grad (reduction "mean" or "sum"), the
    gradients (d hidden, d weight, d bias) for dloss = 1. Arguments checked (check_args)."""
    H = hidden.shape[-1]
    V = weight.shape[0]
    h2 = hidden.reshape(-1, H)
    t = target.reshape(-1)
    N = h2.shape[0]
    ct = _ce._compute_dtype(hidden.dtype)
    stats = _ce._target_stats(target, ignore_index)
    check = _ce.TargetCheck(stats, target, V, ignore_index, OP)
    prep = None if opts is None else opts.prepare(target, ignore_index, V, ct, hidden.device)
    loss_rows = torch.empty(N, dtype=torch.float64, device=hidden.device)
    lz = torch.empty(N, dtype=torch.float64, device=hidden.device) if prep is not None and prep.flags & _ce.ZLOSS \
        else None
    R = chunk_rows(N, H, V, hidden.element_size())
    n_chunks = triton.cdiv(N, R) if N else 0
    grads = _Grads(h2, weight, bias, n_chunks) if want_grad else None
    one = torch.ones((), dtype=torch.float32, device=hidden.device)
    for i0 in range(0, N, R):
        i1 = min(N, i0 + R)
        h = h2[i0:i1]
        logits = _logits(h, weight, bias)
        lr, lse, lzc = _ce._forward_parts(logits, t[i0:i1], ignore_index, label_smoothing, prep)
        loss_rows[i0:i1] = lr
        if lz is not None:
            lz[i0:i1] = lzc
        if grads is not None:
            plan = _ce.BackwardPlan(logits, t[i0:i1], lse, ignore_index, reduction, label_smoothing, stats, prep)
            plan.run(one, out=logits)  # d logits in place of the logits
            grads.add(i0, i1, logits, h, weight)
        logits = plan = None  # freed before the next chunk's are formed: one chunk's logits at a time
    loss = _ce._reduce_loss(loss_rows, target, ignore_index, reduction, hidden.dtype, stats, lz, prep)
    check.finish()
    if grads is None:
        return loss, None
    dh, dw, db = grads.finish(weight, bias)
    return loss, (dh.reshape(hidden.shape), dw, db)


@L.on_tensor_device
def backward_none(hidden, weight, target, bias, dloss, ignore_index: int, label_smoothing: float, opts,
                  need_dh: bool, need_dw: bool, need_db: bool):
    """The gradients for reduction "none" and a dloss per row: each chunk's logits recomputed,
    the backward kernel run with the chunk's dloss, then the two products."""
    H = hidden.shape[-1]
    V = weight.shape[0]
    h2 = hidden.reshape(-1, H)
    t = target.reshape(-1)
    dl_rows = dloss.reshape(-1)
    N = h2.shape[0]
    ct = _ce._compute_dtype(hidden.dtype)
    prep = None if opts is None else opts.prepare(target, ignore_index, V, ct, hidden.device)
    R = chunk_rows(N, H, V, hidden.element_size())
    grads = _Grads(h2, weight, bias, triton.cdiv(N, R) if N else 0)
    for i0 in range(0, N, R):
        i1 = min(N, i0 + R)
        h = h2[i0:i1]
        logits = _logits(h, weight, bias)
        _, lse, _ = _ce._forward_parts(logits, t[i0:i1], ignore_index, label_smoothing, prep)
        plan = _ce.BackwardPlan(logits, t[i0:i1], lse, ignore_index, "none", label_smoothing, None, prep)
        plan.run(dl_rows[i0:i1], out=logits)
        grads.add(i0, i1, logits, h, weight)
        logits = plan = None  # one chunk's logits at a time
    dh, dw, db = grads.finish(weight, bias)
    return (dh.reshape(hidden.shape) if need_dh else None, dw if need_dw else None, db if need_db else None)


class LinearCrossEntropyFunction(torch.autograd.Function):
    """Autograd for linear_cross_entropy: d hidden, d weight, d bias (module docstring)."""

    @staticmethod
    def forward(ctx, hidden, weight, target, bias, ignore_index, reduction, label_smoothing, opts):
        need = ctx.needs_input_grad
        want = (need[0] or need[1] or (bias is not None and need[3]))
        ctx.reduction = reduction
        if reduction == "none":
            loss, _ = forward(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, opts, False)
            ctx.save_for_backward(hidden, weight, target, bias)
            ctx.args = (ignore_index, label_smoothing, opts)
            return loss
        loss, grads = forward(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, opts, want)
        ctx.grads = grads
        ctx.save_for_backward(hidden, weight, target)  # for autograd's check that they are unchanged
        return loss

    @staticmethod
    def backward(ctx, dloss):
        need = ctx.needs_input_grad
        if ctx.reduction == "none":
            hidden, weight, target, bias = ctx.saved_tensors
            dh, dw, db = backward_none(hidden.detach(), weight.detach(), target,
                                       None if bias is None else bias.detach(), dloss, *ctx.args,
                                       need[0], need[1], bias is not None and need[3])
            return dh, dw, None, db, None, None, None, None
        ctx.saved_tensors  # noqa: B018 - raises if an input was modified in place
        # scaled out of place, so that a retained graph's second backward scales the same
        # gradients again; the stored ones are freed with the graph, so the backward's peak
        # (stored and scaled gradients) stays below the forward's (module docstring). A 0-d
        # dloss of the compute dtype: the product is formed in it and rounded once.
        s = dloss.detach().to(_ce._compute_dtype(ctx.grads[0].dtype))
        out = [None if (g is None or not n) else g * s
               for g, n in zip(ctx.grads, (need[0], need[1], len(need) > 3 and need[3]))]
        return out[0], out[1], None, out[2], None, None, None, None


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index: int = -100, reduction: str = "mean",
                         label_smoothing: float = 0.0, ce_weight=None, z_loss: float = 0.0, softcap=None,
                         logit_scale: float = 1.0):
    """cross_entropy(hidden @ weight.T + bias, target, ...) without the (N, V) logits in memory:
    hidden (..., H), weight (V, H), bias (V,) or None, all of one float dtype; target (...)
    int32/int64. The options are cross_entropy's, its class weights named ce_weight (V,) (weight
    is the linear layer's): a weighted mean divides by the sum of w[t] over all counted rows, not
    per chunk. Differentiable in hidden, weight and bias. The module docstring gives the chunking
    and its peak memory."""
    check_args(hidden, weight, target, bias, ignore_index, reduction, label_smoothing)
    opts = _ce.check_options(_stand_in(hidden, weight), ce_weight, z_loss, softcap, logit_scale, OP, "ce_weight")
    return LinearCrossEntropyFunction.apply(hidden, weight, target, bias, ignore_index, reduction,
                                            float(label_smoothing), opts)
