"""Cross-entropy backward whose launcher hands dloss's data pointer to the kernel with a unit
stride: a strided reduction="none" dloss (a slice of a larger gradient, e.g. after torch.cat or a
transpose in the autograd graph) is read from the wrong elements. The bug class: grad_output
assumed contiguous (NVIDIA/TransformerEngine #2402: make grad_output contiguous in
cross_entropy.py; ROCm/TransformerEngine #623: fused cross-entropy backward with a broadcast
grad_output read with a unit row stride). The gradient is the project's Triton kernel."""
import torch

from softmax_properties.kernels import _cross_entropy as _ce


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t's storage from its data pointer with contiguous strides (an expanded tensor whose storage
    is too short is copied instead: reading past the storage would fault on a GPU)."""
    if t.ndim == 0 or t.untyped_storage().nbytes() < (t.storage_offset() + t.numel()) * t.element_size():
        return t.contiguous()
    return torch.as_strided(t, t.shape, torch.empty(t.shape, device="meta").stride(), t.storage_offset())


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    name = "cross_entropy_backward"
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, name)
    _ce.check_dloss(dloss, target, logits, reduction, name)
    _ce.check_targets(target, logits.shape[-1], ignore_index, name)
    _, lse = _ce.forward_rows(logits, target, ignore_index, float(label_smoothing))
    dloss = _as_if_contiguous(dloss)  # BUG: dloss.stride() ignored
    return _ce.backward_rows(logits, target, dloss, lse, ignore_index, reduction, float(label_smoothing))


OP = "cross_entropy_backward"  # the op it breaks: dloss read with a unit stride
CAUGHT_BY = ('ce_gradient_linear_in_dloss',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
