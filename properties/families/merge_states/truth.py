"""The FP64 truth of merge_states: against the one-shot truth of the row's keys, and the N-way merge
of its actual states, within the bounds of a fold of binary merges (merge.bounds)."""
from __future__ import annotations

import torch

from softmax_properties import oracles

from ... import tolerances
from ...spec import Truth, lse_dtype
from ..merge import bounds as B
from ..merge.truth import one_shot_state_truth


def states_truth(case, args, strict=False) -> Truth:
    """merge_states' output against the one-shot truth of all the row's keys, at depth
    max(S - 1, 1): the bound of a left fold over the S states (see merge_states_truth)."""
    return one_shot_state_truth(case, args[0].device, case.order, max(len(case.order) - 1, 1), names=("o", "lse"))


def merge_states_truth(case, o, lse):
    """The FP64 N-way merge of the actual states (oracles.merge_states) and its bounds: the
    chunked-merge bounds (tolerances.merge_value_bound / merge_lse_bound) at depth
    H = max(S - 1, 1) with exact inputs, i.e. those of a fold of S - 1 binary merges. They cover
    a one-pass N-way merge as well: its weights exp(lse_s - M) / D are off by at most
    u (2 Lam + 2.4 S + 9) relative (the exponent's rounding, exp, the sum D of S terms, the
    division, S products and adds), within (S - 1) u (6 Lam + 36) for S >= 2, and its lse by
    u (Lam + 1.4 S + 3 + 4 log S), within (S - 1) u (2 Lam + 12); for S = 1 both are exact.
    Returns (x_ref, lse_ref, tol_x, tol_lse)."""
    x_ref, l_ref = oracles.merge_states(o, lse)
    mag, _ = oracles.merge_states(o.double().abs(), lse)  # sum of w |o|
    l64 = lse.double()
    lam = torch.maximum(torch.where(torch.isfinite(l_ref), l_ref.abs(), 0.0),
                        torch.where(torch.isfinite(l64), l64.abs(), 0.0).amax(-1))
    H = max(lse.shape[-1] - 1, 1)
    eps_x = B.merge_value_bound(case.dtype, H, lam[..., None], mag, leaves=False)
    eps_l = B.merge_lse_bound(case.dtype, H, lam, leaves=False)
    return (x_ref, l_ref, tolerances.total_tolerance(eps_x, x_ref, case.dtype, case.dtype),
            tolerances.total_tolerance(eps_l, l_ref, lse_dtype(case.dtype), case.dtype))
