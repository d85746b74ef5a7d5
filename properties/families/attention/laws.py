"""The laws of the attention family (attention, attention_backward), each with its bound and tier.
The generic laws (inputs unmodified, outputs written, determinism, output structure) apply
through the registry."""
from __future__ import annotations

import math

import torch
from hypothesis import assume

from softmax_properties.oracles import sdpa

from ... import tolerances
from ...failures import PropertyFailure
from ...invariants._checks import assert_bitwise, assert_close, check_oracle, op_call, outputs, worst
from ...invariants._registry import fail, invariant
from ...spec import lse_dtype
from ...tolerances import agree
from . import bounds
from .truth import forward_truth, grads_truth


def attention_op(op) -> bool:
    return op.family == "attention"


def forward(op) -> bool:
    return op.family == "attention" and not op.is_vjp


def backward(op) -> bool:
    return op.family == "attention" and op.is_vjp


def _call(case, target, q, k, v):
    out = outputs(op_call(case, target, q, k, v))
    if len(out) != 2:
        fail(case, target, f"attention returned {len(out)} outputs, expected (o, lse)")
    return out


@invariant(attention_op, strict="attention_matches_oracle_strict")
def attention_matches_oracle(case, target, strict=False):
    """attention's (o, lse) and attention_backward's (dq, dk, dv) equal the FP64 oracle
    (oracles/sdpa.py) within the bounds of bounds.py: two dot products (D, then Lk) around a
    softmax, any summation order and 16-bit intermediate scores (default tier: torch's eager
    composition, SDPA's backends), or the tight order of a flash kernel with float32 scores
    (strict tier). A forward whose lse is off by the factor log2(e) everywhere (base-2 units, as the
    Triton tutorial's kernel keeps its row statistics) gets a report that says so."""
    try:
        check_oracle(case, target, strict=strict)
    except PropertyFailure as e:
        hint = _base2_lse_hint(case, target) if "lse" in type(e)._qualifiers and not case.backward else ""
        if not hint:
            raise
        first, _, rest = str(e).partition("\n")
        raise type(e)(f"{first} {hint}\n{rest}") from None


def _base2_lse_hint(case, target) -> str:
    """A note for a failure of lse whose every finite element, times ln 2, is within twice its
    bound of the truth (lse in base-2 units); "" otherwise."""
    q, k, v = case.tensors(target.device)
    _, lse = _call(case, target, q, k, v)
    (_, el), _ = forward_truth(case, q, k, v)
    got = lse.double()
    fin = torch.isfinite(got) & torch.isfinite(el.value)
    if not bool(fin.any()):
        return ""
    nat = got[fin] * math.log(2.0)
    ref, tol = el.value[fin], el.tol[fin]
    if bool(((nat - ref).abs() <= 2 * tol + 1e-6 * ref.abs()).all()):
        return ("(lse times ln 2 matches the truth: base-2 units, log2 of the sum of 2^(s log2 e); the "
                "contract asks the natural log)")
    return ""


_SPLIT_CALL = ("s = {s}\no1, lse1 = target.attention(q, k[:, :, :s], v[:, :, :s]{kw})\n"
               "o2, lse2 = target.attention(q, k[:, :, s:], v[:, :, s:]{kw})\n"
               "from softmax_properties.oracles import sdpa  # the FP64 merge by the lse rule\n"
               "out, lse = sdpa.merge([(o1, lse1), (o2, lse2)])  # vs attention over all keys")


