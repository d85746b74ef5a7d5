"""The cross-entropy cases: logits (a Logits recipe, batch and Layout), class-index targets, the
options, and the cotangent dloss."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from ...strategies import (BOUNDARIES, FAMILIES, MANY_ROW_COLS, Input, Layout, Logits, draw_index, dtype_name, dtypes,
                           flat_layouts, inputs, many_row_logits, many_rows_count, rarely, row_lengths,
                           special_lengths)
from ...snippets import built
from ...spec import lookup
from ...strategies import DECLARATIONS, OFFERED, TARGET
from .case import CECase


def ce_case(draw, spec, families=None, max_cols=None):
    """The case of cross_entropy or its backward (OpSpec.cases): a CECase (ce_cases)."""
    return draw(ce_cases(spec.name, families, max_cols))


def many_row_ce_case(draw, spec):
    return draw(ce_cases(spec.name, many_rows=True))


# ==============================================================================================
# cross-entropy: logits (a Logits recipe + batch + Layout, as above), class-index targets,
# options, and the cotangent dloss. Drawn into a CECase (case.py).
# ==============================================================================================
REDUCTIONS = ("mean", "none", "sum")
CONFIDENT = "confident"  # a CE-only family: each row's target logit far above the rest (see below)
OUT_OF_RANGE = "out_of_range_target"  # a CE-only marker: one target outside [0, V)
CONFIDENT_MAX_V = 16384
# a marker family: the case draws the options of OpSpec.offered that the target takes, at least
# one of them on; "ce_options:NAME" also holds that one on (a law about it)
CE_OPTIONS = "ce_options"


def empty_mean_zero() -> bool:
    """Whether the target declares that a mean over no counted rows is 0 (CE_EMPTY_MEAN = 0.0),
    not torch's NaN (0 / 0, the default: CE_EMPTY_MEAN = math.nan). Both are conventions: an
    all-padding batch whose loss is 0 keeps a training step finite (liger-kernel's and fla-core's
    fused kernels divide by the count clamped to at least 1), and torch keeps the quotient's NaN.
    The declaration covers the count only: a weighted mean whose counted rows weigh 0 in all stays
    torch's NaN."""
    v = getattr(TARGET.module, "CE_EMPTY_MEAN", math.nan)
    if not (isinstance(v, (int, float)) and (math.isnan(v) or v == 0)):
        raise ValueError(f"CE_EMPTY_MEAN must be math.nan (the default) or 0.0, got {v!r}")
    return not math.isnan(v)


DECLARATIONS["empty_mean_zero"] = empty_mean_zero


WEIGHT_VALUES = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)  # exact in float16 and bfloat16 too


def option_focus(families) -> tuple:
    """(whether the families name CE_OPTIONS, the options they hold on)."""
    fams = families or ()
    on = tuple(f.split(":", 1)[1] for f in fams if f.startswith(CE_OPTIONS + ":"))
    return bool(on) or CE_OPTIONS in fams, on


@st.composite
def ce_option_values(draw, offered, on=(), min_pattern=1):
    """{option: value} for the options of `offered` (each on about half the time; those of `on`
    always; at least one), each a float32 value: z_loss from 1e-4 to 2, softcap from a quarter
    (every moderate logit saturates) to 64, logit_scale in [-8, 8] (negative and 0 included), class weights a
    pattern of WEIGHT_VALUES repeated over the classes (all ones, all zeros, zeros on some
    targets and on the ignored class among them; a pattern of at least min_pattern values)."""
    names = [o for o in offered if o in on or draw(st.booleans(), label=f"{o}_on")]
    if not names and offered:
        names = [offered[draw(st.integers(0, len(offered) - 1), label="option")]]
    out = {}
    for o in names:
        if o == "z_loss":
            out[o] = draw(st.one_of(st.sampled_from([1e-4, 1e-2, 0.5]), st.floats(0.0, 2.0, width=32)), label=o)
        elif o == "softcap":
            out[o] = draw(st.one_of(st.sampled_from([0.25, 2.0, 15.0, 30.0]), st.floats(0.25, 64.0, width=32)), label=o)
        elif o == "logit_scale":
            # float32 values (a kernel holds s in float32), none below 2**-20 in magnitude but 0
            # (a float32 subnormal is 0 to a kernel that flushes them, and 0 * -inf is NaN)
            mag = st.one_of(st.just(0.0), st.floats(2.0**-20, 8.0, width=32))
            out[o] = draw(st.one_of(st.sampled_from([0.5, 2.0, -1.0]), st.tuples(mag, st.booleans()).map(
                lambda a: -a[0] if a[1] else a[0])), label=o)
        elif o == "weight":
            kind = draw(st.sampled_from(["ones", "pattern", "pattern", "zeros"]), label="weight_kind")
            if kind == "ones":
                out[o] = (1.0,)
            elif kind == "zeros":
                out[o] = (0.0,)
            else:
                out[o] = tuple(draw(st.lists(st.sampled_from(WEIGHT_VALUES), min_size=min_pattern, max_size=5),
                                    label="weights"))
    return out


