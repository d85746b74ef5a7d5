"""The strategies every family draws from: values, logits recipes, row lengths, batches, layouts,
and the dispatch to each op's case strategy (its family's strategies.py).

A tensor is drawn as a *recipe*, not as an array: a ``Logits`` block is a cheap fill (a constant,
or a seeded normal / grid / bit-pattern fill) plus a few explicit patches (a value over a column
range of one row). A 65,537-long row costs a handful of draws, and shrinking removes patches,
shortens the row, and turns the fill into a constant -- so a failure ends as a small tensor that
prints in full. A ``Layout`` turns the logical values into the strided tensor the target sees,
from a line of torch code that is also what the reproducer prints: the two cannot disagree.
"""
from __future__ import annotations

import contextlib

import functools
import math
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch
from hypothesis import strategies as st

from .snippets import built
from .spec import lookup

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_BITS_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_PRECISION = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


@dataclass
class Limits:
    """Shape limits of the active profile (set by the plugin from the Hypothesis profile)."""
    max_rows: int = 8
    max_cols: int = 2100
    long_cols: int = 4200  # an occasional long row up to this length
    max_elems: int = 16384  # cap on elements per drawn tensor (long rows get fewer rows)
    many_rows: int = 4200  # rows of a many-rows case (MANY_ROWS), at most max_elems // row length


LIMITS = Limits()


def set_limits(lim: Limits) -> Limits:
    """Make lim the active shape limits (LIMITS is shared, so it is updated in place); returns
    the previous ones."""
    prev = Limits(**vars(LIMITS))
    for k, v in vars(lim).items():
        setattr(LIMITS, k, v)
    return prev


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _dtype(name: str):
    return getattr(torch, name)


# ----------------------------------------------------------------------------------------------
# scalar values, each exactly representable in the dtype
# ----------------------------------------------------------------------------------------------
def from_bits(bits: int, dtype) -> float:
    n = dtype.itemsize * 8
    if bits >= 2 ** (n - 1):
        bits -= 2**n
    return float(torch.tensor([bits], dtype=_BITS_VIEW[dtype.itemsize]).view(dtype).to(torch.float64))


@functools.lru_cache(maxsize=None)
def any_value(dtype):
    """Every representable value of the dtype, NaN, infinities and subnormals included."""
    if dtype.itemsize == 2:
        return st.integers(0, 2**16 - 1).map(lambda b: from_bits(b, dtype))
    return st.floats(width=dtype.itemsize * 8)


@functools.lru_cache(maxsize=None)
def rounded(dtype, lo, hi):
    return st.floats(lo, hi).map(lambda v: float(torch.tensor(v, dtype=torch.float64).to(dtype).double()))


@functools.lru_cache(maxsize=None)
def moderate_value(dtype):
    return rounded(dtype, -30.0, 30.0)


@functools.lru_cache(maxsize=None)
def huge_value(dtype):
    mx = torch.finfo(dtype).max
    return st.one_of(st.sampled_from([mx, -mx]), rounded(dtype, -mx, mx))


@functools.lru_cache(maxsize=None)
def subnormal_value(dtype):
    p = _PRECISION[dtype]
    n = dtype.itemsize * 8
    return st.tuples(st.integers(1, 2 ** (p - 1) - 1), st.booleans()).map(
        lambda t: from_bits(t[0] + (2 ** (n - 1) if t[1] else 0), dtype)
    )


def grid_step(dtype) -> float:
    """Grid values are multiples of this step: 1/4 up to 64 in magnitude (bfloat16: integers up to
    32), so a shift by 37.25 (bfloat16: 37) stays exactly representable (bfloat16 holds integers
    exactly up to 256; float16 holds quarters up to 512)."""
    return 1.0 if dtype == torch.bfloat16 else 0.25


GRID_SHIFT = {torch.bfloat16: 37.0}  # the exact shift used by shift_invariance (others: 37.25)


@functools.lru_cache(maxsize=None)
def grid_value(dtype):
    span = 32 if dtype == torch.bfloat16 else 256
    return st.integers(-span, span).map(lambda k: k * grid_step(dtype))


