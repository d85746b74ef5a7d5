"""The interpreter's bfloat16_math patch (properties/interpreter.py) against compiled Triton's
bfloat16 arithmetic: elementwise operations, exp, reductions, dot and atomic_add computed in
float32 and rounded to nearest even. On a GPU the same checks run compiled kernels; under the
interpreter each check is also run with the patch suspended, to show it fails without it."""
from __future__ import annotations

import inspect
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.errors import InterpreterError

from .. import interpreter
from .exact16 import bits, exact_bits

DEVICE = interpreter.device()
only_interpreting = pytest.mark.skipif(not interpreter.interpreting(),
                                       reason="the patches are for Triton's interpreter (TRITON_INTERPRET=1)")


# ---- bfloat16 arithmetic -----------------------------------------------------------------------
# The stock interpreter keeps bfloat16 as its uint16 patterns and applies numpy's integer
# arithmetic to them (negating 0.018 gave -237); the bfloat16_math patch computes in float32 and
# rounds to nearest even, as compiled Triton's bfloat16 operations do. Each check below compares
# against torch's bfloat16 on the CPU (which also rounds from float32) or an exact reference.
BF16 = torch.bfloat16
NEG, ADD, SUB, MUL, DIV, WHERE, COMPARE, MAXIMUM, CLAMP, FMA, EXP = range(11)


