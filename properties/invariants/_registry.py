"""The law registry: every invariant, the tier it belongs to, and the ops it applies to, selected
by the attributes of their specs (properties/spec.py), never by a list of op names kept by hand.

A law is a function ``check(case, target)`` registered with ``@invariant(applies, ...)``; it
calls ``fail(...)`` when the law does not hold, and the report names the law and its tier from
this registry (a check never spells its own name)."""
from __future__ import annotations

import contextlib
import contextvars
import functools
from dataclasses import dataclass
from typing import Callable

from .. import case as _case
from ..spec import OPS

TIERS = ("default", "strict")


@dataclass(frozen=True)
class Invariant:
    """A registered law. applies(spec) -> bool: the ops it checks (by their specs' attributes);
    needs: target capabilities ("dim": the function takes ``dim=``, "autograd": its output is
    differentiable in some dtype (Target.autograd_probe), "float64": with "autograd", differentiable
    in float64, "op:NAME": a partner op the law calls, "option:NAME": a keyword option of the
    op's OpSpec.offered that the target's function takes, "cuda": the target runs on a CUDA
    device); families: restrict the first input's
    logit family (or name a marker family of strategies: MANY_ROWS, MASKED_CHUNKS), None for all;
    max_cols: a cap on row length (for checks that cost O(D) evaluations per column);
    max_examples: a cap on the profile's examples per test (for laws whose every example costs
    seconds whatever the shape); dtypes: the only dtypes its cases are drawn in (strategies.
    only_dtypes), None for all (a law that judges one dtype draws no case to reject); tier:
    "default" or "strict" (docs/tiers.md)."""

    name: str
    check: Callable
    applies: Callable
    needs: tuple = ()
    families: tuple = None
    max_cols: int = None
    tier: str = "default"
    max_examples: int = None
    dtypes: tuple = None

    @property
    def ops(self) -> tuple:
        """The registered ops the law applies to, in registration order."""
        return tuple(name for name, spec in OPS.items() if self.applies(spec))


REGISTRY: list = []

_RUNNING = contextvars.ContextVar("the law being checked", default=None)


@contextlib.contextmanager
def checking(name: str, tier: str = None):
    """Failures raised inside the block are reported as the law `name` (of `tier`). The registry
    wraps every law in it; a check that is not a registered law (a stateful test) uses it too."""
    token = _RUNNING.set((name, tier))
    try:
        yield
    finally:
        _RUNNING.reset(token)


def _named(name: str, tier: str, check: Callable, like: Callable) -> Callable:
    """check(case, target) reporting its failures as the law `name` (with like's name and docstring)."""
    @functools.wraps(like)
    def named(case, target):
        with checking(name, tier):
            return check(case, target)
    return named


def invariant(applies: Callable, *, needs=(), families=None, max_cols=None, tier="default", strict=None,
              max_examples=None, dtypes=None):
    """Register fn as a law of the given tier for every op whose spec `applies` accepts. ``needs``:
    target capabilities ("dim", "autograd" (differentiable in some dtype), "float64" (with "autograd":
    differentiable in float64), or "op:NAME", a partner op the law calls) or "cuda"
    (the law is about CUDA semantics, such as streams: skipped where the target runs on the CPU,
    the interpreter's runs included). ``strict``:
    the name of fn's strict-tier twin, registered too: the same law called with ``strict=True``
    (the bitwise or untoleranced form of a law whose default form is toleranced). Returns the
    default form, reporting under its own name."""
    if not callable(applies):
        raise TypeError(f"invariant: applies must be a predicate on an OpSpec, got {applies!r}")
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    for need in needs:
        if need not in ("dim", "autograd", "float64", "cuda") and not need.startswith(("op:", "option:")):
            raise ValueError(f"needs: each entry must be 'dim', 'autograd', 'float64', 'cuda', 'op:NAME' or "
                             f"'option:NAME', got {need!r}")
    if "float64" in needs and "autograd" not in needs:
        raise ValueError("needs: 'float64' (differentiable in float64) comes with 'autograd'")

    def deco(fn):
        def add(name, check, t):
            if any(inv.name == name for inv in REGISTRY):
                raise ValueError(f"invariant {name!r} is registered twice")
            check = _named(name, t, check, fn)
            REGISTRY.append(Invariant(name, check, applies, tuple(needs), families, max_cols, t, max_examples,
                                      None if dtypes is None else tuple(dtypes)))
            return check
        default = add(fn.__name__, fn, tier)
        if strict:
            add(strict, functools.partial(fn, strict=True), "strict")
        return default
    return deco


def law(name: str) -> Invariant:
    """The registered law called name."""
    for inv in REGISTRY:
        if inv.name == name:
            return inv
    raise ValueError(f"unknown invariant {name!r} (registered: {', '.join(sorted(i.name for i in REGISTRY))})")


def laws_for(spec) -> list:
    """The registered laws that apply to an op spec, in registration order."""
    return [inv for inv in REGISTRY if inv.applies(spec)]


def _running() -> tuple:
    running = _RUNNING.get()
    if running is None:
        raise RuntimeError("fail() was called outside a law: register the check with @invariant, "
                           "or run it inside invariants.checking(NAME)")
    return running


def current() -> str:
    """The name of the law being checked."""
    return _running()[0]


def fail(case, target, what: str, index=None, expected=None, actual=None, tol=None, call: str = None,
         out_name: str = "out", kind=None):
    """Raise the failure of the law being checked (its name and tier from the registry): what
    broke, the case, the worst element (index None: no element) and the case's reproducer
    (case.fail says how the report reads)."""
    name, tier = _running()
    _case.fail(name, case, target, what, index, expected, actual, tol, call, out_name, kind, tier)
