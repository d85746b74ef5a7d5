"""The FP64 truth of merged (values, lse) states: one merge step from its actual inputs, and a
merge tree's root against the one-shot truth of all its columns (bounds.py)."""
from __future__ import annotations

import torch

from ... import tolerances
from ...spec import OutputTruth, Truth, lse_dtype
from . import bounds as B
from .case import tree_depth, tree_leaves


# ----------------------------------------------------------------------------------------------
# merges of (x, lse) states: softmax_merge, attention_merge (MergeCase), merge_states (StatesCase)
# ----------------------------------------------------------------------------------------------
def step_truth(case, xa, la, xb, lb):
    """FP64 merge of one step's actual inputs and its single-step tolerances (merge_value_bound /
    merge_lse_bound at depth 1, exact inputs): (x_ref, lse_ref, tol_x, tol_lse)."""
    merge = case.spec.oracle
    x_ref, l_ref = merge(xa, la, xb, lb)
    mag, _ = merge(xa.double().abs(), la, xb.double().abs(), lb)  # sum of w |x|
    lam = torch.zeros_like(l_ref)
    for l in (la.double(), lb.double(), l_ref):
        lam = torch.maximum(lam, torch.where(torch.isfinite(l), l.abs(), 0.0))
    eps_x = B.merge_value_bound(case.dtype, 1, lam[..., None], mag, leaves=False)
    eps_l = B.merge_lse_bound(case.dtype, 1, lam, leaves=False)
    return (x_ref, l_ref, tolerances.total_tolerance(eps_x, x_ref, case.dtype, case.dtype),
            tolerances.total_tolerance(eps_l, l_ref, lse_dtype(case.dtype), case.dtype))


def one_shot_truth(case, device, chunks, H):
    """(x_ref, lse_ref, tol_x, tol_lse): the one-shot FP64 truth over the chunks' columns and the
    chunked-merge bounds at merge depth H."""
    x_ref, l_ref, mag, lam = case.one_shot(device, chunks)
    N = len(case.chunk_cols(chunks))
    eps_x, eps_l = B.merge_value_bound(case.dtype, H, lam[..., None], mag, N), B.merge_lse_bound(case.dtype, H, lam, N)
    tol_x = tolerances.total_tolerance(eps_x, x_ref, case.dtype, case.dtype)
    tol_l = tolerances.total_tolerance(eps_l, l_ref, lse_dtype(case.dtype), case.dtype)
    return x_ref, l_ref, tol_x, tol_l


def state_truth(case, x_ref, l_ref, tol_x, tol_l, what_x, what_l, names=("x", "lse")) -> Truth:
    """A merged (values, lse) state's Truth."""
    return Truth((OutputTruth(names[0], x_ref, tol_x, case.dtype, what=what_x),
                  OutputTruth(names[1], l_ref, tol_l, lse_dtype(case.dtype), what=what_l)))


def one_shot_state_truth(case, device, chunks, H, names=("x", "lse")) -> Truth:
    """The merged state of the given chunks (in column order) against the one-shot FP64 truth over
    their columns, within the chunked-merge bounds at merge depth H."""
    return state_truth(case, *one_shot_truth(case, device, chunks, H),
                       f"merged chunks differ from the one-shot FP64 oracle (merge depth {H})",
                       f"merged lse differs from the one-shot FP64 logsumexp (merge depth {H})", names)


def merge_truth(case, args, strict=False) -> Truth:
    """A merge tree's root state against the one-shot truth of all its columns, at the tree's depth."""
    return one_shot_state_truth(case, args[0].device, tree_leaves(case.tree), tree_depth(case.tree))
