"""``--target torch_compile``: the ``torch`` target's functions through
``torch.compile`` (inductor): on a GPU, Triton kernels that inductor generates, real Triton code
written by nobody here, calibrating the default tier like torch eager does.

    python -m pytest -m properties --target torch_compile

Each function is compiled once with ``dynamic=True`` (one graph serves every shape; dynamo's
recompile limit is raised so that dtypes, layouts and the ``dim=`` argument still compile rather
than fall back to eager). Meant for a GPU: on a CPU inductor generates C++ and needs a compiler.
"""
from __future__ import annotations

import torch
import torch._dynamo

from . import torch as _eager

SUITE_REFUSALS = ()
torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
if hasattr(torch._dynamo.config, "accumulated_cache_size_limit"):
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
# Donated buffers (a memory optimisation of compiled backward graphs, on by default) make a
# backward refuse retain_graph=True with a RuntimeError. They are left on, as users get them: that
# refusal is correct behaviour, which autograd_backward_twice accepts, and gradcheck_float64 runs
# every backward on a graph of its own.

_NAMES = ("softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward",
          "softmax_merge", "attention_merge", "cross_entropy")

for _name in _NAMES:
    globals()[_name] = torch.compile(getattr(_eager, _name), dynamic=True)


def cross_entropy_backward(logits, target, dloss, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Autograd through the compiled cross_entropy (inductor compiles its backward graph too)."""
    x = logits.detach().clone().requires_grad_(True)
    loss = globals()["cross_entropy"](x, target, ignore_index=ignore_index, reduction=reduction,
                                      label_smoothing=label_smoothing)
    (dx,) = torch.autograd.grad(loss, x, dloss.to(loss.dtype))
    return dx
