"""Cross-entropy forward without the host-side check of the targets: the kernel masks its gather,
so an out-of-range class index silently reads no logit (x[t] = 0) and returns a plausible loss
instead of raising. The bug class: pytorch/pytorch #43840 (CrossEntropyLoss does not raise
"target out of bounds" on the GPU, returning a value). The loss is the project's Triton kernel;
only the check is missing."""
from softmax_properties.kernels import _cross_entropy as _ce


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    # BUG: _ce.check_targets(target, logits.shape[-1], ignore_index, "cross_entropy") is missing
    rows, _ = _ce.forward_rows(logits, target, ignore_index, float(label_smoothing))
    return _ce.reduce_loss(rows, target, ignore_index, reduction, logits.dtype)


OP = "cross_entropy"  # the op it breaks: out-of-range targets not rejected
CAUGHT_BY = ('ce_out_of_range_target_raises',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
