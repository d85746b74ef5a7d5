"""What a check does besides passing or failing, as a value: the largest errors it measured (the
run's summary), the target's refusals (a law whose every example was refused is skipped with the
target's own reason) and whether it accepted a lost CUDA context (the isolation worker then
restarts). A check fills the record current while it runs (``recording``); the isolation worker
sends its record back with the answer, and the pytest process merges it into the test's
(properties/isolation.py), so the same statistics are merged by one function wherever they travel.

This module imports no other module of the suite."""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field


def merge_worst(into: dict, worst: dict) -> dict:
    """into updated with worst, both {(op, dtype): {statistic: largest value}}: the larger of each."""
    for key, stats in worst.items():
        d = into.setdefault(tuple(key), {})
        for stat, value in stats.items():
            if value == value:  # not NaN
                d[stat] = max(d.get(stat, 0.0), float(value))
    return into


@dataclass
class CheckRecord:
    """worst: {(op, dtype name): {statistic: largest value}}; refused: the target's refusal
    messages, in order; context_lost: a law accepted a device-side assert (a lost CUDA context)."""

    worst: dict = field(default_factory=dict)
    refused: list = field(default_factory=list)
    context_lost: bool = False

    def merge(self, other: "CheckRecord") -> "CheckRecord":
        merge_worst(self.worst, other.worst)
        self.refused.extend(other.refused)
        self.context_lost = self.context_lost or other.context_lost
        return self

    def describe_refusals(self) -> str:
        if not self.refused:
            return "the target refused none"
        return f"the target refused {len(self.refused)} example(s), the first with {self.refused[0]}"


_CURRENT = contextvars.ContextVar("the record of the check being run", default=None)


@contextlib.contextmanager
def recording(record: CheckRecord = None):
    """record (default: a fresh one) is the current record within the block; yields it."""
    record = CheckRecord() if record is None else record
    token = _CURRENT.set(record)
    try:
        yield record
    finally:
        _CURRENT.reset(token)


def current() -> CheckRecord:
    """The current record; outside any ``recording`` block a fresh one that nothing keeps (a check
    called on its own, as replay and the project's tests do)."""
    record = _CURRENT.get()
    return CheckRecord() if record is None else record


def record_worst(op: str, dtype, **stats):
    """Keep the largest value of each statistic for (op, dtype) in the current record."""
    merge_worst(current().worst, {(op, str(dtype).replace("torch.", "")): stats})


def refused(e: BaseException):
    """The target refused the example with e."""
    current().refused.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def accept_context_loss():
    """A law calls this when it has caught, as an accepted outcome, a device-side assert of the
    target (e.g. an out-of-range class index under the default tier): an isolated check then
    passes, and its worker is restarted, since its CUDA context cannot be used again."""
    current().context_lost = True