# ----------------------------------------------------------------------------------------------
# Logits: a cheap recipe for a (rows, cols) block
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Logits:
    """(rows, cols) values of one dtype: ``fill`` everywhere, then each patch
    ``(row, start, stop, value)`` written over ``[row, start:stop]`` (row -1: every row)."""

    rows: int
    cols: int
    dtype: str
    fill: tuple = ("const", 0.0)
    patches: tuple = ()
    family: str = field(default="moderate", compare=False)

    def values(self, device="cpu") -> torch.Tensor:
        dtype = _dtype(self.dtype)
        kind, *args = self.fill
        shape = (self.rows, self.cols)
        if kind == "const":
            v = torch.full(shape, float(args[0]), dtype=torch.float64)
        elif kind == "normal":
            seed, scale = args
            v = torch.from_numpy(np.random.default_rng(seed).standard_normal(shape) * scale)
        elif kind == "grid":
            seed, span = args
            span = min(span, 32) if dtype == torch.bfloat16 else span
            v = torch.from_numpy(np.random.default_rng(seed).integers(-span, span + 1, shape) * grid_step(dtype))
        elif kind in ("bits", "subnormal"):
            (seed,) = args
            n = dtype.itemsize * 8
            rng = np.random.default_rng(seed)
            if kind == "bits":
                raw = rng.integers(0, 2**n, shape, dtype=np.uint64)
            else:
                p = _PRECISION[dtype]
                raw = rng.integers(0, 2 ** (p - 1), shape, dtype=np.uint64) | (
                    rng.integers(0, 2, shape, dtype=np.uint64) << np.uint64(n - 1))
            signed = raw.astype(np.int64) if n == 64 else np.where(raw >= 2 ** (n - 1), raw.astype(np.int64) - 2**n, raw.astype(np.int64))
            bits = torch.from_numpy(np.asarray(signed, dtype=np.int64)).to(_BITS_VIEW[dtype.itemsize])
            v = bits.view(dtype).to(torch.float64)
        else:  # pragma: no cover
            raise ValueError(f"unknown fill {kind!r}")
        mx = torch.finfo(dtype).max
        v = torch.where(v.isfinite(), v.clamp(-mx, mx), v)
        for row, start, stop, value in self.patches:
            if row < 0:
                v[:, start:stop] = value
            elif row < self.rows:
                v[row, start:stop] = value
        return v.to(dtype).to(device)


FAMILIES = ("moderate", "huge", "special", "neg_inf_blocks", "neg_inf_rows", "constant",
            "one_hot", "subnormal", "grid", "bits")


def draw_index(draw, n):
    """A position in range(n), drawn independently of n (k % n), so that shrinking the row
    length never invalidates it and both shrink towards 0 on their own."""
    return draw(st.integers(0, 2**16)) % max(n, 1)


@st.composite
def _patches(draw, rows, cols, value, max_patches=3, max_len=1):
    out = []
    for _ in range(draw(st.integers(0, max_patches), label="n_patches")):
        r = draw_index(draw, rows)
        a = draw_index(draw, cols)
        n = draw(st.integers(1, max_len)) if max_len > 1 else 1
        out.append((r, a, min(cols, a + n), draw(value)))
    return tuple(out)


_SEED = st.integers(0, 2**16)
_NORMAL = st.tuples(st.just("normal"), _SEED, st.sampled_from([1.0, 3.0, 10.0]))


def _as_const(v):
    return ("const", v)


@functools.lru_cache(maxsize=None)
def _const(vals):
    """("const", v) for v drawn from vals. One strategy object per vals (the value strategies are
    cached too): Hypothesis validates each new strategy object on its first draw, a third of the
    time of drawing a case when every draw built its strategies afresh."""
    return vals.map(_as_const)