@invariant(forward, families=("unmasked",))
def split_kv_equivalence(case, target):
    """Attention over keys [0, s) and over [s, Lk), merged by the lse rule (o = sum_c exp(lse_c -
    lse) o_c, lse = log sum_c exp(lse_c); in FP64), equals attention over all keys, for any split
    point s (drawn from the case's seed; no causal or window mask, whose positions a slice of
    the keys would move). Bound: each part within its own bound (eps_o_c, eps_lse_c, from
    bounds.py, final rounding included); an error of at most L = max_c eps_lse_c in each part's
    lse moves its weight by the factor exp(2L) at most, so the merged o is within sum_c W_c
    (eps_o_c + |o_c| expm1(2L)) and its lse within L (W_c the FP64 weights). The seed of ring
    attention and split-KV decoding: the lse a kernel returns must be the one its o is
    normalized by."""
    assume(not case.masked and case.Lk >= 2)
    q, k, v = case.tensors(target.device)
    s = 1 + case.seed % (case.Lk - 1)
    parts, exp = [], []
    for sl in (slice(0, s), slice(s, case.Lk)):
        kc, vc = k[:, :, sl], v[:, :, sl]
        parts.append(_call(case, target, q, kc, vc))
        exp.append(forward_truth(case, q, kc, vc)[0])
    for (o, l), (eo, el) in zip(parts, exp):
        if tuple(o.shape) != tuple(eo.value.shape) or tuple(l.shape) != tuple(el.value.shape):
            fail(case, target, f"a part's outputs have shapes {tuple(o.shape)}, {tuple(l.shape)}, expected "
                 f"{tuple(eo.value.shape)}, {tuple(el.value.shape)}")
    mo, ml = sdpa.merge([(o.double(), l.double()) for o, l in parts])
    ref_o, ref_l = sdpa.attention(q, k, v, **case.oracle_options())
    tol_o, L = bounds.split_merge_bounds(exp, ref_l)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    call = _SPLIT_CALL.format(s=s, kw=kw)
    assert_close(case, target, mo, ref_o, tol_o, "the split-KV merge of o differs from attention over all keys",
                 call, dtype=torch.float64)
    assert_close(case, target, ml, ref_l, L, "the split-KV merge of lse differs from attention over all keys",
                 call.replace("# vs attention", "\nout = lse  # vs attention"), dtype=torch.float64, out_name="lse")


@invariant(forward, families=("unmasked",))
def key_permutation_invariance(case, target):
    """Permuting the keys together with their values (no causal or window mask, whose positions
    matter) leaves o and lse unchanged: softmax and the weighted sum are symmetric in the keys.
    The permutation comes from the case's seed. Bound: both calls within their bound of the same
    FP64 truth, so the two within twice the bound."""
    assume(not case.masked and case.Lk >= 2)
    q, k, v = case.tensors(target.device)
    perm = torch.randperm(case.Lk, generator=torch.Generator().manual_seed(case.seed)).tolist()
    o1, l1 = _call(case, target, q, k, v)
    o2, l2 = _call(case, target, q, k[:, :, perm], v[:, :, perm])
    (e, el), _ = forward_truth(case, q, k, v)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    call = (f"perm = {perm!r}\nfirst = target.attention(q, k, v{kw})\n"
            f"out = target.attention(q, k[:, :, perm], v[:, :, perm]{kw})\n")
    assert_close(case, target, o2, o1.double(), agree(e.tol, e.tol),
                 "o changed when the keys and values were permuted", call + "out = out[0]  # vs first[0]")
    assert_close(case, target, l2, l1.double(), agree(el.tol, el.tol),
                 "lse changed when the keys and values were permuted",
                 call + "out = out[1]  # vs first[1]", dtype=lse_dtype(case.dtype), out_name="lse")


@invariant(forward)
def key_shift(case, target):
    """Adding one vector u to every key adds scale q_i.u to each score of query i (masked or not),
    so o is unchanged and lse moves by scale q_i.u (no softcap, which bends the scores). u: +-1/2,
    +-1 per column from the case's seed; k + u is rounded to the dtype, so each bound adds the
    exact FP64 effect of that rounding (|o64(k') - o64(k)|, |lse64(k') - lse64(k) - scale q.u|) to
    the bounds of the two calls (bounds.py)."""
    assume(not case.softcap and case.Lk >= 1 and case.Lq >= 1)
    q, k, v = case.tensors(target.device)
    gen = torch.Generator().manual_seed(case.seed + 11)
    sign = torch.randint(0, 2, (case.D,), generator=gen, device="cpu") * 2 - 1
    u = (sign * 2.0 ** -torch.randint(0, 2, (case.D,), generator=gen, device="cpu")).double()
    u = u.to(k.device)
    k2 = (k.double() + u).to(k.dtype)
    o1, l1 = _call(case, target, q, k, v)
    o2, l2 = _call(case, target, q, k2, v)
    (e1, el1), _ = forward_truth(case, q, k, v)
    (e2, el2), _ = forward_truth(case, q, k2, v)
    moved = case.scale_value * (q.double() @ u)  # (B, Hq, Lq)
    seen = torch.isfinite(el1.value)
    d_lse = torch.where(seen, moved, 0.0)
    tol_o = bounds.shifted_input_bound(e1, e2, 0.0)
    tol_l = bounds.shifted_lse_bound(el1, el2, moved, seen)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    call = (f"u = torch.tensor({u.tolist()!r}, dtype=torch.float64, device=device)\n"
            f"first = target.attention(q, k, v{kw})\n"
            f"out = target.attention(q, (k.double() + u).to(k.dtype), v{kw})\n")
    assert_close(case, target, o2, o1.double(), tol_o, "o changed when one vector was added to every key",
                 call + "out = out[0]  # vs first[0]")
    want = torch.where(seen, l1.double() + d_lse, l1.double())
    assert_close(case, target, l2, want, tol_l, "lse did not move by scale q.u when u was added to every key",
                 call + f"out = out[1]  # vs first[1] + {case.scale_value!r} * (q.double() @ u)",
                 dtype=lse_dtype(case.dtype), out_name="lse")


