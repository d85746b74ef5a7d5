"""cross_entropy whose per-row losses are float32 (float64 for float64 logits) before the mean,
as torch's and most fused kernels are: lse - x_t of 2 finfo(float32).max is inf, so the mean of
rows holding logits of +-finfo.max is inf where the exact mean is finite. The default tier
accepts it (families/cross_entropy/truth.py, ce_default_mask); the strict tier's overflow-free mean does not."""
import torch
import torch.nn.functional as F


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    c = torch.float64 if logits.dtype == torch.float64 else torch.float32
    V = logits.shape[-1]
    rows = F.cross_entropy(logits.to(c).reshape(-1, V), target.reshape(-1).long(), ignore_index=ignore_index,
                           reduction="none", label_smoothing=float(label_smoothing))  # BUG (strict): float32 rows
    if reduction == "none":
        return rows.reshape(target.shape).to(logits.dtype)
    total = rows.double().sum()
    if reduction == "mean":
        total = total / (target != ignore_index).sum()
    return total.to(logits.dtype)


OP = "cross_entropy"  # the op it breaks: float32 row losses: inf mean at +-finfo.max
CAUGHT_BY = ('ce_matches_oracle_strict',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
