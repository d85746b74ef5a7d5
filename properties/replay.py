"""Saved counterexamples: write each failing (invariant, case) as a script, and re-run it against
any target.

The plugin (``--properties-failures DIR``, default ``.properties-failures/`` under the rootdir;
an empty value turns it off) writes one file per failure of ``test_property``, named
``<target>.<invariant>-<op>.py`` (the target's short name where it is built in; ``-2``, ``-3``...
when one test reports several failures; a later failure of the same test overwrites it). The
file holds the invariant's name, the target it failed on and the drawn case as the evaluable
repr of its dataclass, the same recipe Hypothesis prints under "Draw 1 (case)". Replay re-runs
the invariant's whole check on that case (every call the law makes, its oracle, tolerance and
report), not just the op call:

    python -m softmax_properties.properties.replay .properties-failures/FILE.py   # the target it failed on
    python -m softmax_properties.properties.replay .properties-failures/FILE.py --target TARGET
    python -m softmax_properties.properties.replay .properties-failures/          # every file, its own target

It runs wherever the distribution is installed, from a directory the target imports from (``-m``
puts the working directory first on the module path, as ``python -m pytest`` does). Without CUDA
it uses Triton's interpreter (as the pytest plugin does). Prints PASS, FAIL with the failure
report, NOT APPLICABLE (the target refused the input, or the law's precondition does not hold
for this target's outputs) or SKIP (the target lacks the op). Exit status: 0 when nothing
failed, 1 when something failed, 2 on bad arguments. Replay runs in this process: a case that
crashed the target (a ``target crashed`` failure) crashes it again, with Python's faulthandler
printing where.

Before each check, test_property also writes the case as ``<target>.<invariant>-<op>.pending.py``
(the same format; removed when the test ends), so that a pytest process that dies during a check
(a crash with ``--isolate off``, a time limit) leaves the case it was checking; the next run's
header names such a file.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import traceback

from . import strategies as S, targets

HEADER = """\
# A counterexample of the softmax-properties suite: the invariant, and the case it failed on.
# Re-run the invariant's check on this case against the target it failed on (or --target TARGET):
#   python -m softmax_properties.properties.replay {path}
{failure}
import torch
{imports}

inf, nan = float("inf"), float("nan")

