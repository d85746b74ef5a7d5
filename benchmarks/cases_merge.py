"""Benchmark cases for the merges (softmax_merge, attention_merge, merge_states), for benchmarks/bench.py.

``cases(quick)`` yields one dict per case: op, pass_ ("fwd"), dtype (str), D (row length: Dv,
or Da + Db), N (rows), nbytes (model bytes), impls (name -> zero-arg callable): "ours" (kernels), "torch"
(the eager formulas: ring attention's ``_update_out_and_lse``, the online-softmax merge) and
"compile" (torch.compile of that formula, when it compiles). Each case allocates about 1 GB of
inputs and outputs; tensors are freed when the generator moves on.

Model bytes: attention_merge 3 * numel(o) * s (read o_a and o_b, write o; the lse vectors, 1/Dv of
that, are not counted); softmax_merge 2 * numel(p) * s (read p_a and
p_b, together numel(p), write p); merge_states N ((S + 1) Dv s + 4 (S + 1)) (read the S states'
values and lse, write o and lse; the lse counted, since S lse per row against S * Dv values is
not negligible at small Dv). Its eager formula is the max-subtracted N-way merge, its D column
is Dv and the case name carries S.
"""
from __future__ import annotations

import sys

import torch

from softmax_properties import kernels


def eager_attention_merge(o_a, lse_a, o_b, lse_b):
    """Ring attention's eager _update_out_and_lse in float32, the result cast back to o's dtype."""
    lse = lse_a + torch.log(1 + torch.exp(lse_b - lse_a))
    o = torch.exp(lse_a - lse)[..., None] * o_a.float() + torch.exp(lse_b - lse)[..., None] * o_b.float()
    return o.to(o_a.dtype), lse


def eager_softmax_merge(p_a, lse_a, p_b, lse_b):
    """The eager online-softmax merge (rows of chunks), the result cast back to p's dtype."""
    qa = p_a.float() / (1 + torch.exp(lse_b - lse_a))[..., None]
    qb = p_b.float() / (1 + torch.exp(lse_a - lse_b))[..., None]
    lse = lse_a + torch.log(1 + torch.exp(lse_b - lse_a))
    return torch.cat([qa, qb], -1).to(p_a.dtype), lse


def eager_merge_states(o, lse):
    """The N-way merge in float32 (no -inf handling: the benchmark's states are all live), the
    result cast back to o's dtype."""
    m = lse.amax(-1, keepdim=True)
    w = torch.exp(lse - m)
    den = w.sum(-1, keepdim=True)
    out = ((w / den)[..., None] * o.float()).sum(-2)
    return out.to(o.dtype), (m + torch.log(den))[..., 0]


def _compiled(fn, args):
    try:
        c = torch.compile(fn)
        c(*args)
        return lambda: c(*args)
    except Exception as e:  # pragma: no cover - reported, the case runs without it
        print(f"torch.compile({fn.__name__}) failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _impls(ours, eager, args, want):
    impls = {"ours": lambda: ours(*args), "torch": lambda: eager(*args)}
    comp = _compiled(eager, args) if "compile" in want else None
    if comp is not None:
        impls["compile"] = comp
    return impls


def cases(quick: bool, impls_wanted=("ours", "torch", "compile")):
    dev = "cuda"
    attn = [(torch.float32, 32768 * 32, 128), (torch.bfloat16, 65536 * 32, 128)]
    smax = [(torch.float32, 32768, 4096), (torch.bfloat16, 65536, 4096)]
    if not quick:
        attn += [(torch.float32, 131072 * 8, 128), (torch.float32, 32768 * 8, 512), (torch.bfloat16, 16384 * 32, 512)]
        smax += [(torch.float32, 2**21, 128), (torch.float32, 2048, 65536), (torch.bfloat16, 2**22, 128),
                 (torch.bfloat16, 2**21, 256)]
    for dtype, N, D in attn:
        s = dtype.itemsize
        o_a = torch.randn(N, D, device=dev, dtype=dtype)
        o_b = torch.randn(N, D, device=dev, dtype=dtype)
        lse_a = torch.randn(N, device=dev) * 4
        lse_b = torch.randn(N, device=dev) * 4
        args = (o_a, lse_a, o_b, lse_b)
        yield dict(op="attention_merge", pass_="fwd", dtype=str(dtype).replace("torch.", ""), D=D, N=N,
                   nbytes=3 * N * D * s, impls=_impls(kernels.attention_merge, eager_attention_merge, args, impls_wanted))
        del o_a, o_b, lse_a, lse_b, args
        torch.cuda.empty_cache()
    # merge_states: (dtype, rows, S, Dv): split-KV decode (many splits) and cascade (two or three)
    states = [(torch.bfloat16, 2**18, 8, 128), (torch.float32, 2**17, 4, 128)]
    if not quick:
        states += [(torch.bfloat16, 2**20, 2, 128), (torch.bfloat16, 2**17, 16, 128), (torch.float16, 2**18, 3, 64),
                   (torch.bfloat16, 2**16, 8, 512)]
    for dtype, N, S, D in states:
        s = dtype.itemsize
        o = torch.randn(N, S, D, device=dev, dtype=dtype)
        lse = torch.randn(N, S, device=dev) * 4
        args = (o, lse)
        yield dict(op=f"merge_states_S{S}", pass_="fwd", dtype=str(dtype).replace("torch.", ""), D=D, N=N,
                   nbytes=N * ((S + 1) * D * s + 4 * (S + 1)),
                   impls=_impls(kernels.merge_states, eager_merge_states, args, impls_wanted))
        del o, lse, args
        torch.cuda.empty_cache()
    for dtype, N, D in smax:
        s = dtype.itemsize
        da = D // 2
        p_a = torch.rand(N, da, device=dev, dtype=dtype)
        p_b = torch.rand(N, D - da, device=dev, dtype=dtype)
        lse_a = torch.randn(N, device=dev) * 4
        lse_b = torch.randn(N, device=dev) * 4
        args = (p_a, lse_a, p_b, lse_b)
        yield dict(op="softmax_merge", pass_="fwd", dtype=str(dtype).replace("torch.", ""), D=D, N=N,
                   nbytes=2 * N * D * s, impls=_impls(kernels.softmax_merge, eager_softmax_merge, args, impls_wanted))
        del p_a, p_b, lse_a, lse_b, args
        torch.cuda.empty_cache()
