"""softmax that writes every result into one buffer it keeps per (shape, dtype, device), to save
the allocation (as kernels with a preallocated workspace do): every call returns the same tensor,
so a result the caller holds is overwritten by the next call. Laws that compare two calls compare
that tensor with itself."""
import torch

from softmax_properties import kernels

_BUFFERS = {}  # (shape, dtype, device) -> the output buffer


def softmax(x):
    y = kernels.softmax(x)
    key = (tuple(y.shape), y.dtype, y.device)
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.empty_like(y)
    out = _BUFFERS[key]
    out.copy_(y)  # BUG: the caller's previous result lives here too
    return out


OP = "softmax"  # the op it breaks: returns the same buffer from every call
CAUGHT_BY = ('outputs_outlive_the_next_call',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
