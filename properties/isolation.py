"""Crash isolation: each invariant check runs in a worker process that may die.

A kernel that reads far out of bounds segfaults Triton's interpreter (and with it pytest, and the
rest of the run) or, on a GPU, raises "an illegal memory access was encountered" and leaves the
process's CUDA context broken, so that every later test of that process fails too. Neither gives
a shrunk counterexample. Here the pytest process draws each case with Hypothesis and sends
(invariant, case, target) to a long-lived worker process that runs the invariant's whole check
(all its target calls, autograd included, happen there) and answers: pass, a rejected example, a
PropertyFailure, another exception (type, message, traceback), or nothing because it crashed. A
crash becomes an ordinary failure of its own class, ``TargetCrashed`` ("target crashed:
SIGSEGV", "target crashed: CUDA error: ...", "target crashed: no answer within N s"), raised
in the pytest process, which Hypothesis shrinks like any other; the worker is then restarted for
the next example. What a check does besides passing or failing comes back with the answer: its
record (properties/record.py: the errors it measured, the target's refusals, an accepted loss of
the CUDA context), merged into the pytest process's current record as an in-process check's would
be, and its ``hypothesis.target`` observations, its warnings and the worker's kernel compilation
counts, replayed there.

The worker comes from a fork server (multiprocessing's "forkserver": a fresh interpreter that
imports torch, triton and the suite once, then forks a worker per start), so a restart after a
crash takes milliseconds, not the seconds of importing torch and triton again; that is what makes
shrinking a crash affordable (every shrink step that still crashes restarts the worker). The fork
server never initializes CUDA (a process must not fork after that); each worker does, on the GPU
the pytest process was given (plugin._place_worker: pytest-xdist worker gwK takes GPU K modulo
their number). There is one worker per pytest process, so every pytest-xdist worker has its own.

On CUDA the worker synchronizes after every check, so an asynchronous error of the example's own
launches is raised within that example, never in the next; after any exception it probes the
context (a synchronize and a tiny kernel) and reports a crash when the context is gone.

Options (properties/plugin.py): ``--isolate {auto,on,off}`` (auto: on for every target but the
project's own ``kernels``) and ``--isolate-timeout SECONDS``. Measured on the CPU, isolation costs
no examples per second (``benchmarks/isolation_cost.py``; README, "Crashes, and every bug of a
property"), about 3 s per pytest process to start the fork server, and a fraction of a second per
crash. The project's kernels stay in-process under auto all the same: there --pdb, breakpoints and
cProfile (benchmarks/suite_probe.sh) see the kernels' code, and no second CUDA context is made.
"""
from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import sys
import tempfile
import traceback
import warnings
from multiprocessing.connection import wait

from .targets import OWN_KERNELS  # the project's kernels: not isolated under --isolate auto

MODES = ("auto", "on", "off")
DEFAULT_TIMEOUT = 600.0  # seconds one check may take before it counts as a hang
START_TIMEOUT = 300.0  # seconds a new worker may take to import torch, triton and the target


# Seconds of crashed checks one test may spend before it stops. Each crash restarts the worker: a
# fraction of a second on the CPU, but on a GPU about 14 s (an H200, oob_read: 2 crashed checks took
# 28 s, a new CUDA context and the target's kernels loaded again each time), so a target that
# crashes on most inputs kept a test going for minutes while Hypothesis generated and shrunk.
# Past the budget the smallest crashing case seen so far is the test's failure
# (--isolate-crash-budget; 0: no budget). On the CPU a crash shrinks fully within it (about 30
# crashed checks).
CRASH_BUDGET = 60.0


class CrashBudgetSpent(BaseException):
    """Raised from a check when its test's crashes have spent the budget: a BaseException, so that
    Hypothesis stops the test rather than counting it as one more failure. failure: the smallest
    crash seen, with a note saying why it is not shrunk further."""

    def __init__(self, failure):
        super().__init__(str(failure).splitlines()[0] if str(failure) else "crash budget spent")
        self.failure = failure


