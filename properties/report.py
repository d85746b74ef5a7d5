"""A failing property as a person reads it: the law's report first (law, tier, op, dtype, shapes,
worst element, reproducer), then Hypothesis's notes on the shrunk example and the replay command,
then where the law compared; none of the runner's own frames.

The plugin puts this text in place of pytest's traceback for the target-facing tests (not the
project's own tests) unless ``--tb`` is given: pytest's default long style printed the whole
source of the runner's test function (about 80 lines) before each message, so 3 failing tests
made 651 lines. ``--tb=long`` (or any other style) brings pytest's own report back."""
from __future__ import annotations

import inspect
import os
import sysconfig
import traceback

from .failures import PropertyFailure

try:
    _GROUP = BaseExceptionGroup
except NameError:  # Python 3.10: Hypothesis raises the exceptiongroup backport's groups
    from exceptiongroup import BaseExceptionGroup as _GROUP

SUITE_DIR = os.path.dirname(os.path.realpath(__file__))
_TARGETS_DIR = os.path.join(SUITE_DIR, "targets")
# frames of the target's call worth showing when the target raised: at most this many, innermost last
MAX_TARGET_FRAMES = 12
# Hypothesis's notes that describe its search rather than the failing example
_SEARCH_NOTES = ("Highest target score",)


def _where(filename: str) -> str:
    return os.path.realpath(filename)


# packages whose frames are the test runner's (never worth a line of a report), and libraries
# both the suite and a target call (a frame there is neither's own)
_RUNNER = {"_pytest", "pytest", "pluggy", "hypothesis", "xdist", "_hypothesis_pytestplugin.py"}
_LIBRARIES = {"torch", "numpy", "triton"}
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])


def _package(frame) -> str | None:
    """The installed package a frame's file belongs to (the folder under site-packages), else None."""
    parts = _where(frame.filename).split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            return parts[i + 1] if i + 1 < len(parts) else None
    return None


def _runner(frame) -> bool:
    return _package(frame) in _RUNNER


def _library(frame) -> bool:
    pkg = _package(frame)
    if pkg is not None:
        return pkg in _LIBRARIES
    return _where(frame.filename).startswith(_STDLIB + os.sep) or frame.filename.startswith("<")


def law_files() -> set:
    """The files that define a registered law (invariants/generic.py, each family's laws.py, a
    test's own family): a frame there is the law's, or a helper the law's module keeps beside it."""
    from .invariants import REGISTRY
    return {_where(inspect.getsourcefile(inspect.unwrap(inv.check))) for inv in REGISTRY}


def _is_law(frame, files) -> bool:
    return _where(frame.filename) in files


def is_suite_frame(frame) -> bool:
    """A frame of the suite's own machinery: a file of this package outside properties/targets/
    (the built-in adapters' frames are the target's own)."""
    where = _where(frame.filename)
    return where.startswith(SUITE_DIR + os.sep) and not where.startswith(_TARGETS_DIR + os.sep)


def _relative(path: str) -> str:
    rel = os.path.relpath(_where(path), os.path.dirname(SUITE_DIR))
    return path if rel.startswith(os.pardir) else rel


_BLOB = "by temporarily adding @reproduce_failure"  # "this example" or, in newer releases, "this test case"


def _notes(e: BaseException) -> list:
    notes = [n for n in getattr(e, "__notes__", ()) if not any(n.startswith(s) for s in _SEARCH_NOTES)]
    # where the decorator goes, and its import, which Hypothesis's note leaves out
    return [n + " (`from hypothesis import reproduce_failure`; the test case is the function `check` in "
            "properties/test_properties.py, selected with -k)" if _BLOB in n else n for n in notes]


def _law_line(stack) -> str:
    files = law_files()
    laws = [f for f in stack if _is_law(f, files)]
    if not laws:
        return ""
    f = laws[-1]
    return f"law: {_relative(f.filename)}:{f.lineno} in {f.name}"


def law_line_of(e: BaseException) -> str:
    """The report's "law: FILE:LINE in NAME" line for e, from its traceback (or "")."""
    return _law_line(traceback.extract_tb(e.__traceback__))


def _one(e: BaseException) -> str:
    stack = traceback.extract_tb(e.__traceback__)
    lines = []
    if isinstance(e, PropertyFailure):
        lines.append(f"{type(e).__name__}: {e}")
    else:  # the target or the suite raised: show who, and the frames that say where
        kind = type(e).__qualname__ if type(e).__module__ == "builtins" else f"{type(e).__module__}.{type(e).__qualname__}"
        lines.append(f"{kind}: {e}")
        frames = [f for f in stack if not _runner(f)]
        owner = next((f for f in reversed(frames) if not _library(f)), None)
        if owner is not None and is_suite_frame(owner):
            # the law's own computation raised (directly or through torch), not the target's call:
            # the frames from the law inward, which the target's frames would otherwise hide
            files = law_files()
            first = max((i for i, f in enumerate(frames) if _is_law(f, files)), default=0)
            shown = frames[first:][-MAX_TARGET_FRAMES:]
            lines.append("raised in the suite's own code, not in the target's call (a law that cannot take what "
                         "the target returned, or a bug of the suite), at (innermost last):")
        else:
            shown = [f for f in frames if not is_suite_frame(f)][-MAX_TARGET_FRAMES:]
            if shown:
                lines.append("raised at (innermost last):")
        lines.extend("  " + ln for chunk in traceback.format_list(shown) for ln in chunk.rstrip().splitlines())
    lines.extend(_notes(e))
    law = _law_line(stack) or getattr(e, "law_line", "")  # raised in a worker: the line it sent
    if law:
        lines.append(law)
    return "\n".join(lines)


def failure_text(e: BaseException) -> str:
    """The report of a failed property test: each distinct failure Hypothesis found, in turn."""
    subs = getattr(e, "exceptions", None)
    if isinstance(e, _GROUP) and subs:
        n = len(subs)
        parts = [f"{n} distinct failures (each shrunk on its own):"]
        for i, sub in enumerate(subs, 1):
            parts.append(f"{'-' * 30} failure {i} of {n} {'-' * 30}")
            parts.append(failure_text(sub))
        return "\n".join(parts)
    return _one(e)
