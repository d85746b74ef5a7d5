"""Cross-entropy with class-index targets: cross_entropy(logits, target, *, ignore_index,
reduction, label_smoothing) and cross_entropy_backward(logits, target, dloss, *, ...), as
torch.nn.functional.cross_entropy, drawn as a CECase (logits, class-index targets, the options,
and for the backward the cotangent dloss).

* ``case.py``: CECase; ``strategies.py``: ce_cases and its targets and cotangents;
* ``bounds.py``: the family's error bounds; ``truth.py``: its FP64 truth;
* ``laws.py``: the family's laws.

Importing this package registers the ops and their laws."""
from __future__ import annotations

import torch

from softmax_properties import oracles

from ...spec import OpSpec, register, t64
from ...targets import torch as torch_target
from . import strategies as S, truth
from .case import OFFERED

COMPOSES = ()


def _ce_rows(backward: bool):
    rows = []
    for what, logits, tgt, eps, red, loss, grad, _ in oracles.CE_SEMANTICS:
        V = len(logits[0]) if logits else 3
        x, t = t64(logits).reshape(-1, V), t64(tgt, torch.int64)
        options = dict(reduction=red, label_smoothing=eps)
        if backward:
            dloss = torch.ones(t.shape if red == "none" else (), dtype=torch.float64, device=t.device)
            rows.append((what, (x, t, dloss), options, (t64(grad).reshape(x.shape),)))
        else:
            rows.append((what, (x, t), options, (t64(loss),)))
    return tuple(rows)


def _class_indices(x: torch.Tensor):
    """A cross-entropy call around float64 logits x: class 0 for every row."""
    return (x, torch.zeros(x.shape[:-1], dtype=torch.int64, device=x.device)), {}


# cross-entropy with class-index targets and keyword options (ignore_index, reduction,
# label_smoothing; and where the target takes them weight, z_loss, softcap, logit_scale: OFFERED);
# drawn as a CECase
CE_OPTIONS = ("ignore_index", "reduction", "label_smoothing")
register(OpSpec("cross_entropy", "cross_entropy", ("logits", "target"), oracles.ce.cross_entropy,
                truth.cross_entropy_truth, S.ce_case, S.many_row_ce_case, differentiable=True,
                grad_truth=truth.cross_entropy_grad_truth, sample=_class_indices, semantics=_ce_rows(False),
                torch_ref=torch_target.cross_entropy, options=CE_OPTIONS, offered=OFFERED))
register(OpSpec("cross_entropy_backward", "cross_entropy", ("logits", "target", "dloss"),
                oracles.ce.cross_entropy_backward, truth.cross_entropy_truth, S.ce_case, S.many_row_ce_case,
                forward="cross_entropy", semantics=_ce_rows(True), torch_ref=torch_target.cross_entropy_backward,
                options=CE_OPTIONS, offered=OFFERED))

from . import laws  # noqa: E402,F401  (the family's laws, registered after its ops)
from . import linear  # noqa: E402,F401  (the fused linear cross-entropy: its op and laws)
