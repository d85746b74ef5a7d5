"""Fused linear cross-entropy whose chunk loop runs over the whole chunks only, ``N // R`` of
them: the ragged last chunk's rows never reach the loss (the issue class of a fused linear
cross-entropy whose chunking drops a tail of rows). R = 8 rows per chunk; the chunks it keeps are
the project's kernel's, and the mean is over the rows it kept. Its cross_entropy is the
project's, so only the fused op is wrong, on N not a multiple of 8 past 8."""
from softmax_properties import kernels

R = 8
cross_entropy = kernels.cross_entropy


def linear_cross_entropy(hidden, weight, target, *, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(bias=bias, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
              z_loss=z_loss, softcap=softcap, logit_scale=logit_scale)
    N = hidden.shape[0]
    keep = N - N % R if N > R else N  # BUG: the ragged last chunk dropped
    out = kernels.linear_cross_entropy(hidden[:keep], weight, target[:keep], **kw)
    if reduction == "none" and keep < N:
        return kernels.linear_cross_entropy(hidden, weight, target, **kw).index_fill(0, _tail(keep, N, hidden), 0.0)
    return out


def _tail(keep, N, like):
    import torch
    return torch.arange(keep, N, device=like.device)


OP = "linear_cross_entropy"  # the op it breaks: the last partial chunk of rows dropped
CAUGHT_BY = ("lce_matches_oracle", "lce_is_cross_entropy_of_logits",
             "lce_rows_split_recombine")  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