def _pow2_shift(case):
    """A row vector c (Dv,) of powers of two (+-1, +-2, +-4), from the case's seed."""
    g = torch.Generator().manual_seed(case.seed + 7)
    sign = torch.randint(0, 2, (case.Dv,), generator=g, device="cpu") * 2 - 1
    mag = 2.0 ** torch.randint(0, 3, (case.Dv,), generator=g, device="cpu")
    return (sign * mag).to(torch.float64)


@invariant(forward)
def value_shift(case, target):
    """Adding one row c to every value adds c to every output row that sees a key: the weights of
    a row sum to one, so o(v + c) = o(v) + c (rows without a key stay 0). c: powers of two from
    the case's seed; v + c is rounded to the dtype, so the bound adds the exact FP64 effect of that
    rounding, |o64(v') - o64(v) - c|, to the bounds of the two calls (bounds.py)."""
    q, k, v = case.tensors(target.device)
    assume(case.Lk >= 1 and case.Lq >= 1)
    c = _pow2_shift(case).to(v.device)
    v2 = (v.double() + c).to(v.dtype)
    o1, _ = _call(case, target, q, k, v)
    o2, _ = _call(case, target, q, k, v2)
    (e1, _), _ = forward_truth(case, q, k, v)
    (e2, _), _ = forward_truth(case, q, k, v2)
    seen = sdpa.visible(case.Lq, case.Lk, case.causal, case.window, case.alignment, device=e1.value.device).any(-1)
    shift = torch.where(seen[..., None], c, 0.0)
    ref = o1.double() + shift
    tol = bounds.shifted_input_bound(e1, e2, shift)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    call = (f"c = torch.tensor({c.tolist()!r}, dtype=torch.float64, device=device)\n"
            f"o1, _ = target.attention(q, k, v{kw})\n"
            f"out, _ = target.attention(q, k, (v.double() + c).to(v.dtype){kw})  # vs o1 + c")
    assert_close(case, target, o2, ref, tol, "o(v + c) differs from o(v) + c", call)


@invariant(forward)
def o_within_value_range(case, target):
    """Each o_ic lies within the minimum and maximum of v_jc over the keys j its row sees (o is a
    convex combination of them), up to the bound of o (bounds.py); a row that sees no key is 0."""
    q, k, v = case.tensors(target.device)
    o, _ = _call(case, target, q, k, v)
    (e, _), _ = forward_truth(case, q, k, v)
    vis = sdpa.visible(case.Lq, case.Lk, case.causal, case.window, case.alignment, device=e.value.device)
    ve = v.double().repeat_interleave(case.group, dim=1)[..., None, :, :]  # (B, Hq, 1, Lk, Dv)
    m = vis[..., None]
    hi = torch.where(m, ve, -math.inf).amax(-2) if case.Lk else torch.zeros_like(e.value)
    lo = torch.where(m, ve, math.inf).amin(-2) if case.Lk else torch.zeros_like(e.value)
    none = ~vis.any(-1)[..., None]
    hi, lo = torch.where(none, 0.0, hi), torch.where(none, 0.0, lo)
    od = o.double()
    bad = (od > hi + e.tol) | (od < lo - e.tol) | torch.isnan(od)
    if bool(bad.any()):
        i = worst(bad, torch.maximum(od - hi, lo - od))
        exp = hi[i] if float(od[i]) > float(hi[i]) else lo[i]
        fail(case, target, f"o outside the range of the values its row attends to: {int(bad.sum())} elements "
             f"(row range [{float(lo[i]):.6g}, {float(hi[i]):.6g}])", i, exp, o[i], e.tol[i],
             call=f"{case.call_code()}\nout = out[0]  # o")