@st.composite
def logits(draw, rows, cols, dtype, families=FAMILIES, boundaries=()):
    """A Logits recipe of one logit family (see FAMILIES)."""
    fam = draw(st.sampled_from(families), label="family")
    dn = dtype_name(dtype)
    seed, normal, const = _SEED, _NORMAL, _const
    if fam == "moderate":
        fill = draw(st.one_of(const(moderate_value(dtype)), normal))
        patches = draw(_patches(rows, cols, moderate_value(dtype)))
    elif fam == "huge":
        mx = torch.finfo(dtype).max
        fill = draw(st.one_of(const(huge_value(dtype)), normal,
                              st.tuples(st.just("normal"), seed, st.sampled_from([1e4, mx / 8]))))
        patches = draw(_patches(rows, cols, huge_value(dtype)))
    elif fam == "special":
        fill = draw(st.one_of(const(moderate_value(dtype)), normal))
        patches = draw(_patches(rows, cols, st.sampled_from([math.inf, -math.inf, math.nan]), max_patches=4))
    elif fam == "neg_inf_blocks":
        fill = draw(normal)
        aims = masked_block_boundaries(boundaries)
        starts = [0] + [b for b in aims if b < cols]
        out = []
        for _ in range(draw(st.integers(1, 3))):
            r = -1 if draw(st.booleans()) else draw_index(draw, rows)
            a = draw(st.sampled_from(starts)) if draw(st.booleans()) else draw_index(draw, cols)
            n = draw(st.sampled_from([b for b in aims] + [1, cols]))
            out.append((r, a, min(cols, a + n), -math.inf))
        patches = tuple(out)
    elif fam == "neg_inf_rows":
        fill = draw(normal)
        rs = [draw_index(draw, rows) for _ in range(draw(st.integers(1, 3)))]
        patches = tuple((r, 0, cols, -math.inf) for r in rs)
        patches += draw(_patches(rows, cols, moderate_value(dtype), max_patches=1))
    elif fam == "constant":
        fill = draw(const(st.one_of(moderate_value(dtype), huge_value(dtype), subnormal_value(dtype))))
        patches = ()
    elif fam == "one_hot":
        low = draw(st.one_of(st.sampled_from([-30.0, -1e4]), moderate_value(dtype), st.just(-math.inf)))
        fill = ("const", float(torch.tensor(low).to(dtype).double()))
        hi = draw(moderate_value(dtype).map(lambda v: abs(v) + 1.0))
        # at most 64 hot rows (a many-rows case holds thousands; the rest keep the low fill)
        cols_hot = [draw_index(draw, cols) for _ in range(draw(st.integers(1, min(max(rows, 1), 64))))]
        patches = tuple((i, c, c + 1, float(torch.tensor(hi).to(dtype).double())) for i, c in enumerate(cols_hot))
    elif fam == "subnormal":
        fill = draw(st.one_of(const(subnormal_value(dtype)), st.tuples(st.just("subnormal"), seed)))
        patches = draw(_patches(rows, cols, subnormal_value(dtype)))
    elif fam == "grid":
        fill = draw(st.one_of(const(grid_value(dtype)), st.tuples(st.just("grid"), seed, st.sampled_from([8, 256]))))
        patches = draw(_patches(rows, cols, grid_value(dtype)))
    elif fam == "bits":
        fill = draw(st.one_of(const(any_value(dtype)), st.tuples(st.just("bits"), seed)))
        patches = draw(_patches(rows, cols, any_value(dtype)))
    else:  # pragma: no cover
        raise ValueError(fam)
    return Logits(rows, cols, dn, tuple(fill), tuple(patches), family=fam)


# ----------------------------------------------------------------------------------------------
# shapes
# ----------------------------------------------------------------------------------------------
MASK_POW2_FROM = 2**9  # -inf blocks are aimed at every power of two from here to the longest row


def pow2_boundaries(limit: int = None) -> list:
    """2**9, 2**10, ... up to limit (default: the profile's longest row): column counts where a
    kernel may cut a row into chunks without declaring it (a chunked class axis of 65,536
    columns), so whole chunks of -inf are aimed at them whatever block_boundaries() says."""
    limit = LIMITS.long_cols if limit is None else limit
    out, b = [], MASK_POW2_FROM
    while b <= limit:
        out.append(b)
        b *= 2
    return out


