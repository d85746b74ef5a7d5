"""softmax backward whose row dot products sum(y * g) are split into column chunks whose partial
sums are accumulated with float atomic adds into a zeroed per-row buffer. Floating-point addition
is not associative, so the result depends on the order in which the adds land, which for adds
from concurrent programs changes from run to run on a GPU: two calls on the same input can differ
in the last bits (the sums stay within the error bound, so only bitwise determinism sees it). The
bug class: atomics-based split reductions (triton-lang/triton #8424 asks for a deterministic
tl.atomic_add reduction order; Triton offers none). The stand-in for the scheduler, the only
artificial part: one program per row issues the chunks' adds in order, reversed on every other
call. (With one program per chunk, a real race, the GPU ran the adds of a shrunk 18-element case
in one order five times in a row, so the suite's catch did not reproduce; the interpreter runs
programs in order anyway.)"""
import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_pair
from softmax_properties.kernels._numerics import to_out

from ._base import rows_of

SPLIT = 4  # chunks per row in the dot-product pass (of at least 4 columns)
_CALLS = [0]  # the stand-in for the scheduler: the chunks' adds in reverse order on odd calls


@triton.jit
def _dot_kernel(Yp, G, WS, n, n_chunks, reverse, F64: tl.constexpr, CHUNK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    for j in range(0, n_chunks):
        c = tl.where(reverse != 0, n_chunks - 1 - j, j)
        cols = c * CHUNK + tl.arange(0, CHUNK)
        m = cols < n
        y = tl.load(Yp + row * n + cols, mask=m, other=0.0).to(CT)
        g = tl.load(G + row * n + cols, mask=m, other=0.0).to(CT)
        tl.atomic_add(WS + row, tl.sum(y * g, 0))  # BUG: the order of these adds is not fixed


@triton.jit
def _dx_kernel(Yp, G, WS, DX, n, F64: tl.constexpr, BLOCK: tl.constexpr):
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    y = tl.load(Yp + row * n + cols, mask=m, other=0.0).to(CT)
    g = tl.load(G + row * n + cols, mask=m, other=0.0).to(CT)
    dot = tl.load(WS + row).to(CT)
    tl.store(DX + row * n + cols, to_out(y * (g - dot), DX.dtype.element_ty), mask=m)


def split_dot_backward(y, dy, reverse: bool, lose_last: bool = False):
    """The softmax VJP with its row dot products summed chunk by chunk into a per-row buffer: the
    adds in reverse order if `reverse`, and the last chunk's add of a row of several chunks lost
    if `lose_last` (lost_atomic_add's bug)."""
    check_pair("softmax_backward", "y", y, "dy", dy)
    y2, g2 = rows_of(y), rows_of(dy)
    dx = torch.empty_like(y2)
    if y2.numel():
        f64 = y.dtype == torch.float64
        ws = torch.zeros(y2.shape[0], dtype=torch.float64 if f64 else torch.float32, device=y.device)
        chunk = max(4, triton.next_power_of_2(triton.cdiv(y2.shape[1], SPLIT)))
        n_chunks = triton.cdiv(y2.shape[1], chunk)
        landed = max(1, n_chunks - 1) if lose_last else n_chunks
        _dot_kernel[(y2.shape[0],)](y2, g2, ws, y2.shape[1], landed, int(reverse), F64=f64, CHUNK=chunk)
        _dx_kernel[(y2.shape[0],)](y2, g2, ws, dx, y2.shape[1], F64=f64,
                                   BLOCK=max(16, triton.next_power_of_2(y2.shape[1])))
    return dx.reshape(y.shape)


def softmax_backward(y, dy):
    _CALLS[0] += 1
    return split_dot_backward(y, dy, reverse=_CALLS[0] % 2 == 1)


OP = "softmax_backward"  # the op it breaks: split dot product summed by float atomics
CAUGHT_BY = ('deterministic',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
