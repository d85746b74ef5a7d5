"""Outputs of correct implementations (torch eager, torch.compile) recorded on a GPU, each at
the edge of one of the default tier's allowances (a subnormal rounding, a mean over rows in any
order, a sum of row losses past float32), pinned as plain tests of the truths: the default tier
accepts each recorded value, and a value a few units further off is still rejected, so the
allowance stays a bound. No GPU is needed: the recorded output is compared with the FP64
truth the suite computes for the same case."""
from __future__ import annotations

import torch

from .. import families  # noqa: F401 - registers the built-in ops the cases name
from .. import tolerances
from ..families.cross_entropy import truth
from ..families.cross_entropy.case import CECase
from ..families.cross_entropy.strategies import DLoss, Targets
from ..strategies import Input, Layout, Logits


def _ce(op, dtype, rows, cols, fill, patches=(), family="moderate", batch=None, targets=(0,), reduction="mean",
        eps=0.0, dloss=None, target_dtype="int64", target_stride=1):
    return CECase(op=op, dtype=getattr(torch, dtype),
                  logits=Input(Logits(rows, cols, dtype, fill, patches, family),
                               (rows,) if batch is None else batch, Layout("contiguous", 0)),
                  targets=Targets(values=targets, dtype=target_dtype, stride=target_stride, rows=0 if batch == () else rows),
                  ignore_index=-100, reduction=reduction, label_smoothing=eps, dloss=dloss)


def test_float16_smoothed_gradient_with_subnormal_terms():
    """torch eager, CUDA, float16 logits of 16383 classes, label_smoothing 0.1, mean of one row:
    dx[478] = -5.3048e-06 where the exact value is -5.3516e-06, 0.78 of a float16 subnormal
    spacing (2**-24) apart. torch forms the smoothed cotangent -(eps / V) s in float16, a
    subnormal there, so its rounding errs by half the subnormal spacing, not by u times its
    value (a relative allowance alone gives 4.5e-8 here)."""
    case = _ce("cross_entropy_backward", "float16", 1, 16383, ("normal", 0, 1.0), batch=(), eps=0.1,
               dloss=DLoss(("const", 1.0)))
    ref, tol = truth.ce_truth(case, case.tensors("cpu"))
    got = -5.304813385009766e-06
    assert abs(got - float(ref[478])) <= float(tol[478]), (float(ref[478]), float(tol[478]))
    three_spacings = 3 * 2.0**-24  # a value three subnormal spacings off is still a failure
    assert abs(got - three_spacings - float(ref[478])) > float(tol[478])


def test_mean_over_many_rows_in_any_order():
    """torch.compile, CUDA, float32 logits of 65535 rows [0, 0], mean: 0.69315428 where the exact
    mean is log 2 = 0.69314718, 86 u off (inductor sums the rows' losses in float32 in its own
    order). The default tier holds a reduction over rows to any order (depth_any of the row count),
    the strict tier to the project's float64 sum of its float64 row losses; a mean that drops one
    row in a hundred is a failure in both."""
    case = _ce("cross_entropy", "float32", 65535, 2, ("const", 0.0), target_dtype="int32", target_stride=2)
    args = case.tensors("cpu")
    ref, tol = truth.ce_truth(case, args)
    got = 0.6931542754173279
    assert abs(got - float(ref)) <= float(tol)
    _, tol_strict = truth.ce_truth(case, args, depth=tolerances.depth, strict=True)
    assert abs(got - float(ref)) > float(tol_strict)
    assert abs(float(ref) * 0.99 - float(ref)) > float(tol)


def test_mean_whose_row_losses_sum_past_float32():
    """torch.compile, CUDA, 63 rows [0, -finfo.max] (bfloat16 and float32), target 0,
    label_smoothing 0.1, mean: inf where the exact mean is 1.7e37, each row's loss being
    0.05 finfo.max. A float32 sum of the 63 losses overflows before the division; finite there is
    the strict tier's robustness guarantee, so the default tier leaves the output unjudged, as it
    does a row whose own loss overflows float32. So does torch eager (CPU too) on five rows of
    [0, -finfo.max / 2]: it adds the rows' smoothing sums (finfo.max / 2 each) before it scales
    them by eps / V, inf where the exact mean is 8.5e36. Five rows of [0, -finfo.max / 8] (those
    sums' total below finfo.max) stay judged. (A row [0, -finfo.max] is unjudged on its own: its
    sum over the classes, rounded, may pass finfo.max;
    test_smoothed_row_loss_whose_class_sum_passes_float32.)"""
    for dtype in ("bfloat16", "float32"):
        big = -torch.finfo(getattr(torch, dtype)).max
        for rows, low, judged in ((63, big, False), (5, big / 2, False), (5, big / 8, True)):
            case = _ce("cross_entropy", dtype, rows, 2, ("const", 0.0), ((-1, 0, 1, 0.0), (-1, 1, 2, low)),
                       family="repeated_rows", eps=0.1)
            mask = truth.ce_default_mask(case, case.tensors("cpu"), ())
            assert (mask is None) == judged, (dtype, rows, mask)
            if not judged:
                assert not bool(mask.any())


