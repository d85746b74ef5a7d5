"""What the kernels' meta tests share (test_meta*.py): the device they run on, the project's
kernels as a suite target, an elementwise agreement of two results, and a cross-entropy mean over
no counted rows (the replay test's case too)."""
from __future__ import annotations

import torch

from .. import interpreter
from ..targets import OWN_KERNELS


DEV = interpreter.device()


def kernels_target():
    """The project's kernels as a suite target (properties/ops.Target) on DEV, for calling an
    invariant directly on a fixed case."""
    from ..ops import Target
    tg = Target(OWN_KERNELS)
    tg.device = DEV
    return tg


def agrees(a, b, *, zero_signs: bool = False, atol: float = 0.0, ulps: int = 0) -> bool:
    """a and b (tensors or lists) have one number of elements and agree elementwise: equal within
    relative 1e-12 (and absolute atol), or within `ulps` ulp of b's dtype where b is finite and
    nonzero; NaN where NaN; with zero_signs, zeros of the same sign."""
    eps = torch.finfo(b.dtype).eps if isinstance(b, torch.Tensor) and b.dtype.is_floating_point else 0.0
    a = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    b = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    if a.shape != b.shape:
        return False
    close = torch.isclose(a, b, rtol=1e-12, atol=atol) | (a == b)
    if ulps:
        close |= torch.isfinite(b) & (b != 0) & ((a - b).abs() <= ulps * eps * b.abs())
    if zero_signs:
        close &= (a != 0) | (torch.signbit(a) == torch.signbit(b))
    return bool((close | (torch.isnan(a) & torch.isnan(b))).all())


def all_ignored_mean(**kw):
    """A cross_entropy case of two float32 rows, both ignored, reduction mean (kw: the options,
    the smoothing, empty_mean_zero)."""
    from .. import strategies as S
    from ..families.cross_entropy import strategies as CE
    from ..families.cross_entropy.case import CECase
    x = S.Logits(2, 3, "float32", ("normal", 0, 3.0), (), "moderate")
    kw = {"label_smoothing": 0.0, **kw}
    return CECase("cross_entropy", torch.float32, S.Input(x, (2,), S.Layout()), CE.Targets((-100, -100)), -100,
                  "mean", **kw)
