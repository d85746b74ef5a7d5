"""Benchmark cases of softmax, log_softmax (forward and backward) and logsumexp: one tensor of
2**28 elements per input (0.5 GB bf16, 1 GB fp32), random normal data, and at D = 1,048,576 also
few rows (N = 8, where the split path spreads each row over many programs). Model bytes: forward
2*N*D*s, backward 3*N*D*s, logsumexp N*D*s + 4*N."""
from __future__ import annotations

import torch

from softmax_properties import kernels
import peers

ELEMS = 2**28
FEW_ROWS = 8


def _compiled(fn):
    return torch.compile(fn, dynamic=False)


def cases(quick: bool, impls_wanted=("ours", "torch", "compile"), ds=None):
    Ds = ds or ([128, 4096, 65536, 262144] if quick else [128, 1024, 4096, 16384, 65536, 262144, 1048576])
    c_sm = _compiled(lambda x: torch.softmax(x, -1)) if "compile" in impls_wanted else None
    c_lsm = _compiled(lambda x: torch.log_softmax(x, -1)) if "compile" in impls_wanted else None
    c_lse = _compiled(lambda x: torch.logsumexp(x, -1)) if "compile" in impls_wanted else None
    shapes = [(max(1, ELEMS // D), D) for D in Ds] + [(FEW_ROWS, D) for D in Ds if D >= 2**20]
    for dtype in (torch.bfloat16, torch.float32):
        s = dtype.itemsize
        for N, D in shapes:
            x = torch.randn(N, D, device="cuda", dtype=dtype)
            y = torch.softmax(x.float(), -1).to(dtype)
            z = torch.log_softmax(x.float(), -1).to(dtype)
            g = torch.randn_like(x)
            common = dict(dtype=str(dtype).replace("torch.", ""), D=D, N=N)

            def more(op, pass_):  # liger / fla where they offer the case (benchmarks/peers.py)
                return peers.softmax_family(op, pass_, D, x, y, g, impls_wanted)
            yield dict(op="softmax", pass_="fwd", nbytes=2 * N * D * s, **common, impls={
                "ours": lambda: kernels.softmax(x), "torch": lambda: torch.softmax(x, -1),
                "compile": c_sm and (lambda: c_sm(x)), **more("softmax", "fwd")})
            yield dict(op="log_softmax", pass_="fwd", nbytes=2 * N * D * s, **common, impls={
                "ours": lambda: kernels.log_softmax(x), "torch": lambda: torch.log_softmax(x, -1),
                "compile": c_lsm and (lambda: c_lsm(x)), **more("log_softmax", "fwd")})
            yield dict(op="softmax", pass_="bwd", nbytes=3 * N * D * s, **common, impls={
                "ours": lambda: kernels.softmax_backward(y, g),
                "torch": lambda: torch._softmax_backward_data(g, y, -1, dtype), **more("softmax", "bwd")})
            yield dict(op="log_softmax", pass_="bwd", nbytes=3 * N * D * s, **common, impls={
                "ours": lambda: kernels.log_softmax_backward(z, g),
                "torch": lambda: torch._log_softmax_backward_data(g, z, -1, dtype), **more("log_softmax", "bwd")})
            yield dict(op="logsumexp", pass_="fwd", nbytes=N * D * s + N * 4, **common, impls={
                "ours": lambda: kernels.logsumexp(x), "torch": lambda: torch.logsumexp(x, -1),
                "compile": c_lse and (lambda: c_lse(x)), **more("logsumexp", "fwd")})
            del x, y, z, g
