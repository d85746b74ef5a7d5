"""The suite must catch each deliberately broken kernel in properties/mutants/, with a
counterexample that shrinks to at most 4 elements per input."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, errors, find, settings

from . import strategies as S
from .case import PropertyFailure
from .invariants import REGISTRY
from .ops import Target

MUTANTS = {  # module in properties/mutants -> the op it breaks
    "no_max_subtraction": "softmax",
    "sum_g_backward": "softmax_backward",
    "masked_lanes_zero": "softmax",
    "masked_rows_zero": "softmax",
    "nan_dropped": "softmax",
    "log_of_softmax": "log_softmax",
    "logsumexp_no_max": "logsumexp",
    "low_precision_sum": "softmax",
    "ignores_strides": "softmax",
    "backward_wrong_sign": "log_softmax_backward",
    "tile_wide_max": "softmax",
    "first_block_only": "softmax",
    "in_place": "softmax",
    "lse_wrong_dtype": "logsumexp",
    "softmax_via_rounded_lse": "softmax",
    "swapped_columns": "softmax",
    "backward_row_coupling": "softmax_backward",
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_suite_catches_mutant(name, target):
    op = MUTANTS[name]
    mutant = Target(f"properties.mutants.{name}")
    mutant.device = target.device
    invariants = [inv for inv in REGISTRY if op in inv.ops and not inv.needs]

    def caught(case) -> bool:
        for inv in invariants:
            try:
                inv.check(case, mutant)
            except PropertyFailure:
                return True
            except errors.UnsatisfiedAssumption:
                continue
            except Exception:  # a crash is a failure too, as in the suite itself
                return True
        return False

    case = find(S.cases(op), caught, settings=settings(max_examples=500, database=None, derandomize=True,
                                                      deadline=None, suppress_health_check=list(HealthCheck)))
    sizes = [t.numel() for t in case.tensors(target.device)]
    assert max(sizes) <= 4, f"{name}: shrunk counterexample still has {sizes} elements:\n{case}"
