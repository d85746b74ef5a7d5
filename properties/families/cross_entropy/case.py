"""The cross-entropy case: logits, class-index targets, the options, and for the backward dloss."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import interpreter
from ...case import OpCase, preamble, values_code

# the options beyond torch's (OpSpec.offered), each off at its default: a case passes only those on
OFFERED = ("weight", "z_loss", "softcap", "logit_scale")


def ce_batch(inp) -> tuple:
    lay = inp.layout
    return ((lay.k,) if lay.kind == "expanded" else ()) + tuple(inp.batch)


class _Code(str):
    def __repr__(self):
        return str(self)


@dataclass(frozen=True)
class CECase(OpCase):
    """A cross-entropy case: logits (an Input: recipe, batch, layout), class-index targets, the
    options, and for the backward the cotangent dloss (its shape follows the reduction)."""

    op: str  # "cross_entropy" or "cross_entropy_backward"
    dtype: torch.dtype
    logits: object  # strategies.Input
    targets: object  # strategies.Targets
    ignore_index: int
    reduction: str
    label_smoothing: float
    dloss: object = None  # strategies.DLoss (backward only)
    # class weights: a pattern repeated over the V classes (values exact in every float dtype), None: off
    weight: tuple = None
    z_loss: float = 0.0
    softcap: float = None
    logit_scale: float = 1.0
    # the target's declaration CE_EMPTY_MEAN = 0.0: a mean over no counted rows is 0, not NaN
    empty_mean_zero: bool = False

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

    def output_shape(self):
        """The loss's shape for the forward; the backward's dlogits have the logits' shape."""
        return self.loss_shape if self.op == "cross_entropy" else None

    def options(self) -> dict:
        """The options beyond torch's that are on (the weights as their values), {} for none."""
        on = dict(weight=self.weight, z_loss=self.z_loss, softcap=self.softcap, logit_scale=self.logit_scale)
        off = dict(weight=None, z_loss=0.0, softcap=None, logit_scale=1.0)
        return {k: v for k, v in on.items() if v != off[k]}

    def weight_tensor(self, device=None, dtype=torch.float32):
        if self.weight is None:
            return None
        return torch.tensor(self.weight, dtype=dtype, device=device or interpreter.device()).repeat(self._reps())[:self.V]

    @property
    def V(self) -> int:
        return self.logits.logits.cols

    def _reps(self) -> int:
        return -(-self.V // len(self.weight))

    def oracle_options(self, device) -> dict:
        """The options as the FP64 oracle takes them (weights in float64, on device: the logits')."""
        return dict(weight=self.weight_tensor(device, torch.float64), z_loss=self.z_loss, softcap=self.softcap,
                    logit_scale=self.logit_scale)

    def kwargs(self) -> dict:
        kw = dict(ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing)
        opts = self.options()
        if "weight" in opts:
            opts["weight"] = self.weight_tensor()
        return {**kw, **opts}

    def kwargs_code(self) -> str:
        kw = self.kwargs()
        if "weight" in kw:
            kw["weight"] = _Code(f"torch.tensor({list(self.weight)!r}, dtype=torch.float32, device=device)"
                                 f".repeat({self._reps()})[:{self.V}]")
        return ", ".join(f"{k}={v!r}" for k, v in kw.items())

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

    def call_code(self) -> str:
        # the class indices are `labels` in a reproducer: `target` is the module under test
        args = "logits, labels" + (", dloss" if self.dloss is not None else "")
        return f"out = target.{self.op}({args}, {self.kwargs_code()})"

    def family(self) -> str:
        return self.logits.logits.family

    def describe(self, device="cpu") -> str:
        ts = self.tensors(device)
        lay = self.logits.layout
        parts = [f"op={self.op}", f"dtype={self.dtype_name}", f"options: {self.kwargs_code()}",
                 f"logits: shape={tuple(ts[0].shape)} strides={tuple(ts[0].stride())} "
                 f"layout={lay.kind}{'(' + str(lay.k) + ')' if lay.k else ''} family={self.family()}",
                 f"target: {list(self.targets.values)}{f' repeated over {self.targets.rows} rows' if self.targets.rows else ''}"
                 f" dtype={self.targets.dtype} strides={tuple(ts[1].stride())}"]
        if self.dloss is not None:
            parts.append(f"dloss: shape={tuple(ts[2].shape)} strides={tuple(ts[2].stride())} "
                         f"layout={self.dloss.layout} fill={self.dloss.fill}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        lines.append(values_code(self.logits.values(), self.logits))
        lines.append(self.logits.layout.code("logits"))
        # the class indices are `labels` here: `target` is the module under test
        lines.append(self.targets.code("labels", self.batch))
        if self.dloss is not None:
            lines.append(self.dloss.code("dloss", self.loss_shape, self.dtype_name))
        lines.append(call or self.call_code())
        lines.append("print(out)")
        return "\n".join(lines)
