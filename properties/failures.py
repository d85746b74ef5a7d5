"""The suite's failure classes: one per kind of broken law, so that each distinct bug of a
property is reported with its own shrunk example.

Hypothesis tells failures apart by where they come from (the exception's type and the line that
raised it) and reports, and shrinks, one example per origin. Every failure of a law is raised by
``case.fail``, from one line, so with a single class the first bug a test found would hide every
other (seen: an empty-state NaN hid an lse overflow in the same merge; bfloat16 artifacts hid
float32 bugs). Each failure therefore gets a class from the kind of its worst element, the output
it is in (``x`` / ``lse`` of a merge) and its precision group (16-bit formats, which kernels
usually widen, against the wider ones):

    UnexpectedNaN      NaN where the truth is not NaN
    UnexpectedInf      an infinity where the truth is finite (an overflow)
    UnexpectedFinite   a finite value where the truth is NaN or infinite
    WrongNonFinite     non-finite, but not the truth's (NaN for inf, an inf of the wrong sign)
    OutOfTolerance     finite, beyond the derived tolerance
    Differs            finite, unequal where the law demands equality (bitwise laws)
    WrongOutput        the wrong type, shape, dtype or device
    Raised             the check raised another exception (the type and the raising line
                       qualify it; only runs isolated in a worker process use it: in-process
                       the exception propagates as it is)
    TargetCrashed      the worker process running the check died (a signal), lost its CUDA
                       context, or hung (properties/isolation.py)

e.g. ``UnexpectedNaN[lse, 16-bit]``. All are PropertyFailure subclasses (so ``except
PropertyFailure`` catches each), and every one pickles, so that a worker process can send it.
"""
from __future__ import annotations

import math


class PropertyFailure(AssertionError):
    """A law of the suite does not hold (the message: the law, the case, its worst element and a
    reproducer). Subclasses name the kind of failure."""

    _qualifiers: tuple = ()
    # "law: FILE:LINE in NAME", the law's line that compared (report.law_line_of), set where the
    # failure was raised in a worker process: its traceback does not cross the process boundary
    law_line: str = ""

    def __reduce__(self):
        # the instance's attributes (law_line, Hypothesis's __notes__) travel with it
        return _rebuild, (_base_of(type(self)).__name__, type(self)._qualifiers, self.args), dict(self.__dict__)


class UnexpectedNaN(PropertyFailure):
    """NaN where the truth is not NaN."""


class UnexpectedInf(PropertyFailure):
    """An infinity where the truth is finite."""


class UnexpectedFinite(PropertyFailure):
    """A finite value where the truth is NaN or infinite."""


class WrongNonFinite(PropertyFailure):
    """A non-finite value other than the truth's."""


class OutOfTolerance(PropertyFailure):
    """A finite value beyond the derived tolerance."""


class Differs(PropertyFailure):
    """A finite value unequal to what the law requires it to equal."""


class WrongOutput(PropertyFailure):
    """An output of the wrong type, shape, dtype or device."""


class Raised(PropertyFailure):
    """The check raised an exception that is not a failure (in a worker process)."""


class TargetCrashed(PropertyFailure):
    """The worker process died, lost its CUDA context, or did not answer in time."""


def device_assert(e: BaseException) -> bool:
    """Whether e is CUDA's report of a device-side assert: asynchronous (it surfaces at the next
    synchronization) and fatal to the process's CUDA context."""
    return "device-side assert" in str(e)


KINDS = {c.__name__: c for c in (PropertyFailure, UnexpectedNaN, UnexpectedInf, UnexpectedFinite, WrongNonFinite,
                                  OutOfTolerance, Differs, WrongOutput, Raised, TargetCrashed)}
_DERIVED: dict = {}


def _base_of(cls) -> type:
    return next(c for c in cls.__mro__ if c.__name__ in KINDS and KINDS[c.__name__] is c)


def failure_class(kind: type, *qualifiers: str) -> type:
    """kind, or its subclass for the given qualifiers (the same class for the same arguments;
    a kind that is itself qualified keeps its qualifiers, the new ones after them)."""
    if not (isinstance(kind, type) and issubclass(kind, PropertyFailure)):
        raise TypeError(f"kind must be PropertyFailure or a subclass ({', '.join(KINDS)}), got {kind!r}")
    qualifiers = kind._qualifiers + tuple(str(q) for q in qualifiers if q)
    kind = _base_of(kind)
    if not qualifiers:
        return kind
    key = (kind.__name__, qualifiers)
    if key not in _DERIVED:
        name = f"{kind.__name__}[{', '.join(qualifiers)}]"
        _DERIVED[key] = type(name, (kind,), {"_qualifiers": qualifiers, "__module__": __name__, "__qualname__": name})
    return _DERIVED[key]


def _rebuild(kind_name: str, qualifiers: tuple, args: tuple):
    return failure_class(KINDS[kind_name], *qualifiers)(*args)


def classify(expected, actual, tol=None) -> type:
    """The kind of a failing element: its value actual against the law's expected value (tol:
    the tolerance it was held to, None for an exact law)."""
    e, a = float(expected), float(actual)
    if math.isnan(a) and not math.isnan(e):
        return UnexpectedNaN
    if math.isinf(a) and math.isfinite(e):
        return UnexpectedInf
    if math.isfinite(a) and not math.isfinite(e):
        return UnexpectedFinite
    if not math.isfinite(a):
        return WrongNonFinite
    return OutOfTolerance if tol is not None else Differs


def precision_group(dtype) -> str:
    """'16-bit' for float16 and bfloat16, '' otherwise (no qualifier)."""
    return "16-bit" if getattr(dtype, "itemsize", 0) == 2 else ""
