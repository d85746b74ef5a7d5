"""Cross-entropy whose reduction="mean" divides by every row, ignored ones included: the
reduction a launcher writes as ``loss_rows.sum() / N`` (torch, and the suite, divide by the
number of rows whose target is not ignore_index). The per-row loss comes from the project's
Triton kernel (kernels/_cross_entropy.py), so this bug -- which lives in the reduction, after the
kernel -- is the only one."""
import torch

from softmax_properties.kernels import _cross_entropy as _ce


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    _ce.check_targets(target, logits.shape[-1], ignore_index, "cross_entropy")
    rows, _ = _ce.forward_rows(logits, target, ignore_index, float(label_smoothing))
    if reduction == "mean":
        return (rows.to(torch.float64).sum() / rows.numel()).to(logits.dtype)  # BUG: counts ignored rows
    return _ce.reduce_loss(rows, target, ignore_index, reduction, logits.dtype)


OP = "cross_entropy"  # the op it breaks: mean divides by all rows
CAUGHT_BY = ('ce_matches_oracle', 'ce_reductions_agree')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