@dataclass(frozen=True)
class Targets:
    """Class indices, one per row (``ignore_index`` included), as ``dtype``; ``stride`` > 1 lays
    them out every ``stride`` elements with the out-of-range value ``JUNK`` in the gaps, so a
    kernel that ignores the target's stride reads an index it must not. ``rows`` > 0: that many
    rows, whose indices repeat ``values`` (a pattern: many-rows cases hold thousands of rows)."""

    values: tuple
    dtype: str = "int64"
    stride: int = 1
    rows: int = 0

    JUNK = 2**30

    @property
    def count(self) -> int:
        return self.rows or len(self.values)

    def code(self, name: str, shape) -> str:
        """Code building tensor `name` on `device` (a variable of the reproducer)."""
        vals = f"torch.tensor({list(self.values)}, dtype=torch.{self.dtype}, device=device)"
        if self.rows:
            vals += f".repeat({-(-self.rows // max(len(self.values), 1))})[:{self.rows}]"
        if self.stride == 1:
            return f"{name} = {vals}.reshape({tuple(shape)})"
        n = self.count
        return (f"base = torch.full(({n * self.stride},), {self.JUNK}, dtype=torch.{self.dtype}, device=device)\n"
                f"base[::{self.stride}] = {vals}\n{name} = base[::{self.stride}].view({tuple(shape)})")

    def tensor(self, shape, device="cpu", name="target") -> torch.Tensor:
        # built on the device: Tensor.to() would make a strided layout contiguous
        return built(self.code(name, shape), name, device=device)


@dataclass(frozen=True)
class DLoss:
    """The cotangent of the loss: ``fill`` (("const", v) or ("normal", seed, scale)) rounded to
    the dtype, laid out ``contiguous``, ``strided`` (every k-th element, NaN gaps) or
    ``expanded`` (one value broadcast with stride 0: what loss.sum().backward() hands to
    reduction="none")."""

    fill: tuple = ("const", 1.0)
    layout: str = "contiguous"
    k: int = 0

    def values_code(self, shape, dtype: str) -> str:
        kind, *args = self.fill
        if kind == "const" or self.layout == "expanded":
            v = float(args[0]) if kind == "const" else 1.0
            return f"DV = torch.full({tuple(shape)}, {v!r}, dtype=torch.float64).to(torch.{dtype}).to(device)"
        seed, scale = args
        return (f"import numpy as np\nDV = torch.from_numpy(np.asarray(np.random.default_rng({seed}).standard_normal("
                f"{tuple(shape)}) * {scale!r})).to(torch.{dtype}).to(device)")

    def code(self, name: str, shape, dtype: str) -> str:
        """Code building tensor `name` on `device` (a variable of the reproducer)."""
        lines = [self.values_code(shape, dtype)]
        if self.layout == "expanded" and len(shape) and math.prod(shape) > 0:
            lines.append(f"{name} = DV.reshape(-1)[:1].reshape(()).expand({tuple(shape)})")
        elif self.layout == "strided" and len(shape):
            lines.append(f"base = torch.full((DV.numel() * {self.k},), float('nan'), dtype=DV.dtype, device=DV.device)\n"
                         f"base[::{self.k}] = DV.reshape(-1)\n{name} = base[::{self.k}].view({tuple(shape)})")
        else:
            lines.append(f"{name} = DV.clone()")
        return "\n".join(lines)

    def tensor(self, shape, dtype: str, device="cpu", name="dloss") -> torch.Tensor:
        # built on the device: Tensor.to() would make stride-0 and strided layouts contiguous
        return built(self.code(name, shape, dtype), name, device=device)


def ce_options():
    """(ignore_index, reduction, label_smoothing): torch's default -100 mostly, sometimes a real
    class (its rows are then ignored); smoothing 0 half the time, else 1, a round value or any."""
    ignore = rarely(st.integers(0, 3), st.just(-100), 4)
    eps = st.one_of(st.just(0.0), st.one_of(st.sampled_from([0.1, 0.5, 1.0]), st.floats(0.0, 1.0)))
    return st.tuples(ignore, st.sampled_from(REDUCTIONS), eps)


