"""The laws of the merge family: merges of two (x, lse) states, softmax_merge and attention_merge,
each drawn as a MergeCase (case.py: a row's chunk states and a merge tree over them).
Their oracle, inputs-unmodified and many-rows laws are the generic ones (generic.py)."""
from __future__ import annotations

import math

import torch
from hypothesis import assume

from ... import tolerances
from ...tolerances import agree
from ...failures import WrongOutput
from ...spec import lse_dtype
from ...invariants._checks import assert_close, assert_structure, bits_equal, check_oracle, check_outputs, run, worst
from ...invariants._registry import fail, invariant
from .case import tree_code, tree_depth, tree_leaves
from .truth import one_shot_state_truth, one_shot_truth, step_truth


def merges(op) -> bool:
    return op.family == "merge"


def state_ok(case, target, got, like, what, call=None, names=("x", "lse")):
    """got must be a (values, lse) pair of like's shapes, the values in the case dtype and lse in
    its lse dtype, on like's device."""
    assert_structure(case, target, got, [(names[0], like[0].shape, case.dtype, like[0].device),
                                         (names[1], like[1].shape, lse_dtype(case.dtype), like[1].device)], what, call)


def state_close(case, target, got, want, tol_x, tol_l, what, call=None, names=("x", "lse")):
    """The two outputs of a merge, got, within (tol_x, tol_l) of want's."""
    assert_close(case, target, got[0], want[0], tol_x, what, call, dtype=case.dtype, out_name=names[0])
    assert_close(case, target, got[1], want[1], tol_l, what, call, dtype=lse_dtype(case.dtype), out_name=names[1])


def check_one_shot(case, target, out, chunks, H, call=None):
    """The merged state out of the given chunks (in column order) against the one-shot FP64 truth
    over their columns, within the chunked-merge bounds at merge depth H."""
    check_outputs(case, target, out, one_shot_state_truth(case, target.device, chunks, H), call, record=True)


def _tree_bounds(case, target):
    """(tol_x, tol_lse): the chunked-merge bounds of the case's whole tree."""
    _, _, tol_x, tol_l = one_shot_truth(case, target.device, tree_leaves(case.tree), tree_depth(case.tree))
    return tol_x, tol_l


@invariant(merges, strict="merge_tree_with_garbage_states")
def merge_tree_matches_one_shot(case, target, strict=False):
    """Chunked-merge equivalence: merging the chunk states of a row (empty and fully masked
    chunks) in the drawn order and tree shape gives the one-shot
    FP64 softmax / attention and logsumexp of the whole row (softmax columns in the tree's leaf
    order), within merge_value_bound / merge_lse_bound (tolerances.py) at the tree's depth: each
    merge adds a few roundings, and the lse errors telescope along a chunk's path. Runs under
    NaN-poisoned allocations, so an output element never written shows up as NaN. default: empty
    states hold their natural values (MergeCase.natural); strict (merge_tree_with_garbage_states):
    garbage (NaN, inf, 0, -0, 1e4) in empty states, whose values must never reach the output."""
    check_oracle(case if strict else case.natural(), target, poisoned=True)


def _merge_agree(case, target, a, b, strict, what, call):
    """Two merged states of the whole tree: bitwise (signs of zeros included) in the strict tier,
    within twice the tree's chunked-merge bounds in the default tier (NaN patterns exactly)."""
    for i, nm in ((0, "x"), (1, "lse")):
        if a[i].shape != b[i].shape or a[i].dtype != b[i].dtype:
            fail(case, target, f"{what}: {nm} shape/dtype {tuple(a[i].shape)}/{a[i].dtype} vs "
                 f"{tuple(b[i].shape)}/{b[i].dtype}", call=call, kind=WrongOutput)
    if not strict:
        tol_x, tol_l = _tree_bounds(case, target)
        state_close(case, target, a, (b[0].double(), b[1].double()), agree(tol_x, tol_x), agree(tol_l, tol_l), what,
                    call)
        return
    for i, nm in ((0, "x"), (1, "lse")):
        bad = ~bits_equal(a[i], b[i])
        if bool(bad.any()):
            j = worst(bad, torch.nan_to_num((a[i].double() - b[i].double()).abs(), nan=1.0))
            fail(case, target, f"{what} ({int(bad.sum())} elements of {nm} differ bitwise)", j, b[i][j], a[i][j],
                 out_name=nm, call=call)