INVARIANT = {invariant!r}
TARGET = {target!r}
CASE = {case}
"""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def failures_dir(config):
    """The directory the plugin writes to (absolute), or None when turned off."""
    d = config.getoption("properties_failures", None)
    if not d:
        return None
    return d if os.path.isabs(d) else os.path.join(str(config.rootpath), d)


def _leaves(exc):
    """The exceptions of a (possibly grouped) failure, innermost groups flattened."""
    subs = getattr(exc, "exceptions", None)
    if isinstance(subs, (list, tuple)) and isinstance(exc, BaseException) and subs is not exc:
        return [leaf for s in subs for leaf in _leaves(s)]
    return [exc]


def _recipe_classes(value, found: dict) -> dict:
    """{class: None} of every dataclass in the case's recipe (the case, its inputs, layouts, ...),
    found by walking it, so that a replay file imports each from its own module: a family's new
    case type replays without being listed here."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        found.setdefault(type(value), None)
        for f in dataclasses.fields(value):
            _recipe_classes(getattr(value, f.name), found)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _recipe_classes(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _recipe_classes(v, found)
    return found


def _imports(case) -> str:
    by_module: dict = {}
    for cls in _recipe_classes(case, {}):
        by_module.setdefault(cls.__module__, set()).add(cls.__name__)
    return "\n".join(f"from {m} import {', '.join(sorted(names))}  # noqa: F401" for m, names in sorted(by_module.items()))


def render(invariant: str, target: str, case, message: str = "", path: str = "FILE") -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    failure = f"# failed on {target}: {first}"[:300] if first else f"# target: {target}"
    return HEADER.format(path=path, failure=failure, invariant=invariant, target=target, case=repr(case),
                         imports=_imports(case))


def save(directory: str, target: str, invariant: str, op: str, exc) -> list:
    """Write a replay file for each failure in exc that carries its case (test_property marks
    them); returns the paths written."""
    found = [e for e in _leaves(exc) if getattr(e, "_properties_case", None) is not None]
    if not found:
        return []
    os.makedirs(directory, exist_ok=True)
    paths = []
    for k, e in enumerate(found):
        name = f"{_safe(targets.short_name(target))}.{invariant}-{op}{'' if k == 0 else f'-{k + 1}'}.py"
        path = os.path.join(directory, name)
        rel = os.path.relpath(path)
        rel = path if rel.startswith("..") else rel
        with open(path, "w") as f:
            f.write(render(invariant, target, e._properties_case, f"{type(e).__name__}: {e}", rel))
        if hasattr(e, "add_note"):
            e.add_note(f"replay: python -m softmax_properties.properties.replay {rel} [--target TARGET]")
        paths.append(rel)
    return paths


PENDING = ".pending.py"  # the suffix of a case written before it is checked


def pending_path(directory: str, target: str, invariant: str, op: str) -> str:
    return os.path.join(directory, f"{_safe(targets.short_name(target))}.{invariant}-{op}{PENDING}")


class Pending:
    """The case being checked, as a replay file written before each check (<target>.<invariant>
    -<op>.pending.py), so that a process that dies on it (a crash outside the isolation worker,
    a time limit) still leaves it; removed when the test ends. One open file rewritten in place:
    a few microseconds per example besides the case's repr."""

    def __init__(self, directory: str, target: str, invariant: str, op: str):
        os.makedirs(directory, exist_ok=True)
        self.path = pending_path(directory, target, invariant, op)
        self.target, self.invariant, self.rel = target, invariant, os.path.relpath(self.path)
        self.file = open(self.path, "w")

    def write(self, case):
        text = render(self.invariant, self.target, case, "the process died while checking this case", self.rel)
        self.file.seek(0)
        self.file.write(text)
        self.file.truncate()
        self.file.flush()  # into the operating system's hands: it survives this process dying

    def close(self):
        self.file.close()
        if os.path.exists(self.path):
            os.remove(self.path)


def load(path: str):
    """(invariant name, case, target name) from a replay file; ValueError naming what is wrong."""
    import runpy

    from . import families  # noqa: F401 - registers the built-in ops (a replay file names one)
    from .spec import OPS
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    scope = runpy.run_path(path, run_name="properties_replay_file")
    missing = [k for k in ("INVARIANT", "CASE", "TARGET") if k not in scope]
    if missing:
        raise ValueError(f"{path}: not a replay file (no {', '.join(missing)})")
    case = scope["CASE"]
    if getattr(case, "op", None) not in OPS or not hasattr(case, "tensors"):
        raise ValueError(f"{path}: CASE must be a case of a registered op ({', '.join(OPS)}), got {case!r:.200}")
    return scope["INVARIANT"], case, scope["TARGET"]


def replay(invariant: str, case, target_name: str):
    """Run the named invariant's check on case against target_name, once, inside a one-example
    Hypothesis test (so assume/reject and hypothesis.target behave as in the suite). Returns
    (status, text): status one of "PASS", "FAIL", "NOT APPLICABLE", "SKIP"."""
    from hypothesis import HealthCheck, Phase, given, settings, strategies as st
    from hypothesis.errors import Unsatisfiable

    from . import interpreter
    from .invariants import law
    from .ops import Target
    from .applicability import skip_reason

    if interpreter.interpreting():
        interpreter.install()
    inv = law(invariant)
    if case.op not in inv.ops:
        raise ValueError(f"invariant {invariant} does not apply to op {case.op!r} (it checks {', '.join(inv.ops)})")

    class Recording(Target):
        refused = None

        def call(self, op_name, *tensors, **kw):
            try:
                return super().call(op_name, *tensors, **kw)
            except self.refusals as e:
                self.refused = f"{type(e).__name__}: {e}"
                raise

    target = Recording(targets.resolve(target_name))
    target.device = interpreter.device()
    target.record = False
    reason = skip_reason(inv, case.op, target)
    if reason:
        return "SKIP", reason
    # judged by this target's declarations (causal alignment, empty rows' conventions), which
    # the case carries from the target it was drawn for
    saved, S.TARGET.module = S.TARGET.module, target.module
    try:
        case = S.redeclared(case)
    finally:
        S.TARGET.module = saved

    @settings(max_examples=1, database=None, phases=[Phase.generate], deadline=None, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(st.just(case))
    def check(c):
        inv.check(c, target)

    try:
        check()
    except Unsatisfiable:
        why = f"the target refused it ({target.refused})" if target.refused else "the law's precondition does not hold"
        return "NOT APPLICABLE", why
    except Exception as e:  # noqa: BLE001 - a failure of any kind is the report
        from .case import PropertyFailure
        text = str(e) if isinstance(e, PropertyFailure) else "".join(traceback.format_exception(e))
        return "FAIL", text
    return "PASS", f"[{invariant}] holds for {target_name}.{case.op} on this case"


def _files(paths):
    for p in paths:
        if os.path.isdir(p):
            yield from sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".py"))
        else:
            yield p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m softmax_properties.properties.replay",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE", help="replay files (or directories of them)")
    ap.add_argument("--target", default=None, metavar="TARGET",
                    help="a built-in target (" + ", ".join(targets.BUILTIN) + ") or a module path to replay against "
                         "(default: the one each file failed on)")
    args = ap.parse_args(argv)
    if args.target is not None:
        try:
            args.target = targets.resolve(args.target)
        except ValueError as e:
            ap.error(str(e))
    import faulthandler
    if not faulthandler.is_enabled():  # a case that crashes the target (a segfault) shows where it died
        try:
            faulthandler.enable()
        except (AttributeError, OSError, ValueError):  # stderr is no file (captured): no stack on a crash
            pass
    import warnings
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")
    worst = 0
    files = list(_files(args.files))
    if not files:
        print("no replay files found in " + ", ".join(args.files), file=sys.stderr)
        return 2
    for path in files:
        try:
            invariant, case, failed_on = load(path)
            status, text = replay(invariant, case, args.target or failed_on)
        except (ValueError, ImportError) as e:
            print(f"ERROR {path}: {e}", file=sys.stderr)
            worst = max(worst, 2)
            continue
        print(f"{status} {path}: [{invariant}] {case.op} against {args.target or failed_on}")
        if status != "PASS":
            print("  " + text.replace("\n", "\n  "))
        if status == "FAIL":
            worst = max(worst, 1)
    return worst


if __name__ == "__main__":
    sys.exit(main())
