"""Crash isolation and one failure class per kind of bug (properties/isolation.py,
properties/failures.py): a check run in the worker process ends as it would in-process, a crash of
the target is a failure of its own that Hypothesis shrinks while the rest of the run goes on, and
a kernel with two independent bugs has both reported by one test, each with its own smallest case.
The end-to-end tests run pytest in a subprocess against the targets in properties/faulty/."""
from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import time
from types import SimpleNamespace

import hypothesis
import pytest
import torch

from .. import interpreter, isolation, replay
from ..case import Case, fail
from ..failures import (Differs, OutOfTolerance, PropertyFailure, Raised, TargetCrashed, UnexpectedFinite,
                       UnexpectedInf, UnexpectedNaN, WrongNonFinite, WrongOutput, failure_class)
from ..invariants import law
from ..record import recording
from ..ops import Target
from ..strategies import Input, Layout, Logits
from ..targets import OWN_KERNELS
from . import ROOT

ON_GPU = interpreter.device() == "cuda"
MATCHES_ORACLE = law("matches_oracle")


def _case(cols: int, rows: int = 2, dtype=torch.float32) -> Case:
    name = str(dtype).replace("torch.", "")
    return Case("softmax", dtype, (Input(Logits(rows, cols, name, ("normal", 1, 1.0)), (rows,), Layout()),))


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the exception is what is examined
        return e
    raise AssertionError("nothing raised")


# ---- failure classes --------------------------------------------------------------------------
@pytest.mark.parametrize("expected,actual,tol,kind", [
    (1.0, math.nan, 1e-6, UnexpectedNaN), (math.inf, math.nan, None, UnexpectedNaN),
    (1.0, math.inf, 1e-6, UnexpectedInf), (math.nan, 0.5, 1e-6, UnexpectedFinite), (-math.inf, 0.0, None, UnexpectedFinite),
    (math.inf, -math.inf, None, WrongNonFinite), (1.0, 1.5, 1e-6, OutOfTolerance), (1.0, 1.5, None, Differs),
])
def test_fail_class_follows_the_worst_element(expected, actual, tol, kind):
    target = SimpleNamespace(name="kernels")
    e = _raised(lambda: fail("inv", _case(2), target, "broken", (0, 1), expected, actual, tol))
    assert type(e) is kind and isinstance(e, PropertyFailure) and str(e).startswith("[inv] broken")


def test_fail_class_qualified_by_output_and_precision():
    target = SimpleNamespace(name="kernels")
    a = _raised(lambda: fail("inv", _case(2, dtype=torch.bfloat16), target, "w", (0,), 1.0, math.nan, 0.1, out_name="lse"))
    b = _raised(lambda: fail("inv", _case(2, dtype=torch.float16), target, "w", (0,), 1.0, math.nan, 0.1, out_name="lse"))
    c = _raised(lambda: fail("inv", _case(2), target, "shape", kind=WrongOutput))
    d = _raised(lambda: fail("inv", _case(2), target, "no element"))
    assert type(a) is type(b) is failure_class(UnexpectedNaN, "lse", "16-bit")
    assert type(a).__name__ == "UnexpectedNaN[lse, 16-bit]" and isinstance(a, UnexpectedNaN)
    assert type(c) is WrongOutput and type(d) is PropertyFailure
    for e in (a, c, d, failure_class(Raised, "IndexError", "k.py:3")("m")):  # what a worker sends
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
    with pytest.raises(TypeError, match="kind must be PropertyFailure or a subclass"):
        failure_class(ValueError)


def test_isolate_modes():
    assert isolation.enabled("on", OWN_KERNELS) and not isolation.enabled("off", "other")
    assert isolation.enabled("auto", "other") and not isolation.enabled("auto", OWN_KERNELS)
    with pytest.raises(ValueError, match="--isolate must be one of auto, on, off, got 'sometimes'"):
        isolation.enabled("sometimes", OWN_KERNELS)


