"""Op specs and their registry, in the style of PyTorch's OpInfo: everything the suite knows about
an op is one ``OpSpec``, and every law selects the ops it applies to by the attributes of their
specs. The built-in ops are registered by their families (properties/families/); a new op is its
spec, a kernel that offers it, and its FP64 oracle (docs/extending.md).

This module is the bottom of the suite's imports: it imports no other module of the suite."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch


def t64(values, dtype=torch.float64) -> torch.Tensor:
    """A tensor of the given values (an op's edge rows, OpSpec.semantics)."""
    return torch.tensor(values, dtype=dtype, device="cpu")


def row64(values) -> torch.Tensor:
    """One row (1, len(values)) of float64 values."""
    return t64(values).reshape(1, len(values))


def same_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a logsumexp (an lse output or state): float32 for 16/32-bit inputs, float64
    for float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def lse_or_input_dtype(dtype: torch.dtype) -> tuple:
    """The dtypes the default tier accepts for logsumexp's output: the contract's lse_dtype, or the
    input's own, which torch.logsumexp returns (a bfloat16 lse of bfloat16 logits). Either is a
    legitimate convention; the values are judged at the precision returned (truth.truth_at's
    returned=), so an lse rounded to 16 bits carries that rounding and no more. The strict tier
    keeps lse_dtype: a 16-bit lse loses the precision a following merge needs."""
    return tuple(dict.fromkeys((lse_dtype(dtype), dtype)))


@dataclass(frozen=True)
class OutputTruth:
    """One output of an op as the FP64 truth has it: its ``value`` and the elementwise bound ``tol``
    (float64), the output's ``dtype``, the elements the tier judges (``only``, a bool mask
    broadcast to ``value``; None: all), how a report names it and what a mismatch means; ``also``:
    further dtypes the tier accepts for it, each with its bound (logsumexp in the default tier)."""

    name: str
    value: torch.Tensor
    tol: torch.Tensor
    dtype: torch.dtype
    only: Optional[torch.Tensor] = None
    what: str = "differs from the FP64 oracle"
    also: tuple = ()  # (dtype, tol): another dtype the tier accepts for this output, and the bound there

    @property
    def dtypes(self) -> tuple:
        """Every dtype the tier accepts for this output, its own first."""
        return (self.dtype,) + tuple(d for d, _ in self.also)

    def returned_as(self, dtype: torch.dtype) -> "OutputTruth":
        """This output as judged when the target returned it in dtype: itself for its own dtype
        (or one the tier does not accept: the structure check reports that), else with the
        dtype and bound that ``also`` gives for it."""
        for d, tol in self.also:
            if d == dtype and d != self.dtype:
                return dataclasses.replace(self, dtype=d, tol=tol, also=())
        return self


@dataclass(frozen=True)
class Truth:
    """The FP64 truth of a call: one OutputTruth per output, in the order the op returns them (a
    single tensor, or a tuple such as a merge's (x, lse))."""

    outputs: tuple

    def __getitem__(self, i) -> OutputTruth:
        return self.outputs[i]


def _one_tensor(x: torch.Tensor):
    return (x,), {}


@dataclass(frozen=True)
class OpSpec:
    """Everything the suite knows about one op.

    Identity and calling convention
      name: the function a target offers. args: its tensor arguments in call order (their roles:
      the names reproducers and reports use). options: the keyword options every call passes
      (cross-entropy's ignore_index, reduction, label_smoothing); a case's values for them come
      from the case (``case.kwargs()``). A target's function must accept ``name(*args,
      **options)``: the plugin checks its signature before any test runs. offered: keyword
      options a target may take or not (attention's causal, scale, window, softcap;
      cross-entropy's weight, z_loss, softcap, logit_scale), discovered from its function's
      signature (Target.offers): cases draw only those the target offers, every call passes only
      those its case uses, and a law that needs one (``needs=("option:NAME",)``) is skipped where
      it is not offered.
    Meaning
      oracle: the FP64 function the op computes (float64 tensors in, float64 out; options as
      keywords); what it gives is the FP64 truth. truth(case, args, strict=False) -> Truth: the
      truth of every output at these (laid-out) arguments and the bound a correct kernel meets
      (strict: the strict tier's bound). truth_at(dtype, args, depth, **options) -> (ref, tol):
      the truth ``ref`` and its bound, for single-output ops of the
      softmax family, the same at a given reduction-depth model (tolerances.depth_any / depth),
      which laws also ask of other ops (log_softmax's laws ask logsumexp's).
      out_dtype: the output dtype from the input dtype. default_out_dtypes: every output dtype
      the default tier accepts for an input dtype (None: out_dtype's alone; logsumexp:
      lse_or_input_dtype), the values judged at the precision returned. reduces: the output
      drops the reduced axis. semantics: edge rows, each (what, args, options, expected
      outputs), that the oracle must reproduce (properties/test_registry.py).
    Inputs
      cases(draw, spec, families, max_cols) -> case: draws a case (strategies.cases calls it);
      many_rows(draw, spec) -> case: thousands of short rows (None: no many-rows case).
    Attributes the laws select by
      family: "softmax", "merge", "merge_states", "cross_entropy" or "attention" (the family laws
      that apply).
      forward: for an explicit VJP, the forward op whose output its first argument is.
      differentiable: autograd differentiates the op's output (gradcheck, autograd composition).
      has_dim: the op takes ``dim=`` (the dim laws run where the target's function takes it).
      out_range: the exact interval every output lies in (None: no such law). normalized: each
      finite row of the output sums to 1.
      grad_truth(case, args, g, y) -> (ref, tol, only): the FP64 VJP of a differentiable op at
      its arguments args (x = args[0]) for the cotangent g (y: the output the target returned),
      its bound (never NaN: 0 where ref is NaN), and the elements judged (None: all)
      (autograd_composition).
      sample(x) -> (args, kwargs): a small valid call around the tensor x, of any float dtype (the
      autograd probe, Target.autograd_probe, tries float64, float32, bfloat16 and float16).
    Calibration
      torch_ref: the calibration target's function (properties/targets/torch.py), whose error on
      the same inputs the run's summary prints beside the target's (None: no figure)."""

    name: str
    family: str
    args: tuple
    oracle: Callable
    truth: Callable
    cases: Callable
    many_rows: Optional[Callable] = None
    truth_at: Optional[Callable] = None
    out_dtype: Callable = same_dtype
    default_out_dtypes: Optional[Callable] = None
    reduces: bool = False
    forward: Optional[str] = None
    differentiable: bool = False
    has_dim: bool = False
    out_range: Optional[tuple] = None
    normalized: bool = False
    grad_truth: Optional[Callable] = None
    sample: Callable = _one_tensor
    semantics: tuple = field(default=(), repr=False)
    torch_ref: Optional[Callable] = None
    options: tuple = ()
    offered: tuple = ()

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"OpSpec name must be a Python identifier (the function a target offers), got {self.name!r}")
        if not self.args or not all(isinstance(a, str) and a.isidentifier() for a in self.args):
            raise ValueError(f"OpSpec {self.name}: args must be a non-empty tuple of argument names, got {self.args!r}")
        for attr in ("oracle", "truth", "cases", "out_dtype", "sample"):
            if not callable(getattr(self, attr)):
                raise TypeError(f"OpSpec {self.name}: {attr} must be callable, got {getattr(self, attr)!r}")

    @property
    def is_vjp(self) -> bool:
        return self.forward is not None

    @property
    def call_signature(self) -> str:
        """The call every law makes, as a signature: ``cross_entropy(logits, target, *,
        ignore_index, reduction, label_smoothing)``."""
        options = f", *, {', '.join(self.options)}" if self.options else ""
        return f"{self.name}({', '.join(self.args)}{options})"


OPS: dict = {}  # name -> OpSpec, in registration order


def register(spec: OpSpec) -> OpSpec:
    """Add spec to the registry; every law whose selection its attributes meet applies to it."""
    if not isinstance(spec, OpSpec):
        raise TypeError(f"register expects an OpSpec, got {type(spec).__name__}")
    if spec.name in OPS:
        raise ValueError(f"op {spec.name!r} is registered twice")
    if spec.forward is not None and spec.forward not in OPS:
        raise ValueError(f"op {spec.name!r}: its forward op {spec.forward!r} is not registered (register it first)")
    OPS[spec.name] = spec
    return spec


@contextlib.contextmanager
def registered(spec: OpSpec):
    """spec registered for the duration of the block (a test's own op), then removed."""
    register(spec)
    try:
        yield spec
    finally:
        OPS.pop(spec.name, None)


def vjp_of(name: str) -> OpSpec:
    """The registered explicit VJP of the forward op `name`."""
    for spec in OPS.values():
        if spec.forward == name:
            return spec
    raise KeyError(f"no registered op is the explicit VJP of {name!r}")


def lookup(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}: registered ops are {', '.join(OPS) or 'none'} (the built-in ops are "
                       f"registered by importing properties.families)") from None