class CrashBudget:
    """The crashes (TargetCrashed failures) of one test and the seconds their checks took, up to
    `seconds`."""

    def __init__(self, seconds: float):
        self.seconds, self.spent, self.count, self.smallest = float(seconds), 0.0, 0, None

    def spend(self, e: BaseException, case, took: float) -> None:
        from .failures import TargetCrashed
        if not isinstance(e, TargetCrashed):
            return
        self.count += 1
        self.spent += took
        size = len(repr(case))  # the shrinker's moves make the recipe shorter: a fair proxy of its order
        if self.smallest is None or size <= self.smallest[0]:
            self.smallest = (size, e)
        if self.spent >= self.seconds:
            failure = self.smallest[1]
            if hasattr(failure, "add_note"):
                failure.add_note(f"the test stopped after {self.count} crash(es) that took {self.spent:.1f} s "
                                 "(--isolate-crash-budget): this is the smallest crashing case seen, not shrunk further")
            raise CrashBudgetSpent(failure)


def enabled(mode: str, target_name: str) -> bool:
    """Whether checks against target_name run in a worker process under --isolate mode."""
    if mode not in MODES:
        raise ValueError(f"--isolate must be one of {', '.join(MODES)}, got {mode!r}")
    return mode == "on" or (mode == "auto" and target_name != OWN_KERNELS)


def compile_counts() -> tuple:
    """(kernel variants requested, Triton compilations) of the project's kernels in this process
    ((0, 0) when they were not imported: a target of its own does not pay for importing them)."""
    if OWN_KERNELS not in sys.modules:
        return (0, 0)
    try:
        from softmax_properties import kernels
        from softmax_properties.kernels import _launch
        return (len(_launch.VARIANTS), kernels.compiled_kernel_count())
    except Exception:
        return (0, 0)


# ----------------------------------------------------------------------------------------------
# the pytest process
# ----------------------------------------------------------------------------------------------
class Crash:
    """No answer: the worker died, hung or lost its CUDA context. reason: one line; short: the
    class qualifier (the signal's name, "CUDA error: ...", "timeout"); detail: where it was."""

    def __init__(self, reason: str, short: str, detail: str = ""):
        self.reason, self.short, self.detail = reason, short, detail


