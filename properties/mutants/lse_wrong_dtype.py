"""logsumexp that returns float32 whatever the input's dtype (its output buffer follows the 16/32-bit
rule for float64 input too): a float64 row's lse loses its precision. Wrong in both tiers: the
default tier accepts float32 or the input's dtype (float64 here), the strict tier float64 alone.
(A 16-bit lse of 16-bit input, torch.logsumexp's convention, is the default tier's to accept.)"""
import torch

from softmax_properties.kernels import logsumexp as _lse


def logsumexp(x):
    out = _lse(x)
    return out.to(torch.float32)  # BUG: the contract is float64 for float64 input


OP = "logsumexp"  # the op it breaks
CAUGHT_BY = ('output_dtype_and_shape',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
