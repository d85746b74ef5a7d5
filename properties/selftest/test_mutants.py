"""The suite must catch each deliberately broken kernel in properties/mutants/.

Every invariant must catch at least one mutant on its own: each mutant module declares
``CAUGHT_BY``, the invariants meant to catch it; the union over the zoo must be the whole registry
(so an invariant added without a mutant that it catches fails here), and each declared
(mutant, invariant) pair is checked by a search over that invariant's cases alone, shrunk on
small shapes (the report prints the counterexample and its size).

The classic mutants (no max subtraction; sum(g) for sum(y * g); the two classic merge bugs and the
two classic cross-entropy bugs) are also searched as a user's run meets them, over all of their
op's laws at once, and must shrink to at most 4 elements per tensor, printing the failure report
of their shrunk counterexample. A control runs that search against the project's kernels and must
find nothing.

Every law's reproducer runs as printed: for each invariant, the failure report of its first mutant
(by name) is taken from its pair search, and its reproducer is executed in a fresh Python process,
where it must raise nothing, print, and leave in `out` the value the report calls actual."""
from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import math
import os
import pkgutil
import re
import select
import subprocess
import sys
import tempfile
import traceback

import pytest
import torch
from hypothesis import HealthCheck, Phase, errors, find, settings, strategies as st

from .. import mutants, strategies as S
from ..applicability import device_reason, skip_reason
from ..case import PropertyFailure
from ..invariants import REGISTRY
from ..ops import OPS, Target
from ..targets import OWN_KERNELS

def _declared(name: str, attr: str, default=None):
    """What the mutant module properties/mutants/NAME.py declares as attr (OP, CAUGHT_BY)."""
    return getattr(importlib.import_module(f"{mutants.__name__}.{name}"), attr, default)


# every module in properties/mutants -> the op it breaks (its OP): adding a mutant adds one file
MUTANTS = {m.name: _declared(m.name, "OP") for m in sorted(pkgutil.iter_modules(mutants.__path__), key=lambda m: m.name)
           if not m.name.startswith("_")}

# mutants whose counterexamples need hundreds of rows (float16-subnormal shares of a mean): the
# pair search reports its first catch unshrunk (shrinking re-runs thousand-row cases in the
# interpreter, minutes on two cores, and cannot go below the rows the bug needs)
UNSHRUNK = {"ce_mean_16bit_partials"}

MAX_ELEMENTS = {"no_max_subtraction": 4, "sum_g_backward": 4, "merge_lse_arithmetic": 4, "merge_lse_max": 4,
                "ce_mean_counts_ignored": 4, "ce_none_backward_ignores_dloss": 4}


@contextlib.contextmanager
def small_shapes(limits: S.Limits = None):
    """The ci profile's shape limits (or the given ones) whatever the profile: the mutants' bugs
    show on small tensors, and on a GPU the gpu profile's shapes would make each search take minutes."""
    from ..plugin import LIMITS
    saved = S.set_limits(limits or LIMITS["ci"])
    try:
        yield
    finally:
        S.set_limits(saved)


def search(module: str, op: str, device: str, max_examples: int, only: str = None, shrink: bool = True,
           limits: S.Limits = None):
    """Hypothesis.find over (invariant, case) pairs for op: the smallest case on which some
    invariant fails for the module (NoSuchExample if none does), on small shapes. The invariants
    are those the suite runs for op against the module (its needs met: dim=, autograd), but for
    the laws of SHAPE_FAMILIES; only=NAME searches that invariant alone, and then only its
    PropertyFailure counts (not a crash of the mutant). shrink=False returns the first case found, unshrunk (shrinking is most of a search's
    time: Hypothesis redraws the case hundreds of times); limits replaces the ci profile's shape limits."""
    with small_shapes(limits):
        return _search(module, op, device, max_examples, only, shrink)


# laws that draw shapes of their own (thousands of rows, rows past 2**11 with whole -inf chunks):
# a case costs seconds under the interpreter, and a catch by them shrinks no further than those
# shapes, so the search over all of a mutant's laws leaves them out; they are searched alone for
# the mutants that declare them (CAUGHT_BY, test_invariant_catches_mutant)
SHAPE_FAMILIES = {S.MANY_ROWS, S.MASKED_CHUNKS}


