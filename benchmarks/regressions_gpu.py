"""Counterexamples of the suite's GPU runs, re-run directly on the GPU: each prints OK or FAIL with
what it saw. Fast (no Hypothesis): run it first on a GPU machine.

    python benchmarks/regressions_gpu.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import kernels  # noqa: E402
import oracles  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() and not kernels.interpreting() else "cpu"
F64MAX = torch.finfo(torch.float64).max
inf = float("inf")


def lsm_bwd_overflowing_sum():
    """float64 dz = finfo.max over 128 columns: the exact VJP is finite (sum(dz) is not)."""
    x = torch.full((128,), 4.25, dtype=torch.float64)
    x[:2] = 0.0
    z = oracles.log_softmax(x).to(DEV)
    out = kernels.log_softmax_backward(z, torch.full((128,), F64MAX, dtype=torch.float64, device=DEV))
    ref = oracles.log_softmax_backward(z[None].cpu(), torch.full((1, 128), F64MAX, dtype=torch.float64))[0]
    return bool(out.isfinite().all()) and bool(((out.cpu() - ref).abs() <= 1e-12 * F64MAX).all()), out[:3]


def sm_bwd_zero_y():
    """y = [1, 0]: dx = y (g - y.g) is exactly 0 for any g (float64; g of 1e-102 and 6e206, and
    g = [-max, max], where g - sum overflows and 0 times it must stay 0)."""
    y = oracles.softmax(torch.tensor([1.0, -10000.0], dtype=torch.float64)).to(DEV)
    outs = [kernels.softmax_backward(y, torch.tensor(g, dtype=torch.float64, device=DEV))
            for g in ([1.1850267126941059e-102, 6.421064332944792e+206], [-F64MAX, F64MAX])]
    return all(bool((out == 0).all()) for out in outs), outs


def lsm_bwd_tiny_exp_float32():
    """float32 z near -104 times a sum of finfo(float32).max: exp(z) must keep its bits."""
    x = torch.tensor([45.0, 17.5, 1.5, -29.5, -24.75, -58.75, -54.5], dtype=torch.float32)
    z = oracles.log_softmax(x).to(torch.float32)
    dz = torch.zeros(7, dtype=torch.float32)
    dz[0] = torch.finfo(torch.float32).max
    out = kernels.log_softmax_backward(z.to(DEV), dz.to(DEV)).cpu().double()
    ref = oracles.log_softmax_backward(z.double()[None], dz.double()[None])[0]
    return bool(((out[1:] - ref[1:]).abs() <= 1e-5 * ref[1:].abs()).all()), out


def ce_smoothing_below_float32():
    """label_smoothing 2.2e-311 (0 in float32) with mean(x) = -inf: the loss is +inf, not NaN."""
    x = torch.tensor([-inf] * 16 + [-0.5442590117454529], dtype=torch.float32, device=DEV)
    t = torch.tensor(0, device=DEV)
    out = kernels.cross_entropy(x, t, label_smoothing=2.225073858507e-311)
    return bool(out == inf), out


def lsm_bwd_dim0_bitwise():
    """dim=0 on a transposed copy gives bitwise the last-axis result (a cancelling float64 row)."""
    z = oracles.log_softmax(torch.zeros(6144, dtype=torch.float64)).to(DEV).unsqueeze(0).expand(2, 6144)
    dz = torch.full((6144,), F64MAX, dtype=torch.float64, device=DEV).unsqueeze(0).expand(2, 6144)
    a = kernels.log_softmax_backward(z, dz)
    b = kernels.log_softmax_backward(z.movedim(-1, 0), dz.movedim(-1, 0), dim=0).movedim(0, -1)
    return bool(torch.equal(a, b)), (a[0, :2], b[0, :2])


def lsm_bwd_nan_z_infinite_sum():
    """float32 z = NaN (log_softmax of [+inf]) with dz = [+inf]: dx is NaN, not inf."""
    z = oracles.log_softmax(torch.tensor([inf])).to(torch.float32).to(DEV)
    out = kernels.log_softmax_backward(z, torch.tensor([inf], dtype=torch.float32, device=DEV))
    return bool(out.isnan().all()), out


def lsm_bwd_neg_inf_z_infinite_sum():
    """float32 z = log_softmax([-inf, 0]), dz = [inf, 0]: dx = [nan, -inf] (exp(-inf) * inf)."""
    z = oracles.log_softmax(torch.tensor([-inf, 0.0])).to(torch.float32).to(DEV)
    out = kernels.log_softmax_backward(z, torch.tensor([inf, 0.0], dtype=torch.float32, device=DEV))
    return bool(out[0].isnan() and out[1] == -inf), out


def lsm_bwd_oracle_sum_reads_nan():
    """float64 dz = +-1.7e308 alternating over 255 columns (the GPU run drew N(0, 2.2e307)): torch's
    sum reads NaN (accumulators overflow with opposite signs); the oracle must still give the
    finite exact VJP."""
    z = oracles.log_softmax(torch.zeros(255, dtype=torch.float64))
    dz = torch.full((255,), 1.7e308, dtype=torch.float64)
    dz[1::2] *= -1
    ref = oracles.log_softmax_backward(z[None], dz[None])[0]
    out = kernels.log_softmax_backward(z.to(DEV), dz.to(DEV)).cpu()
    return bool(ref.isfinite().all() and ((out - ref).abs() <= 1e-12 * dz.abs().max()).all()), (dz.sum(), out[:2], ref[:2])


if __name__ == "__main__":
    bad = 0
    for f in (lsm_bwd_overflowing_sum, sm_bwd_zero_y, lsm_bwd_tiny_exp_float32,
              ce_smoothing_below_float32, lsm_bwd_dim0_bitwise, lsm_bwd_nan_z_infinite_sum,
              lsm_bwd_neg_inf_z_infinite_sum, lsm_bwd_oracle_sum_reads_nan):
        ok, seen = f()
        bad += not ok
        print(f"{'OK  ' if ok else 'FAIL'} {f.__name__}: {f.__doc__.splitlines()[0]}\n     saw {seen}")
    sys.exit(1 if bad else 0)