def test_bfloat16_smoothed_loss_from_rounded_log_probabilities():
    """torch, CUDA, bfloat16, label_smoothing 0.1, reduction 'none' (F.cross_entropy composes
    log_softmax in bfloat16, the NLL and the smoothing sum, each rounded to bfloat16):
    * eager, logits [0.3457, 0.8203], target 0: 0.9296875 where the exact loss is 0.9346178;
    * torch.compile, logits [-0.4121, -2.4375] (a row of a stride-0 batch), target 0: 0.2246094
      where the exact loss is 0.2252045.
    Both are within the default tier's allowance for rounded log-probabilities
    (bounds.ce_rounded_log_probs: 1.6 and 2.0 ulps with the output's rounding, against errors of
    1.26 and 0.61 ulps) and outside the strict tier's bound; a loss two bfloat16 ulps further off
    is still a failure."""
    for row, got in (((0.345703125, 0.8203125), 0.9296875), ((-0.412109375, -2.4375), 0.224609375)):
        case = _ce("cross_entropy", "bfloat16", 1, 2, ("const", row[0]), ((-1, 1, 2, row[1]),), batch=(),
                   reduction="none", eps=0.1)
        args = case.tensors("cpu")
        ref, tol = truth.ce_truth(case, args)
        assert abs(got - float(ref)) <= float(tol), (row, float(ref), float(tol))
        _, tol_strict = truth.ce_truth(case, args, depth=tolerances.depth, strict=True)
        assert abs(got - float(ref)) > float(tol_strict)
        two_ulps = 2 * float(tolerances.ulp(ref.reshape(1), torch.bfloat16)[0])
        assert abs(got - two_ulps - float(ref)) > float(tol), (row, got - two_ulps, float(ref), float(tol))


def test_bfloat16_mean_gradient_scaled_in_the_dtype():
    """torch eager (CUDA and CPU), bfloat16 logits of 15 zeros per row, target 0, mean, dloss 1:
    nll_loss's backward forms the scale dloss / count in bfloat16, the count held in bfloat16 too.
    * 3 rows: dx[0, 0] = -0.3125 where the exact value is -0.311111 (scale round(1/3) = 0.333984);
    * 257 rows: -0.0036468506 where the exact value is -0.0036316472 (the count rounds to 256).
    Both are within the default tier's allowance (bounds.ce_rounded_mean_scale) and outside the strict
    tier's bound; two bfloat16 ulps further off is still a failure."""
    for rows, got in ((3, -0.3125), (257, -0.0036468505859375)):
        case = _ce("cross_entropy_backward", "bfloat16", rows, 15, ("const", 0.0), dloss=DLoss(("const", 1.0)))
        args = case.tensors("cpu")
        ref, tol = truth.ce_truth(case, args)
        r, e = float(ref[0, 0]), float(tol[0, 0])
        assert abs(got - r) <= e, (rows, r, e)
        _, tol_strict = truth.ce_truth(case, args, depth=tolerances.depth, strict=True)
        assert abs(got - r) > float(tol_strict[0, 0])
        two_ulps = 2 * float(tolerances.ulp(ref[0, 0].reshape(1), torch.bfloat16)[0])
        assert abs(got - two_ulps - r) > e, (rows, got - two_ulps, r, e)


def test_smoothed_row_loss_whose_class_sum_passes_float32():
    """torch eager and torch.compile (CUDA and CPU), float32 rows [finfo.max, 0, 0], target 0,
    label_smoothing 0.1, reduction 'none': inf where the exact loss is 2.27e37. torch sums
    |x_j - lse| over the classes (2 finfo.max here) before scaling by eps / V; finite there is the
    strict tier's guarantee, so the default tier leaves that row unjudged and judges the others:
    a row of [1e30, 0, 0] in the same tensor, and every row of a tensor without the extreme one."""
    big = torch.finfo(torch.float32).max
    case = _ce("cross_entropy", "float32", 2, 3, ("const", 0.0), ((0, 0, 1, big), (1, 0, 1, 1e30)),
               family="repeated_rows", reduction="none", eps=0.1)
    args = case.tensors("cpu")
    assert args[0][0, 0] == big and args[0][1, 0] == 1e30, args[0]
    mask = truth.ce_default_mask(case, args, (2,))
    assert mask is not None and mask.tolist() == [False, True]
    ref, _ = truth.ce_truth(case, args)
    assert 2.2e37 < float(ref[0]) < 2.3e37
    case = _ce("cross_entropy", "float32", 2, 3, ("const", 0.0), ((-1, 0, 1, 1e30),), family="repeated_rows",
               reduction="none", eps=0.1)
    assert truth.ce_default_mask(case, case.tensors("cpu"), (2,)) is None
