"""Cross-entropy benchmark cases for benchmarks/bench.py: forward + backward in bfloat16 at the
three (rows, vocabulary) shapes of SHAPES (LLM vocabularies of 32K, 128K and 256K), in model bytes
3 N V s (read logits forward, read them again and write the gradient backward).

    from cases_ce import cases
    for c in cases(quick=False): ...   # dicts: op, pass_, dtype, D, N, nbytes, impls

impls (zero-argument callables, each a full training step of the loss: forward then backward
through autograd, the gradient returned rather than accumulated):
  ours    -- kernels.cross_entropy (the torch.library op; its backward reuses the forward's lse)
  torch   -- F.cross_entropy eager
  compile -- torch.compile of F.cross_entropy (left out if compiling fails)
  liger, fla -- where installed and asked for (benchmarks/peers.py)
Tensors are allocated when a case is generated; drop the dict before the next one (a generator).

The fused linear cross-entropy (op "linear_cross_entropy", LCE_SHAPES: N = 8192 tokens, H = 4096,
V = 128,256 and 262,144, bfloat16): a training step from hidden (N, H) and the projection
weight (V, H), returning d hidden and d weight. impls:
  ours   -- kernels.linear_cross_entropy (chunked over rows, the logits never whole)
  torch  -- F.cross_entropy(hidden @ weight.T), the logits materialised
  liger  -- LigerFusedLinearCrossEntropyLoss, where installed and asked for
Its cases carry peak_memory=True: benchmarks/bench.py then also records each implementation's
peak allocated memory over one step (torch.cuda.max_memory_allocated, reset before), beyond what
was allocated before it. nbytes counts hidden and weight read twice and their gradients written
once (4 (N + V) H s), and flops its three matmuls (6 N V H): the step is bound by them, so
bench.py reports TFLOP/s, and read its time (ms) and peak memory beside it.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from softmax_properties import kernels
import peers

SHAPES = [(16384, 32000), (8192, 128256), (4096, 262144)]  # (rows, V)
LCE_SHAPES = [(8192, 4096, 128256), (8192, 4096, 262144)]  # (N, H, V)


class _Skip(Exception):
    """torch.compile was not asked for."""


def _step(loss_fn, x, t):
    def run():
        loss = loss_fn(x, t)
        return torch.autograd.grad(loss, x)[0]
    return run


def _lce_step(loss_fn, h, w, t):
    def run():
        loss = loss_fn(h, w, t)
        return torch.autograd.grad(loss, (h, w))
    return run


def _liger_lce():
    """liger-kernel's LigerFusedLinearCrossEntropyLoss as fn(hidden, weight, target), or None."""
    mod = peers._mod("liger_kernel.transformers")
    cls = getattr(mod, "LigerFusedLinearCrossEntropyLoss", None) if mod is not None else None
    if cls is None:
        return None
    loss = cls()
    return lambda h, w, t: loss(w, h, t)  # its forward takes (lin_weight, _input, target)


def lce_cases(quick: bool, device: str = "cuda", shapes=None, impls_wanted=("ours", "torch")):
    """The fused linear cross-entropy cases. quick: the smaller vocabulary only."""
    dtype = torch.bfloat16
    shapes = shapes or (LCE_SHAPES[:1] if quick else LCE_SHAPES)
    for N, H, V in shapes:
        h = torch.randn(N, H, device=device, dtype=dtype).requires_grad_(True)
        w = (torch.randn(V, H, device=device, dtype=dtype) / H**0.5).requires_grad_(True)
        t = torch.randint(0, V, (N,), device=device)
        impls = {
            "ours": _lce_step(lambda a, b, c: kernels.linear_cross_entropy(a, b, c), h, w, t),
            "torch": _lce_step(lambda a, b, c: F.cross_entropy(a @ b.T, c), h, w, t),
        }
        liger = _liger_lce() if "liger" in impls_wanted else None
        if liger is not None:
            impls["liger"] = _lce_step(liger, h, w, t)
        yield dict(op="linear_cross_entropy", pass_="fwd+bwd", dtype="bfloat16", D=V, N=N, H=H,
                   nbytes=4 * (N + V) * H * dtype.itemsize, flops=6 * N * V * H, impls=impls, peak_memory=True)


def cases(quick: bool, device: str = "cuda", shapes=None, impls_wanted=("ours", "torch", "compile"), lce_shapes=None):
    """quick: the smallest and the largest vocabulary only (and the smaller fused linear case).
    device/shapes/lce_shapes: for a CPU smoke test."""
    dtype = torch.bfloat16
    shapes = shapes or (SHAPES[:1] + SHAPES[-1:] if quick else SHAPES)
    for N, V in shapes:
        x = torch.randn(N, V, device=device, dtype=dtype).requires_grad_(True)
        t = torch.randint(0, V, (N,), device=device)
        impls = {
            "ours": _step(lambda a, b: kernels.cross_entropy(a, b), x, t),
            "torch": _step(lambda a, b: F.cross_entropy(a, b), x, t),
        }
        try:
            if "compile" not in impls_wanted:
                raise _Skip
            compiled = torch.compile(lambda a, b: F.cross_entropy(a, b))
            step = _step(compiled, x, t)
            step()  # compile now; a failure leaves the column out
            impls["compile"] = step
        except _Skip:
            pass
        except Exception as e:  # pragma: no cover - depends on the machine
            print(f"cross_entropy: torch.compile failed for {N}x{V}: {type(e).__name__}: {e}", file=sys.stderr)
        impls.update(peers.cross_entropy(x, t, _step, impls_wanted))  # liger / fla (benchmarks/peers.py)
        yield dict(op="cross_entropy", pass_="fwd+bwd", dtype="bfloat16", D=V, N=N,
                   nbytes=3 * N * V * dtype.itemsize, impls=impls)
        del x, t, impls
    yield from lce_cases(quick, device, lce_shapes, impls_wanted)


def peak_memory(fn) -> float:
    """Peak allocated memory (GiB) of one call of fn beyond what was allocated before it, its
    results included."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**30


if __name__ == "__main__":  # a quick stand-alone run: python benchmarks/cases_ce.py
    import triton
    for c in cases(quick="--quick" in sys.argv):
        for name, fn in c["impls"].items():
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            mem = f" peak {peak_memory(fn):6.2f} GiB" if c.get("peak_memory") else ""
            print(f"{c['op']} {c['pass_']} {c['dtype']} N={c['N']} V={c['D']} {name:8s} {ms:8.3f} ms "
                  f"{c['nbytes'] / ms / 1e6:8.0f} GB/s{mem}")
