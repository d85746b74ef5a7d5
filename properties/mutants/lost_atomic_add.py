"""softmax backward whose row dot products sum(y * g) are split into column chunks whose partial
sums are added into a zeroed per-row buffer, declared nondeterministic (NONDETERMINISTIC) as a
kernel summing with float atomics rightly is, but whose adds are plain read-modify-writes: two
programs that read the buffer before either writes lose one of their partial sums. The bug class:
a lost update (a load, add and store where an atomic add was meant, or an atomic on a copy), which
a declaration of nondeterminism must not excuse: the sum it loses is far beyond the bounds that
reordering the adds stays within. The stand-in for the scheduler, the only artificial part: every
other call loses the last chunk's add of each row of more than one chunk."""
import torch
import triton

from softmax_properties.kernels._launch import check_pair

from ._base import rows_of
from .atomic_order_split_dot import SPLIT, _dot_kernel, _dx_kernel

NONDETERMINISTIC = ("softmax_backward",)  # declared: reordered adds are within the bounds, lost ones are not
_CALLS = [0]  # the stand-in for the scheduler: a chunk's add lost on odd calls


def softmax_backward(y, dy):
    check_pair("softmax_backward", "y", y, "dy", dy)
    y2, g2 = rows_of(y), rows_of(dy)
    dx = torch.empty_like(y2)
    if y2.numel():
        f64 = y.dtype == torch.float64
        ws = torch.zeros(y2.shape[0], dtype=torch.float64 if f64 else torch.float32, device=y.device)
        chunk = max(4, triton.next_power_of_2(triton.cdiv(y2.shape[1], SPLIT)))
        n_chunks = triton.cdiv(y2.shape[1], chunk)
        _CALLS[0] += 1
        landed = max(1, n_chunks - 1) if _CALLS[0] % 2 else n_chunks  # BUG: the last chunk's add lost
        _dot_kernel[(y2.shape[0],)](y2, g2, ws, y2.shape[1], landed, _CALLS[0] % 2, F64=f64, CHUNK=chunk)
        _dx_kernel[(y2.shape[0],)](y2, g2, ws, dx, y2.shape[1], F64=f64,
                                   BLOCK=max(16, triton.next_power_of_2(y2.shape[1])))
    return dx.reshape(y.shape)


OP = "softmax_backward"  # the op it breaks: split dot product with an update lost every other call
CAUGHT_BY = ('deterministic',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