@invariant(merges)
def merge_step_matches_oracle(case, target):
    """Every merge step of the tree, on its actual inputs (chunk states, or the target's own
    earlier results), matches the FP64 merge oracle of those inputs within the single-step bound
    (merge_value_bound / merge_lse_bound at depth 1 with exact inputs), NaN and infinities
    exactly: the MERGE_SEMANTICS rules (an empty side is the exact identity, both empty give o = 0
    or NaN p, NaN and +inf lse poison) on every state the tree meets."""
    assume(not isinstance(case.tree, int))
    case = case.natural()  # empty states' garbage is the strict tier's (merge_tree_with_garbage_states)
    steps = []

    def call(xa, la, xb, lb):
        out = run(target, case.op, xa, la, xb, lb)
        steps.append(((xa, la, xb, lb), out))
        return out

    case.run_tree(call, target.device)
    for i, (args, out) in enumerate(steps):
        x_ref, l_ref, tol_x, tol_l = step_truth(case, *args)
        name = "out" if i == len(steps) - 1 else f"m{i}"
        call = None if name == "out" else f"{case.call_code()}\nout = {name}  # the step, vs the FP64 merge of its inputs"
        state_ok(case, target, out, (x_ref, l_ref), f"step {name}", call)
        assert_close(case, target, out[0], x_ref, tol_x, f"merge step {name} differs from the FP64 merge of its inputs",
                     call, dtype=case.dtype, out_name=f"{name}[0]")
        assert_close(case, target, out[1], l_ref, tol_l,
                     f"merge step {name}'s lse differs from the FP64 merge of its inputs", call,
                     dtype=lse_dtype(case.dtype), out_name=f"{name}[1]")


def _merger(case, target):
    """fn(x_a, lse_a, x_b, lse_b) calling the target's merge."""
    return lambda *a: run(target, case.op, *a)


@invariant(merges)
def merge_commutative(case, target):
    """merge(a, b) == merge(b, a) for the root's two subtree states a, b (softmax: with the two
    column blocks swapped back). Toleranced, not bitwise: the law holds exactly in real
    arithmetic, and a correct merge may evaluate its two sides in an order-dependent way (e.g.
    lse_a + log(1 + exp(lse_b - lse_a)), eagerly), so each side is held to the single-step bound
    of the FP64 merge and the two may differ by twice that. NaN patterns must agree exactly."""
    assume(not isinstance(case.tree, int))
    case = case.natural()  # empty states' garbage is the strict tier's (merge_tree_with_garbage_states)
    leaves = case.leaf_tensors(target.device)
    a, b = (case.run_tree(_merger(case, target), target.device, t, leaves) for t in case.tree)
    ab = run(target, case.op, *a, *b)
    ba = run(target, case.op, *b, *a)
    x_ref, l_ref, tol_x, tol_l = step_truth(case, *a, *b)
    call = "\n".join(tree_code(case.tree[0], case.op, "a", "ma") + tree_code(case.tree[1], case.op, "b", "mb")
                     + [f"out = target.{case.op}(*a, *b), target.{case.op}(*b, *a)"])
    state_ok(case, target, ba, (x_ref, l_ref), "merge(b, a)", call)
    xba = ba[0]
    if not case.attention:  # softmax columns come side by side: b's first in merge(b, a)
        db = b[0].shape[-1]
        xba = torch.cat([xba[..., db:], xba[..., :db]], -1)
    state_close(case, target, (xba, ba[1]), (ab[0].double(), ab[1].double()), agree(tol_x, tol_x), agree(tol_l, tol_l),
                 "merge(b, a) != merge(a, b)", call)


def _chains(leaves):
    left = leaves[0]
    for c in leaves[1:]:
        left = (left, c)
    right = leaves[-1]
    for c in reversed(leaves[:-1]):
        right = (c, right)
    return left, right


