"""softmax that subtracts floor(max) instead of the max: exp(x - floor(m)) <= e, so nothing
overflows and the result is within the oracle bound, but x - floor(m) is not the same number
after a shift of the logits by 37.25, so the rounding, and the output bits, change with the
shift. A correct kernel is not wrong for this (the default tier accepts it); the strict tier's
bitwise shift invariance, a reproducibility guarantee, does not."""
import torch


def softmax(x):
    c = torch.float64 if x.dtype == torch.float64 else torch.float32
    xc = x.to(c)
    if xc.shape[-1] == 0:
        return x.clone()
    m = xc.amax(-1, keepdim=True)
    r = torch.where(torch.isfinite(m), torch.floor(m), m)  # BUG (strict): a shift-dependent reference
    e = torch.exp(xc - r)
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


OP = "softmax"  # the op it breaks: subtracts floor(max): accurate, not bitwise shift-invariant
CAUGHT_BY = ('shift_invariance_bitwise',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
