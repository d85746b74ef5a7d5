"""Counterexamples Hypothesis found on a GPU, pinned as plain tests of the project's kernels, so
every CPU run (the interpreter) and GPU run checks them in seconds whatever the search draws.
Each docstring says what the case is and what was wrong (or what a correct kernel must do)."""
from __future__ import annotations

import pytest
import torch

from softmax_properties import kernels
from softmax_properties import oracles

from .. import interpreter

DEV = interpreter.device()
F32MAX = torch.finfo(torch.float32).max
F64MAX = torch.finfo(torch.float64).max
inf = float("inf")


def test_log_softmax_backward_overflowing_sum():
    """float64 dz = finfo.max over 128 columns: the exact VJP is finite (sum(dz) is not)."""
    x = torch.full((128,), 4.25, dtype=torch.float64)
    x[:2] = 0.0
    z = oracles.log_softmax(x).to(DEV)
    out = kernels.log_softmax_backward(z, torch.full((128,), F64MAX, dtype=torch.float64, device=DEV)).cpu()
    ref = oracles.log_softmax_backward(z[None].cpu(), torch.full((1, 128), F64MAX, dtype=torch.float64))[0]
    assert bool(out.isfinite().all()), out[:3]
    assert bool(((out - ref).abs() <= 1e-12 * F64MAX).all()), (out[:3], ref[:3])


@pytest.mark.parametrize("g", [[1.1850267126941059e-102, 6.421064332944792e+206], [-F64MAX, F64MAX]])
def test_softmax_backward_zero_y(g):
    """y = [1, 0]: dx = y (g - y.g) is exactly 0 for any g (float64; for g = [-max, max], g - sum
    overflows, and 0 times it must stay 0)."""
    y = oracles.softmax(torch.tensor([1.0, -10000.0], dtype=torch.float64)).to(DEV)
    out = kernels.softmax_backward(y, torch.tensor(g, dtype=torch.float64, device=DEV))
    assert bool((out == 0).all()), out


def test_log_softmax_backward_tiny_exp_float32():
    """float32 z near -104 times a sum of finfo(float32).max: exp(z) must keep its bits."""
    x = torch.tensor([45.0, 17.5, 1.5, -29.5, -24.75, -58.75, -54.5], dtype=torch.float32)
    z = oracles.log_softmax(x).to(torch.float32)
    dz = torch.zeros(7, dtype=torch.float32)
    dz[0] = F32MAX
    out = kernels.log_softmax_backward(z.to(DEV), dz.to(DEV)).cpu().double()
    ref = oracles.log_softmax_backward(z.double()[None], dz.double()[None])[0]
    assert bool(((out[1:] - ref[1:]).abs() <= 1e-5 * ref[1:].abs()).all()), (out, ref)


def test_cross_entropy_smoothing_below_float32():
    """label_smoothing 2.2e-311 (0 in float32) with mean(x) = -inf: the loss is +inf, not NaN."""
    x = torch.tensor([-inf] * 16 + [-0.5442590117454529], dtype=torch.float32, device=DEV)
    out = kernels.cross_entropy(x, torch.tensor(0, device=DEV), label_smoothing=2.225073858507e-311)
    assert bool(out == inf), out


def test_cross_entropy_mean_of_overflowing_rows():
    """float32 logits 9 x 2 of -finfo.max with row 0 = (+max, -max), five counted rows, mean: a
    row's lse - x_t is 2 finfo.max (inf in float32), the exact mean 1.3611e38 is finite. torch
    gives inf (the default tier leaves this to the strict tier, ce_matches_oracle_strict)."""
    x = torch.full((9, 2), -F32MAX, dtype=torch.float32)
    x[0] = torch.tensor([F32MAX, -F32MAX])
    t = torch.tensor([1, -100, -100, -100, 0, 0, 0, 0, -100])
    out = kernels.cross_entropy(x.to(DEV), t.to(DEV), reduction="mean").cpu()
    ref = oracles.ce.cross_entropy(x.double(), t, -100, "mean", 0.0)
    assert bool(torch.isfinite(out)), out
    assert abs(out.double().item() - ref.item()) <= 2 * 2.0**-24 * abs(ref.item()), (out, ref)


def test_cross_entropy_float16_mean_over_more_rows_than_float16_counts():
    """float16 logits 65535 x [0, 0], target 0, mean: log 2 and a gradient of -+1/(2 * 65535) (a
    float16 subnormal), though the count of rows is past float16's range (torch gives 0 for both:
    FINDINGS.md, torch 3)."""
    x = torch.zeros(65535, 2, dtype=torch.float16, device=DEV, requires_grad=True)
    loss = kernels.cross_entropy(x, torch.zeros(65535, dtype=torch.long, device=DEV))
    loss.backward()
    assert abs(loss.item() - 0.6931471805599453) <= 2.0**-11, loss
    g = x.grad[0].double().cpu()
    exact = 0.5 / 65535
    assert abs(g[1].item() - exact) <= 2.0**-25 and abs(g[0].item() + exact) <= 2.0**-25, g