def _invisible_change(case):
    """(side, J0, rows, size): the keys changed (j >= J0 for side 'suffix', j < J0 for 'prefix')
    and the query rows (Lq,) that see none of them but see some key, J0 the first of those that
    maximizes rows x keys changed (size); None where no J0 leaves such a row. The side comes from
    the seed (a prefix one case in three), the other where the seed's changes no row (a causal
    mask alone leaves every row key 0). A row sees none of the suffix iff its last visible key is
    below J0, none of the prefix iff its first is at or above J0: one comparison per (J0, row),
    not a pass over the mask per J0 (rows of 2,048 keys)."""
    if case.Lk < 2:
        return None
    vis = sdpa.visible(case.Lq, case.Lk, case.causal, case.window, case.alignment)
    first = "prefix" if case.seed % 3 == 2 else "suffix"
    for side in (first, "suffix" if first == "prefix" else "prefix"):
        pick = _invisible_side(case, vis, side)
        if pick is not None:
            return pick
    return None


def _invisible_side(case, vis, side):
    """_invisible_change for one side."""
    seen = vis.any(-1)
    j = torch.arange(case.Lk, device=vis.device)
    J0 = j[1:, None]  # (Lk - 1, 1): the candidate split points
    if side == "suffix":
        last = torch.where(vis, j, -1).amax(-1)
        rows = (last[None, :] < J0) & seen
        keys = case.Lk - J0[:, 0]
    else:
        first = torch.where(vis, j, case.Lk).amin(-1)
        rows = (first[None, :] >= J0) & seen
        keys = J0[:, 0]
    size = rows.sum(-1) * keys
    best = int(torch.argmax(size))
    if int(size[best]) == 0:
        return None
    return side, best + 1, rows[best], int(size[best])


@invariant(forward, needs=("option:causal",), families=("masked",), strict="mask_locality_strict")
def mask_locality(case, target, strict=False):
    """Under a causal or window mask, changing the keys and values a query cannot see leaves its
    row unchanged: the changed keys (a suffix j >= J0 or a prefix j < J0 of the keys) get new
    finite values (k -> 2k + 1, v -> 2v - 3), and every row that sees none of them keeps its o
    and lse. Default tier: within the row's bound (the FP64 truth of the row is the same);
    strict: bitwise (a kernel whose arithmetic for a row depends on keys the row cannot see, such
    as a row max taken before masking, changes in the last bits). Needs the causal option (a
    target without it is skipped, naming it); windows are drawn where the target takes them."""
    assume(case.masked and case.Lk >= 2)
    q, k, v = case.tensors(target.device)
    pick = _invisible_change(case)
    assume(pick is not None)
    side, J0, rows, _ = pick
    sl = "[:, :, {}:]".format(J0) if side == "suffix" else "[:, :, :{}]".format(J0)
    k2, v2 = k.clone(), v.clone()
    idx = slice(J0, None) if side == "suffix" else slice(0, J0)
    k2[:, :, idx] = (2 * k.double()[:, :, idx] + 1).to(k.dtype)
    v2[:, :, idx] = (2 * v.double()[:, :, idx] - 3).to(v.dtype)
    o1, l1 = _call(case, target, q, k, v)
    o2, l2 = _call(case, target, q, k2, v2)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    rows_t = rows.to(o1.device)
    call = (f"first = target.attention(q, k, v{kw})\nk2, v2 = k.clone(), v.clone()\n"
            f"k2{sl} = (2 * k.double(){sl} + 1).to(k.dtype)\nv2{sl} = (2 * v.double(){sl} - 3).to(v.dtype)\n"
            f"rows = torch.tensor({rows.tolist()!r}, device=device)  # the queries that see no changed key\n"
            f"out = target.attention(q, k2, v2{kw})\n"
            f"out, first = out[0][:, :, rows], first[0][:, :, rows]  # o of those rows: vs first")
    if strict:
        assert_bitwise(case, target, o2[:, :, rows_t], o1[:, :, rows_t],
                       "o of rows that see no changed key differs bitwise", call)
        assert_bitwise(case, target, l2[:, :, rows_t], l1[:, :, rows_t],
                       "lse of rows that see no changed key differs bitwise", call, out_name="lse")
        return
    (e, el), _ = forward_truth(case, q, k, v)
    only = rows_t[None, None, :, None].expand(e.value.shape)
    assert_close(case, target, o2, e.value, e.tol, "o of rows that see no changed key moved", call, only=only)
    assert_close(case, target, l2.double(), el.value, el.tol, "lse of rows that see no changed key moved", call,
                 only=rows_t[None, None, :].expand(el.value.shape), dtype=lse_dtype(case.dtype), out_name="lse")