CRASHES = []  # the checks of the last search that raised something other than a PropertyFailure


def crashes_told() -> str:
    """The last search's crashes, for a failure message: how many, and the first in full."""
    if not CRASHES:
        return ""
    return f"\n{len(CRASHES)} checks raised instead of passing or failing; the first: {CRASHES[0]}"


def _search(module: str, op: str, device: str, max_examples: int, only=None, shrink=True):
    mutant = Target(module)
    mutant.device = device
    mutant.record = False  # keep the searches out of the suite's error statistics
    invariants = [inv for inv in REGISTRY if op in inv.ops and skip_reason(inv, op, mutant) is None
                  and (inv.name == only if only is not None else not SHAPE_FAMILIES & set(inv.families or ()))]
    assert invariants, f"no invariant {only or ''} applies to {module}.{op}"
    # draw (invariant, case) pairs exactly as the suite does, each invariant with its own inputs
    pairs = st.sampled_from(invariants).flatmap(
        lambda inv: S.cases(op, inv.families, inv.max_cols).map(lambda case: (inv, case)))
    seen = {}  # (invariant, case) -> caught: a replay agrees even for a mutant with state
    CRASHES.clear()

    def caught(pair) -> bool:
        inv, case = pair
        key = (inv.name, repr(case))
        if key not in seen:
            seen[key] = _caught(inv, case)
        return seen[key]

    def _caught(inv, case) -> bool:
        try:
            inv.check(case, mutant)
        except PropertyFailure as e:
            if only is not None and not str(e).startswith(f"[{only}]"):
                raise AssertionError(f"{only} raised another invariant's failure:\n{e}") from e
            return True
        except errors.UnsatisfiedAssumption:
            return False
        except errors.HypothesisException:  # a harness error must never count as a catch
            raise
        except Exception as e:  # a crash of the mutant is a failure too, as in the suite itself
            CRASHES.append(f"{inv.name} on {case!r}:\n{''.join(traceback.format_exception(e))}")
            return only is None  # ... but it is no evidence that the named invariant catches it
        return False

    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    return find(pairs, caught, settings=settings(max_examples=max_examples, database=None, derandomize=True, phases=phases,
                                                  deadline=None, suppress_health_check=list(HealthCheck)))


def report(inv, case, module: str, device: str, attempts: int = 5) -> str:
    """The suite's failure report (with its reproducer) for the shrunk counterexample. A race
    (atomic_order_split_dot on the GPU, where the scheduler orders the adds) shows only on some
    runs: a GPU run can fail to reproduce its shrunk case, so the case is re-run up to
    `attempts` times (a deterministic mutant reproduces on the first)."""
    mutant = Target(module)
    mutant.device = device
    mutant.record = False
    for _ in range(attempts):
        try:
            inv.check(case, mutant)
        except PropertyFailure as e:
            return str(e)
        except Exception as e:  # a crash of the mutant
            return f"{type(e).__name__}: {e}"
    return "(the counterexample did not reproduce)"


_FOUND = {}  # mutant -> (invariant, case) of its test_suite_catches_mutant, reused by the pair test below


@pytest.mark.parametrize("name", sorted(MAX_ELEMENTS))
def test_suite_catches_mutant(name, target):
    """The suite (every invariant it runs on the mutant's op, searched together, as a user's run
    does) catches the classic mutants and shrinks each catch to at most MAX_ELEMENTS elements per
    tensor; the failure report of the shrunk case is printed. Every other mutant is shown caught by
    each invariant it declares, searched alone (test_invariant_catches_mutant): a catch by one law
    of the suite is a catch by the suite, and a search over all of an op's laws would spend most of
    its cases on laws that cannot catch that mutant."""
    module = f"{mutants.__name__}.{name}"
    inv, case = search(module, MUTANTS[name], target.device, 1000)
    _FOUND[name] = (inv, case)
    sizes = [t.numel() for t in case.tensors(target.device)]
    print(f"{name}: caught by {inv.name}; counterexample sizes {sizes}\n{report(inv, case, module, target.device)}")
    assert max(sizes) <= MAX_ELEMENTS[name], \
        f"{name}: caught by {inv.name}, but the shrunk counterexample still has {sizes} elements:\n{case}"