@st.composite
def ce_targets(draw, rows: int, V: int, ignore_index: int, invalid: bool = False):
    """A Targets for `rows` rows of V classes: each a class (position drawn independently of V, so
    it shrinks on its own) or ignore_index (about one row in four). invalid=True makes one row
    out of range (V, V + k, -1 or a large value), never equal to ignore_index."""
    vals = []
    for _ in range(rows):
        if draw(st.integers(0, 3), label="ignored") == 3:
            vals.append(ignore_index)
        else:
            vals.append(draw_index(draw, V))
    if invalid and rows:
        i = draw_index(draw, rows)
        bad = draw(st.sampled_from([V, V + 1, -1, -2, 2**31 - 1]), label="out_of_range")
        vals[i] = bad if bad != ignore_index else V + 7
    dtype = draw(st.sampled_from(["int64", "int32"]), label="target_dtype")
    stride = draw(rarely(st.integers(2, 3), st.just(1), 4), label="target_stride")
    return Targets(tuple(vals), dtype, stride)


@functools.lru_cache(maxsize=None)
def dlosses(reduction: str):
    """The cotangent's recipe: 1 (what loss.backward() hands), a rounded moderate constant, or a
    seeded normal fill; for "none" also strided (NaN gaps) or expanded (stride 0)."""
    fill = st.one_of(st.just(("const", 1.0)), st.floats(-8, 8).map(lambda v: ("const", v)),
                     st.tuples(st.just("normal"), st.integers(0, 2**16), st.sampled_from([1.0, 1e-3, 1e3])))
    if reduction != "none":
        return fill.map(lambda f: DLoss(f))
    lay = st.one_of(st.just(("contiguous", 0)), st.integers(2, 3).map(lambda k: ("strided", k)),
                    st.just(("expanded", 0)))
    return st.tuples(fill, lay).map(lambda a: DLoss(a[0], a[1][0], a[1][1]))


def _confident_logits(draw, rows, cols, dtype, targets):
    """bfloat16-exact integers: a constant c everywhere and c + gap at each row's target, with gap
    the integer in [ln(V - 1) + 7, ln(V - 1) + 8], so 1 - softmax_t lies in [e^-8, e^-7]:
    below half a bfloat16 ulp of 1 (2^-10), so rounding softmax to bfloat16 before subtracting
    the one-hot loses the whole gradient of the target column."""
    c = draw(st.integers(-8, 8), label="base")
    gap = math.ceil(math.log(max(cols - 1, 1)) + 7.0)
    patches = tuple((i % rows, t, t + 1, float(c + gap)) for i, t in enumerate(targets.values) if 0 <= t < cols)
    return Logits(rows, cols, dtype_name(dtype), ("const", float(c)), patches, family=CONFIDENT)


@st.composite
def ce_target_pattern(draw, rows: int, V: int, ignore_index: int):
    """Targets for many rows: a pattern of 1 to 4 indices (each a class, or ignore_index about one
    in four) repeated over the rows; period 1 half the time, so that with repeated logits rows
    every row has the same loss."""
    period = draw(st.one_of(st.just(1), st.integers(1, 4)), label="period")
    vals = [ignore_index if draw(st.integers(0, 3), label="ignored") == 3 else draw_index(draw, V) for _ in range(period)]
    dtype = draw(st.sampled_from(["int64", "int32"]), label="target_dtype")
    stride = draw(rarely(st.integers(2, 3), st.just(1), 4), label="target_stride")
    return Targets(tuple(vals), dtype, stride, rows)


