"""The peers the benchmark times beside our kernels, where they offer an op: liger-kernel 0.8.5 and
fla-core 0.6.0 (the versions the adapters pin). Each is timed only when importable (on the
GPU machine: the wheels in ``.whl/``, which gpu_check.sh installs for the benchmark step) and asked
for by ``--impls``.

What each offers, through the entry points its own modules use (the property targets
``properties/targets/liger.py`` and ``fla.py`` document the same calls):

* softmax forward / backward: liger ``liger_softmax`` / ``ops.softmax._softmax_backward`` with
  ``calculate_settings(D)``; fla ``ops.utils.softmax_fwd`` / ``softmax_bwd`` (output in the input's
  dtype). Both hold a row in one block and refuse rows over 65,536 columns (liger raises; fla's
  block does not compile): those cases are left out.
* logsumexp: fla ``ops.utils.logsumexp_fwd`` (float32; longer rows in 65,536-column blocks merged
  by torch). liger has none.
* log_softmax, the merges: neither offers one.
* cross-entropy forward + backward (a training step through autograd, as ours and torch's):
  liger ``liger_cross_entropy`` (mean over rows; its forward writes the gradient into the logits'
  buffer, its documented trick, so it gets its own copy of the logits); fla
  ``modules.fused_cross_entropy.cross_entropy_loss`` (per-row float32 loss, reduced to the mean
  as FusedCrossEntropyLoss does).
"""
from __future__ import annotations

import importlib

import torch

MAX_BLOCK_COLS = 65536  # liger_kernel.ops.utils.calculate_settings; fla's one-block rows


def _mod(name):
    try:
        return importlib.import_module(name)
    except Exception:  # not installed (or broken): the peer is left out
        return None


_liger_f = _mod("liger_kernel.transformers.functional")
_liger_sm = _mod("liger_kernel.ops.softmax")
_liger_u = _mod("liger_kernel.ops.utils")
_fla_u = _mod("fla.ops.utils")
_fla_ce = _mod("fla.modules.fused_cross_entropy")


def available() -> list:
    return [n for n, ok in (("liger", _liger_f is not None and _liger_sm is not None and _liger_u is not None),
                            ("fla", _fla_u is not None)) if ok]


def softmax_family(op: str, pass_: str, D: int, x, y, g, wanted) -> dict:
    """{peer: zero-argument callable} for a softmax-family case (x the input, y = softmax(x),
    g the cotangent)."""
    out = {}
    one_block = D <= MAX_BLOCK_COLS
    if "liger" in wanted and "liger" in available() and op == "softmax" and one_block:
        if pass_ == "fwd":
            out["liger"] = lambda: _liger_f.liger_softmax(x)
        else:
            block, warps = _liger_u.calculate_settings(D)
            out["liger"] = lambda: _liger_sm._softmax_backward(g, y, block, warps, D > block)
    if "fla" in wanted and "fla" in available():
        if op == "softmax" and one_block:
            if pass_ == "fwd":
                out["fla"] = lambda: _fla_u.softmax_fwd(x, dtype=x.dtype)
            else:
                out["fla"] = lambda: _fla_u.softmax_bwd(y, g, dtype=y.dtype)
        elif op == "logsumexp":
            out["fla"] = lambda: _fla_u.logsumexp_fwd(x)
    return out


def cross_entropy(x: torch.Tensor, t: torch.Tensor, step, wanted) -> dict:
    """{peer: zero-argument training step} for a cross-entropy case; step(loss_fn, x, t) builds
    one (cases_ce._step: forward, then the gradient by autograd)."""
    out = {}
    if "liger" in wanted and "liger" in available():
        xl = x.detach().clone().requires_grad_(True)  # liger writes its gradient into this buffer
        out["liger"] = step(lambda a, b: _liger_f.liger_cross_entropy(a, b), xl, t)
    if "fla" in wanted and _fla_ce is not None:
        def fla_mean(a, b):
            loss, _z = _fla_ce.cross_entropy_loss(a, b)
            return loss.sum() / b.numel()
        out["fla"] = step(fla_mean, x, t)
    return out