# the control's cases per op: it checks the search's harness (every law of test_properties runs
# against the kernels there, 30 cases each on the CPU, 1000 on a GPU)
CONTROL_EXAMPLES = 60


@pytest.mark.parametrize("op", list(OPS))
def test_control_correct_kernels_are_not_caught(op, target):
    """The same search against the project's kernels finds nothing: a catch above is the mutant's
    bug, not the search's (this control once exposed two harness errors counted as catches). The
    laws of SHAPE_FAMILIES, which this search leaves out, run against the kernels in
    test_properties."""
    try:
        inv, case = search(OWN_KERNELS, op, target.device, CONTROL_EXAMPLES)
    except errors.NoSuchExample:
        return
    pytest.fail(f"the search caught the project's kernels: {report(inv, case, OWN_KERNELS, target.device)}"
                f"{crashes_told()}")


def _long_launch_cases():
    """attention_backward cases for the long-sequence launch: 16-bit, D = 128 and a partial block
    of 100, full, causal and grouped heads, lengths around its 64 x 128 blocks."""
    from ..families.attention.case import AttnCase
    for dtype in (torch.bfloat16, torch.float16):
        shapes = ((128, 1, False, (65, 129)), (128, 2, True, (200, 127)), (100, 4, False, (1, 64)),
                  (128, 2, False, (63, 257)), (100, 1, True, (130, 130)))
        for D, Hq, causal, (Lq, Lk) in shapes:
            yield AttnCase(op="attention_backward", dtype=dtype, B=2, Hq=Hq, Hkv=1, Lq=Lq, Lk=Lk, D=D, Dv=D,
                           seed=Lq + Lk, causal=causal)


def test_long_attention_launch_matches_the_oracle(target, monkeypatch):
    """The attention backward's long-sequence launch (kernels/tuning.py ATTN_BWD_16_LONG, causal
    ATTN_BWD_16_LONG_CAUSAL, with OFF32) starts at ATTN_BWD_LONG_FROM queries, which the suite's
    draws reach only rarely (one length in four is a block boundary, and only the gpu profile's
    lengths go that far): the oracle law holds for it at that length +-1 and, with the threshold
    lowered to 1, on short cases with partial blocks, a causal mask and grouped heads. Compiled
    code: on a GPU (the interpreter runs a launch of its own)."""
    if target.device == "cpu":
        pytest.skip("the long launch is compiled code (the interpreter runs its own launch): on a GPU")
    from softmax_properties.kernels import _attention as AT
    from softmax_properties.kernels import tuning as T
    from ..families.attention.case import AttnCase
    law = next(inv for inv in REGISTRY if inv.name == "attention_matches_oracle")
    own = Target(OWN_KERNELS)
    own.device, own.record = target.device, False
    n = T.ATTN_BWD_LONG_FROM
    for Lq in (n - 1, n, n + 1):
        case = AttnCase(op="attention_backward", dtype=torch.bfloat16, B=1, Hq=1, Hkv=1, Lq=Lq, Lk=96, D=128, Dv=128,
                        seed=Lq, causal=Lq == n)
        assert AT.bwd_long(case.dtype, 128, 128, False, Lq) == (Lq >= n)
        law.check(case, own)
    monkeypatch.setattr(T, "ATTN_BWD_LONG_FROM", 1)
    for case in _long_launch_cases():
        assert AT.bwd_long(case.dtype, case.D, case.Dv, False, case.Lq)
        law.check(case, own)


# ----------------------------------------------------------------------------------------------
# every invariant catches at least one mutant, on its own
# ----------------------------------------------------------------------------------------------
def caught_by(name: str) -> tuple:
    """The invariants a mutant module declares will catch it (its CAUGHT_BY)."""
    return tuple(_declared(name, "CAUGHT_BY", ()))