@triton.jit
def _bf16_elementwise(X, Y, W, OUT, N, OP: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    x = tl.load(X + o, mask=m)
    y = tl.load(Y + o, mask=m)
    w = tl.load(W + o, mask=m)
    if OP == 0:
        r = -x
    elif OP == 1:
        r = x + y
    elif OP == 2:
        r = x - y
    elif OP == 3:
        r = x * y
    elif OP == 4:
        r = (x * y) / (x - y)  # bfloat16 product and difference; Triton's / divides in float32
    elif OP == 5:
        r = tl.where(x < y, x, y * 2.0)
    elif OP == 6:
        r = ((x < y).to(tl.int8) + 2 * (x <= y).to(tl.int8) + 4 * (x == y).to(tl.int8)
             + 8 * (x != y).to(tl.int8) + 16 * (x > y).to(tl.int8) + 32 * (x >= y).to(tl.int8))
    elif OP == 7:
        r = tl.maximum(x, y)
    elif OP == 8:
        r = tl.clamp(x, -tl.abs(y), tl.abs(y))
    elif OP == 9:
        r = tl.fma(x, y, w)
    else:
        r = tl.exp((x - y).to(tl.float32))  # tl.exp takes float32/float64 only, compiled or not
    tl.store(OUT + o, r, mask=m)


def bf16_inputs(kind: str) -> tuple:
    """x, y, w: bfloat16, 1024 each. "wide": both signs, magnitudes 2**-24 .. 2**24, subnormals,
    the largest finite, zeros, infinities and NaN, and pairs whose sum is a tie (1 + 2**-8 rounds
    down to even, 1.0078125 + 2**-8 up); "finite": without zeros (their sign is no concern here),
    infinities, NaN and subnormals; "small": |x - y| < 30, for exp."""
    g = torch.Generator().manual_seed(7)
    n = 1024
    if kind == "small":
        x, y = ((torch.randn(n, generator=g) * 4).clamp(-14, 14).to(BF16) for _ in range(2))
        return x, y, x
    scale = 2.0 ** torch.randint(-24, 25, (n,), generator=g).float()
    x = (torch.randn(n, generator=g) * scale).to(BF16)
    pairs = [(0.018, 0.5), (1.0, 2.0**-8), (1.0078125, 2.0**-8), (-1.5, 0.5), (3.0, -3.0), (-0.25, 0.1),
             (3.3895313892515355e38, 3.3895313892515355e38), (-1e30, 1e30), (0.3, -0.29)]
    if kind == "wide":
        pairs += [(1e-39, 1e-39), (-3e-39, 2.0**-130), (0.0, -0.0), (-0.0, -0.0), (0.0, 1.0), (math.inf, -math.inf),
                  (math.nan, 1.0), (-0.25, -math.inf), (math.inf, 2.0)]
    px, py = zip(*pairs)
    x[:len(pairs)] = torch.tensor(px, dtype=BF16)
    y = x[torch.randperm(n, generator=g)]
    y[:len(pairs)] = torch.tensor(py, dtype=BF16)
    w = x[torch.randperm(n, generator=g)]
    return x, y, w


def _nearest_bf16_bits(exact: Fraction) -> int:
    """The bfloat16 nearest to an exact value, as its pattern: the float64 rounded to odd (so
    that rounding it again cannot round twice), then exact_bits."""
    f = float(exact)
    if Fraction(f) != exact and not int(np.float64(f).view(np.uint64)) & 1:
        f = math.nextafter(f, math.inf if exact > f else -math.inf)
    return exact_bits(f, BF16, "rtne")


def _from_bits(b: list) -> torch.Tensor:
    return torch.tensor(b, dtype=torch.int32).to(torch.int16).view(BF16)


BF16_ELEMENTWISE = {  # name: (OP, inputs, reference on torch's bfloat16 tensors)
    "neg": (NEG, "wide", lambda x, y, w: -x),
    "add": (ADD, "wide", lambda x, y, w: x + y),
    "sub": (SUB, "wide", lambda x, y, w: x - y),
    "mul": (MUL, "wide", lambda x, y, w: x * y),
    # the float32 quotient of two bfloat16 values is never within a GPU's 2 float32 ulps of a
    # bfloat16 tie, so its rounding at the store is torch's bfloat16 division's
    "div": (DIV, "finite", lambda x, y, w: (x * y) / (x - y)),
    "where": (WHERE, "wide", lambda x, y, w: torch.where(x < y, x, y * 2.0)),
    "compare": (COMPARE, "wide", lambda x, y, w: ((x < y).to(torch.int8) + 2 * (x <= y).to(torch.int8)
                                                  + 4 * (x == y).to(torch.int8) + 8 * (x != y).to(torch.int8)
                                                  + 16 * (x > y).to(torch.int8) + 32 * (x >= y).to(torch.int8))),
    "maximum": (MAXIMUM, "finite", lambda x, y, w: torch.maximum(x, y)),
    "clamp": (CLAMP, "finite", lambda x, y, w: torch.clamp(x, -y.abs(), y.abs())),
    # rounded once, against an exact reference (torch has no bfloat16 fma)
    "fma": (FMA, "finite", lambda x, y, w: _from_bits([_nearest_bf16_bits(Fraction(a) * Fraction(b) + Fraction(c))
                                                       for a, b, c in zip(x.tolist(), y.tolist(), w.tolist())])),
}


def bf16_elementwise_mismatches(name: str) -> list:
    """Elements where the kernel differs from the reference (as values: NaN matches NaN, and
    -0 matches 0, since triton 3.6 negates as 0 - x)."""
    op, kind, ref = BF16_ELEMENTWISE[name]
    x, y, w = bf16_inputs(kind)
    out = torch.empty(x.shape, dtype=torch.int8 if op == COMPARE else BF16, device=DEVICE)
    _bf16_elementwise[(1,)](x.to(DEVICE), y.to(DEVICE), w.to(DEVICE), out, x.numel(), OP=op, BLOCK=1024)
    got, want = out.cpu(), ref(x, y, w)
    same = (got == want) | (got.isnan() & want.isnan())
    return [f"x={a!r} y={b!r} w={c!r}: got {g!r}, want {v!r}"
            for a, b, c, g, v in zip(x[~same].tolist(), y[~same].tolist(), w[~same].tolist(),
                                     got[~same].tolist(), want[~same].tolist())]


def bf16_exp_mismatches() -> list:
    """exp of a bfloat16 difference (x - y rounded to bfloat16, exp in float32, stored as
    bfloat16): each result must be one of the two bfloat16 values around exp of that difference
    (a GPU's float32 exp is not correctly rounded, so only that much is promised)."""
    x, y, _ = bf16_inputs("small")
    out = torch.empty(x.shape, dtype=BF16, device=DEVICE)
    _bf16_elementwise[(1,)](x.to(DEVICE), y.to(DEVICE), x.to(DEVICE), out, x.numel(), OP=EXP, BLOCK=1024)
    bad = []
    for a, b, g, d in zip(x.tolist(), y.tolist(), bits(out.cpu()).tolist(), (x - y).tolist()):
        below = exact_bits(math.exp(d), BF16, "rtz")
        if g not in (below, below + 1):
            bad.append(f"exp({a!r} - {b!r}): got {g:#06x}, want {below:#06x} or the next")
    return bad


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.skipif(
    n == "fma" and not interpreter.interpreting(), reason="a compiled bfloat16 fma rounds as the backend lowers it "
    "(fused, or in float32 and then to bfloat16: twice)")) for n in BF16_ELEMENTWISE])
