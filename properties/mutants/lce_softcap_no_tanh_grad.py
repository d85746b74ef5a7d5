"""Fused linear cross-entropy under a softcap whose backward forgets the chain rule through the
cap: its d logits are the cross-entropy gradient with respect to the capped logits
y = c tanh(s z / c), not times dy/dz = s (1 - tanh^2(s z / c)) (the class of a fused kernel that
applies the cap in its forward and takes the capped logits for the raw ones in its backward). The
loss is the project's kernels'; the logits are formed in the compute precision, the cross-entropy
backward of y by the kernels, the products by torch."""
import torch

from softmax_properties import kernels

from ._lce_base import cross_entropy, kernel_grads, with_backward  # noqa: F401 (cross_entropy: the op it composes)


def _grads(hidden, weight, bias, target, dloss, options):
    if options["softcap"] is None:
        return kernel_grads(hidden, weight, bias, target, dloss, options)
    ct = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    h, w = hidden.to(ct), weight.to(ct)
    z = h @ w.T + (0 if bias is None else bias.to(ct))
    c, s = options["softcap"], options["logit_scale"]
    y = c * torch.tanh(z * s / c)
    kw = {k: options[k] for k in ("ignore_index", "reduction", "label_smoothing", "z_loss")}
    dz = kernels.cross_entropy_backward(y, target, dloss.to(ct), **kw)  # BUG: not times s (1 - tanh^2(s z / c))
    return ((dz @ w).to(hidden.dtype), (dz.T @ h).to(weight.dtype),
            None if bias is None else dz.sum(0).to(bias.dtype))


linear_cross_entropy = with_backward(_grads)
OP = "linear_cross_entropy"  # the op it breaks: the softcap's derivative in the gradients
CAUGHT_BY = ("lce_gradients_match_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
