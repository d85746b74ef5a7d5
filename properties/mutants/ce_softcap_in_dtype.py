"""Cross-entropy whose softcap and logit scale are applied in the logits' dtype: y = c tanh(s x / c)
rounded to float16 / bfloat16 before a float32 loss, as torch's composition
``softcap * torch.tanh(logits / softcap)`` forms it. Each y is off by up to half an ulp of the
16-bit dtype (bfloat16 y = 30: 0.06), which the default tier accepts as torch's convention and
the strict tier, the compute precision's bound, does not. The project's kernels do the rest."""
import torch

from softmax_properties import kernels


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, weight=None,
                  z_loss=0.0, softcap=None, logit_scale=1.0):
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing, weight=weight,
              z_loss=z_loss)
    if logits.dtype not in (torch.float16, torch.bfloat16) or (softcap is None and logit_scale == 1.0):
        return kernels.cross_entropy(logits, target, softcap=softcap, logit_scale=logit_scale, **kw)
    y = logits.float() * logit_scale
    if softcap is not None:
        y = softcap * torch.tanh(y / softcap)
    return kernels.cross_entropy(y.to(logits.dtype), target, **kw)  # BUG (strict): y rounded to 16 bits


OP = "cross_entropy"  # the op it breaks, in the strict tier: the transformed logits rounded to the dtype
CAUGHT_BY = ("ce_options_match_oracle_strict",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