class Worker:
    """The worker process of this pytest process: started on first use, reused for every check,
    restarted after a crash."""

    def __init__(self, threads: int = None, gpu: int = None):
        self.threads, self.gpu = threads, gpu
        self.proc = self.conn = self.fault_path = None
        self.starts = 0
        self.compiles_dead = (0, 0)  # compilation counts of workers that crashed
        self.compiles_now = (0, 0)

    # ---- lifetime
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self, preload=()):
        ctx = _context(preload)
        parent, child = ctx.Pipe()
        fd, self.fault_path = tempfile.mkstemp(prefix="properties-worker-", suffix=".txt")
        os.close(fd)
        filters = [f for f in warnings.filters if _pickles(f)]  # the same warnings shown or ignored there
        self.proc = ctx.Process(target=_serve, name="properties-isolation-worker", daemon=True,
                                args=(child, self.fault_path, self.threads, self.gpu, filters))
        # OpenMP threads that sleep when idle, not spin (unless the user chose): measured on 2 cores,
        # spinning threads of the worker made torch's small float64 ops in the checks up to 5x slower
        # than in-process (OpenMP reads this when torch is imported: by the fork server, which starts
        # here on first use, or by a spawned worker)
        # TRITON_INTERPRET: this process's choice, explicit, so that the fork server's import of the
        # suite does not query CUDA to make it (properties/__init__.py: a CUDA query in the server
        # breaks CUDA in every worker forked from it)
        unset = {k: v for k, v in (("OMP_WAIT_POLICY", "passive"), ("TRITON_INTERPRET", "0")) if k not in os.environ}
        os.environ.update(unset)
        try:
            self.proc.start()
        finally:
            for k in unset:
                del os.environ[k]
        child.close()
        self.conn = parent
        self.starts += 1
        got = self._answer(START_TIMEOUT)
        if isinstance(got, Crash):
            raise RuntimeError(f"the isolation worker did not start: {got.reason}\n{got.detail}")

    def stop(self):
        """End the worker (if running) and forget it."""
        if self.proc is not None:
            if self.proc.is_alive():
                try:
                    self.conn.send(None)
                except OSError:
                    pass
                self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        if self.fault_path and os.path.exists(self.fault_path):
            os.remove(self.fault_path)
        self.proc = self.conn = self.fault_path = None

    # ---- requests
    def request(self, msg, timeout: float, preload=()):
        """Send msg and return the worker's answer, or a Crash (the worker is then restarted on
        the next request)."""
        if not self.alive():
            self.stop()
            self.start(preload)
        try:
            self.conn.send(msg)
        except OSError:  # it died between two requests (nothing of this example ran)
            got = self._died()
        else:
            got = self._answer(timeout)
        if isinstance(got, Crash):
            self.retire()
        return got

    def retire(self):
        """Stop a worker that crashed, keeping its compilation counts; the next request starts another."""
        self.compiles_dead = tuple(a + b for a, b in zip(self.compiles_dead, self.compiles_now))
        self.compiles_now = (0, 0)
        self.stop()

    def _answer(self, timeout: float):
        ready = wait([self.conn, self.proc.sentinel], timeout)
        if self.conn in ready or (ready and self.conn.poll(0)):
            try:
                return self.conn.recv()
            except (EOFError, OSError):
                pass
        if not ready:
            return self._hung(timeout)
        return self._died()

    def _died(self) -> Crash:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason, short = f"{name} (the worker process was killed by signal {-code})", name
        else:
            reason, short = f"the worker process exited with status {code}", f"exit {code}"
        return Crash(reason, short, self._where())

    def _hung(self, timeout: float) -> Crash:
        if hasattr(signal, "SIGUSR1"):  # the worker's faulthandler writes where it is stuck
            try:
                os.kill(self.proc.pid, signal.SIGUSR1)
                self.proc.join(2)
            except OSError:
                pass
        self.proc.kill()
        self.proc.join(5)
        return Crash(f"no answer within {timeout:g} s (a hang?); the worker process was killed", "timeout",
                     self._where())

    def _where(self) -> str:
        """The Python stack the worker's faulthandler wrote when it died (or was asked), if any."""
        try:
            with open(self.fault_path) as f:
                lines = [ln.rstrip() for ln in f if ln.startswith("  File ")]
        except OSError:
            return ""
        cut = next((k for k, ln in enumerate(lines) if os.path.basename(__file__) in ln), len(lines))
        lines = lines[:cut]  # the frames above the check are the worker's own machinery
        if not lines:
            return ""
        return "  where the worker was (most recent call first):\n" + "\n".join("  " + ln for ln in lines[:16])


_WORKER: Worker = None
GPU_INDEX: int = None  # the GPU of this pytest process (plugin._place_worker); None: the current one


def worker() -> Worker:
    """This process's worker (created on first use, with this process's torch threads and GPU;
    started by its first request)."""
    global _WORKER
    if _WORKER is None:
        import torch
        _WORKER = Worker(torch.get_num_threads(), GPU_INDEX)
    return _WORKER


def shutdown():
    global _WORKER
    if _WORKER is not None:
        _WORKER.stop()
        _WORKER = None


