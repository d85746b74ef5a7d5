"""Cross-entropy whose reduction over more than 64 rows (more than one 64-row program) goes
through a buffer in the loss dtype: each row's share loss_i / N ("mean"; loss_i for "sum") is
stored in float16 / bfloat16 before the sum. Over thousands of rows each share is tiny: under
float16 it falls into the subnormals or flushes to 0, and a mean over 8192 rows comes out several
percent low, or 0. Batches of up to 64 rows reduce in float32 (the project's reduction), and
32/64-bit logits are right. The bug class: partial results kept in the 16-bit output dtype
outside autocast (issue 1 of the coverage review: a cross-entropy that stores each row's
loss / N in fp16 before summing)."""
import torch

from softmax_properties.kernels import _cross_entropy as _ce

ROWS = 64  # rows per program: one program reduces in registers, several through the buffer


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    _ce.check_args(logits, target, ignore_index, reduction, label_smoothing, "cross_entropy")
    _ce.check_targets(target, logits.shape[-1], ignore_index, "cross_entropy")
    loss_rows, _ = _ce.forward_rows(logits, target, ignore_index, float(label_smoothing))
    if reduction == "none" or loss_rows.numel() <= ROWS or logits.dtype not in (torch.float16, torch.bfloat16):
        return _ce.reduce_loss(loss_rows, target, ignore_index, reduction, logits.dtype)
    count = (target != ignore_index).sum() if reduction == "mean" else 1
    shares = (loss_rows / count).to(logits.dtype)  # BUG: each row's share rounded to the 16-bit loss dtype
    return shares.float().sum().to(logits.dtype)


OP = "cross_entropy"  # the op it breaks: each row's loss / N stored in fp16 / bf16
CAUGHT_BY = ('many_rows_match_oracle',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
