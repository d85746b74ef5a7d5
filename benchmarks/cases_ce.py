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
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from softmax_properties import kernels
import peers

SHAPES = [(16384, 32000), (8192, 128256), (4096, 262144)]  # (rows, V)


class _Skip(Exception):
    """torch.compile was not asked for."""


def _step(loss_fn, x, t):
    def run():
        loss = loss_fn(x, t)
        return torch.autograd.grad(loss, x)[0]
    return run


def cases(quick: bool, device: str = "cuda", shapes=None, impls_wanted=("ours", "torch", "compile")):
    """quick: the smallest and the largest vocabulary only. device/shapes: for a CPU smoke test."""
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


if __name__ == "__main__":  # a quick stand-alone run: python benchmarks/cases_ce.py
    import triton
    for c in cases(quick="--quick" in sys.argv):
        for name, fn in c["impls"].items():
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            print(f"{c['op']} {c['pass_']} {c['dtype']} N={c['N']} V={c['D']} {name:8s} {c['nbytes'] / ms / 1e6:8.0f} GB/s")
