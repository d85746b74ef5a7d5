"""Expected failures per target, in the manner of array-api-tests' xfails file.

``properties/xfails/<target>.txt`` for a built-in target (e.g. ``properties/xfails/fla.txt``), or
the file given with ``--xfails PATH`` (a target of one's own keeps its file in its own repository):
one pattern per line, each with a ``# reason``::

    test_property[ce_ignored_rows_do_not_count-cross_entropy_backward]  # fla follows torch: ...
    test_property[*-softmax_backward]  # a glob: * any characters, ? one
    cuda: test_property[matches_oracle-softmax_backward]  # only where the suite runs on CUDA

A trailing ``when KEY<op>VALUE ...`` clause limits an entry to the examples whose case matches
every condition (``<op>``: ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``; keys: ``dtype``, ``op``,
``reduction``, ``label_smoothing``, ``rows``, the batch's row count, ``target_min``, the smallest
class index that is not ``ignore_index``, attention's ``groups`` (query heads per key head) and
``masked`` (1 under a causal or window mask, else 0), and ``failure``, the kind of the example's
failure, a class of ``properties/failures.py``: ``failure=UnexpectedInf``)::

    test_property[*-cross_entropy] when dtype=float16 label_smoothing>0 failure=UnexpectedInf  # torch 4: ...

Name the failure kind where the entry's pattern covers several laws: a bug that makes the loss inf
must not excuse a law of those that fails another way on the same inputs (a second bug).

Such a test is not marked at collection: it runs, a failing example that matches is counted and
passed over (the search goes on), and the test ends as xfailed when it saw one and nothing else
failed; a failure of any other example fails the test. So the entry hides only the bug's own
inputs, where a plain entry hides every failure of the test.

A leading ``cpu:`` or ``cuda:`` limits an entry to runs on that device (``interpreter.device()``:
the CPU is Triton's interpreter): a library's bug of one device's kernels stays a failure on the
other, where its kernels pass. A pattern matches a test whose node id, or the part after its
last ``::``, it matches whole (``*`` and ``?`` are the only wildcards: brackets are literal).
Matching tests are marked ``xfail(strict=False)`` with the reason: a failure is reported as
xfailed, a pass as xpassed. An entry that matches no collected test gets a warning (a stale
entry, or a typo).
Blank lines and lines starting with ``#`` are skipped.
"""
from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass

import pytest

from . import targets
from .failures import KINDS, PropertyFailure

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xfails")
DEVICES = {"cpu:": "cpu", "cuda:": "cuda"}  # an entry's device qualifier -> the device it holds on


class XfailsWarning(pytest.PytestWarning):
    """An expected-failures entry that matches no collected test."""


@dataclass(frozen=True)
class Entry:
    pattern: str
    reason: str
    where: str  # "file:line"
    device: str = None  # "cpu" or "cuda": the entry holds on that device only; None: on both
    when: tuple = ()  # (key, op, value) conditions on an example's case; () for the whole test

    def holds_for(self, case, exc: BaseException = None) -> bool:
        """Whether a failing example (its case, and its failure exc) meets every condition of the
        ``when`` clause; a ``failure`` condition holds for exc of that kind or a subclass of it."""
        f = facts(case)
        for key, op, value in self.when:
            if key == "failure":
                if (isinstance(exc, KINDS[value])) != (op == "="):
                    return False
                continue
            if key not in f:
                return False
            have = f[key]
            if isinstance(value, float):
                try:
                    have = float(have)
                except (TypeError, ValueError):
                    return False
            if not _OPS[op](have, value):
                return False
        return True

    @property
    def regex(self):
        return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in self.pattern) + r"\Z")

    def matches(self, nodeid: str) -> bool:
        r = self.regex
        return bool(r.match(nodeid) or r.match(nodeid.rsplit("::", 1)[-1]))


def default_path(target_name: str) -> str:
    return os.path.join(HERE, f"{targets.short_name(target_name)}.txt")


def parse(path: str) -> list:
    """Entries of an xfails file; a line without a pattern or a reason raises ValueError naming
    the file and line."""
    entries = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            pattern, sep, reason = line.partition("#")
            pattern, reason = pattern.strip(), reason.strip()
            if not sep or not reason:
                raise ValueError(f"{path}:{n}: an expected failure needs a reason: '<pattern>  # <reason>', got {line!r}")
            device = next((d for q, d in DEVICES.items() if pattern.startswith(q)), None)
            if device is not None:
                pattern = pattern.split(":", 1)[1].strip()
            pattern, _, clause = pattern.partition(" when ")
            pattern = pattern.strip()
            if any(c.isspace() for c in pattern):
                raise ValueError(f"{path}:{n}: the pattern must be one node id (no spaces), optionally after "
                                 f"{' or '.join(DEVICES)} and followed by 'when KEY=VALUE ...', got {pattern!r}")
            try:
                when = _conditions(clause)
            except ValueError as e:
                raise ValueError(f"{path}:{n}: {e}") from None
            entries.append(Entry(pattern, reason, f"{path}:{n}", device, when))
    return entries


