"""The softmax family: softmax, log_softmax, logsumexp and their explicit VJPs (softmax_backward,
log_softmax_backward), each reducing over the last axis of one tensor of logits (or of a forward
output and its cotangent), drawn as a Case (properties/case.py).

* ``strategies.py``: the family's case strategies; ``bounds.py``: its error bounds;
* ``truth.py``: the FP64 truth of each op and its bound; ``laws.py``: the family's laws.

Importing this package registers the ops and their laws."""
from __future__ import annotations

import math

from softmax_properties import oracles

from ...spec import OpSpec, lse_dtype, lse_or_input_dtype, register, row64, t64
from ...targets import torch as torch_target
from . import strategies as S, truth

COMPOSES = ()


def _forward_rows(column):
    return tuple((what, (row64(row),), {}, (t64([out]).reshape(1, -1) if isinstance(out, list) else t64([out]),))
                 for what, row, *outs in oracles.SEMANTICS for out in (outs[column],))


_SOFTMAX_FAMILY = dict(family="softmax", truth=truth.logits_truth, cases=S.logit_case, many_rows=S.many_row_logit_case,
                       has_dim=True)

register(OpSpec("softmax", args=("x",), oracle=oracles.softmax, truth_at=truth.softmax_truth_at,
                differentiable=True, out_range=(0.0, 1.0), normalized=True, grad_truth=truth.normalized_grad_truth,
                semantics=_forward_rows(0), torch_ref=torch_target.softmax, **_SOFTMAX_FAMILY))
register(OpSpec("log_softmax", args=("x",), oracle=oracles.log_softmax, truth_at=truth.log_softmax_truth_at,
                differentiable=True, out_range=(-math.inf, 0.0), grad_truth=truth.normalized_grad_truth,
                semantics=_forward_rows(1), torch_ref=torch_target.log_softmax, **_SOFTMAX_FAMILY))
register(OpSpec("logsumexp", args=("x",), oracle=oracles.logsumexp, truth_at=truth.logsumexp_truth_at,
                out_dtype=lse_dtype, default_out_dtypes=lse_or_input_dtype, reduces=True, differentiable=True,
                grad_truth=truth.logsumexp_grad_truth,
                semantics=_forward_rows(2), torch_ref=torch_target.logsumexp, **_SOFTMAX_FAMILY))
register(OpSpec("softmax_backward", args=("y", "dy"), oracle=oracles.softmax_backward, forward="softmax",
                truth_at=truth.softmax_backward_truth_at, torch_ref=torch_target.softmax_backward, **_SOFTMAX_FAMILY))
register(OpSpec("log_softmax_backward", args=("z", "dz"), oracle=oracles.log_softmax_backward, forward="log_softmax",
                truth_at=truth.log_softmax_backward_truth_at, torch_ref=torch_target.log_softmax_backward,
                **_SOFTMAX_FAMILY))

from . import laws  # noqa: E402,F401  (the family's laws, registered after its ops)
