"""softmax_backward by its textbook formula dx = y (dy - sum(y dy)) in float32 (float64 for
float64), unscaled: for cotangents near finfo.max, dy_i - sum(y dy) overflows and the result is
-inf or NaN where the exact VJP is finite (y_i tiny). torch's own CPU and CUDA backward do this,
and so do most kernels: the default tier accepts it (families/softmax/bounds.py, vjp_in_range), the strict tier's
overflow-free guarantee does not."""
import torch


def softmax_backward(y, dy):
    c = torch.float64 if y.dtype == torch.float64 else torch.float32
    y32, g32 = y.to(c), dy.to(c)
    return (y32 * (g32 - (y32 * g32).sum(-1, keepdim=True))).to(y.dtype)  # BUG: no scaling near finfo.max


OP = "softmax_backward"  # the op it breaks: textbook float32 VJP, overflows near finfo.max
CAUGHT_BY = ('matches_oracle_strict',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