def load(config) -> list:
    """The entries for this run: --xfails PATH (which must exist), else the target's default
    file if there is one, else none."""
    path = config.getoption("xfails", None)
    if path:
        if not os.path.isfile(path):
            raise pytest.UsageError(f"--xfails {path}: no such file")
    else:
        path = default_path(config.getoption("target"))
        if not os.path.isfile(path):
            return []
    try:
        return parse(path)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def apply(entries: list, items: list, warn: bool = True, device: str = None) -> dict:
    """Mark the items an entry for this device matches xfail(strict=False) (the first matching
    entry's reason); warn (XfailsWarning) for each entry that matches none, whatever its device.
    device: the run's (None: every entry holds). Returns {nodeid: reason}."""
    marked, used = {}, set()
    CONDITIONAL.clear()
    for item in items:
        for e in entries:
            if e.matches(item.nodeid):
                used.add(e)
                if e.device is not None and device is not None and e.device != device:
                    continue
                if e.when:  # judged per example, by the test (ExpectedExamples)
                    CONDITIONAL.setdefault(item.nodeid, []).append(e)
                    continue
                if item.nodeid not in marked:
                    marked[item.nodeid] = e.reason
                    item.add_marker(pytest.mark.xfail(reason=f"expected failure ({e.where}): {e.reason}", strict=False))
    if warn:
        for e in entries:
            if e not in used:
                warnings.warn(XfailsWarning(f"{e.where}: expected failure {e.pattern!r} matches no collected test"))
    return marked


# ----------------------------------------------------------------------------------------------
# entries with a ``when`` clause: per example
# ----------------------------------------------------------------------------------------------
CONDITIONAL: dict = {}  # node id -> the entries with a when clause that hold for it on this device (apply)
KEYS = ("dtype", "op", "reduction", "label_smoothing", "rows", "target_min", "groups", "masked", "failure")
_OPS = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
        ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}


def _conditions(clause: str) -> tuple:
    """'dtype=float16 rows>65504' -> (("dtype", "=", "float16"), ("rows", ">", 65504.0)); a value
    that reads as a number is compared as one."""
    out = []
    for term in clause.split():
        m = re.fullmatch(r"([a-z_]+)(!=|<=|>=|=|<|>)(\S+)", term)
        if not m:
            raise ValueError(f"a condition must read KEY<op>VALUE (op one of {' '.join(_OPS)}), got {term!r}")
        key, op, value = m.groups()
        if key not in KEYS:
            raise ValueError(f"unknown condition key {key!r} (known: {', '.join(KEYS)})")
        if key == "failure":
            if op not in ("=", "!=") or value not in KINDS:
                raise ValueError(f"{term!r}: failure takes = or != and a failure kind ({', '.join(KINDS)})")
            out.append((key, op, value))
            continue
        try:
            value = float(value)
        except ValueError:
            if op not in ("=", "!="):
                raise ValueError(f"{term!r}: {op} needs a number") from None
        out.append((key, op, value))
    return tuple(out)


def facts(case) -> dict:
    """What a when clause can test of a case: its op and dtype (a name: "float16"), the
    cross-entropy options and smallest class index that is not ignore_index, its row count
    (the batch's size, where the case has a batch), and an attention case's query heads per key
    head and whether a mask applies."""
    f = {"op": getattr(case, "op", None), "dtype": str(getattr(case, "dtype", "")).replace("torch.", "")}
    for key in ("reduction", "label_smoothing"):
        if hasattr(case, key):
            f[key] = getattr(case, key)
    targets = getattr(getattr(case, "targets", None), "values", None)
    counted = [t for t in targets or () if t != getattr(case, "ignore_index", None)]
    if counted:
        f["target_min"] = min(counted)
    batch = getattr(case, "batch", None)
    if batch is not None:
        f["rows"] = math.prod(batch)
    if hasattr(case, "group") and hasattr(case, "masked"):  # an attention case (AttnCase)
        f["groups"] = case.group
        f["masked"] = int(case.masked)
    return f


class ExpectedExamples:
    """The conditional entries of one test: ``passes_over(case, exc)`` says whether a failing
    example is one of them (and counts it); ``report()`` ends the test as xfailed when one was."""

    def __init__(self, nodeid: str):
        self.entries = CONDITIONAL.get(nodeid, [])
        self.seen = {}  # entry -> [examples passed over, the first one's failure (kind: first line)]

    def passes_over(self, case, exc: BaseException) -> bool:
        if not isinstance(exc, PropertyFailure):
            return False
        for e in self.entries:
            if e.holds_for(case, exc):
                if e not in self.seen:
                    lines = str(exc).strip().splitlines()
                    self.seen[e] = [0, f"{type(exc).__name__}: {lines[0] if lines else ''}"]
                self.seen[e][0] += 1
                return True
        return False

    def report(self):
        """End the test as xfailed if an example was passed over, naming the entry and the first
        passed-over failure (so that what the entry excused can be read, not only its reason)."""
        if self.seen:
            pytest.xfail("; ".join(f"expected failure ({e.where}) on {n} example{'s' * (n > 1)} of its inputs: {e.reason} "
                                   f"[first: {first[:300]}]" for e, (n, first) in self.seen.items()))