def test_bfloat16_elementwise_matches_torch(name):
    bad = bf16_elementwise_mismatches(name)
    assert not bad, f"{len(bad)} of 1024 wrong, e.g. {bad[:6]}"


def test_bfloat16_exp_of_a_difference_is_faithful():
    bad = bf16_exp_mismatches()
    assert not bad, f"{len(bad)} of 1024 wrong, e.g. {bad[:6]}"


@triton.jit
def _bf16_reduce(X, SUM, MAX, IMAX, MIN, IMIN, ARGMAX, MAX_PLAIN, CUMSUM, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    x = tl.load(X + r[:, None] * C + c[None, :])
    tl.store(SUM + r, tl.sum(x, 1))
    m, i = tl.max(x, 1, return_indices=True)
    tl.store(MAX + r, m)
    tl.store(IMAX + r, i)
    m, i = tl.min(x, 1, return_indices=True)
    tl.store(MIN + r, m)
    tl.store(IMIN + r, i)
    tl.store(ARGMAX + c, tl.argmax(x, 0))
    tl.store(MAX_PLAIN + r, tl.max(x, 1))
    tl.store(CUMSUM + r[:, None] * C + c[None, :], tl.cumsum(x, 1))


def bf16_reduction_mismatches() -> list:
    """tl.sum, tl.max and tl.min (with and without indices), tl.argmax and tl.cumsum over the
    rows and columns of an 8 x 16 bfloat16 block of distinct multiples of 1/4 in [-4, 4) per
    row: every partial sum is a multiple of 1/4 below 64 in magnitude, exact in bfloat16, so
    the results do not depend on the order of the additions (a GPU's, the interpreter's or
    torch's) nor on whether partial sums are rounded to bfloat16; no ties for the indices."""
    R, C = 8, 16
    g = torch.Generator().manual_seed(3)
    x = torch.stack([torch.randperm(32, generator=g)[:C] for _ in range(R)]).sub(16).div(4).to(BF16)
    i32, f32 = torch.int32, torch.float32
    shapes = {"sum": (R, BF16), "max": (R, BF16), "argmax_row": (R, i32), "min": (R, BF16), "argmin_row": (R, i32),
              "argmax_col": (C, i32), "max_plain": (R, f32), "cumsum": ((R, C), BF16)}
    outs = {k: torch.empty(shape, dtype=dt, device=DEVICE) for k, (shape, dt) in shapes.items()}
    _bf16_reduce[(1,)](x.to(DEVICE), *outs.values(), R=R, C=C)
    want = {"sum": x.sum(1), "max": x.max(1).values, "argmax_row": x.max(1).indices.int(), "min": x.min(1).values,
            "argmin_row": x.min(1).indices.int(), "argmax_col": x.argmax(0).int(), "max_plain": x.max(1).values.float(),
            "cumsum": x.cumsum(1)}
    return [f"{k}: got {outs[k].cpu().tolist()}, want {want[k].tolist()}" for k in outs
            if not torch.equal(outs[k].cpu(), want[k])]


def test_bfloat16_reductions_match_torch():
    bad = bf16_reduction_mismatches()
    assert not bad, bad


@triton.jit
def _bf16_sum_row(X, OUT, C: tl.constexpr):
    tl.store(OUT, tl.sum(tl.load(X + tl.arange(0, C)), 0))


def sum_of_256_then_ones() -> float:
    x = torch.tensor([256.0] + [1.0] * 255, dtype=BF16, device=DEVICE)
    out = torch.empty((), dtype=BF16, device=DEVICE)
    _bf16_sum_row[(1,)](x, out, C=256)
    return out.item()


@only_interpreting
def test_bfloat16_sum_rounds_each_partial_sum():
    """Compiled Triton sums bfloat16 in bfloat16 (tl.sum widens only integers; each addition is
    rounded), in an order its layout fixes; the interpreter adds in a tree of halves. 256 then
    255 ones: 510 (the first level's 256 + 1 rounds to 256, every later partial sum is exact),
    where adding in order gives 256 and torch.sum, which accumulates in float32, 512."""
    assert sum_of_256_then_ones() == 510.0


@only_interpreting
def test_bfloat16_sum_check_fails_without_patch():
    with interpreter.suspended("bfloat16_math"):
        assert sum_of_256_then_ones() != 510.0


@triton.jit
def _bf16_dot(A, B, OUT, M: tl.constexpr):
    r = tl.arange(0, M)[:, None] * M + tl.arange(0, M)[None, :]
    tl.store(OUT + r, tl.dot(tl.load(A + r), tl.load(B + r)))


def bf16_dot_mismatches() -> list:
    """tl.dot of bfloat16 16 x 16 blocks into float32: small integers, so every product and
    partial sum is exact whatever the accumulation order."""
    g = torch.Generator().manual_seed(5)
    a, b = (torch.randint(-4, 5, (16, 16), generator=g).to(BF16) for _ in range(2))
    out = torch.empty(16, 16, dtype=torch.float32, device=DEVICE)
    _bf16_dot[(1,)](a.to(DEVICE), b.to(DEVICE), out, M=16)
    want = a.float() @ b.float()
    return [] if torch.equal(out.cpu(), want) else [f"got {out.cpu()[:2].tolist()}, want {want[:2].tolist()}"]


def test_bfloat16_dot_matches_torch():
    bad = bf16_dot_mismatches()
    assert not bad, bad


@triton.jit
def _bf16_atomic_add(Y, X, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.atomic_add(Y + o % 3, tl.load(X + tl.program_id(0) * BLOCK + o), mask=o < BLOCK - 1)


def bf16_atomic_add_mismatches() -> list:
    """tl.atomic_add of bfloat16, four programs of 8 lanes into 3 addresses (lanes share
    addresses; the last lane is masked off): multiples of 1/4, exact in any order."""
    g = torch.Generator().manual_seed(9)
    x = torch.randint(-16, 17, (32,), generator=g).div(4).to(BF16)
    y = torch.zeros(3, dtype=BF16, device=DEVICE)
    _bf16_atomic_add[(4,)](y, x.to(DEVICE), BLOCK=8)
    live = x.view(4, 8)[:, :7].float()
    want = torch.stack([live[:, k::3].sum() for k in range(3)]).to(BF16)
    return [] if torch.equal(y.cpu(), want) else [f"got {y.cpu().tolist()}, want {want.tolist()}"]


def test_bfloat16_atomic_add_matches_torch():
    bad = bf16_atomic_add_mismatches()
    assert not bad, bad


BF16_CHECKS = {**{name: (lambda name=name: bf16_elementwise_mismatches(name)) for name in BF16_ELEMENTWISE},
               "exp": bf16_exp_mismatches, "reductions": bf16_reduction_mismatches, "dot": bf16_dot_mismatches,
               "atomic_add": bf16_atomic_add_mismatches}


@only_interpreting
@pytest.mark.parametrize("check", list(BF16_CHECKS))
def test_bfloat16_check_fails_without_patch(check):
    """Wrong results, or an error: the stock interpreter refuses bfloat16 atomics ("Unsupported
    data type"), and triton 3.6's has no bfloat16 constants (y * 2.0 raises AttributeError)."""
    if check == "maximum" and "_promote_bfloat16_to_float32" in inspect.getsource(tl.maximum):
        pytest.skip("this triton's tl.maximum computes bfloat16 in float32 itself (triton 3.6 does)")
    with interpreter.suspended("bfloat16_math"):
        try:
            bad = BF16_CHECKS[check]()
        except InterpreterError as e:
            bad = [repr(e)]
    assert bad, "the check passes without the bfloat16_math patch"