CAUGHT = [pytest.param(name, inv, id=f"{name}-{inv}") for name in sorted(MUTANTS) for inv in caught_by(name)]
PAIR_EXAMPLES = 400  # a declared catch must show within this many drawn cases of the invariant
# the pair searches draw smaller tensors than the ci profile (one invariant's cases shrink in about
# a second there), with the occasional long row kept; a mutant whose bug needs more uses "ci"
PAIR_LIMITS = S.Limits(max_rows=4, max_cols=64, long_cols=2100, max_elems=2100)
# first_block_only needs rows longer than 1024 columns; the two many-rows mutants need 2048 rows of
# more than one class (PAIR_LIMITS' 2100 elements hold them at V = 1 only)
PAIR_LIMITS_FOR = {"first_block_only": "ci", "ce_tail_rows_dropped": "ci", "ce_mean_16bit_partials": "ci"}
# unscaled_softmax_backward fails only on cotangents within a factor of ~8 of finfo.max in a 32-bit
# compute type (one "huge" fill in ~7 families, then that scale, then a row whose terms overflow):
# about one case in 400, so whether 400 draws hold one depended on Hypothesis's pool of constants
# from the project's sources, which every edit changes
# lce_weighted_mean_per_chunk fails only on a weighted mean without z-loss over more than two rows
# whose class weights differ between its chunks of two, by more than a 16-bit bound: about one
# case in 150
PAIR_EXAMPLES_FOR = {"unscaled_softmax_backward": 2000, "lce_weighted_mean_per_chunk": 2000}


def test_zoo_covers_every_invariant(target):
    """Every module in properties/mutants/ declares OP, a registered op it defines, and CAUGHT_BY:
    registered invariants that the suite runs on that op; and together they name every invariant
    in the registry, so each invariant has a mutant that it alone catches (checked pair by pair in
    test_invariant_catches_mutant)."""
    undeclared = sorted(name for name, op in MUTANTS.items() if op not in OPS)
    assert not undeclared, f"mutants whose OP is missing or not a registered op ({sorted(OPS)}): {undeclared}"
    undefined = sorted(name for name, op in MUTANTS.items() if not callable(_declared(name, op)))
    assert not undefined, f"mutants that do not define the op their OP names: {undefined}"
    names = {inv.name: inv for inv in REGISTRY}
    covered = set()
    for name, op in MUTANTS.items():
        declared = caught_by(name)
        assert declared, f"properties/mutants/{name}.py declares no CAUGHT_BY"
        mutant = Target(f"{mutants.__name__}.{name}")
        mutant.device = target.device  # the autograd probe runs there (on a GPU, not on the CPU)
        for inv in declared:
            assert inv in names, f"{name}.CAUGHT_BY names {inv!r}, which is not a registered invariant"
            assert op in names[inv].ops, f"{name}.CAUGHT_BY: {inv} does not apply to {op}"
            reason = skip_reason(names[inv], op, mutant)
            # a law about CUDA semantics is skipped on the CPU: its catch is shown on a GPU
            assert reason is None or device_reason(names[inv], mutant), \
                f"{name}.CAUGHT_BY: the suite skips {inv} on it ({reason})"
        covered |= set(declared)
    missing = sorted(set(names) - covered)
    assert not missing, f"invariants that no mutant is declared to catch (add a mutant for each): {missing}"