@st.composite
def ce_cases(draw, op_name, families=None, max_cols=None, invalid_target=False, many_rows=False):
    """A CECase for op_name ("cross_entropy" or "cross_entropy_backward"). Logits come from the
    same families, row lengths (every kernel block boundary +-1, so the looped and split paths and
    whole -inf tiles are reached) and layouts as the softmax ops; V >= 1, the batch may be empty.
    families=("confident",) draws bfloat16 rows whose target logit dominates (eps = 0).
    many_rows: thousands of rows; half the cases confident rows of 2 or 3 classes (below), the
    others of V in MANY_ROW_COLS (many_row_logits) with targets a repeated pattern
    (ce_target_pattern) and reduction "mean" half the time (a mean over many rows)."""
    if many_rows:
        dtype = draw(dtypes(), label="dtype")
        # one case in two every row is confident about one target class (the target logit c + gap,
        # the others c): row losses about (V - 1) e^-gap, from 2e-2 down to 1e-7, so the rows'
        # shares of a mean (loss / N) are float16 subnormals over a few hundred rows and flush to
        # 0 over thousands, where a reduction through the 16-bit dtype loses them (a mean formed
        # from 16-bit partials). Such cases hold 2 or 3 classes and the top of the row budget (the
        # most rows it holds: the error of such a reduction grows with the row count), are reduced
        # ("mean" or "sum") and not smoothed (smoothing adds about eps * gap to each loss). A
        # branch of its own, drawn first: as a third of the cases, with the class count, pattern
        # and options drawn for the others, the search of 400 cases that must catch such a
        # reduction (properties/mutants/ce_mean_16bit_partials.py) missed it in 3 of 5 seeds; so
        # drawn, it caught it within 3 to 32 cases in 5 of 5.
        confident = draw(st.booleans(), label="confident_rows")
        # else half the time 2 or 3 classes too: the most rows the element budget holds with a
        # loss that depends on the logits (V = 1, every loss exactly 0, stays among MANY_ROW_COLS)
        cols = draw(st.integers(2, 3) if confident else st.one_of(st.integers(2, 3), st.sampled_from(MANY_ROW_COLS)),
                    label="V")
        n = draw(many_rows_count(cols, top_only=confident), label="rows")
        layout = draw(flat_layouts(), label="layout")
        ignore_index, reduction, eps = draw(ce_options(), label="options")
        if confident:
            t0 = draw(st.integers(0, cols - 1), label="confident_target")
            t0 = (t0 + 1) % cols if t0 == ignore_index else t0
            gap = draw(st.sampled_from([4, 8, 12, 16]), label="confident_gap")
            c = draw(st.integers(-8, 8), label="base")
            reduction = draw(st.sampled_from(["mean", "sum"]), label="reduction")
            targets = Targets((t0,), draw(st.sampled_from(["int64", "int32"]), label="target_dtype"), 1, n)
            inp = Input(Logits(n, cols, dtype_name(dtype), ("const", float(c)), ((-1, t0, t0 + 1, float(c + gap)),),
                               family="confident_rows"), (n,), layout)
            eps = 0.0
        else:
            reduction = draw(st.one_of(st.just("mean"), st.just(reduction)), label="reduction")
            inp = Input(draw(many_row_logits(n, cols, dtype), label="logits"), (n,), layout)
            targets = draw(ce_target_pattern(n, cols, ignore_index), label="target")
        dl = draw(dlosses(reduction), label="dloss") if op_name == "cross_entropy_backward" else None
        return CECase(op_name, dtype, inp, targets, ignore_index, reduction, float(eps), dl,
                      empty_mean_zero=empty_mean_zero())
    with_options, focus = option_focus(families)
    if with_options:
        families = tuple(f for f in families if not f.startswith(CE_OPTIONS)) or None
    families = families or FAMILIES
    confident = CONFIDENT in families
    invalid_target = invalid_target or OUT_OF_RANGE in families
    dtype = torch.bfloat16 if confident else draw(dtypes(), label="dtype")
    if max_cols is None:
        cols = draw(row_lengths(BOUNDARIES.values, allow_empty=False), label="V")
    else:
        cols = draw(st.one_of(st.sampled_from(special_lengths(BOUNDARIES.values, max_cols)),
                              st.integers(1, max_cols)), label="V")
    if confident:
        # 2 <= V <= 16384: the derived gradient bound grows with depth(V) (tolerances.ce_grad_bound);
        # up to 16384 it stays below a quarter of 1 - p_t >= e^-8, so the law can resolve the loss
        cols = min(max(cols, 2), CONFIDENT_MAX_V)
    ignore_index, reduction, eps = draw(ce_options(), label="options")
    if confident:
        eps = 0.0
    fam = [f for f in families if f not in (CONFIDENT, OUT_OF_RANGE)] or list(FAMILIES)
    inp = draw(inputs(dtype, BOUNDARIES.values, tuple(fam), allow_empty=True, cols=cols), label="logits")
    if confident and inp.layout.kind == "expanded":
        # an expanded batch repeats one logits row for several targets: it cannot be confident
        # about each of them, so confident rows are laid out contiguously
        inp = Input(inp.logits, inp.batch, Layout("contiguous", 0))
    rows = inp.logits.rows * (inp.layout.k if inp.layout.kind == "expanded" else 1)
    targets = draw(ce_targets(rows, cols, ignore_index, invalid_target), label="target")
    if confident:
        inp = Input(_confident_logits(draw, rows, cols, dtype, targets), inp.batch, inp.layout)
    dl = draw(dlosses(reduction), label="dloss") if op_name == "cross_entropy_backward" else None
    opts = draw(ce_option_values(OFFERED.of(lookup(op_name)), focus), label="ce_options") if with_options else {}
    return CECase(op_name, dtype, inp, targets, ignore_index, reduction, float(eps), dl, **opts,
                  empty_mean_zero=empty_mean_zero())
