"""Expected failures per target, in the manner of array-api-tests' xfails file.

``properties/xfails/<target>.txt`` for a built-in target (e.g. ``properties/xfails/fla.txt``), or
the file given with ``--xfails PATH`` (a target of one's own keeps its file in its own repository):
one pattern per line, each with a ``# reason``::

    test_property[ce_ignored_rows_do_not_count-cross_entropy_backward]  # fla follows torch: ...
    test_property[*-softmax_backward]  # a glob: * any characters, ? one
    cuda: test_property[matches_oracle-softmax_backward]  # only where the suite runs on CUDA

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

import os
import re
import warnings
from dataclasses import dataclass

import pytest

from . import targets

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
            if any(c.isspace() for c in pattern):
                raise ValueError(f"{path}:{n}: the pattern must be one node id (no spaces), optionally after "
                                 f"{' or '.join(DEVICES)}, got {pattern!r}")
            entries.append(Entry(pattern, reason, f"{path}:{n}", device))
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
    for item in items:
        for e in entries:
            if e.matches(item.nodeid):
                used.add(e)
                if e.device is not None and device is not None and e.device != device:
                    continue
                if item.nodeid not in marked:
                    marked[item.nodeid] = e.reason
                    item.add_marker(pytest.mark.xfail(reason=f"expected failure ({e.where}): {e.reason}", strict=False))
    if warn:
        for e in entries:
            if e not in used:
                warnings.warn(XfailsWarning(f"{e.where}: expected failure {e.pattern!r} matches no collected test"))
    return marked