@pytest.mark.parametrize("name,inv_name", CAUGHT)
def test_invariant_catches_mutant(name, inv_name, target):
    """The declared invariant alone, over its own cases (families, max_cols) as the suite draws
    them, finds a case on which the mutant fails it. When test_suite_catches_mutant (same process)
    already shrank to a catch by this invariant, that case is the evidence and no search runs.
    For each invariant's first mutant (REPRODUCED_WITH), the failure report's reproducer then runs
    as printed, outside the suite, and shows the failure (check_reproducer)."""
    from ..plugin import LIMITS
    module = f"{mutants.__name__}.{name}"
    where = device_reason(next(inv for inv in REGISTRY if inv.name == inv_name), target)
    if where:
        pytest.skip(where)
    if name in _FOUND and _FOUND[name][0].name == inv_name:
        inv, case = _FOUND[name]
        rep, how = report(inv, case, module, target.device), "reused from test_suite_catches_mutant"
        if rep.startswith(f"[{inv_name}]"):  # a PropertyFailure of this invariant, not a crash
            _print_catch(name, inv_name, how, case, rep, target.device)
            if REPRODUCED_WITH[inv_name] == name:
                check_reproducer(rep, module)
            return
    limits = LIMITS[PAIR_LIMITS_FOR[name]] if name in PAIR_LIMITS_FOR else PAIR_LIMITS
    try:
        n = PAIR_EXAMPLES_FOR.get(name, PAIR_EXAMPLES)
        inv, case = search(module, MUTANTS[name], target.device, n, only=inv_name, limits=limits,
                           shrink=name not in UNSHRUNK)
    except errors.NoSuchExample:
        pytest.fail(f"{inv_name} did not catch {name} in {n} cases, though {name}.CAUGHT_BY declares it"
                    f"{crashes_told()}")
    rep = report(inv, case, module, target.device)
    _print_catch(name, inv_name, "searched", case, rep, target.device)
    assert rep.startswith(f"[{inv_name}]"), f"the shrunk case does not reproduce the catch:\n{rep}"
    if REPRODUCED_WITH[inv_name] == name:
        check_reproducer(rep, module)


def test_declared_nondeterminism_passes_reordered_sums_only(target):
    """NONDETERMINISTIC (docs/contract.md) excuses the order of a sum, not its value:
    atomic_order_split_dot's softmax_backward, whose adds land in another order every other call,
    passes `deterministic` in a module that declares it, and undeclared its report says the two
    results are within their bounds and how to declare it; lost_atomic_add, declared, is caught
    beyond the bounds (test_invariant_catches_mutant)."""
    import types
    split = f"{mutants.__name__}.atomic_order_split_dot"
    declared = types.ModuleType("declared_split_dot")
    declared.softmax_backward = importlib.import_module(split).softmax_backward
    declared.NONDETERMINISTIC = ("softmax_backward",)
    with pytest.raises(errors.NoSuchExample):
        search(declared, "softmax_backward", target.device, PAIR_EXAMPLES, only="deterministic", limits=PAIR_LIMITS)
    inv, case = search(split, "softmax_backward", target.device, PAIR_EXAMPLES, only="deterministic",
                       limits=PAIR_LIMITS)
    rep = report(inv, case, split, target.device)
    assert "within the two results' oracle bounds" in rep and "NONDETERMINISTIC = ('softmax_backward',)" in rep, rep


def test_a_malformed_nondeterministic_declaration_names_it():
    import types
    for bad, says in (("softmax", "expected a tuple of op names"), (("softmax", "sofmax"), "'sofmax' is not an op"),
                      ([["softmax"]], "is not an op")):
        m = types.ModuleType("declares")
        m.NONDETERMINISTIC = bad
        with pytest.raises(ValueError, match=f"declares.NONDETERMINISTIC: .*{re.escape(says)}"):
            Target(m).nondeterministic("softmax")
    m.NONDETERMINISTIC = ["softmax", "attention_backward"]
    assert Target(m).nondeterministic("attention_backward") and not Target(m).nondeterministic("log_softmax")


def _print_catch(name, inv_name, how, case, rep, device):
    sizes = [t.numel() for t in case.tensors(device)]
    print(f"{name}: caught by {inv_name} alone ({how}); counterexample sizes {sizes}\n{rep}")


# ----------------------------------------------------------------------------------------------
# every law's reproducer runs as printed
# ----------------------------------------------------------------------------------------------
# each invariant's reproducer is run for one catch: that of the first mutant (by name) declaring it
REPRODUCED_WITH = {}
for _name in sorted(MUTANTS):
    for _inv in caught_by(_name):
        REPRODUCED_WITH.setdefault(_inv, _name)

