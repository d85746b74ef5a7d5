"""Cross-entropy backward that writes the gradient into the logits' own buffer (to save the memory
of a V-wide gradient) and returns it: the caller's logits are destroyed, which breaks any second
use of them (another loss on the same logits, gradient checkpointing's recompute). The bug class:
unslothai/unsloth #5002 (the cross-entropy backward kernel writes gradients into the logits tensor
in place). In place when the logits are contiguous (the fast path); the gradient is the project's
Triton kernel."""
from softmax_properties import kernels


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    dx = kernels.cross_entropy_backward(logits, target, dloss, ignore_index=ignore_index, reduction=reduction,
                                        label_smoothing=label_smoothing)
    if logits.is_contiguous():
        return logits.copy_(dx)  # BUG: the logits must be left unmodified
    return dx


OP = "cross_entropy_backward"  # the op it breaks: gradient written over the logits
CAUGHT_BY = ('inputs_unmodified',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