@invariant(merges)
def merge_associative(case, target):
    """Generalised associativity: the left chain ((c0, c1), c2)... and the right chain
    (c0, (c1, (c2, ...))) over the same leaf order (three chunks or more) agree within the sum of
    their chunked-merge bounds (each within merge_value_bound / merge_lse_bound at depth k - 1 of
    the one-shot truth), NaN patterns exactly. Toleranced: each step rounds, so different trees
    round differently; the bound grows with the depth, as the tolerance derivation says."""
    leaves = tree_leaves(case.tree)
    assume(len(leaves) >= 3)
    case = case.natural()  # empty states' garbage is the strict tier's (merge_tree_with_garbage_states)
    lt, rt = _chains(leaves)
    tensors = case.leaf_tensors(target.device)
    L = case.run_tree(_merger(case, target), target.device, lt, tensors)
    R = case.run_tree(_merger(case, target), target.device, rt, tensors)
    x_ref, l_ref, tol_x, tol_l = one_shot_truth(case, target.device, leaves, len(leaves) - 1)
    call = "\n".join(tree_code(lt, case.op, "left", "ml") + tree_code(rt, case.op, "right", "mr") + ["out = left, right"])
    state_ok(case, target, L, (x_ref, l_ref), "left chain", call)
    state_ok(case, target, R, (x_ref, l_ref), "right chain", call)
    state_close(case, target, R, (L[0].double(), L[1].double()), agree(tol_x, tol_x), agree(tol_l, tol_l),
                "right chain != left chain", call)


@invariant(merges, strict="merge_identity_bitwise")
def merge_identity(case, target, strict=False):
    """An empty state e (lse = -inf) is the identity on both sides: merge(s, e) and merge(e, s)
    return s's values and lse (softmax: e's columns are 0). Exact, not toleranced: a correct
    merge's weights are exactly 1 and 0 there (exp(-inf) = 0, logaddexp(l, -inf) = l), and ring /
    causal attention merges many empty blocks, so any drift would accumulate. Rows where s itself
    is empty or poisoned follow MERGE_SEMANTICS exactly (both empty: o = 0 / NaN p; NaN / +inf
    lse: NaN). default: e holds its natural values (o = 0, or the NaN softmax of an all -inf row)
    and values are compared as numbers (-0.0 == 0.0: 0 * w + -0.0 is +0.0 in IEEE arithmetic, and
    no caller can tell). strict (merge_identity_bitwise): e holds garbage (NaN, inf, 0, -0, 1e4,
    or the chunk's own) and the result is s bitwise, signs of zeros included."""
    leaves = tree_leaves(case.tree)
    c, e = leaves[0], leaves[-1]
    natural = 0.0 if case.attention else math.nan
    g = dict(case.garbage).get(e, math.nan) if strict else natural
    tensors = case.leaf_tensors(target.device)
    xs, ls = tensors[c]
    xe = torch.full_like(tensors[e][0], g)
    le = torch.full_like(ls, -math.inf)
    merge = case.spec.oracle
    for order, args in (("merge(s, e)", (xs, ls, xe, le)), ("merge(e, s)", (xe, le, xs, ls))):
        call = (f"e = torch.full_like(x{e}, {g!r}), torch.full_like(lse{c}, -inf)\n"
                f"out = target.{case.op}({'x%d, lse%d, *e' % (c, c) if order == 'merge(s, e)' else '*e, x%d, lse%d' % (c, c)})")
        out = run(target, case.op, *args)
        x_ref, l_ref = merge(*args)  # exact here: copies, zeros, NaN
        x_ref, l_ref = x_ref.to(case.dtype), l_ref.to(lse_dtype(case.dtype))
        state_ok(case, target, out, (x_ref, l_ref), order, call)
        for got, want, nm in ((out[0], x_ref, "x"), (out[1], l_ref, "lse")):
            if strict:
                bad = ~bits_equal(got, want)
            else:
                g64, w64 = got.double(), want.double()
                bad = ~((g64 == w64) | (torch.isnan(g64) & torch.isnan(w64)))
            if bool(bad.any()):
                i = worst(bad, torch.ones_like(want, dtype=torch.float64))
                fail(case, target, f"{order} with an empty e is not {'bitwise ' if strict else ''}s "
                     f"({int(bad.sum())} elements of {nm} differ)", i, want[i], got[i], call=call, out_name=nm)