# ---- the worker -------------------------------------------------------------------------------
def test_worker_server_imports_the_suite_without_querying_cuda():
    """The fork server imports the suite with TRITON_INTERPRET as the pytest process chose it
    (Worker.start). A CUDA query there initializes the driver, and every worker forked from the
    server then fails its first CUDA call ("Cannot re-initialize CUDA in forked subprocess", on an
    H200), so with TRITON_INTERPRET set the suite's modules must not query CUDA when imported."""
    code = ("import torch\n"
            "def refuse(*a, **k):\n"
            "    raise AssertionError('CUDA queried while importing the suite')\n"
            "torch.cuda.is_available = torch.cuda.device_count = torch.cuda.init = refuse\n"
            "import softmax_properties.oracles, softmax_properties.properties.invariants, softmax_properties.properties.isolation\n")
    for value in ("0", "1"):
        got = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TRITON_INTERPRET=value),
                             capture_output=True, text=True, timeout=300)
        assert got.returncode == 0, got.stderr[-2000:]


@pytest.mark.filterwarnings("ignore:Using `reject` outside")  # the refusal's reject(), here outside @given
def test_worker_outcomes_match_in_process(monkeypatch):
    """Every outcome of a check in the worker: a pass (its hypothesis.target observation and
    record merged into this process's), a PropertyFailure (same class and message as in-process), a
    refusal (rejected), an exception (Raised, by type and line, with the worker's traceback), a
    segfault and a hang (TargetCrashed, with where the worker was), and a restart after each."""
    target = Target("softmax_properties.properties.faulty.misbehaves")
    seen = []
    monkeypatch.setattr(hypothesis, "target", lambda v, label="": seen.append((v, label)))
    with recording() as rec:
        isolation.check(MATCHES_ORACLE, _case(4, dtype=torch.float64), target)
    assert [label for _, label in seen] == ["bound used softmax float64"]
    assert list(rec.worst) == [("softmax", "float64")]

    here = _raised(lambda: MATCHES_ORACLE.check(_case(9), target))
    there = _raised(lambda: isolation.check(MATCHES_ORACLE, _case(9), target))
    assert type(there) is type(here) is OutOfTolerance and str(there) == str(here)
    # the report's pointer to the law's comparison, which the traceback cannot carry across
    from ..report import failure_text, law_line_of
    assert law_line_of(here).startswith("law: properties/") and law_line_of(there) == ""
    assert law_line_of(here) in failure_text(there), failure_text(there)

    with pytest.raises(hypothesis.errors.UnsatisfiedAssumption):
        isolation.check(MATCHES_ORACLE, _case(7), target)

    e = _raised(lambda: isolation.check(MATCHES_ORACLE, _case(6), target))
    assert isinstance(e, Raised) and type(e).__name__.startswith("Raised[IndexError, misbehaves.py:")
    assert str(e).startswith("[matches_oracle] (default tier) raised IndexError: six columns")
    assert "raised in the worker process:" in str(e) and 'raise IndexError("six columns")' in str(e)

    starts = isolation.worker().starts
    e = _raised(lambda: isolation.check(MATCHES_ORACLE, _case(10), target))
    assert type(e) is failure_class(TargetCrashed, "SIGSEGV")
    assert str(e).startswith("[matches_oracle] (default tier) target crashed: SIGSEGV"), str(e)
    assert "reproducer:" in str(e) and "out = target.softmax(x)" in str(e)
    assert "where the worker was" in str(e) and "misbehaves.py" in str(e)
    isolation.check(MATCHES_ORACLE, _case(4), target)  # a new worker
    assert isolation.worker().starts == starts + 1

    t0 = time.perf_counter()
    e = _raised(lambda: isolation.check(MATCHES_ORACLE, _case(5), target, timeout=2))
    assert type(e) is failure_class(TargetCrashed, "timeout") and "no answer within 2 s" in str(e)
    assert "misbehaves.py" in str(e)  # where it hung
    assert time.perf_counter() - t0 < 30
    isolation.check(MATCHES_ORACLE, _case(4), target)


