"""A drawn test case: what it is, how to rebuild it exactly, and how to report a failure on it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .failures import PropertyFailure, classify, failure_class, precision_group
from .spec import lookup

EXPLICIT_MAX = 64  # tensors up to this many elements are printed value by value


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def preamble(target_name: str) -> list:
    """The first lines of every reproducer: its tensors live where the suite ran the target (CUDA
    when present and the interpreter is off, else the CPU), so it can be pasted and run on either.
    Without CUDA, Triton's interpreter runs the kernels as in the suite's CPU runs: chosen before
    the target imports triton (importing the suite's package does that), and patched to round as
    compiled Triton does (properties/interpreter.py; the unpatched interpreter truncates to
    bfloat16, and a failure found with the patches would not show)."""
    return ["import os", "import torch",
            "from softmax_properties.properties import interpreter  # no CUDA: Triton's interpreter, as in the suite",
            "if interpreter.interpreting():", "    interpreter.install()",
            f"import {target_name} as target", 'inf, nan = float("inf"), float("nan")',
            'device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"']


def explicit_code(V: torch.Tensor, var: str = "V") -> str:
    """Code that rebuilds V from its values written out, exactly, on the reproducer's device."""
    dt = f"torch.{str(V.dtype).replace('torch.', '')}"
    flat = ", ".join(_fmt(v) for v in V.double().reshape(-1).tolist())
    return f"{var} = torch.tensor([{flat}], dtype=torch.float64).to({dt}).reshape({tuple(V.shape)}).to(device)"


def value_or_recipe(lines: list, V: torch.Tensor, load: str, case, case_import: str, recipe_written: bool) -> bool:
    """Append to a reproducer's lines the code that sets V: its values written out (up to
    EXPLICIT_MAX elements), else ``V = <load>``, an expression of ``case`` (the case rebuilt from
    its repr, written once, after case_import, before the first such tensor). Returns whether the
    case's recipe is now written."""
    if V.numel() <= EXPLICIT_MAX:
        lines.append(explicit_code(V))
        return recipe_written
    if not recipe_written:
        lines.append(f"{case_import}\nfrom softmax_properties.properties.strategies import Layout, Logits")
        lines.append(f"case = {case!r}")
    lines.append(f"V = {load}")
    return True


def values_code(V: torch.Tensor, inp, var: str = "V") -> str:
    """Code that rebuilds the logical values V exactly, as the variable `var`."""
    if V.numel() <= EXPLICIT_MAX:
        return explicit_code(V, var)
    return (f"from softmax_properties.properties.strategies import Logits\n"
            f"{var} = {inp.logits!r}.values().reshape({inp.shape}).to(device)")


class OpCase:
    """What every case type offers the laws beside its own fields (op, dtype, ...): its op's spec,
    the call's keyword options, the case as the default tier feeds it, how to evaluate the op on
    its tensors and how a reproducer names and calls them. A case type of a new op subclasses
    this (or Case) and overrides what differs."""

    @property
    def spec(self):
        return lookup(self.op)

    def kwargs(self) -> dict:
        """The keyword options every call of the op passes (none here)."""
        return {}

    def natural(self):
        """The case as the default tier feeds it: itself (merge cases drop their garbage)."""
        return self

    def output_shape(self):
        """The shape of the op's (first) output where the case alone tells it, else None: laws
        that need a shape of some kind reject the case before calling the op (a call per
        rejected example is most of such a law's time)."""
        return None

    def evaluate(self, fn, tensors):
        """The op's result on these argument tensors, fn(*tensors, **options) calling it once."""
        return fn(*tensors, **self.kwargs())

    def tensor_names(self) -> tuple:
        """How reports and reproducers name the tensors of tensors(), in order."""
        return self.spec.args

    def call_code(self) -> str:
        """The reproducer's line that calls the op on the case's tensors."""
        kw = "".join(f", {k}={v!r}" for k, v in self.kwargs().items())
        return f"out = target.{self.op}({', '.join(self.tensor_names())}{kw})"

    def poisoned_call_code(self) -> str:
        """call_code() under NaN-poisoned allocations, as the laws that look for unwritten outputs
        call the op (invariants._checks.poisoned_allocations)."""
        body = "\n".join("    " + line for line in self.call_code().splitlines())
        return ("from softmax_properties.properties.invariants._checks import poisoned_allocations\n"
                "with poisoned_allocations():  # torch.empty returns NaN: an output element never written reads NaN\n"
                + body)


@dataclass(frozen=True)
class Case(OpCase):
    """op, dtype and the drawn inputs. For an explicit VJP, ``inputs[0]`` holds the forward's
    logits: its first argument is the FP64 forward of those logits, rounded to dtype."""

    op: str
    dtype: torch.dtype
    inputs: tuple  # of Input, one per op argument

    def logical(self, i: int, device="cpu") -> torch.Tensor:
        """The i-th argument's values in dtype, before layout."""
        V = self.inputs[i].values(device)
        if i == 0 and self.spec.is_vjp:
            V = lookup(self.spec.forward).oracle(V).to(self.dtype)
        return V

    def tensors(self, device="cpu") -> list:
        """Fresh tensors, laid out, in argument order."""
        return [inp.layout.apply(self.logical(i, device), name)
                for i, (inp, name) in enumerate(zip(self.inputs, self.spec.args))]

    def family(self) -> str:
        return "/".join(inp.logits.family for inp in self.inputs)

    def describe(self, device="cpu") -> str:
        ts = self.tensors(device)
        parts = [f"op={self.op}", f"dtype={str(self.dtype).replace('torch.', '')}"]
        for name, t, inp in zip(self.spec.args, ts, self.inputs):
            parts.append(f"{name}: shape={tuple(t.shape)} strides={tuple(t.stride())} "
                         f"layout={inp.layout.label} "
                         f"family={inp.logits.family}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        for i, (inp, name) in enumerate(zip(self.inputs, self.spec.args)):
            if i == 0 and self.spec.is_vjp:
                lines.append("from softmax_properties import oracles  # the suite's FP64 oracles")
                lines.append(values_code(inp.values(), inp, var="X"))
                lines.append(f"V = oracles.{self.spec.forward}(X).to(torch.{str(self.dtype).replace('torch.', '')})")
            else:
                lines.append(values_code(inp.values(), inp))
            lines.append(inp.layout.code(name))
        lines.append(call or self.call_code())
        lines.append("print(out)")
        return "\n".join(lines)


def fail(invariant: str, case: Case, target, what: str, index=None, expected=None, actual=None, tol=None,
         call: str = None, out_name: str = "out", kind=None, tier: str = None):
    """Raise PropertyFailure: the invariant (of the given tier) and what broke, the case, the worst
    element of the output named out_name (index None: no element), and the case's reproducer.
    case: any case type (anything with describe() and reproducer(target_name, call)). The
    exception's class (properties/failures.py) is kind (default: from the worst element, else
    PropertyFailure), qualified by out_name and the case's precision group, so that each kind of
    bug is reported and shrunk on its own. Laws call invariants.fail, which names the law."""
    msg = [f"[{invariant}] {f'({tier} tier) ' if tier else ''}{what}", "  " + case.describe()]
    if index is not None:
        where = f"{out_name}[{', '.join(map(str, index))}]" if len(index) else out_name
        msg.append(f"  worst element {where}: actual={_fmt(float(actual))} expected={_fmt(float(expected))}"
                   f" tolerance={float(tol):.3g}" if tol is not None else
                   f"  worst element {where}: actual={_fmt(float(actual))} expected={_fmt(float(expected))}")
    msg.append("  reproducer:\n" + "\n".join("    " + line for line in case.reproducer(target.name, call).splitlines()))
    if kind is None:
        kind = classify(expected, actual, tol) if index is not None and expected is not None else PropertyFailure
    cls = failure_class(kind, "" if out_name == "out" else out_name, precision_group(getattr(case, "dtype", None)))
    raise cls("\n".join(msg))