@invariant(merges, strict="merge_layout_invariance_bitwise")
def merge_layout_invariance(case, target, strict=False):
    """Strided chunk states (padded, offset, transposed, interleaved, expanded x; offset, strided
    or stride-0 lse) give the results of their contiguous copies. default: within twice the
    tree's chunked-merge bounds (a kernel may take a vectorised path for contiguous rows and
    another for strided ones, contracting to FMA differently); strict
    (merge_layout_invariance_bitwise): bitwise, since the merge is element-wise per row."""
    case = case if strict else case.natural()
    tensors = case.leaf_tensors(target.device)
    assume(any(not t.is_contiguous() for st_ in tensors.values() for t in st_))
    a = case.run_tree(_merger(case, target), target.device, None, tensors)
    b = case.run_tree(_merger(case, target), target.device, None,
                      {k: tuple(t.contiguous() for t in v) for k, v in tensors.items()})
    _merge_agree(case, target, a, b, strict, "strided states differ from their contiguous copies",
                 "\n".join(tree_code(case.tree, case.op) + ["# vs the same with every x{c}, lse{c} made .contiguous()"]))


@invariant(merges, strict="merge_row_independence_bitwise")
def merge_row_independence(case, target, strict=False):
    """Each row's merged state depends on that row's states alone: overwriting every other row of
    every chunk state (values and lse with NaN, inf, -inf, huge; in a contiguous copy) leaves row
    0 of the merged x and lse unchanged: within twice the tree's chunked-merge bounds (default),
    bitwise (strict, merge_row_independence_bitwise)."""
    case = case if strict else case.natural()
    tensors = case.leaf_tensors(target.device)
    x0, _ = tensors[0]
    lead = x0.shape[:-1]
    assume(len(lead) >= 1 and math.prod(lead) >= 2)
    a = case.run_tree(_merger(case, target), target.device, None, tensors)
    junk = [math.nan, math.inf, -math.inf, torch.finfo(case.dtype).max]
    poisoned = {}
    for c, (x, l) in tensors.items():
        px = x.contiguous().clone().reshape(math.prod(lead), x.shape[-1])
        pl = l.contiguous().clone().reshape(math.prod(lead))
        for r in range(1, px.shape[0]):
            px[r] = junk[r % len(junk)]
            pl[r] = junk[(r + 1) % len(junk)]
        poisoned[c] = (px.reshape(x.shape), pl.reshape(l.shape))
    b = case.run_tree(_merger(case, target), target.device, None, poisoned)
    rows = [t.reshape(math.prod(lead), *t.shape[len(lead):])[:1] for t in (*a, *b)]
    # compared as a one-row case: the tree's bounds for row 0 come from the whole case's (per row)
    a0, b0 = (rows[0], rows[1]), (rows[2], rows[3])
    R = math.prod(lead)
    call = "\n".join(
        [f"junk = {junk!r}", "def other_rows_replaced(x, lse):",
         "    x, lse = x.contiguous().clone(), lse.contiguous().clone()",
         f"    for r in range(1, {R}):",
         f"        x.view({R}, x.shape[-1])[r], lse.view({R})[r] = junk[r % 4], junk[(r + 1) % 4]",
         "    return x, lse"]
        + [f"x{c}, lse{c} = other_rows_replaced(x{c}, lse{c})" for c in tensors]
        + tree_code(case.tree, case.op) + ["# row 0 vs row 0 of the same on the unchanged states"])
    if strict:
        _merge_agree(case, target, b0, a0, True, "row 0 changed when the other rows changed", call)
        return
    tol_x, tol_l = _tree_bounds(case, target)
    tol_x = tol_x.reshape(math.prod(lead), *tol_x.shape[len(lead):])[:1]
    tol_l = tol_l.reshape(math.prod(lead))[:1]
    state_close(case, target, b0, (a0[0].double(), a0[1].double()), agree(tol_x, tol_x), agree(tol_l, tol_l),
                 "row 0 changed when the other rows changed", call, names=("x[0]", "lse[0]"))
