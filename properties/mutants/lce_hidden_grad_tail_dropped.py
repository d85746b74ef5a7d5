"""Fused linear cross-entropy whose backward writes d hidden for the whole chunks only: the rows
of the ragged last chunk (R = 8 rows per chunk, N not a multiple of 8 past 8) keep a zero
gradient, while the loss and d weight are right (the class of a fused kernel whose gradient pass
drops a tail of rows that its forward kept). Values are the project's kernels' elsewhere."""
from ._lce_base import cross_entropy, kernel_grads, with_backward  # noqa: F401 (cross_entropy: the op it composes)

R = 8


def _grads(hidden, weight, bias, target, dloss, options):
    dh, dw, db = kernel_grads(hidden, weight, bias, target, dloss, options)
    dh = dh.clone()
    N = dh.shape[0]
    if N > R:
        dh[N - N % R:] = 0  # BUG: the ragged last chunk's rows get no gradient
    return dh, dw, db


linear_cross_entropy = with_backward(_grads)
OP = "linear_cross_entropy"  # the op it breaks: d hidden of the last partial chunk's rows
CAUGHT_BY = ("lce_gradients_match_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
