"""Declarative op records and the target adapter (the module under test, chosen at run time)."""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from softmax_properties import oracles


def _same(d):
    return d


def _lse_dtype(d):
    return torch.float64 if d == torch.float64 else torch.float32


@dataclass(frozen=True)
class Op:
    """name: the function a target offers; args: its tensor arguments; forward: for an explicit
    VJP, the forward op whose output is its first argument; oracle: FP64 truth over the last axis;
    out_dtype: output dtype from input dtype; reduces: the output drops the reduced axis."""

    name: str
    args: tuple
    oracle: Callable
    forward: Optional[str] = None
    out_dtype: Callable = _same
    reduces: bool = False

    @property
    def is_vjp(self) -> bool:
        return self.forward is not None


OPS = {
    op.name: op
    for op in (
        Op("softmax", ("x",), oracles.softmax),
        Op("log_softmax", ("x",), oracles.log_softmax),
        Op("logsumexp", ("x",), oracles.logsumexp, out_dtype=_lse_dtype, reduces=True),
        Op("softmax_backward", ("y", "dy"), oracles.softmax_backward, forward="softmax"),
        Op("log_softmax_backward", ("z", "dz"), oracles.log_softmax_backward, forward="log_softmax"),
        # merges of two (x, lse) states; return (x, lse). Drawn as MergeCase (properties/case.py)
        Op("softmax_merge", ("p_a", "lse_a", "p_b", "lse_b"), oracles.softmax_merge),
        Op("attention_merge", ("o_a", "lse_a", "o_b", "lse_b"), oracles.attention_merge),
        # N-way merge of S states stacked along axis -2 (o) / -1 (lse); drawn as a StatesCase
        Op("merge_states", ("o", "lse"), oracles.merge_states),
        # cross-entropy: keyword options (ignore_index, reduction, label_smoothing); drawn as a
        # CECase (properties/case.py), checked by the ce_* invariants
        Op("cross_entropy", ("logits", "target"), oracles.ce.cross_entropy),
        Op("cross_entropy_backward", ("logits", "target", "dloss"), oracles.ce.cross_entropy_backward),
    )
}

# exceptions a target may raise to refuse an input it does not support (the example is then
# discarded); a module can narrow this with SUITE_REFUSALS, as the project's own kernels do (none)
DEFAULT_REFUSALS = (NotImplementedError, ValueError, TypeError)


class Target:
    """The module under test. Functions reduce over the last axis; missing ones are skipped
    (cross_entropy and cross_entropy_backward included)."""

    def __init__(self, module_name: str):
        self.name = module_name
        try:
            self.module = importlib.import_module(module_name)
        except ImportError as e:
            raise ImportError(f"--target {module_name!r} could not be imported: {e}") from e
        self.refusals = tuple(getattr(self.module, "SUITE_REFUSALS", DEFAULT_REFUSALS))
        self.device = "cpu"
        self._autograd = {}

    def fn(self, op_name: str):
        f = getattr(self.module, op_name, None)
        return f if callable(f) else None

    def has(self, op_name: str) -> bool:
        return self.fn(op_name) is not None

    def accepts_dim(self, op_name: str) -> bool:
        try:
            return "dim" in inspect.signature(self.fn(op_name)).parameters
        except (TypeError, ValueError):
            return False

    def call(self, op_name: str, *tensors, **kw):
        return self.fn(op_name)(*tensors, **kw)

    def supports_autograd(self, op_name: str) -> bool:
        """True when the op returns a differentiable output for a float64 input (cross_entropy:
        for float64 logits and class indices)."""
        if op_name not in self._autograd:
            try:
                x = torch.zeros(2, 3, dtype=torch.float64, device=self.device, requires_grad=True)
                args = (x, torch.zeros(2, dtype=torch.int64, device=self.device)) if op_name == "cross_entropy" else (x,)
                self._autograd[op_name] = bool(self.call(op_name, *args).requires_grad)
            except Exception:
                self._autograd[op_name] = False
        return self._autograd[op_name]