# The interpreter that runs reproducers: a fresh Python process, started once per pytest process
# (importing torch and triton once, not once per reproducer: seconds each), that runs each
# reproducer it is sent in a namespace of its own, with the target module imported afresh (a
# mutant's module-level state, such as a workspace, starts empty as in a new process), and answers
# with the traceback, if any, what the reproducer printed and the values of its final `out` (a
# tensor, or nested tuples of them).
_RUNNER_CODE = r"""
import contextlib, io, json, os, sys, traceback
answers = os.fdopen(os.dup(1), "w")  # the answers' own channel: whatever writes to file descriptor 1
os.dup2(2, 1)                       # (a library's C code) goes where stderr goes instead
for line in sys.stdin:
    request = json.loads(line)
    module = request["module"]
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        del sys.modules[name]
    printed, scope, error, values = io.StringIO(), {"__name__": "__main__"}, None, None
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(request["code"], "<reproducer>", "exec"), scope)
    except BaseException:
        error = traceback.format_exc()
    try:
        import torch
        def flat(out):  # a tensor, or nested tuples / lists of them
            if isinstance(out, torch.Tensor):
                return out.detach().double().cpu().reshape(-1).tolist()
            if isinstance(out, (tuple, list)) and out:
                return [v for o in out for v in flat(o)]
            raise TypeError(type(out).__name__)
        values = flat(scope.get("out"))
    except Exception:
        pass
    answers.write(json.dumps({"error": error, "printed": printed.getvalue(), "values": values}) + "\n")
    answers.flush()
"""
_RUNNER = []  # the running interpreter and the file its stderr goes to, if started
REPRODUCER_TIMEOUT = 300.0  # seconds one reproducer may take


def _runner() -> subprocess.Popen:
    if _RUNNER and _RUNNER[0].poll() is None:
        return _RUNNER[0]
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=errors, text=True, env=dict(os.environ))
    _RUNNER[:] = [proc, errors]
    atexit.register(_stop_runner, proc)
    return proc


def _runner_stderr() -> str:
    """The end of what the reproducer interpreter wrote to stderr (warnings, a crash's message)."""
    errors = _RUNNER[1]
    errors.seek(0)
    return errors.read()[-3000:]


def _stop_runner(proc):
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_reproducer(code: str, module: str) -> dict:
    """Run reproducer code in the reproducer interpreter: {"error": traceback or None, "printed":
    its output, "values": its final `out` (a tensor or nested tuples of them) as floats, or None}."""
    proc = _runner()
    proc.stdin.write(json.dumps({"code": code, "module": module}) + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], REPRODUCER_TIMEOUT)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        pytest.fail(f"the reproducer gave no answer within {REPRODUCER_TIMEOUT:g} s (it hung or killed its "
                    f"interpreter):\n{code}\nthe interpreter's stderr, last lines:\n{_runner_stderr()}")
    return json.loads(line)


def reproducer_of(rep: str) -> str:
    """The reproducer a failure report prints (its lines after 'reproducer:', unindented)."""
    lines = rep.splitlines()
    start = lines.index("  reproducer:") + 1
    code = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        code.append(line[4:])
    return "\n".join(code)


_WORST = re.compile(r"^  worst element \S+: actual=(\S+) expected=(\S+)", re.M)


def _same(a: float, b: float) -> bool:
    """The same value, signs of zeros included, or both NaN."""
    return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (math.isnan(a) and math.isnan(b))


def check_reproducer(rep: str, module: str):
    """The failure report's reproducer, run as printed in a fresh interpreter (run_reproducer),
    raises nothing and prints, and, where the report names a worst element, its final `out`
    holds the value the report calls actual (which differs from the FP64 expected one): the
    reproducer shows the failure, not only the case."""
    code = reproducer_of(rep)
    got = run_reproducer(code, module)
    where = f"\nthe reproducer:\n{code}\nthe report:\n{rep}"
    assert got["error"] is None, f"the reproducer raised:\n{got['error']}{where}"
    assert got["printed"].strip(), f"the reproducer printed nothing{where}"
    worst = _WORST.search(rep)
    if worst is None:
        return
    actual, expected = (float(v) for v in worst.groups())
    assert not _same(actual, expected), f"the report's actual value is its expected one{where}"
    assert got["values"] is not None, f"the reproducer's out is not a tensor or a tuple of tensors{where}"
    assert any(_same(v, actual) for v in got["values"]), \
        f"the reproducer's out does not hold the failing value {actual!r} (expected {expected!r}){where}"