def masked_block_boundaries(boundaries) -> list:
    """Where neg_inf_blocks starts and sizes its -inf blocks: the target's declared boundaries
    and every power of two from 2**9 to the profile's longest row."""
    return sorted(set(boundaries) | set(pow2_boundaries()))


def special_lengths(boundaries, limit):
    out = {1, 2, 3, 4, 5, 7, 8, 9}
    for b in boundaries:
        out |= {b - 1, b, b + 1}
    k = 1
    while 2**k <= limit + 1:
        out |= {2**k - 1, 2**k, 2**k + 1}
        k += 1
    return sorted(v for v in out if 1 <= v <= limit)


def rarely(rare, common, one_in: int):
    """`rare` about once in `one_in` draws, else `common`; shrinks towards `common`. (st.one_of
    weights its branches equally: an empty-tensor branch beside two others was a third of all
    draws.)"""
    return st.integers(0, one_in - 1).flatmap(lambda k: rare if k == one_in - 1 else common)


def row_lengths(boundaries, allow_empty=True):
    """Row lengths biased to 1, 2, 2^k +- 1 and every block boundary of the kernels; a long row
    about once in 8 draws, the empty row about once in 32."""
    lim = LIMITS
    out = st.one_of(st.sampled_from(special_lengths(boundaries, lim.max_cols)), st.integers(1, lim.max_cols))
    if lim.long_cols > lim.max_cols:
        out = rarely(st.sampled_from(special_lengths(boundaries, lim.long_cols)), out, 8)
    if allow_empty:
        out = rarely(st.just(0), out, 32)
    return out


