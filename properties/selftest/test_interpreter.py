"""The interpreter patches (properties/interpreter.py) against compiled Triton's semantics: 16-bit
conversions round to nearest even (exactly IEEE, "rtz" truncates), a float scalar argument is
float32, and a plain third-party-style bfloat16 softmax (properties/targets/naive_triton.py) stores
correctly rounded values. On a GPU the same checks run compiled kernels; under the interpreter
each check is also run with its patch suspended, to show it fails without it."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from .. import interpreter
from .exact16 import SIXTEEN, positive_grid, bits, exact_bits

DEVICE = interpreter.device()
only_interpreting = pytest.mark.skipif(not interpreter.interpreting(),
                                       reason="the patches are for Triton's interpreter (TRITON_INTERPRET=1)")

STORE, TO, RTZ = 0, 1, 2  # how _convert converts: tl.store's implicit cast, .to(), .to(rtz)


@triton.jit
def _convert(X, Y, N, HOW: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    x = tl.load(X + o, mask=m)
    if HOW == 0:
        tl.store(Y + o, x, mask=m)
    elif HOW == 1:
        tl.store(Y + o, x.to(Y.dtype.element_ty), mask=m)
    else:
        tl.store(Y + o, x.to(Y.dtype.element_ty, fp_downcast_rounding="rtz"), mask=m)


@triton.jit
def _scale(X, Y, s, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    tl.store(Y + o, tl.load(X + o, mask=m) * s, mask=m)


def convert(x: torch.Tensor, dtype, how: int) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=dtype, device=DEVICE)
    _convert[(triton.cdiv(x.numel(), 1024),)](x.to(DEVICE), y, x.numel(), HOW=how, BLOCK=1024)
    return y.cpu()


# ---- exact reference: the nearest (or toward-zero) 16-bit value, by enumeration ----------------
def _neighbours(dtype) -> list:
    """16-bit values at the edges that matter (zero, the subnormals, the normal range's ends, even
    and odd last bits, the largest finite), each with its upper neighbour, as float64."""
    inf_bits, _ = SIXTEEN[dtype]
    mant = 7 if dtype == torch.bfloat16 else 10
    one = (inf_bits >> 1) & ~((1 << mant) - 1)  # 1.0: exponent field at the bias
    patterns = [0, 1, 2, 3, (1 << mant) - 2, (1 << mant) - 1, 1 << mant, one, one + 1, one + 2, one + 3,
                inf_bits - 3, inf_bits - 2, inf_bits - 1]
    grid = positive_grid(dtype)
    return [(grid[p], grid[p + 1]) for p in patterns]


def float32_grid(dtype) -> torch.Tensor:
    """float32 values: 16-bit values, their midpoints (ties) and one float32 ulp either side, both
    signs; zeros, infinities, NaN, float32's extremes; and 4096 random float32 bit patterns."""
    vals = [0.0, -0.0, math.inf, -math.inf, math.nan, 3.4028234663852886e38, 2.0**-149, 1.1754943508222875e-38]
    for lo, hi in _neighbours(dtype):
        mid = np.float32((lo + hi) / 2)  # exact: one bit more than the 16-bit format
        vals += [lo, float(mid), float(np.nextafter(mid, np.float32(0))), float(np.nextafter(mid, np.float32(np.inf)))]
    x = torch.tensor(vals + [-v for v in vals], dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    rand = torch.randint(-2**31, 2**31, (4096,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([x, rand])


def float64_grid(dtype) -> torch.Tensor:
    """float64 values where converting through float32 first would round twice (a midpoint plus
    or minus a float64 ulp becomes the midpoint in float32), beyond float32's range, and specials."""
    vals = [0.0, -0.0, math.inf, math.nan, 1e300, 1e-300, 3.5e38, 1e-46, 2.0**-150, 3 * 2.0**-151]
    for lo, hi in _neighbours(dtype):
        mid = (lo + hi) / 2
        vals += [lo, mid, math.nextafter(mid, 0.0), math.nextafter(mid, math.inf), mid + mid * 2.0**-40]
    return torch.tensor(vals + [-v for v in vals], dtype=torch.float64)


def rounding_mismatches(x: torch.Tensor, dtype, how: int) -> list:
    """Values of x whose conversion by _convert differs from the IEEE result (NaN: any NaN);
    float32 round to nearest is also checked against torch's .to(dtype)."""
    got = convert(x, dtype, how)
    mode = "rtz" if how == RTZ else "rtne"
    torch_ref = how != RTZ and x.dtype == torch.float32  # torch's float64 -> 16-bit rounds twice
    ref = x.to(dtype) if torch_ref else got
    bad = []
    for v, g, nan, r, rnan in zip(x.tolist(), bits(got).tolist(), torch.isnan(got).tolist(),
                                  bits(ref).tolist(), torch.isnan(ref).tolist()):
        want = exact_bits(v, dtype, mode)
        if (nan, g) != (want is None, g if want is None else want) or (nan, g) != (rnan, g if rnan else r):
            bad.append(f"{v!r}: got {g:#06x}, want {'NaN' if want is None else hex(want)}"
                       + (f" (torch .to(): {r:#06x})" if torch_ref else ""))
    return bad


DOWNCASTS = [(torch.float32, how, d) for how in (STORE, TO, RTZ) for d in SIXTEEN] + \
            [(torch.float64, how, d) for how in (STORE, TO) for d in SIXTEEN]


def _ids(p):
    src, how, dst = p
    return f"{str(src)[6:]}-{('store', 'to', 'rtz')[how]}-{str(dst)[6:]}"


@pytest.mark.parametrize("src,how,dst", DOWNCASTS, ids=[_ids(p) for p in DOWNCASTS])
def test_downcast_to_16_bit_is_ieee(src, how, dst):
    x = float32_grid(dst) if src == torch.float32 else float64_grid(dst)
    bad = rounding_mismatches(x, dst, how)
    assert not bad, f"{len(bad)} of {x.numel()} conversions wrong, e.g. {bad[:6]}"


@only_interpreting
@pytest.mark.parametrize("src,how,dst", [(torch.float32, STORE, torch.bfloat16), (torch.float32, TO, torch.bfloat16),
                                         (torch.float64, TO, torch.bfloat16), (torch.float32, RTZ, torch.float16)],
                         ids=["float32-store-bfloat16", "float32-to-bfloat16", "float64-to-bfloat16", "float32-rtz-float16"])
def test_downcast_check_fails_without_patch(src, how, dst):
    """The stock interpreter truncates float32 -> bfloat16, converts float64 -> bfloat16 as an
    integer, and turns an "rtz" overflow into NaN. (To float16 without "rtz" it rounds right:
    numpy's conversion.)"""
    x = float32_grid(dst) if src == torch.float32 else float64_grid(dst)
    with interpreter.suspended("casts"):
        bad = rounding_mismatches(x, dst, how)
    assert bad, "the check passes without the casts patch"


ALL16 = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16)


@pytest.mark.parametrize("src,dst", [(torch.bfloat16, torch.float32), (torch.bfloat16, torch.float16),
                                     (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float64)],
                         ids=["bfloat16-float32", "bfloat16-float16", "float16-bfloat16", "bfloat16-float64"])
def test_every_16_bit_pattern_converts_like_torch(src, dst):
    """All 65,536 patterns of src (subnormals included) through .to(dst), bitwise against torch
    (both round once from the exact value); NaN must stay NaN."""
    bad = pattern_mismatches(src, dst)
    assert not bad, f"{len(bad)} of 65536 wrong, e.g. {bad[:6]}"


def pattern_mismatches(src, dst) -> list:
    x = ALL16.view(src)
    got, want = convert(x, dst, TO), x.to(dst)
    same = (got.view(torch.uint8) == want.view(torch.uint8)).view(-1, got.element_size()).all(1)
    same |= torch.isnan(got) & torch.isnan(want)
    return [f"{v!r} -> {g!r}, want {w!r}" for v, g, w in zip(x[~same].tolist(), got[~same].tolist(), want[~same].tolist())]


INTEGERS = torch.tensor([0, 1, -1, 255, 256, 257, 258, 259, -257, -259, 2**24 - 1, 65535, 123457], dtype=torch.int32)


def integer_mismatches() -> list:
    """int32 -> bfloat16 (257 is a tie: 256; 259 rounds up: 260)."""
    got = bits(convert(INTEGERS, torch.bfloat16, TO)).tolist()
    want = [exact_bits(float(v), torch.bfloat16, "rtne") for v in INTEGERS.tolist()]
    return [f"{v}: got {g:#06x}, want {w:#06x}" for v, g, w in zip(INTEGERS.tolist(), got, want) if g != w]


def test_integers_to_bfloat16_round_to_nearest_even():
    bad = integer_mismatches()
    assert not bad, bad


@only_interpreting
@pytest.mark.parametrize("check", ["bfloat16-float32", "float16-bfloat16", "int32-bfloat16"])
def test_widening_and_16_bit_checks_fail_without_patch(check):
    """The stock interpreter widens subnormal bfloat16 wrongly, truncates float16 -> bfloat16 and
    converts integers to bfloat16 as integers."""
    with interpreter.suspended("casts"):
        bad = {"bfloat16-float32": lambda: pattern_mismatches(torch.bfloat16, torch.float32),
               "float16-bfloat16": lambda: pattern_mismatches(torch.float16, torch.bfloat16),
               "int32-bfloat16": integer_mismatches}[check]()
    assert bad, "the check passes without the casts patch"


# ---- float scalar arguments --------------------------------------------------------------------
SCALARS = [  # (x dtype, out dtype, x values, s): the product in float32 (float64 for float64 x)
    (torch.float16, torch.float32, [1000.0, 3.0, 6.103515625e-05, -65504.0, 0.333251953125], 100.0),
    (torch.float16, torch.float32, [1.0, 3.0, -7.0], 1e-8),
    (torch.float64, torch.float64, [1.0, 3.0, -7.0], 0.1),
]


def scalar_mismatches(xdt, odt, values, s) -> list:
    x = torch.tensor(values, dtype=xdt)
    y = torch.empty(x.shape, dtype=odt, device=DEVICE)
    _scale[(1,)](x.to(DEVICE), y, s, x.numel(), BLOCK=8)
    want = x.to(odt) * torch.tensor(s, dtype=torch.float32).to(odt)  # s as the float32 it reaches a kernel as
    return [f"{v} * {s}: got {g!r}, want {w!r}" for v, g, w in zip(values, y.cpu().tolist(), want.tolist()) if g != w]


@pytest.mark.parametrize("xdt,odt,values,s", SCALARS, ids=["fp16-times-100", "fp16-times-1e-8", "fp64-times-0.1"])
def test_float_argument_is_float32(xdt, odt, values, s):
    """x * s with a float argument s is formed in float32 (x float16: 1000 * 100 is 1e5, not
    float16's inf; 1 * 1e-8 is not float16's 0) and s is float32 (x float64: 0.1 is rounded)."""
    bad = scalar_mismatches(xdt, odt, values, s)
    assert not bad, bad


@only_interpreting
@pytest.mark.parametrize("xdt,odt,values,s", SCALARS, ids=["fp16-times-100", "fp16-times-1e-8", "fp64-times-0.1"])
def test_float_argument_check_fails_without_patch(xdt, odt, values, s):
    with interpreter.suspended("float_args"):
        bad = scalar_mismatches(xdt, odt, values, s)
    assert bad, "the check passes without the float_args patch"


# ---- a third-party-style bfloat16 softmax ------------------------------------------------------
def _softmax_of_zeros():
    from ..targets import naive_triton
    return naive_triton.softmax(torch.zeros(2, 3, dtype=torch.bfloat16, device=DEVICE)).cpu()


def test_naive_bfloat16_softmax_rounds_its_store():
    """softmax of three zeros computed in float32 (1/3) and stored as bfloat16: 0.333984375, the
    nearest, not the truncated 0.33203125."""
    assert _softmax_of_zeros().float().unique().tolist() == [0.333984375]


@only_interpreting
def test_naive_bfloat16_softmax_truncates_without_patch():
    with interpreter.suspended("casts"):
        assert _softmax_of_zeros().float().unique().tolist() == [0.33203125]


# ---- nested_calls: triton.language patched once per launch -------------------------------------
@triton.jit
def _scaled(x, s):
    return x * s


@triton.jit
def _nested(X, Y, N, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    x = tl.load(X + o, mask=o < N, other=float("-inf"))
    e = tl.exp(x - tl.max(x, 0))  # tl.max, tl.sum: triton's own library functions (their module holds tl.core)
    tl.store(Y + o, _scaled(e, 1.0 / tl.sum(e, 0)), mask=o < N)


def _softmax_nested(x):
    y = torch.empty_like(x)
    _nested[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


@only_interpreting
def test_nested_calls_patch_changes_nothing_but_time():
    """Device functions (ours and triton's library) called inside a launch skip re-patching
    triton.language, which the launch has patched already: the same bits as with every call
    re-patching, triton's own _patch_lang reached once per launch and once per other language
    module (not once per call), and triton.language restored when the grid is done."""
    from triton.runtime import interpreter as I
    x = torch.tensor([0.5, -1.25, 3.0, 7.0, -2.0], dtype=torch.float32)
    (owner, attr, original) = interpreter._UNDO["nested_calls"][0]
    calls = []
    cell = next(c for c in I._patch_lang.__closure__ if c.cell_contents is original)
    cell.cell_contents = lambda fn: calls.append(fn.__name__) or original(fn)
    try:
        y = _softmax_nested(x)
    finally:
        cell.cell_contents = original
    assert calls.count("_nested") == 1 and len(calls) <= 3, calls  # the launch, then one call per language module
    assert tl.core.is_builtin(tl.load) and tl.core.is_builtin(tl.tensor.__add__), "triton.language left patched"
    with interpreter.suspended("nested_calls"):
        z = _softmax_nested(x)
    assert torch.equal(y, z) and torch.allclose(y.double(), torch.softmax(x.double(), 0), rtol=1e-6, atol=0)


# ---- libdevice ---------------------------------------------------------------------------------
from triton.language.extra.libdevice import erf as _ld_erf, pow as _ld_pow, tanh as _ld_tanh  # noqa: E402


@triton.jit
def _libdevice_math(X, Y, N, c, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    x = tl.load(X + o, mask=o < N)
    b = tl.abs(x) * 0.0625 + 1.0  # pow of two tensors of x's dtype (no scalar promotion to rely on)
    tl.store(Y + o, c * _ld_tanh(x / c) + _ld_erf(x) + _ld_pow(b, b), mask=o < N)


def _libdevice_check(dtype):
    x = torch.tensor([-30.0, -2.5, -0.75, 0.0, 1e-3, 0.5, 3.0, 40.0], dtype=dtype, device=DEVICE)
    y = torch.empty_like(x)
    _libdevice_math[(1,)](x, y, x.numel(), 0.25, BLOCK=8)
    x64 = x.double()
    b = x64.abs() * 0.0625 + 1.0
    want = 0.25 * torch.tanh(x64 / 0.25) + torch.erf(x64) + b**b
    assert torch.allclose(y.double(), want, rtol=8 * torch.finfo(dtype).eps, atol=4 * torch.finfo(dtype).eps), (y, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_libdevice_functions_compute(dtype):
    """triton.language.extra.libdevice's tanh, erf and pow (imported by name before any launch,
    as a third-party kernel module does) give their values, in float32 and float64."""
    _libdevice_check(dtype)


@only_interpreting
def test_libdevice_check_fails_without_patch():
    with interpreter.suspended("libdevice"):
        with pytest.raises(Exception, match="NoneType"):
            _libdevice_check(torch.float32)


@only_interpreting
def test_libdevice_refuses_16_bit_arguments_as_compiled():
    x = torch.ones(8, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="float32 or float64"):
        _libdevice_math[(1,)](x, torch.empty_like(x), 8, 0.25, BLOCK=8)


# ---- frame_stack: one frame-stack chunk mapped per launch --------------------------------------
@triton.jit
def _many_ops(X, Y, N, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    x = tl.load(X + o, mask=o < N, other=0.0)
    for _ in range(64):
        x = x * 0.5 + 1.0
    tl.store(Y + o, x, mask=o < N)


def _page_faults_at_depth(depth: int, launch) -> int:
    """Minor page faults of launch(), called `depth` frames (about 140 bytes each) deeper."""
    import resource  # POSIX only: the test skips without it
    if depth:
        return _page_faults_at_depth(depth - 1, launch)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    launch()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@only_interpreting
@pytest.mark.skipif(sys.version_info < (3, 11), reason="CPython 3.10 keeps frames on the heap, in no chunks")
def test_frame_stack_patch_maps_one_chunk_per_launch():
    """A kernel of some hundred interpreted operations, launched from every stack depth across more
    than a 16 KB chunk: with the patch each launch costs a few page faults wherever it starts;
    without it, the depths that put its operations on a chunk's edge cost thousands (a chunk
    mapped and unmapped per operation), and the results are the same bits."""
    pytest.importorskip("resource")
    x = torch.linspace(-3.0, 3.0, 16)
    ys = []

    def launch():
        ys.append(torch.empty_like(x))
        _many_ops[(1,)](x, ys[-1], 16, BLOCK=16)
    launch()
    depths = range(160)
    on = [_page_faults_at_depth(d, launch) for d in depths]
    with interpreter.suspended("frame_stack"):
        off = [_page_faults_at_depth(d, launch) for d in depths]
    assert max(on) < 100, on
    assert max(off) > 1000, off  # the control: the edge was crossed, and the patch is what removed its cost
    assert all(torch.equal(y, ys[0]) for y in ys)


# ---- install(), patches(), suspended() ---------------------------------------------------------
@only_interpreting
def test_install_is_idempotent_and_every_patch_is_on():
    assert interpreter.install() and interpreter.install()
    assert interpreter.patches() == {"autotune": "on", "casts": "on", "float_args": "on", "nested_calls": "on",
                                     "bfloat16_math": "on", "libdevice": "on", "frame_stack": "on"}
    with pytest.raises(ValueError, match="names must be among"):
        with interpreter.suspended("rounding"):
            pass


def test_missing_internal_leaves_the_patch_off_and_says_why(monkeypatch):
    """A triton without an internal a patch needs: install() does not raise, returns False and
    patches() names the patch that is off and why; the others are installed."""
    def missing():
        raise AttributeError("module 'triton.runtime.interpreter' has no attribute '_implicit_cvt'")
    done = []
    monkeypatch.setattr(interpreter, "_STATE", {})
    monkeypatch.setattr(interpreter, "_UNDO", {})
    monkeypatch.setattr(interpreter, "_INSTALLERS", {"autotune": lambda: done.append("autotune") or [],
                                                     "casts": lambda: done.append("casts") or [],
                                                     "float_args": missing,
                                                     "nested_calls": lambda: done.append("nested_calls") or [],
                                                     "bfloat16_math": lambda: done.append("bfloat16_math") or [],
                                                     "libdevice": lambda: done.append("libdevice") or [],
                                                     "frame_stack": lambda: done.append("frame_stack") or []})
    assert interpreter.install() is False
    state = interpreter.patches()
    assert state["autotune"] == state["casts"] == state["nested_calls"] == state["bfloat16_math"] == "on"
    assert done == ["autotune", "casts", "nested_calls", "bfloat16_math", "libdevice", "frame_stack"]
    assert state["float_args"].startswith("off (AttributeError: ") and "_implicit_cvt" in state["float_args"]
    assert interpreter.install() is False  # idempotent
    assert done == ["autotune", "casts", "nested_calls", "bfloat16_math", "libdevice", "frame_stack"]
    with pytest.raises(RuntimeError, match="not installed"):
        with interpreter.suspended("float_args"):
            pass