def _context(preload):
    """The fork server's context (spawn where there is none). Its preload is set once, before it
    first starts: the suite's modules and, without CUDA, the target (a third-party module might
    touch CUDA when imported, and the fork server must not)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "triton", "numpy", "numpy.random", "hypothesis", "softmax_properties.oracles",
                                f"{__package__}.invariants", f"{__package__}.isolation", *preload])
    return ctx


def _spec(target) -> tuple:
    return (target.name, target.device, getattr(target, "record", True))


def _preload(target) -> tuple:
    return (target.name,) if target.device != "cuda" else ()


def check(inv, case, target, timeout: float = DEFAULT_TIMEOUT):
    """inv.check(case, target) in the worker process, with the same outcome in this one: returns
    on a pass; hypothesis.reject() on a rejected example; raises the PropertyFailure, a ``Raised``
    failure for any other exception, or a ``TargetCrashed`` one when the worker crashed."""
    from .failures import Raised, TargetCrashed, failure_class
    w = worker()
    got = w.request(("check", inv.name, case, _spec(target)), timeout, _preload(target))
    if isinstance(got, Crash):
        raise _failure(inv, case, target, f"target crashed: {got.reason}", failure_class(TargetCrashed, got.short),
                       got.detail)
    outcome, payload, side, restart = got
    _replay(side, w)
    if restart:  # the check accepted a lost CUDA context (record.accept_context_loss): the worker has exited
        w.retire()
    if outcome == "pass":
        return
    if outcome == "reject":
        import hypothesis
        hypothesis.reject()
    if outcome == "fail":
        raise payload
    if outcome == "crashed":  # the worker's CUDA context is gone: it has exited
        reason, detail = payload
        w.retire()
        raise _failure(inv, case, target, f"target crashed: {reason}",
                       failure_class(TargetCrashed, reason.split("\n")[0][:80]), detail)
    type_name, where, message, text = payload
    first = message.strip().splitlines()[0] if message.strip() else ""
    raise _failure(inv, case, target, f"raised {type_name}" + (f": {first}" if first else ""),
                   failure_class(Raised, type_name, where), "  raised in the worker process:\n" + _indent(text))


def supports_autograd(target, op: str) -> bool:
    """Target.supports_autograd, probed in the worker (the probe calls the target): the probe's
    answer for every dtype (Target.autograd_probe) is cached on target, so the laws and skip
    reasons read it without calling the target in this process."""
    if op not in target._autograd:
        w = worker()
        got = w.request(("autograd", _spec(target), op), DEFAULT_TIMEOUT, _preload(target))
        if isinstance(got, Crash):
            target._autograd[op] = {dtype: f"target crashed: {got.reason}" for dtype in target.PROBE_DTYPES}
            return False
        probe, broken = got
        if broken:  # the worker lost its CUDA context and has exited
            w.retire()
        target._autograd[op] = probe
    return target.supports_autograd(op)


def _failure(inv, case, target, what, kind, detail=""):
    """The failure case.fail raises for what (so it names the law, its tier and the case, and
    prints its reproducer), with detail appended to its message."""
    from .case import fail
    from .failures import PropertyFailure
    try:
        fail(inv.name, case, target, what, kind=kind, tier=inv.tier)
    except PropertyFailure as e:
        return type(e)(str(e) + ("\n" + detail if detail else ""))
    raise AssertionError("case.fail returned")  # pragma: no cover


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.rstrip().splitlines())


def _replay(side, w: Worker):
    """What the check did besides its outcome, done again in this process."""
    import hypothesis
    from . import record
    observations, rec, caught, compiles = side
    for value, label in observations:
        try:  # only valid inside a @given test, as in the invariants themselves
            hypothesis.target(value, label=label)
        except hypothesis.errors.InvalidArgument:
            pass
    record.current().merge(rec)  # the worker's statistics and refusals count as this process's check's
    for category, message, filename, lineno in caught:  # shown once per place, as a module's registry does
        warnings.warn_explicit(message, category, filename, lineno, registry=_SHOWN)
    w.compiles_now = compiles


_SHOWN: dict = {}  # the warnings registry of the worker's warnings shown here


def total_compiles() -> tuple:
    """Compilation counts over every worker of this process (the running one and those that crashed)."""
    w = _WORKER
    if w is None:
        return (0, 0)
    return tuple(a + b for a, b in zip(w.compiles_dead, w.compiles_now))


# ----------------------------------------------------------------------------------------------
# the worker process
# ----------------------------------------------------------------------------------------------
_OBSERVED: list = []


def _observe(observation, *, label=""):
    """hypothesis.target in the worker: recorded, and replayed by the pytest process."""
    _OBSERVED.append((float(observation), label))
    return observation


def _serve(conn, fault_path, threads, gpu, filters):
    """The worker's loop: one request at a time until the pytest process goes away."""
    fault = open(fault_path, "w")
    faulthandler.enable(fault)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, fault)
    import torch

    from . import hypothesis_compat, interpreter
    if threads:
        torch.set_num_threads(threads)
    if interpreter.interpreting():
        interpreter.install()
    hypothesis_compat.redirect_target(_observe)  # this process runs checks only; the pytest process targets
    targets = {}
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the pytest process is gone
            return
        if msg is None:
            return
        if msg[0] == "autograd":
            _, spec, op = msg
            target = _target(targets, spec, gpu)
            probe = target.autograd_probe(op)
            broken = target.device == "cuda" and bool(_cuda_broken())  # the probe's launch broke the context
            conn.send((probe, broken))
            if broken:
                os._exit(0)
            continue
        _, inv_name, case, spec = msg
        answer = _check(inv_name, case, _target(targets, spec, gpu), filters)
        conn.send(answer)
        outcome, _, _, restart = answer
        if outcome == "crashed" or restart:
            os._exit(0)  # the CUDA context cannot be used again


