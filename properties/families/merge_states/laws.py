"""The laws of the N-way merge, merge_states(o, lse): o (..., S, Dv), lse (..., S), drawn as a
StatesCase (case.py: a row's chunk states stacked along a states axis)."""
from __future__ import annotations

import math

import torch
from hypothesis import assume

from ...tolerances import agree
from ...invariants._checks import bits_equal, check_oracle, op_call, run, worst
from ...invariants._registry import fail, invariant
from ..merge.laws import state_close, state_ok
from .truth import merge_states_truth

STATE_NAMES = ("o", "lse")


def n_way(op) -> bool:
    return op.family == "merge_states"


def _states_close(case, target, got, want, tol_x, tol_l, what, call):
    """got against want (two (o, lse) pairs) within (tol_x, tol_l), NaN patterns exactly."""
    state_ok(case, target, got, want, what, call, names=STATE_NAMES)
    state_close(case, target, got, (want[0].double(), want[1].double()), tol_x, tol_l, what, call, names=STATE_NAMES)


@invariant(n_way)
def merge_states_matches_one_shot(case, target):
    """merge_states of a row's chunk states (stacked along S in any order; empty, masked and
    extreme-lse states: lse from -finfo.max to +finfo.max through the case's lse_shift) equals the
    one-shot FP64 attention over all the row's keys, the softmax-weighted sum of the values,
    within the chunked-merge bounds at depth max(S - 1, 1) (the bound of a left fold over the S
    states, which covers a one-pass merge: see truth.merge_states_truth), under NaN-poisoned
    allocations. Tier default: a wrong merged output or lse is a bug for any user of split-KV attention."""
    check_oracle(case, target, poisoned=True)


@invariant(n_way)
def merge_states_is_fold_of_attention_merge(case, target):
    """merge_states(o, lse) equals the left fold attention_merge(...attention_merge(s_0, s_1)...,
    s_{S-1}) of the same states: with the target's own attention_merge when it has one (each side
    within the bound of a fold of S - 1 merges of the FP64 merge of these inputs, so the two within
    twice that), else the FP64 fold (oracles.merge_states: within the bound once). Unlike the
    one-shot law, the reference is the merge of the actual rounded states, so the bound holds no
    term for their rounding. Tier default: the N-way merge must mean what its binary steps mean."""
    o, lse = case.stacked(target.device)
    out = op_call(case, target, o, lse)
    x_ref, l_ref, tol_x, tol_l = merge_states_truth(case, o, lse)
    S = lse.shape[-1]
    if target.has("attention_merge"):
        # the fold starts from the first state as merged with nothing: an empty one (lse = -inf)
        # is o = 0, as the contract's all-empty merge (for S = 1 no attention_merge runs at all)
        fold = (o[..., 0, :].masked_fill(torch.isneginf(lse[..., 0])[..., None], 0), lse[..., 0])
        for s in range(1, S):
            fold = tuple(run(target, "attention_merge", *fold, o[..., s, :], lse[..., s]))
        tol_x, tol_l = agree(tol_x, tol_x), agree(tol_l, tol_l)
        call = ("fold = o[..., 0, :].masked_fill(lse[..., 0, None] == -inf, 0), lse[..., 0]\n"
                f"for s in range(1, {S}):\n    fold = target.attention_merge(*fold, o[..., s, :], lse[..., s])\n"
                "out = target.merge_states(o, lse), fold")
    else:
        fold = (x_ref, l_ref)
        call = "out = target.merge_states(o, lse)  # vs the FP64 fold of attention_merge over the states"
    _states_close(case, target, out, fold, tol_x, tol_l,
                  "merge_states differs from the fold of attention_merge over its states", call)


