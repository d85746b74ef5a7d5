"""Cross-entropy forward that computes every row's loss (ignored rows with a placeholder class)
and then masks the ignored rows by multiplying with a 0/1 mask: an ignored row holding NaN or inf
logits (padding tokens whose logits overflowed, say) contributes 0 * NaN = NaN to the sum and the
mean. The bug class: masking by multiplication instead of selection (torch.where). The per-row
losses come from the project's Triton kernel; the bug is the masking after it."""
import torch

from softmax_properties.kernels import _cross_entropy as _ce


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    _ce.check_targets(target, logits.shape[-1], ignore_index, "cross_entropy")
    ign = target == ignore_index
    placeholder = 0 if ignore_index != 0 else min(1, logits.shape[-1] - 1)
    rows, _ = _ce.forward_rows(logits, torch.where(ign, placeholder, target), ignore_index, float(label_smoothing))
    rows = rows * (~ign).reshape(-1).to(rows.dtype)  # BUG: torch.where(ign, 0, rows)
    return _ce.reduce_loss(rows, target, ignore_index, reduction, logits.dtype)


OP = "cross_entropy"  # the op it breaks: loss * mask: 0 * NaN
CAUGHT_BY = ('ce_ignored_rows_do_not_count',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
