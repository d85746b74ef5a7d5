"""The suite must catch each deliberately broken kernel in properties/mutants/. For the two the
foundation issue names (no max subtraction; sum(g) for sum(y * g)) the counterexample must shrink
to at most 4 elements per input; the others report their size (the shrinker does not always
reach the smallest case over (invariant, case) pairs, and catching is what is required). The two
merge mutants of issue 3 must shrink to at most 4 elements per state tensor too, and print the
failure report of their shrunk counterexample."""
from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import HealthCheck, errors, find, settings, strategies as st

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
    "first_block_only": "softmax",  # needs a row longer than 1024
    "in_place": "softmax",
    "lse_wrong_dtype": "logsumexp",
    "softmax_via_rounded_lse": "softmax",
    "swapped_columns": "softmax",
    "backward_row_coupling": "softmax_backward",
    "merge_lse_arithmetic": "attention_merge",  # issue 3: lse = -inf treated arithmetically (0 * NaN)
    "merge_lse_max": "softmax_merge",  # issue 3: merged lse = max(lse_a, lse_b)
    "ce_mean_counts_ignored": "cross_entropy",  # issue 4: mean divides by all rows
    "ce_none_backward_ignores_dloss": "cross_entropy_backward",  # issue 4: reduction="none" drops dloss
}

MAX_ELEMENTS = {"no_max_subtraction": 4, "sum_g_backward": 4, "merge_lse_arithmetic": 4, "merge_lse_max": 4,
                "ce_mean_counts_ignored": 4, "ce_none_backward_ignores_dloss": 4}


@contextlib.contextmanager
def small_shapes():
    """The ci profile's shape limits whatever the profile: the mutants' bugs show on small
    tensors, and on a GPU the gpu profile's shapes would make each search take minutes."""
    from .plugin import LIMITS
    saved = S.set_limits(LIMITS["ci"])
    try:
        yield
    finally:
        S.set_limits(saved)


def search(module: str, op: str, device: str, max_examples: int):
    """Hypothesis.find over (invariant, case) pairs for op: the smallest case on which some
    invariant fails for the module (NoSuchExample if none does), on small shapes."""
    with small_shapes():
        return _search(module, op, device, max_examples)


def _search(module: str, op: str, device: str, max_examples: int):
    mutant = Target(module)
    mutant.device = device
    mutant.record = False  # keep the searches out of the suite's error statistics
    invariants = [inv for inv in REGISTRY if op in inv.ops and not inv.needs]
    # draw (invariant, case) pairs exactly as the suite does, each invariant with its own inputs
    pairs = st.sampled_from(invariants).flatmap(
        lambda inv: S.cases(op, inv.families, inv.max_cols).map(lambda case: (inv, case)))

    def caught(pair) -> bool:
        inv, case = pair
        try:
            inv.check(case, mutant)
        except PropertyFailure:
            return True
        except errors.UnsatisfiedAssumption:
            return False
        except errors.HypothesisException:  # a harness error must never count as a catch
            raise
        except Exception:  # a crash of the mutant is a failure too, as in the suite itself
            return True
        return False

    return find(pairs, caught, settings=settings(max_examples=max_examples, database=None, derandomize=True,
                                                  deadline=None, suppress_health_check=list(HealthCheck)))


def report(inv, case, module: str, device: str) -> str:
    """The suite's failure report (with its reproducer) for the shrunk counterexample."""
    mutant = Target(module)
    mutant.device = device
    mutant.record = False
    try:
        inv.check(case, mutant)
    except PropertyFailure as e:
        return str(e)
    except Exception as e:  # a crash of the mutant
        return f"{type(e).__name__}: {e}"
    return "(the counterexample did not reproduce)"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_suite_catches_mutant(name, target):
    module = f"properties.mutants.{name}"
    inv, case = search(module, MUTANTS[name], target.device, 1000)
    sizes = [t.numel() for t in case.tensors(target.device)]
    print(f"{name}: caught by {inv.name}; counterexample sizes {sizes}\n{report(inv, case, module, target.device)}")
    limit = MAX_ELEMENTS.get(name, math.inf)
    assert max(sizes) <= limit, f"{name}: caught by {inv.name}, but the shrunk counterexample still has {sizes} elements:\n{case}"


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward",
                                "softmax_merge", "attention_merge", "cross_entropy", "cross_entropy_backward"])
def test_control_correct_kernels_are_not_caught(op, target):
    """The same search against the project's kernels finds nothing: a catch above is the mutant's
    bug, not the search's (this control once exposed two harness errors counted as catches)."""
    with pytest.raises(errors.NoSuchExample):
        search("kernels", op, target.device, 150)
