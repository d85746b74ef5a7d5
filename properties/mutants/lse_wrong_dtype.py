"""logsumexp that returns the input dtype (bfloat16/float16 log-sum-exps lose the precision a
following merge needs) instead of float32."""
import torch

from softmax_properties.kernels import logsumexp as _lse


def logsumexp(x):
    out = _lse(x)
    return out.to(x.dtype)  # BUG: the contract is float32 for 16/32-bit input


OP = "logsumexp"  # the op it breaks
CAUGHT_BY = ('output_dtype_and_shape',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