@invariant(forward, families=("grouped",))
def grouped_heads_match_repeated(case, target):
    """With grouped-query heads (Hq = G Hkv, G > 1), attention equals the same attention with k and
    v repeated to Hq heads (query head h reads key / value head h // G). Bound: each call within
    its bound of the same FP64 truth, so the two within the sum of the bounds."""
    assume(case.group > 1)
    q, k, v = case.tensors(target.device)
    g = case.group
    o1, l1 = _call(case, target, q, k, v)
    o2, l2 = _call(case, target, q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))
    (e, el), _ = forward_truth(case, q, k, v)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    call = (f"first = target.attention(q, k, v{kw})\n"
            f"out = target.attention(q, k.repeat_interleave({g}, dim=1), v.repeat_interleave({g}, dim=1){kw})\n")
    assert_close(case, target, o2, o1.double(), agree(e.tol, e.tol),
                 "attention with k, v repeated to Hq heads differs from the grouped attention",
                 call + "out = out[0]  # vs first[0]")
    assert_close(case, target, l2, l1.double(), agree(el.tol, el.tol),
                 "lse with k, v repeated differs from the grouped lse",
                 call + "out = out[1]  # vs first[1]", dtype=lse_dtype(case.dtype), out_name="lse")


_GRAD_SUBSETS = (("q",), ("k",), ("v",), ("k", "v"))  # beside all three: one per example, by the case


def _check_grad(case, target, name, got, x, e, via, call, hint=""):
    """One gradient from autograd against its FP64 VJP (truth e): x's shape and dtype, then e's
    bound; via says how it was formed, hint what a mismatch looks like, for the report."""
    if got is None or tuple(got.shape) != tuple(x.shape) or got.dtype != x.dtype:
        have = None if got is None else (tuple(got.shape), got.dtype)
        fail(case, target, f"{name} from autograd {via} is {have}, expected shape {tuple(x.shape)} and {x.dtype}",
             call=call)
    assert_close(case, target, got, e.value, e.tol, f"{name} from autograd {via} differs from the FP64 VJP{hint}",
                 call, dtype=case.dtype, out_name=name)


@invariant(forward, needs=("autograd",))
def attention_autograd_matches_vjp(case, target):
    """Autograd through attention's o: with q, k, v leaves (as laid out) and o's cotangent do
    (seeded by the case), torch.autograd.grad(o, (q, k, v), do) equals the FP64 VJP (oracles/sdpa.py
    attention_backward) within the backward's bounds (bounds.py), each gradient in its input's
    shape and dtype; judged in the dtypes where the target's attention is differentiable. Then
    the same with only some of the inputs requiring grad (one of q; k; v; k and v, chosen by the
    case): cross-attention over a frozen encoder's keys and values, or frozen queries, is everyday
    use, and a kernel that forms one gradient only when another input requires grad (dq only with
    dk) returns nothing or zeros there."""
    assume(case.dtype in target.autograd_dtypes(case.op))
    from ...invariants.generic import _seed
    base = case.tensors(target.device)
    do = case.logical("do", target.device)
    truths = grads_truth(case, *(t.detach() for t in base), do)
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    some = _GRAD_SUBSETS[_seed(case, "grad_subset") % len(_GRAD_SUBSETS)]
    for wanted in (("q", "k", "v"), some):
        leaves = dict(zip("qkv", (t.detach().requires_grad_(n in wanted) for n, t in zip("qkv", base))))
        which = ", ".join(wanted) + (" (only)" if len(wanted) < 3 else "")
        with torch.enable_grad():
            o, _ = _call(case, target, leaves["q"], leaves["k"], leaves["v"])
            if not o.requires_grad:
                fail(case, target, f"o does not require grad when {which} require(s) grad")
            grads = torch.autograd.grad(o, [leaves[n] for n in wanted], do, allow_unused=True)
        head = ("q, k, v = (t.detach() for t in (q, k, v))\n"
                + "".join(f"{n}.requires_grad_()\n" for n in wanted)
                + f"{case._value_code(3, 'do')}\ndo = V\n"
                f"o, lse = target.attention(q, k, v{kw})\ngrads = torch.autograd.grad(o, ({', '.join(wanted)},), do)\n")
        for i, (n, got) in enumerate(zip(wanted, grads)):
            _check_grad(case, target, "d" + n, got, leaves[n], truths["qkv".index(n)],
                        f"through o (with {which} requiring grad)", head + f"out = grads[{i}]  # d{n} vs the FP64 VJP")


