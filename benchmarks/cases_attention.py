"""Attention benchmark cases for benchmarks/bench.py: forward and forward + backward in bfloat16, in
TFLOP/s, at the shapes flash-attention reports: B * L = 16384 tokens, H * D = 2048 (H = 2048 / D),
L in {1024, 4096, 8192}, D in {64, 128}, causal and not; q, k, v (B, H, L, D) contiguous.

FLOPs (the case's ``flops``): forward 4 B H L^2 D (two matmuls of 2 B H L^2 D), halved for causal;
forward + backward 3.5 times that (the backward is 2.5 forwards: five matmuls where the forward
has two). Model bytes (``nbytes``, for bench.py's GB/s column): q, k, v read and o written once.

impls (zero-argument callables; forward + backward returns the gradients, not accumulated):
  ours     -- kernels.attention (o and lse; autograd through its backward kernels)
  flash    -- torch SDPA on its flash backend (sdpa_kernel(SDPBackend.FLASH_ATTENTION))
  cudnn    -- torch SDPA on its cuDNN backend
  flex     -- torch.compile(flex_attention) with the lse returned (its generated Triton kernels),
              causal through a block mask
Each peer is left out where it is missing or fails its first call (a CPU, an older torch, a GPU
its backend does not support): the reason goes to stderr.

    python benchmarks/cases_attention.py --quick     # without a GPU: the cases' logic on tiny CPU
                                                     # shapes, every available implementation once
"""
from __future__ import annotations

import sys

import torch

from softmax_properties import kernels

TOKENS = 16384
MODEL_DIM = 2048
LENGTHS = (1024, 4096, 8192)
HEAD_DIMS = (64, 128)


def flops(B: int, H: int, L: int, D: int, causal: bool, backward: bool) -> float:
    f = 4.0 * B * H * L * L * D
    if causal:
        f /= 2
    return f * 3.5 if backward else f


def _try(name, fn):
    """fn if one call succeeds, else None (the reason to stderr)."""
    if fn is None:
        return None
    try:
        fn()
        return fn
    except Exception as e:  # the peer is missing here: the case runs without it
        print(f"attention: {name} left out: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
        return None


def _sdpa(backend_name):
    """torch SDPA restricted to one backend, or None where torch has no such backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = getattr(SDPBackend, backend_name)
    except (ImportError, AttributeError):
        return None

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


_FLEX = {}


def _flex(L: int, causal: bool, device: str):
    """torch.compile(flex_attention) returning (o, lse), with a causal block mask; None where
    torch has no FlexAttention."""
    try:
        from torch.nn.attention import flex_attention as fa
    except ImportError:
        return None
    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(fa.flex_attention, dynamic=False)
    compiled = _FLEX["fn"]
    mask = None
    if causal:
        mask = fa.create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, L, L, device=device)
    aux = getattr(fa, "AuxRequest", None)

    def run(q, k, v):
        if aux is not None:
            o, a = compiled(q, k, v, block_mask=mask, return_aux=aux(lse=True))
            return o, a.lse
        return compiled(q, k, v, block_mask=mask, return_lse=True)
    return run


def _train(fwd, q, k, v, g):
    """Forward, then the gradients of (o * g).sum() by autograd."""
    def run():
        out = fwd(q, k, v)
        o = out[0] if isinstance(out, tuple) else out
        return torch.autograd.grad(o, (q, k, v), g)
    return run


def cases(quick: bool, impls_wanted=("ours", "flash", "cudnn", "flex"), device: str = "cuda", shapes=None):
    """shapes: (B, H, L, D) tuples for a CPU logic check; by default the module's grid (quick: L =
    1024 and 4096 only)."""
    dtype = torch.bfloat16
    if shapes is None:
        shapes = [(TOKENS // L, MODEL_DIM // D, L, D) for L in (LENGTHS[:2] if quick else LENGTHS) for D in HEAD_DIMS]
    flash, cudnn = _sdpa("FLASH_ATTENTION"), _sdpa("CUDNN_ATTENTION")
    for B, H, L, D in shapes:
        for causal in (False, True):
            gen = torch.Generator(device=device).manual_seed(0)
            q, k, v = (torch.randn(B, H, L, D, device=device, dtype=dtype, generator=gen).requires_grad_(True)
                       for _ in range(3))
            g = torch.randn(B, H, L, D, device=device, dtype=dtype, generator=gen)
            fwd = {"ours": lambda a, b, c, causal=causal: kernels.attention(a, b, c, causal=causal)}
            if "flash" in impls_wanted and flash is not None:
                fwd["flash"] = lambda a, b, c, causal=causal: flash(a, b, c, causal)
            if "cudnn" in impls_wanted and cudnn is not None:
                fwd["cudnn"] = lambda a, b, c, causal=causal: cudnn(a, b, c, causal)
            if "flex" in impls_wanted:
                try:
                    fl = _flex(L, causal, device)
                except Exception as e:  # no block masks on this device or torch
                    print(f"attention: flex left out: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
                    fl = None
                if fl is not None:
                    fwd["flex"] = fl
            name = f"attention_d{D}" + ("_causal" if causal else "")
            common = dict(op=name, dtype="bfloat16", D=L, N=B * H, nbytes=4 * B * H * L * D * dtype.itemsize)

            qd, kd, vd = q.detach(), k.detach(), v.detach()  # the forward cases record no graph

            def no_grad(f):
                def run():
                    return f(qd, kd, vd)
                return run
            yield dict(pass_="fwd", flops=flops(B, H, L, D, causal, False), **common,
                       impls={n: _try(f"{n} fwd", no_grad(f)) for n, f in fwd.items() if n in impls_wanted})
            yield dict(pass_="fwd+bwd", flops=flops(B, H, L, D, causal, True), **common,
                       impls={n: _try(f"{n} fwd+bwd", _train(f, q, k, v, g)) for n, f in fwd.items() if n in impls_wanted})
            del q, k, v, g, qd, kd, vd
            if device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    # python benchmarks/cases_attention.py [--quick]: on a GPU, time every case; without one, run the
    # cases' logic on tiny CPU shapes under Triton's interpreter (each implementation once)
    import os
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        from softmax_properties.properties import interpreter
        if not interpreter.interpreting():
            raise SystemExit("no GPU: run with TRITON_INTERPRET=1 for the CPU logic check")
        interpreter.install()
        for c in cases(quick=True, device="cpu", shapes=[(1, 2, 32, 16)]):
            ran = {n: f is not None and f() is not None for n, f in c["impls"].items()}
            print(f"{c['op']} {c['pass_']} L={c['D']} B*H={c['N']} {c['flops'] / 1e6:.2f} MFLOP: ran {ran}")
    else:
        import triton
        for c in cases(quick="--quick" in sys.argv):
            for name, fn in c["impls"].items():
                if fn is None:
                    continue
                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                print(f"{c['op']} {c['pass_']} L={c['D']} B*H={c['N']} {name:6s} {c['flops'] / ms / 1e9:7.1f} TFLOP/s")