def test_autograd_probe_in_worker():
    target = Target("softmax_properties.properties.faulty.misbehaves")
    assert isolation.supports_autograd(target, "softmax") is True
    # the probe's answer for every dtype comes back from the worker (the laws judge those dtypes)
    assert target._autograd == {"softmax": {dtype: None for dtype in Target.PROBE_DTYPES}}
    # and what it raised there (for the skip reason)
    assert isolation.supports_autograd(target, "log_softmax") is False  # the module offers no log_softmax
    assert target.autograd_refused("log_softmax").startswith("float64, float32, bfloat16, float16: TypeError"), \
        target.autograd_probe("log_softmax")


# ---- end to end -------------------------------------------------------------------------------
def _pytest(*args, timeout=600):
    cmd = [sys.executable, "-m", "pytest", "-m", "properties", "properties/test_properties.py", "-p", "no:randomly",
           "--hypothesis-profile=ci", *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return out, out.stdout + out.stderr


OOB = ["--target", "softmax_properties.properties.faulty.oob_read", "-k", "matches_oracle and (softmax or log_softmax) and not backward"]


def test_crash_is_a_shrunk_failure_and_the_run_goes_on(tmp_path):
    """A Triton kernel that reads far out of bounds on tensors of more than 3 rows: its test fails
    with a shrunk 'target crashed' (a segfault of the interpreter; on a GPU, an illegal memory
    access) of 4 rows of one column, its reproducer and a replay file, and the next test of the
    run (log_softmax of the same target) still runs and passes."""
    fails = tmp_path / "fail"
    out, text = _pytest(*OOB, "--isolate", "on", "--properties-failures", str(fails))
    assert out.returncode == 1, text
    assert "1 failed, 1 passed" in text, text
    how = "CUDA error" if ON_GPU else "SIG"
    assert f"TargetCrashed[{how}" in text and f"[matches_oracle] (default tier) target crashed: {how}" in text, text
    assert "reproducer:" in text and "out = target.softmax(x)" in text, text
    # on the CPU the worker's Python stack is in the kernel's launch; on a GPU the illegal access
    # surfaces at the worker's synchronize after the check, outside the target's code
    assert ON_GPU or "oob_read.py" in text, text
    (saved,) = [p for p in fails.iterdir()]
    assert saved.name == "softmax_properties.properties.faulty.oob_read.matches_oracle-softmax.py", text
    inv, case, _ = replay.load(str(saved))
    (x,) = case.tensors()
    assert inv == "matches_oracle" and x[..., 0].numel() == 4 and x.shape[-1] == 1, case  # shrunk to the threshold


def test_crashes_per_test_are_bounded(tmp_path):
    """Once its crashed checks have taken --isolate-crash-budget seconds a test stops: its failure
    is the smallest crashing case seen (a replay file like any other), with a note that it is not
    shrunk further; the run goes on."""
    fails = tmp_path / "fail"
    out, text = _pytest(*OOB, "--isolate", "on", "--isolate-crash-budget", "0.001", "--properties-failures",
                        str(fails))
    assert out.returncode == 1 and "1 failed, 1 passed" in text, text
    assert "the test stopped after 1 crash(es) that took" in text and "(--isolate-crash-budget)" in text, text
    (saved,) = [p for p in fails.iterdir()]
    inv, case, _ = replay.load(str(saved))
    assert inv == "matches_oracle" and case.tensors()[0][..., 0].numel() > 3, case  # crashes, unshrunk
    out, text = _pytest(*OOB[:2], "--isolate-crash-budget", "-1", "--co")
    assert out.returncode == 4 and "--isolate-crash-budget must be a non-negative number" in text, text


@pytest.mark.skipif(ON_GPU, reason="on a GPU the crash is an exception that leaves pytest alive")
def test_crash_without_isolation_leaves_the_pending_case(tmp_path):
    """With --isolate off the same crash kills pytest; the case it was checking is left as a
    pending replay file, and the next run's header names it."""
    fails = tmp_path / "fail"
    out, text = _pytest(*OOB, "--isolate", "off", "--properties-failures", str(fails))
    assert out.returncode < 0 or out.returncode > 128, text  # killed by a signal
    (pending,) = [p for p in fails.iterdir()]
    assert pending.name.endswith(replay.PENDING), pending
    inv, case, tname = replay.load(str(pending))
    assert (inv, tname) == ("matches_oracle", "softmax_properties.properties.faulty.oob_read") and case.tensors()[0][..., 0].numel() > 3
    from ..plugin import pytest_report_header
    opts = {"isolate": "auto", "target": OWN_KERNELS, "properties_failures": str(fails)}
    config = SimpleNamespace(getoption=lambda k, d=None: opts.get(k, d), _softmax_profile="ci", _softmax_in_use=True,
                             rootpath=tmp_path)
    header = "\n".join(pytest_report_header(config))
    assert "a run died while checking the case in" in header and pending.name in header, header


def test_two_independent_bugs_both_reported(tmp_path):
    """A softmax that is NaN on rows holding a logit above 50 and 1% off on rows longer than 4:
    one test reports both (in 16-bit and in wider dtypes, each precision group a class of its
    own), each shrunk to its own smallest case, and saves a replay file for each."""
    fails = tmp_path / "fail"
    out, text = _pytest("--target", "softmax_properties.properties.faulty.two_bugs", "-k", "matches_oracle-softmax and not backward",
                        "--isolate", "off", "--properties-failures", str(fails))
    assert out.returncode == 1, text
    assert "distinct failures" in text, text
    shapes = {}
    for path in fails.iterdir():
        _, case, _ = replay.load(str(path))
        status, report = replay.replay("matches_oracle", case, "softmax_properties.properties.faulty.two_bugs")
        assert status == "FAIL", report
        kind = "nan" if "actual=nan" in report else "off"
        wide = case.dtype.itemsize > 2
        shapes[kind, wide] = tuple(case.tensors()[0].shape)
    assert shapes == {("nan", True): (1,), ("nan", False): (1,), ("off", True): (5,), ("off", False): (5,)}, (shapes, text)
    for name in ("UnexpectedNaN:", "UnexpectedNaN[16-bit]:", "OutOfTolerance:", "OutOfTolerance[16-bit]:"):
        assert f"\n{name}" in text, text  # the report opens with the failure's class


@pytest.mark.parametrize("raises,async_error,sticky,outcome", [
    (None, True, True, "crashed"),  # a launch's asynchronous error: surfaces at the check's closing synchronize
    (RuntimeError("CUDA error: out of memory"), False, False, "raised"),  # an error that leaves the context usable
    (None, False, False, "pass"),
    ("fail", True, True, "crashed"),  # a failure on garbage read after the context broke
    ("accept", True, True, "pass"),  # a law that caught the device-side assert it expects: passes, worker restarts
])
def test_cuda_errors_are_attributed_to_their_example(monkeypatch, raises, async_error, sticky, outcome):
    """The worker's CUDA path, without a GPU: torch.cuda.synchronize and the context probe are
    stand-ins. An error of the example's own launches ends that example (the worker synchronizes
    after every check), and a lost context makes it a crash, not an ordinary exception."""
    from .. import record
    from ..invariants import Invariant, _registry

    def check(case, target):
        if raises == "fail":
            fail("fake", case, target, "garbage", (0,), 1.0, 2.0, 0.1)
        if raises == "accept":
            record.accept_context_loss()
            return
        if raises is not None:
            raise raises

    def synchronize():
        if async_error:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    monkeypatch.setattr(_registry, "REGISTRY", [Invariant("fake", check, lambda op: op.name == "softmax")])
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(isolation, "_cuda_broken", lambda: "CUDA error: an illegal memory access was encountered" if sticky else "")
    got, payload, _, restart = isolation._check("fake", _case(2), SimpleNamespace(device="cuda", name="fake"), [])
    assert got == outcome, payload
    assert restart == (raises == "accept")
    if outcome == "crashed":
        reason, detail = payload
        assert reason == "CUDA error: an illegal memory access was encountered" and "this example's launches" in detail