def batch_shapes(allow_empty=True, max_rows=None):
    """Leading shape: mostly one row axis, sometimes none or two, empty about once in 32 draws."""
    r = max(1, min(LIMITS.max_rows, max_rows or LIMITS.max_rows))
    out = st.one_of(st.integers(1, r).map(lambda n: (n,)), st.just(()),
                    st.tuples(st.integers(1, min(3, r)), st.integers(1, max(1, r // 3))))
    if allow_empty:
        out = rarely(st.sampled_from([(0,), (2, 0)]), out, 32)
    return out


# ----------------------------------------------------------------------------------------------
# layouts: how the logical values are laid out in memory
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A named layout and its parameter; ``code`` builds tensor ``{name}`` from values ``V``."""

    kind: str = "contiguous"
    k: int = 0

    @property
    def label(self) -> str:
        """The layout as a report names it: its kind, and its parameter where it has one."""
        return f"{self.kind}({self.k})" if self.k else self.kind

    def code(self, name: str) -> str:
        nan_full = "torch.full({shape}, float('nan'), dtype=V.dtype, device=V.device)"
        if self.kind == "contiguous":
            return f"{name} = V.clone()"
        if self.kind == "row_padded":  # every row padded with k NaN columns
            return (f"base = {nan_full.format(shape=f'(*V.shape[:-1], V.shape[-1] + {self.k})')}\n"
                    f"base[..., :V.shape[-1]] = V\n{name} = base[..., :V.shape[-1]]")
        if self.kind == "offset":  # storage offset of k elements (NaN before)
            return (f"base = {nan_full.format(shape=f'(V.numel() + {self.k},)')}\n"
                    f"base[{self.k}:] = V.reshape(-1)\n{name} = base[{self.k}:].view(V.shape)")
        if self.kind == "transposed":  # reduced axis outermost in memory
            return f"{name} = V.movedim(-1, 0).contiguous().movedim(0, -1)"
        if self.kind == "interleaved":  # column stride k, NaN in the gaps
            return (f"base = {nan_full.format(shape=f'(*V.shape[:-1], V.shape[-1] * {self.k})')}\n"
                    f"base[..., ::{self.k}] = V\n{name} = base[..., ::{self.k}]")
        if self.kind == "expanded":  # a stride-0 leading axis of size k
            return f"{name} = V.unsqueeze(0).expand({self.k}, *V.shape)"
        if self.kind == "states_outer":  # merge_states' states axis (-2) outermost: (S, ..., Dv) in memory
            return f"{name} = V.movedim(-2, 0).contiguous().movedim(0, -2)"
        raise ValueError(self.kind)  # pragma: no cover

    def apply(self, V: torch.Tensor, name: str = "x") -> torch.Tensor:
        return built(self.code(name), name, V=V)


def layouts():
    return st.one_of(
        st.just(Layout()),
        st.integers(1, 17).map(lambda k: Layout("row_padded", k)),
        st.integers(1, 9).map(lambda k: Layout("offset", k)),
        st.just(Layout("transposed")),
        st.integers(2, 3).map(lambda k: Layout("interleaved", k)),
        st.integers(2, 3).map(lambda k: Layout("expanded", k)),
    )


# ----------------------------------------------------------------------------------------------
# a drawn input tensor: recipe + batch shape + layout
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    logits: Logits
    batch: tuple
    layout: Layout

    @property
    def shape(self):
        return tuple(self.batch) + (self.logits.cols,)

    def values(self, device="cpu") -> torch.Tensor:
        return self.logits.values(device).reshape(self.shape)

    def tensor(self, name="x", device="cpu") -> torch.Tensor:
        return self.layout.apply(self.values(device), name)


@st.composite
def inputs(draw, dtype, boundaries=(), families=FAMILIES, allow_empty=True, max_cols=None, layout=None, cols=None):
    if cols is None:
        cols = draw(row_lengths(boundaries, allow_empty) if max_cols is None else
                    st.one_of(st.sampled_from(special_lengths(boundaries, max_cols)), st.integers(1, max_cols)),
                    label="cols")
    batch = draw(batch_shapes(allow_empty, max_rows=LIMITS.max_elems // max(cols, 1)), label="batch")
    rows = int(np.prod(batch)) if batch else 1
    lg = draw(logits(rows, cols, dtype, families, boundaries), label="logits")
    lay = draw(layouts(), label="layout") if layout is None else layout
    return Input(lg, tuple(batch), lay)


@dataclass
class _Only:
    dtypes: tuple = None  # the dtypes the running law's cases are drawn in (None: DTYPES)


ONLY = _Only()


@contextlib.contextmanager
def only_dtypes(allowed):
    """Within the block, dtypes() draws only from `allowed` (None: every dtype): the law being
    checked judges those alone (Invariant.dtypes), so its strategies draw no case to reject."""
    saved, ONLY.dtypes = ONLY.dtypes, (None if allowed is None else tuple(allowed))
    try:
        yield
    finally:
        ONLY.dtypes = saved


def dtypes():
    if ONLY.dtypes is None:
        return st.sampled_from(DTYPES)
    return st.sampled_from([d for d in DTYPES if d in ONLY.dtypes])


@dataclass
class _Bounds:
    values: tuple = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


BOUNDARIES = _Bounds()  # the plugin replaces values with the target's block_boundaries(), if any


class _Target:
    """The module the run tests (set by the plugin's target fixture; None: none declared), for
    the declarations a family's strategies read from it (attention: its causal alignment and
    block sizes)."""
    module = None


TARGET = _Target()
# the target's declarations a case carries: its field name -> the function reading it from
# TARGET.module (each family registers its own), so that a case replayed against another target
# is judged by that target's declarations, not by those of the target it was drawn for
DECLARATIONS: dict = {}


def redeclared(case):
    """case with each declaration it carries read again from TARGET.module."""
    names = {f.name for f in fields(case)}
    return replace(case, **{k: read() for k, read in DECLARATIONS.items() if k in names})


@dataclass
class _Offered:
    values: dict = None  # op name -> the options of its OpSpec.offered the target takes; None: all

    def of(self, spec) -> tuple:
        return tuple(spec.offered) if self.values is None else tuple(self.values.get(spec.name, ()))


OFFERED = _Offered()  # the plugin sets values from the target's signatures (Target.offered)


MANY_ROWS = "many_rows"  # a marker family: thousands of short rows (many_rows_cases)
MASKED_CHUNKS = "masked_chunks"  # a marker family: rows past 2**k with whole -inf chunks (masked_chunks_input)


@st.composite
def cases(draw, op_name, families=None, max_cols=None):
    """A case for op_name, drawn by its spec (OpSpec.cases; properties/families/). The marker family
    MANY_ROWS draws thousands of short rows instead (OpSpec.many_rows), for the laws that name it."""
    if families and MANY_ROWS in families:
        return draw(many_rows_cases(op_name))
    spec = lookup(op_name)
    return spec.cases(draw, spec, families, max_cols)


# ----------------------------------------------------------------------------------------------
# many rows: thousands of short rows (a kernel's row tiling, a mean over the batch)
# ----------------------------------------------------------------------------------------------
MANY_ROW_COLS = (1, 2, 3, 4, 5, 8, 16, 17, 32)  # row lengths of many-rows cases
# families whose recipes stay a handful of draws however many rows there are
MANY_ROW_FAMILIES = ("moderate", "constant", "grid", "special", "neg_inf_rows", "neg_inf_blocks", "huge",
                     "subnormal", "bits", "one_hot")


def many_rows_count(per_row: int, top_only: bool = False):
    """How many rows a many-rows case holds: about one draw in three (top_only: always) the top of
    the budget (2**K - 1, 2**K, 2**K + 1 for the largest 2**K in it, or the budget itself), else
    one of 2**k - 1, 2**k, 2**k + 1 for k from 6 up (each about equally likely), one draw in four
    of those any count in between. The budget: LIMITS.many_rows, and LIMITS.max_elems // per_row
    (the elements of one row). Shrinks towards 63 rows (top_only: towards 2**K - 1)."""
    cap = max(1, min(LIMITS.many_rows, LIMITS.max_elems // max(per_row, 1)))
    kmax = cap.bit_length() - 1
    kmin = min(6, kmax)
    near = sorted({min(cap, max(1, 2**k + d)) for k in range(kmin, kmax + 1) for d in (-1, 0, 1)})
    top = sorted({max(1, 2**kmax - 1), 2**kmax, min(cap, 2**kmax + 1), cap})
    if top_only:
        return st.sampled_from(top)
    return rarely(st.sampled_from(top), rarely(st.integers(min(2**kmin, cap), cap), st.sampled_from(near), 4), 3)


@st.composite
def many_row_logits(draw, rows, cols, dtype):
    """Logits of many short rows: half the time every row the same (a constant fill and up to
    three columns set in every row, so an error made alike in each row adds up instead of
    cancelling: a per-row rounding of a mean's terms), else one of MANY_ROW_FAMILIES' recipes with
    up to three such column patches on top; a few single elements (NaN, inf, anything) then
    poison or perturb single rows."""
    col = st.one_of(moderate_value(dtype), huge_value(dtype), st.just(-math.inf))
    if draw(st.booleans(), label="repeated_rows"):
        fill = ("const", draw(moderate_value(dtype)))
        fam = "repeated_rows"
        own = draw(_patches(rows, cols, any_value(dtype), max_patches=2))
    else:
        lg = draw(logits(rows, cols, dtype, MANY_ROW_FAMILIES, BOUNDARIES.values), label="logits")
        fill, fam, own = lg.fill, lg.family, lg.patches
    n = draw(st.integers(0 if fam != "repeated_rows" else 1, min(cols, 3)), label="n_column_patches")
    columns = tuple((-1, j, j + 1, draw(col)) for j in [draw_index(draw, cols) for _ in range(n)])
    return Logits(rows, cols, dtype_name(dtype), tuple(fill), columns + tuple(own), family=fam)


def flat_layouts():
    """layouts() without the stride-0 batch axis (which would multiply a many-rows case's rows)."""
    return layouts().filter(lambda l: l.kind != "expanded")


@st.composite
def many_rows_cases(draw, op_name):
    """A case of op_name with many short rows, drawn by its spec (OpSpec.many_rows): row length
    from MANY_ROW_COLS (for the merges: few keys and values; cross-entropy: V), row count from
    many_rows_count, one batch axis, layouts without a stride-0 axis. Drawn by the laws with
    families=(MANY_ROWS,)."""
    spec = lookup(op_name)
    if spec.many_rows is None:
        raise ValueError(f"op {op_name!r} draws no many-rows cases (its OpSpec.many_rows is None)")
    return spec.many_rows(draw, spec)