def _target(targets, spec, gpu):
    if spec not in targets:
        from .ops import Target
        name, device, record = spec
        if device == "cuda" and gpu is not None:
            import torch
            torch.cuda.set_device(gpu)
        t = Target(name)
        t.device, t.record = device, record
        targets[spec] = t
    return targets[spec]


def _check(inv_name, case, target, filters):
    from hypothesis.errors import HypothesisDeprecationWarning

    from .failures import PropertyFailure
    from .hypothesis_compat import UnsatisfiedAssumption
    from .invariants import law
    from .record import recording
    inv = law(inv_name)
    _OBSERVED.clear()
    cuda = target.device == "cuda"
    with warnings.catch_warnings(record=True) as caught, recording() as rec:
        warnings.filters[:] = filters
        # assume() and reject() outside a Hypothesis test warn; here they are the rejection
        warnings.filterwarnings("ignore", message=r"Using `(assume|reject)` outside", category=HypothesisDeprecationWarning)
        err = None
        try:
            inv.check(case, target)
            outcome, payload = "pass", None
        except UnsatisfiedAssumption:
            outcome, payload = "reject", None
        except PropertyFailure as e:
            from .report import law_line_of
            e.law_line = law_line_of(e)  # the traceback stays here; the report's pointer to the law goes along
            outcome, payload = "fail", e
        except Exception as e:  # noqa: BLE001 - every other exception is reported as it is
            outcome, payload, err = "raised", _raised(e), e
        accepted = rec.context_lost  # the law caught a device-side assert as its accepted outcome
        if cuda:  # an asynchronous error of this example's launches surfaces here, not in the next example
            import torch
            try:
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                if outcome in ("pass", "reject") and not accepted:
                    outcome, payload, err = "raised", _raised(e), e
        if cuda and outcome not in ("pass", "reject"):
            broken = _cuda_broken()
            if broken:
                detail = ("  the CUDA context is lost; the worker synchronizes after every check, so the error "
                          "comes from this example's launches")
                if outcome == "raised":
                    detail += "\n  raised in the worker process:\n" + _indent(_format(err))
                outcome, payload = "crashed", (broken, detail)
    notes = [(w.category if _pickles(w.category) else UserWarning, str(w.message), w.filename, w.lineno) for w in caught]
    if outcome == "fail" and not _pickles(payload):  # a failure that does not pickle travels as its text
        outcome, payload = "raised", _raised(payload)
    restart = cuda and accepted and outcome in ("pass", "reject")
    return outcome, payload, (list(_OBSERVED), rec, notes, compile_counts()), restart


def _raised(e: BaseException) -> tuple:
    """(type name, innermost file:line, message, formatted traceback) of an exception."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
    return type(e).__name__, where, str(e), _format(e)


def _format(e: BaseException) -> str:
    """The traceback of an exception raised by a check, from the check down (not the worker's loop)."""
    tb = e.__traceback__
    if tb is not None and tb.tb_next is not None and tb.tb_frame.f_code is _check.__code__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def _cuda_broken() -> str:
    """'' when the CUDA context still works, else the first line of the error using it raises."""
    import torch
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).sum().item()
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa: BLE001 - whatever the probe raises means the context is gone
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return line


def _pickles(obj) -> bool:
    import pickle
    try:
        pickle.dumps(obj)
        return True
    except Exception:
        return False
