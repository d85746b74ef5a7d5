"""A drawn test case: what it is, how to rebuild it exactly, and how to report a failure on it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .ops import OPS
from .strategies import Input

EXPLICIT_MAX = 64  # tensors up to this many elements are printed value by value


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def values_code(V: torch.Tensor, inp: Input, var: str = "V") -> str:
    """Code that rebuilds the logical values V exactly, as the variable `var`."""
    dt = f"torch.{str(V.dtype).replace('torch.', '')}"
    if V.numel() <= EXPLICIT_MAX:
        flat = ", ".join(_fmt(v) for v in V.double().reshape(-1).tolist())
        return f"{var} = torch.tensor([{flat}], dtype=torch.float64).to({dt}).reshape({tuple(V.shape)})"
    return (f"from properties.strategies import Logits\n"
            f"{var} = {inp.logits!r}.values().reshape({inp.shape})")


@dataclass(frozen=True)
class Case:
    """op, dtype and the drawn inputs. For an explicit VJP, ``inputs[0]`` holds the forward's
    logits: its first argument is the FP64 forward of those logits, rounded to dtype."""

    op: str
    dtype: torch.dtype
    inputs: tuple  # of Input, one per op argument

    @property
    def spec(self):
        return OPS[self.op]

    def logical(self, i: int, device="cpu") -> torch.Tensor:
        """The i-th argument's values in dtype, before layout."""
        V = self.inputs[i].values(device)
        if i == 0 and self.spec.is_vjp:
            V = OPS[self.spec.forward].oracle(V).to(self.dtype)
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
                         f"layout={inp.layout.kind}{'(' + str(inp.layout.k) + ')' if inp.layout.k else ''} "
                         f"family={inp.logits.family}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = ["import torch", f"import {target_name} as target", "inf, nan = float(\"inf\"), float(\"nan\")"]
        for i, (inp, name) in enumerate(zip(self.inputs, self.spec.args)):
            if i == 0 and self.spec.is_vjp:
                lines.append("import oracles  # the suite's FP64 oracles")
                lines.append(values_code(inp.values(), inp, var="X"))
                lines.append(f"V = oracles.{self.spec.forward}(X).to(torch.{str(self.dtype).replace('torch.', '')})")
            else:
                lines.append(values_code(inp.values(), inp))
            lines.append(inp.layout.code(name))
        args = ", ".join(self.spec.args)
        lines.append(call or f"out = target.{self.op}({args})")
        lines.append("print(out)")
        return "\n".join(lines)


class PropertyFailure(AssertionError):
    pass


def fail(invariant: str, case: Case, target, what: str, index=None, expected=None, actual=None, tol=None,
         call: str = None):
    msg = [f"[{invariant}] {what}", "  " + case.describe()]
    if index is not None:
        where = f"out[{', '.join(map(str, index))}]" if len(index) else "out"
        msg.append(f"  worst element {where}: actual={_fmt(float(actual))} expected={_fmt(float(expected))}"
                   f" tolerance={float(tol):.3g}" if tol is not None else
                   f"  worst element {where}: actual={_fmt(float(actual))} expected={_fmt(float(expected))}")
    msg.append("  reproducer:\n" + "\n".join("    " + line for line in case.reproducer(target.name, call).splitlines()))
    raise PropertyFailure("\n".join(msg))


def ce_batch(inp: Input) -> tuple:
    lay = inp.layout
    return ((lay.k,) if lay.kind == "expanded" else ()) + tuple(inp.batch)


@dataclass(frozen=True)
class CECase:
    """A cross-entropy case: logits (an Input: recipe, batch, layout), class-index targets, the
    options, and for the backward the cotangent dloss (its shape follows the reduction)."""

    op: str  # "cross_entropy" or "cross_entropy_backward"
    dtype: torch.dtype
    logits: Input
    targets: object  # strategies.Targets
    ignore_index: int
    reduction: str
    label_smoothing: float
    dloss: object = None  # strategies.DLoss (backward only)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    @property
    def batch(self) -> tuple:
        """The logits tensor's shape without the class axis (an expanded layout adds an axis)."""
        return ce_batch(self.logits)

    @property
    def loss_shape(self):
        return self.batch if self.reduction == "none" else ()

    def kwargs(self) -> dict:
        return dict(ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing)

    def kwargs_code(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs().items())

    def tensors(self, device="cpu") -> list:
        """Fresh (logits, target[, dloss]), laid out as drawn."""
        x = self.logits.tensor("logits", device)
        t = self.targets.tensor(self.batch, device)
        if self.dloss is None:
            return [x, t]
        return [x, t, self.dloss.tensor(self.loss_shape, self.dtype_name, device)]

    def call(self, target, *tensors, **overrides):
        kw = {**self.kwargs(), **overrides}
        return target.call(self.op, *tensors, **kw)

    def family(self) -> str:
        return self.logits.logits.family

    def describe(self, device="cpu") -> str:
        ts = self.tensors(device)
        lay = self.logits.layout
        parts = [f"op={self.op}", f"dtype={self.dtype_name}", f"options: {self.kwargs_code()}",
                 f"logits: shape={tuple(ts[0].shape)} strides={tuple(ts[0].stride())} "
                 f"layout={lay.kind}{'(' + str(lay.k) + ')' if lay.k else ''} family={self.family()}",
                 f"target: {list(self.targets.values)} dtype={self.targets.dtype} strides={tuple(ts[1].stride())}"]
        if self.dloss is not None:
            parts.append(f"dloss: shape={tuple(ts[2].shape)} strides={tuple(ts[2].stride())} "
                         f"layout={self.dloss.layout} fill={self.dloss.fill}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = ["import torch", f"import {target_name} as target", "inf, nan = float(\"inf\"), float(\"nan\")"]
        lines.append(values_code(self.logits.values(), self.logits))
        lines.append(self.logits.layout.code("logits"))
        # the class indices are `labels` here: `target` is the module under test
        lines.append(self.targets.code("labels", self.batch))
        args = "logits, labels"
        if self.dloss is not None:
            lines.append(self.dloss.code("dloss", self.loss_shape, self.dtype_name))
            args += ", dloss"
        lines.append(call or f"out = target.{self.op}({args}, {self.kwargs_code()})")
        lines.append("print(out)")
        return "\n".join(lines)