@invariant(n_way)
def merge_states_permutation_invariant(case, target):
    """merge_states(o[..., p, :], lse[..., p]) == merge_states(o, lse) for a reversal-and-rotation
    p of the S states, each within its bound of the FP64 merge of these states (the order of a
    kernel's sum may follow S), so the two within twice it; NaN patterns exactly. Tier default: the
    states of split-KV attention come in whatever order the splits finish."""
    o, lse = case.stacked(target.device)
    S = lse.shape[-1]
    assume(S >= 2)
    p = torch.roll(torch.arange(S - 1, -1, -1, device=o.device), S // 3)
    a = op_call(case, target, o, lse)
    b = op_call(case, target, o[..., p, :], lse[..., p])
    _, _, tol_x, tol_l = merge_states_truth(case, o, lse)
    _states_close(case, target, b, a, agree(tol_x, tol_x), agree(tol_l, tol_l),
                  "permuting the states changed the merge",
                  f"p = torch.roll(torch.arange({S - 1}, -1, -1, device=o.device), {S // 3})  # reversed, then rolled\n"
                  "out = target.merge_states(o[..., p, :], lse[..., p]), target.merge_states(o, lse)")


def _insert_empty(o, lse, value):
    """o and lse with empty states (lse = -inf, values `value`) inserted: two first, one in the
    middle and one last."""
    S = lse.shape[-1]
    eo = torch.full((*o.shape[:-2], 1, o.shape[-1]), value, dtype=o.dtype, device=o.device)
    el = torch.full((*lse.shape[:-1], 1), -math.inf, dtype=lse.dtype, device=lse.device)
    k = S // 2
    return (torch.cat([eo, eo, o[..., :k, :], eo, o[..., k:, :], eo], -2),
            torch.cat([el, el, lse[..., :k], el, lse[..., k:], el], -1))


@invariant(n_way)
def merge_states_empty_states_are_identities(case, target):
    """Empty states (lse = -inf) contribute nothing: with empty states inserted (two first, one in
    the middle, one last; values 0, or a finite garbage value of the case) the merge equals that
    of the others, each within its bound of the FP64 merge (a kernel's summation order may depend
    on S, so not bitwise); NaN patterns exactly. And rows whose states are all empty give o = 0 and
    lse = -inf exactly, whatever finite values the states hold. Tier default: causal and
    split-KV attention merge fully masked splits all the time."""
    o, lse = case.stacked(target.device)
    g = next((v for _, v in case.garbage), 0.0)
    o2, l2 = _insert_empty(o, lse, g)
    a = op_call(case, target, o, lse)
    b = op_call(case, target, o2, l2)
    _, _, tol_xa, tol_la = merge_states_truth(case, o, lse)
    _, _, tol_xb, tol_lb = merge_states_truth(case, o2, l2)
    _states_close(case, target, b, a, agree(tol_xa, tol_xb), agree(tol_la, tol_lb),
                  "inserting empty states changed the merge",
                  f"e_o, e_lse = torch.full_like(o[..., :1, :], {g!r}), torch.full_like(lse[..., :1], -inf)\n"
                  f"k = o.shape[-2] // 2\n"
                  "o2 = torch.cat([e_o, e_o, o[..., :k, :], e_o, o[..., k:, :], e_o], -2)\n"
                  "lse2 = torch.cat([e_lse, e_lse, lse[..., :k], e_lse, lse[..., k:], e_lse], -1)\n"
                  "out = target.merge_states(o2, lse2), target.merge_states(o, lse)")
    ones = torch.ones_like(o) if o.shape[-1] else o
    le = torch.full_like(lse, -math.inf)
    out = op_call(case, target, ones, le)
    call = "out = target.merge_states(torch.ones_like(o), torch.full_like(lse, -inf))"
    zero = torch.zeros((*o.shape[:-2], o.shape[-1]), dtype=torch.float64, device=o.device)
    state_ok(case, target, out, (zero, torch.full(le.shape[:-1], -math.inf, dtype=torch.float64, device=o.device)),
             "all empty", call, names=STATE_NAMES)
    for got, want, nm in ((out[0], 0.0, "o"), (out[1], -math.inf, "lse")):
        bad = ~(got.double() == want)
        if bool(bad.any()):
            i = worst(bad, torch.ones_like(got, dtype=torch.float64))
            fail(case, target,
                 f"all states empty: {nm} is not {want} ({int(bad.sum())} elements)", i, want, got[i], call=call, out_name=nm)


@invariant(n_way, tier="strict")
def merge_states_empty_garbage_ignored(case, target):
    """An empty state's values are never read: with one more empty state up front, the values of
    every empty state replaced by NaN, +inf, -inf and finfo.max give bitwise the same (o, lse) as
    with the values they held, signs of zeros included (a merge that selects the live states
    computes exactly the same thing; one that multiplies by the zero weight gets 0 * NaN = NaN).
    Tier strict: the contract leaves an empty state's o unspecified, and attention libraries that
    store empty states as zeros never put NaN there, so this is a robustness guarantee beyond the
    default contract."""
    o, lse = case.stacked(target.device)
    o1, l1 = _insert_empty(o, lse, 0.0)
    o1, l1 = o1[..., 1:, :], l1[..., 1:]  # one leading empty state is enough here
    empty = (l1 == -math.inf)[..., None].expand(o1.shape)
    junk = torch.tensor([math.nan, math.inf, -math.inf, torch.finfo(case.dtype).max], dtype=o1.dtype, device=o1.device)
    idx = torch.arange(o1.numel(), device=o1.device).reshape(o1.shape) % 4
    o2 = torch.where(empty, junk[idx], o1)
    a = op_call(case, target, o1, l1)
    b = op_call(case, target, o2, l1)
    call = ("e_o, e_lse = torch.full_like(o[..., :1, :], 0.0), torch.full_like(lse[..., :1], -inf)\n"
            "k = o.shape[-2] // 2  # the states with empty ones up front, in the middle and last:\n"
            "o1 = torch.cat([e_o, o[..., :k, :], e_o, o[..., k:, :], e_o], -2)\n"
            "lse1 = torch.cat([e_lse, lse[..., :k], e_lse, lse[..., k:], e_lse], -1)\n"
            f"junk = torch.tensor([nan, inf, -inf, {torch.finfo(case.dtype).max!r}], dtype=o1.dtype, device=o1.device)\n"
            "junk = junk[torch.arange(o1.numel(), device=o1.device).reshape(o1.shape) % 4]\n"
            "o2 = torch.where((lse1 == -inf)[..., None], junk, o1)  # nan/inf/-inf/max in every empty state\n"
            "out = target.merge_states(o2, lse1), target.merge_states(o1, lse1)")
    state_ok(case, target, b, (a[0], a[1]), "garbage states", call, names=STATE_NAMES)
    for i_, nm in ((0, "o"), (1, "lse")):
        bad = ~bits_equal(b[i_], a[i_])
        if bool(bad.any()):
            j = worst(bad, torch.ones_like(a[i_], dtype=torch.float64))
            fail(case, target,
                 f"garbage in empty states changed {nm} ({int(bad.sum())} elements differ bitwise)", j, a[i_][j],
                 b[i_][j], call=call, out_name=nm)
