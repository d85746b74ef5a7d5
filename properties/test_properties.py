"""The property suite: every registered invariant x every op it applies to, against --target."""
from __future__ import annotations

import time

import pytest
from hypothesis import errors, given, settings, strategies as st

from . import expected, hypothesis_compat, isolation, replay, strategies as S
from .applicability import skip_reason
from .invariants import REGISTRY
from .record import CheckRecord, recording

PAIRS = [pytest.param(inv, op, id=f"{inv.name}-{op}") for inv in REGISTRY for op in inv.ops]


class _TagsCase:
    """The invariant, whose check writes the case as a pending replay file first (when pending is
    given), runs in the isolation worker (when isolated; properties/isolation.py) and tags an
    exception with its case (what properties/replay.py saves), or passes over the failure of an
    example that an xfails entry's when clause names (counted, for the test's xfail; known). What
    each check records (properties/record.py) gathers in the test's record. A
    wrapper, not code in `check`: under derandomize, Hypothesis seeds from the source of `check`,
    so editing it would change every example the ci profile draws."""

    def __init__(self, inv, isolated=False, timeout=isolation.DEFAULT_TIMEOUT, pending=None, known=None,
                 crash_budget=None):
        self._inv, self._isolated, self._timeout, self._pending = inv, isolated, timeout, pending
        self._known = known  # expected.ExpectedExamples: failing examples an xfails entry names
        self._crashes = isolation.CrashBudget(crash_budget) if isolated and crash_budget else None
        self.record = CheckRecord()  # the errors measured and the refusals of every example

    def __getattr__(self, name):
        return getattr(self._inv, name)

    def check(self, case, target):
        if self._pending is not None:
            self._pending.write(case)
        start = time.perf_counter()
        try:
            with recording(self.record):
                return self._check(case, target)
        except Exception as e:
            if self._known is not None and self._known.passes_over(case, e):
                return None
            e._properties_case = case
            if self._crashes is not None:
                self._crashes.spend(e, case, time.perf_counter() - start)  # CrashBudgetSpent past the budget
            raise

    def _check(self, case, target):
        if self._isolated:
            return isolation.check(self._inv, case, target, self._timeout)
        return self._inv.check(case, target)


@pytest.mark.parametrize("inv,op", PAIRS)
def test_property(inv, op, target, request):
    isolated = isolation.enabled(request.config.getoption("isolate", "off"), target.name)
    if isolated and "autograd" in inv.needs:  # the probe calls the target: in the worker too
        isolation.supports_autograd(target, op)
    reason = skip_reason(inv, op, target)
    if reason:
        pytest.skip(reason)
    where = replay.failures_dir(request.config)
    pending = replay.Pending(where, target.name, inv.name, op) if where else None
    known = expected.ExpectedExamples(request.node.nodeid)  # xfails entries with a when clause
    inv = _TagsCase(inv, isolated, request.config.getoption("isolate_timeout", isolation.DEFAULT_TIMEOUT), pending,
                    known, request.config.getoption("isolate_crash_budget", isolation.CRASH_BUDGET))
    stats = [0, 0.0]

    @given(data=st.data())
    def check(data):
        t0 = time.perf_counter()
        case = data.draw(S.cases(op, inv.families, inv.max_cols), label="case")
        try:
            inv.check(case, target)
        finally:
            stats[0] += 1
            stats[1] += time.perf_counter() - t0

    if inv.max_examples and settings.default.max_examples > inv.max_examples:
        check = settings(max_examples=inv.max_examples)(check)
    # one example-database key (and, under derandomize, one seed) per (invariant, op): the
    # nested function's source is the same for every parametrization, so without this all of
    # them would share one key, and a saved failure would be replayed first by the wrong test
    hypothesis_compat.set_database_key(check, f"{inv.name}-{op}")
    def save(e):  # each failure (grouped when several) as a replay file
        if where:
            for path in replay.save(where, target.name, inv.name, op, e):
                request.node.user_properties.append(("softmax_replay", path))

    try:
        with S.only_dtypes(inv.dtypes):
            check()
    except errors.Unsatisfiable as e:  # nothing the law could judge: say why
        if inv.record.refused and not target.declares_refusals:
            # a refusal is a module's deliberate answer, declared; undeclared, a law that judged
            # nothing is a failure (a broken call raising NotImplementedError must not go green)
            pytest.fail(f"the law judged no example: {inv.record.describe_refusals()}, and {target.name} does not "
                        "declare SUITE_REFUSALS. If those inputs are deliberately unsupported, list the exception types in "
                        "the module's SUITE_REFUSALS (the law is then skipped); otherwise the function is broken.",
                        pytrace=False)
        pytest.skip(f"no example satisfied the law's preconditions ({inv.record.describe_refusals()}): "
                    f"{str(e).splitlines()[0]}")
    except isolation.CrashBudgetSpent as spent:  # the smallest crash seen, reported without further shrinking
        save(spent.failure)
        raise spent.failure from None
    except Exception as e:
        save(e)
        raise
    else:
        known.report()  # xfailed where an expected bug's own inputs failed and nothing else did
    finally:  # travels to the controller under xdist
        if pending is not None:
            pending.close()
        request.node.user_properties.append(("softmax_stats", (stats[0], stats[1])))
        request.node.user_properties.append(("softmax_ulps", inv.record.worst))
        request.node.user_properties.append(("softmax_compiles", isolation.total_compiles() if isolated
                                             else isolation.compile_counts()))