@invariant(forward, needs=("autograd",))
def attention_lse_autograd_matches_vjp(case, target):
    """Autograd through lse: where the target's lse requires grad, torch.autograd.grad((o, lse),
    (q, k, v), (do, dlse)) equals the FP64 VJP of both outputs (oracles/sdpa.py attention_backward
    with dlse: dS = P (dP - Delta + dlse)) within the backward's bounds (bounds.py), and so does
    autograd through lse alone (o unused, chosen by the case). Split-KV and ring attention
    written with autograd differentiate the merged o, whose weights come from each part's lse:
    a lse that requires grad but whose backward drops its cotangent (an autograd Function that
    takes (do, dlse) and uses do only) gives wrong gradients with no error. A lse that does not
    require grad (torch SDPA's flash lse is non-differentiable) is a declared convention, not a
    bug: the law then holds vacuously, and a use of that lse fails loudly in autograd itself."""
    assume(case.dtype in target.autograd_dtypes(case.op))
    from ...invariants.generic import _seed
    base = case.tensors(target.device)
    do = case.logical("do", target.device)
    dlse = case.lse_cotangent(target.device)
    lse_only = _seed(case, "lse_only") % 2 == 1
    leaves = [t.detach().requires_grad_(True) for t in base]
    kw = "".join(f", {k_}={v_!r}" for k_, v_ in case.kwargs().items())
    with torch.enable_grad():
        o, lse = _call(case, target, *leaves)
        if not (isinstance(lse, torch.Tensor) and lse.requires_grad):
            return
        if lse_only:
            grads = torch.autograd.grad(lse, leaves, dlse, allow_unused=True)
        else:
            grads = torch.autograd.grad((o, lse), leaves, (do, dlse), allow_unused=True)
    plain = [t.detach() for t in base]
    truths = grads_truth(case, *plain, torch.zeros_like(do) if lse_only else do, dlse=dlse)
    which = "lse alone" if lse_only else "o and lse"
    head = ("q, k, v = (t.detach().requires_grad_() for t in (q, k, v))\n"
            + ("" if lse_only else f"{case._value_code(3, 'do')}\ndo = V\n")
            + f"{case.dlse_code()}\no, lse = target.attention(q, k, v{kw})\n"
            + ("grads = torch.autograd.grad(lse, (q, k, v), dlse)\n" if lse_only
               else "grads = torch.autograd.grad((o, lse), (q, k, v), (do, dlse))\n"))
    for i, (n, got) in enumerate(zip("qkv", grads)):
        x, e = leaves[i], truths[i]
        if got is None:  # not in the graph of the outputs used (v, for lse alone): a zero gradient
            got = torch.zeros_like(x)
        hint = ""
        if got.shape == x.shape and bool(tolerances.compare(got, e.value, e.tol, case.dtype).any()):
            # the VJP without lse's cotangent (0 for lse alone): a report that names a dropped dlse
            alone = torch.zeros_like(e.value) if lse_only else grads_truth(case, *plain, do)[i].value
            if not bool(tolerances.compare(got, alone, e.tol, case.dtype).any()):
                hint = " (it is the VJP without lse's cotangent: the backward drops dlse)"
        _check_grad(case, target, "d" + n, got, x, e, f"through {which}",
                    head + f"out = grads[{i}]  # d{n} vs the FP64 VJP", hint)