def test_cross_entropy_float16_smoothing_sum_past_float16():
    """float16 rows of 7359 zeros, label_smoothing 0.1: every loss is log 7359 = 8.9036, though the
    sum of the log-probabilities (-65522) is past float16's range (torch gives inf: FINDINGS.md,
    torch 4)."""
    x = torch.zeros(2, 7359, dtype=torch.float16, device=DEV)
    out = kernels.cross_entropy(x, torch.zeros(2, dtype=torch.long, device=DEV), label_smoothing=0.1,
                                reduction="none").cpu()
    assert bool(((out.double() - 8.903679).abs() <= 2.0**-8).all()), out


def test_log_softmax_backward_dim0_bitwise():
    """dim=0 on a transposed copy gives bitwise the last-axis result (a cancelling float64 row)."""
    z = oracles.log_softmax(torch.zeros(6144, dtype=torch.float64)).to(DEV).unsqueeze(0).expand(2, 6144)
    dz = torch.full((6144,), F64MAX, dtype=torch.float64, device=DEV).unsqueeze(0).expand(2, 6144)
    a = kernels.log_softmax_backward(z, dz)
    b = kernels.log_softmax_backward(z.movedim(-1, 0), dz.movedim(-1, 0), dim=0).movedim(0, -1)
    assert torch.equal(a, b), (a[0, :2], b[0, :2])


def test_log_softmax_backward_nan_z_infinite_sum():
    """float32 z = NaN (log_softmax of [+inf]) with dz = [+inf]: dx is NaN, not inf."""
    z = oracles.log_softmax(torch.tensor([inf])).to(torch.float32).to(DEV)
    out = kernels.log_softmax_backward(z, torch.tensor([inf], dtype=torch.float32, device=DEV))
    assert bool(out.isnan().all()), out


def test_log_softmax_backward_neg_inf_z_infinite_sum():
    """float32 z = log_softmax([-inf, 0]), dz = [inf, 0]: dx = [nan, -inf] (exp(-inf) * inf)."""
    z = oracles.log_softmax(torch.tensor([-inf, 0.0])).to(torch.float32).to(DEV)
    out = kernels.log_softmax_backward(z, torch.tensor([inf, 0.0], dtype=torch.float32, device=DEV)).cpu()
    assert bool(out[0].isnan() and out[1] == -inf), out


def test_log_softmax_backward_oracle_sum_reads_nan():
    """float64 dz = +-1.7e308 alternating over 255 columns: torch's sum reads NaN (accumulators
    overflow with opposite signs); the oracle must still give the finite exact VJP, and so must
    the kernel."""
    z = oracles.log_softmax(torch.zeros(255, dtype=torch.float64))
    dz = torch.full((255,), 1.7e308, dtype=torch.float64)
    dz[1::2] *= -1
    ref = oracles.log_softmax_backward(z[None], dz[None])[0]
    out = kernels.log_softmax_backward(z.to(DEV), dz.to(DEV)).cpu()
    assert bool(ref.isfinite().all()), ref[:2]
    assert bool(((out - ref).abs() <= 1e-12 * dz.abs().max()).all()), (out[:2], ref[:2])


def test_cross_entropy_smoothed_row_class_sum_past_float32():
    """float32 [finfo.max, 0, 0], target 0, label_smoothing 0.1, reduction 'none': the sum over
    the classes of x_j - lse is -2 finfo.max, the exact loss 0.1 * 2 finfo.max / 3 = 2.27e37 is
    finite (torch gives inf: the default tier accepts that, the strict tier does not)."""
    x = torch.tensor([[F32MAX, 0.0, 0.0]], dtype=torch.float32, device=DEV)
    out = kernels.cross_entropy(x, torch.tensor([0], device=DEV), reduction="none", label_smoothing=0.1).cpu()
    exact = 0.1 * 2 * F32MAX / 3
    assert abs(float(out[0]) - exact) <= 1e-6 * exact, out


def test_cross_entropy_bfloat16_mean_gradient_scale():
    """bfloat16 logits 3 x 15 of zeros, target 0, mean, dloss 1: dx[:, 0] = (1/15 - 1) / 3 =
    -0.311111 rounds to -0.310546875 (torch's -0.3125 comes from the scale 1/3 rounded to
    bfloat16 first, an allowance of the default tier only)."""
    x = torch.zeros(3, 15, dtype=torch.bfloat16, device=DEV)
    out = kernels.cross_entropy_backward(x, torch.zeros(3, dtype=torch.long, device=DEV),
                                         torch.tensor(1.0, dtype=torch.bfloat16, device=DEV)).cpu()
    assert bool((out[:, 0].float() == -0.310546875).all()), out[:, 0]