@invariant(backward)
def zero_sum_vjps(case, target):
    """Each row of dS = P (dP - rowsum(P dP)) sums to zero over the keys a query sees, so without
    softcap (whose factor 1 - tanh^2 weighs the row's terms unequally) dk summed over the keys is
    zero per (batch, key head, column); and dv summed over the keys equals do summed over the
    query rows that see a key, per (batch, key head group). Bound: the sum of the elements'
    bounds (bounds.py) plus the rounding of the sum in float64."""
    args = case.tensors(target.device)
    q, k, v, _, _, do = args
    out = outputs(op_call(case, target, *args))
    if len(out) != 3:
        fail(case, target, f"attention_backward returned {len(out)} outputs, expected (dq, dk, dv)")
    dq, dk, dv = out
    edq, edk, edv = grads_truth(case, q, k, v, do)
    for name, got, e in (("dk", dk, edk), ("dv", dv, edv)):
        if tuple(got.shape) != tuple(e.value.shape):
            fail(case, target, f"{name} has shape {tuple(got.shape)}, expected {tuple(e.value.shape)}")
    vis = sdpa.visible(case.Lq, case.Lk, case.causal, case.window, case.alignment, device=e.value.device)
    seen = vis.any(-1)
    if not case.softcap:
        s = dk.double().sum(2)
        tol = bounds.column_sum_bound(edk.tol, dk, case.Lk)
        assert_close(case, target, s, torch.zeros_like(s), tol, "dk summed over the keys is not zero",
                     f"{case.call_code()}\nout = out[1].double().sum(2)  # vs 0", dtype=torch.float64, out_name="dk")
    B, Hkv, g = case.B, case.Hkv, case.group
    want = torch.where(seen[..., None], do.double(), 0.0).reshape(B, Hkv, g * case.Lq, case.Dv).sum(2)
    s = dv.double().sum(2)
    tol = bounds.column_sum_bound(edv.tol, dv, case.Lk + g * case.Lq, want.abs())
    assert_close(case, target, s, want, tol, "dv summed over the keys differs from do summed over the queries",
                 f"{case.call_code()}\nout = out[2].double().sum(2)  # vs do summed over the query rows of each group",
                 dtype=torch.float64, out_name="dv")


@invariant(attention_op, families=("empty",))
def attention_empty_rows(case, target):
    """A query that sees no key (Lk = 0, or a mask that leaves it none) gets o = 0 and lse = -inf
    (the empty state of the merges, ATTENTION_SEMANTICS), and its row of dq is 0: exactly,
    whatever the tier (nothing is summed). (What such a row adds to dk and dv, nothing, the oracle
    law and zero_sum_vjps judge.) A target may declare flash-attention's lse of +inf instead
    (ATTENTION_EMPTY_LSE = math.inf): its kernels write INFINITY where a row's sum is 0, so that
    the backward's exp(s - lse) is 0 without a test; the merges' empty state is -inf, and a
    split-KV combine must map it (flash-attention writes -inf into its own split partials). A
    convention of the API, not a bug: the law then asks +inf, and the backward is given it."""
    args = case.tensors(target.device)
    out = outputs(op_call(case, target, *args))
    vis = sdpa.visible(case.Lq, case.Lk, case.causal, case.window, case.alignment)
    empty = ~vis.any(-1)
    assume(bool(empty.any()))
    rows = empty.to(out[0].device)
    if not case.backward:
        o, lse = out
        bad = (o[:, :, rows] != 0) | torch.isnan(o[:, :, rows])
        if bool(bad.any()):
            fail(case, target, "o of a query without a key is not 0", None, call=case.call_code())
        bad = lse[:, :, rows] != case.empty_lse
        if bool(bad.any()):
            got = sorted({float(x) for x in lse[:, :, rows][bad].double().flatten()[:4].tolist()}, key=str)
            hint = (" (flash-attention's +inf is a convention: declare ATTENTION_EMPTY_LSE = math.inf in the "
                    "target module)" if got == [math.inf] else "")
            want = "-inf" if case.empty_lse < 0 else "+inf, as declared (ATTENTION_EMPTY_LSE)"
            fail(case, target, f"lse of a query without a key is {got}, expected {want}{hint}", None,
                 call=case.call_code())
        return
    dq = out[0]
    bad = (dq[:, :, rows] != 0) | torch.isnan(dq[:, :, rows])
    if bool(bad.any()):
        fail(case, target, "dq of a query without a key is not 0", None, call=case.call_code())
