"""The pytest plugin: options, markers, Hypothesis profiles, collection, report header and summary.

Loaded through the distribution's ``pytest11`` entry point, so it is active in every pytest run
of an environment the distribution is installed in. Its options and markers always exist; the
rest (the Hypothesis profile, shape limits, the interpreter's patches, warning filters, the
expected failures) applies only to a run that collects the suite (``_suite_collected``), so a
kernel repository's own tests run as they would without it.

* ``--target TARGET``: the module under test: a built-in target's short name (``kernels``, the
  default: the project's own kernels; ``torch``, ``torch_compile``, ``naive_triton``, ``liger``,
  ``fla``; properties/targets/__init__.py) or any importable module path.
* ``--isolate {auto,on,off}``: run each check in a worker process that may crash
  (properties/isolation.py); auto: on for every target but the project's kernels.
* markers: ``properties`` on every test of this package, ``selftest`` on the project's own tests
  (properties/selftest/: meta tests, the mutant zoo, the kernels' unit tests). Those are
  collected only when the target is the project's kernels: a ``--target`` of one's own runs the
  target-facing tests alone.
* test modules of this package are imported under their package name (``_PackageModule``),
  whatever pytest's ``--import-mode``: pytest would name them after their folder
  (``properties.test_properties``), a second copy of every module they import, registries
  included.
* profiles: ``ci`` (CPU interpreter: deterministic, small shapes), ``dev``, ``gpu`` (default when
  CUDA is present: 1,000 examples per property), ``nightly`` (10,000 examples, larger batches).
  Choose with Hypothesis's own ``--hypothesis-profile``. matches_oracle feeds
  ``hypothesis.target`` the fraction of the derived bound an output used, so the search climbs
  towards the worst case (every profile but ``ci``, which skips Hypothesis's target phase: under
  the interpreter the climb re-ran a test's kernels about twice as often as its 30 cases did, 53 of
  the 85 s of many_rows_match_oracle on cross_entropy_backward); the summary prints the largest
  fraction (and the error in ulps) found per op and dtype.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from . import hypothesis_compat, interpreter, isolation, report, strategies as S, targets
from .record import merge_worst
from .spec import OPS

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                      HealthCheck.function_scoped_fixture])
# registered when the plugin loads, so that --hypothesis-profile finds them; "ci" replaces
# Hypothesis's own profile of that name (which Hypothesis loads by itself on CI machines), so it is
# registered only for a run that collects the suite (pytest_configure)
# Hypothesis's explain phase is left out: the lines it names as "always and only run by failing
# examples" are the suite's own (case.py, the report's code), never the target's
_PHASES = [p for p in Phase if p.name != "explain"]
CI_PROFILE = settings(max_examples=30, derandomize=True, phases=[p for p in _PHASES if p is not Phase.target], **_COMMON)
settings.register_profile("dev", max_examples=100, phases=_PHASES, **_COMMON)
settings.register_profile("gpu", max_examples=1000, phases=_PHASES, **_COMMON)
settings.register_profile("nightly", max_examples=10000, phases=_PHASES, **_COMMON)

LIMITS = {  # shape limits per profile (many_rows: the rows of many-rows cases, strategies.MANY_ROWS)
    "ci": S.Limits(max_rows=6, max_cols=1100, long_cols=2100, max_elems=8192, many_rows=2100),
    "dev": S.Limits(max_rows=8, max_cols=4200, long_cols=20000, max_elems=65536, many_rows=16500),
    "gpu": S.Limits(max_rows=16, max_cols=70000, long_cols=1_100_000, max_elems=2**21, many_rows=70000),
    "nightly": S.Limits(max_rows=32, max_cols=70000, long_cols=1_100_000, max_elems=2**22, many_rows=140000),
}

# gathered from test reports (so it works under pytest-xdist too) and printed in the summary
WORST_ULP: dict = {}  # (op, dtype) -> {statistic: largest value} (record.record_worst)
STATS: dict = {}  # test id -> (examples, seconds)
COMPILES: dict = {}  # worker -> (variants requested, Triton compilations)
REPLAYS: list = []  # replay files written for this run's failures (properties/replay.py)


_LOG_PATH = None  # --properties-log, in the process that writes it (the xdist controller, or the only one)


def _log(report):
    """--properties-log: one line per finished test, and each failure's full report, written as
    the report arrives (under xdist by the controller alone), so a run cut short by a time limit
    still leaves them."""
    if not _LOG_PATH or (report.when != "call" and report.passed):
        return
    n, t = next((tuple(v) for k, v in report.user_properties if k == "softmax_stats"), (0, 0.0))
    outcome = report.outcome.upper()
    if hasattr(report, "wasxfail"):  # pytest reports an xfailed test as skipped, an xpassed one as passed
        outcome = "XFAIL" if report.skipped else "XPASS"
    with open(_LOG_PATH, "a") as f:
        f.write(f"{outcome:8s} {report.when:5s} {report.duration:8.1f}s {n:6d} examples  {report.nodeid}\n")
        if report.failed:
            f.write(report.longreprtext + "\n" + "-" * 100 + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed target-facing test reports the law's message first and none of the runner's
    frames (properties/report.py), unless --tb asks for one of pytest's styles."""
    outcome = yield
    rep = outcome.get_result()
    if (call.when == "call" and rep.failed and call.excinfo is not None and item.config.option.tbstyle == "auto"
            and getattr(item.config, "_softmax_in_use", False) and module_name(item.path) is not None
            and not item.get_closest_marker("selftest")):
        rep.longrepr = report.failure_text(call.excinfo.value)


def pytest_runtest_logreport(report):
    _log(report)
    if report.when != "call":
        return
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
    for key, val in report.user_properties:
        if key == "softmax_stats":
            STATS[report.nodeid.split("::")[-1]] = tuple(val)
        elif key == "softmax_ulps":
            merge_worst(WORST_ULP, val)
        elif key == "softmax_compiles":
            COMPILES[worker] = tuple(val)
        elif key == "softmax_replay":
            REPLAYS.append(val)


# ----------------------------------------------------------------------------------------------
# collection: this package's tests under their package names; the project's own tests apart
# ----------------------------------------------------------------------------------------------
PACKAGE_DIR = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
SELFTEST = f"{__package__}.selftest"  # the project's own tests (properties/selftest/)
WARNINGS = ("ignore::RuntimeWarning:triton.runtime.interpreter",  # numpy overflow inside interpreted kernels
            "ignore:.*deterministic.*:UserWarning")  # torch's note on deterministic algorithms


def module_name(path) -> str | None:
    """The import name of a file or folder inside this package (None outside it)."""
    rel = os.path.relpath(os.path.realpath(str(path)), PACKAGE_DIR)
    if rel == os.curdir:
        return __package__
    if rel.startswith(os.pardir) or os.path.isabs(rel):
        return None
    parts = rel[:-3].split(os.sep) if rel.endswith(".py") else rel.split(os.sep)
    return ".".join([__package__, *parts])


class _PackageModule(pytest.Module):
    """A test module of this package, imported by its package name."""

    def _getobj(self):
        mod = importlib.import_module(module_name(self.path))
        self.config.pluginmanager.consider_module(mod)
        return mod


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    if module_name(module_path) is not None:
        return _PackageModule.from_parent(parent, path=module_path)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path, parent):
    """This package's folders as plain directories: pytest's Package collector would import each
    __init__.py by its folder's name (a second copy of the package)."""
    if module_name(path) is not None:
        return pytest.Dir.from_parent(parent, path=path)
    return None


def pytest_ignore_collect(collection_path, config):
    """The project's own tests run against the project's kernels only."""
    if module_name(collection_path) == SELFTEST and config.getoption("target") != targets.OWN_KERNELS:
        return True
    return None  # not False: that would overrule pytest's own --ignore


def _suite_collected(config) -> bool:
    """Whether the run's arguments reach this package: a path inside it or above it (the
    checkout's root, its testpaths), or, with --pyargs, a module of it."""
    for arg in config.args:
        where = arg.split("::")[0]
        if config.getoption("pyargs", False):
            try:
                spec = importlib.util.find_spec(where)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.origin not in (None, "namespace"):
                where = os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin
        path = os.path.realpath(os.path.join(str(config.invocation_params.dir), where))
        if path == PACKAGE_DIR or path.startswith(PACKAGE_DIR + os.sep) or PACKAGE_DIR.startswith(path + os.sep):
            return True
    return False


def _profile_name(config) -> str:
    name = config.getoption("hypothesis_profile", None)
    if name:
        return name
    return hypothesis_compat.profile_name()


def pytest_addoption(parser):
    group = parser.getgroup("softmax-properties", "softmax-family property suite")
    group.addoption("--target", default="kernels", metavar="TARGET",
                    help="the module whose softmax/log_softmax/logsumexp/... are tested: a built-in target ("
                         + ", ".join(targets.BUILTIN) + "; default: kernels, the project's own) or any importable "
                         "module path; any other target runs the target-facing tests alone")
    group.addoption("--tier", default="default", choices=("default", "strict"),
                    help="default: the laws every correct implementation passes (a failure is a bug); strict: "
                         "those plus the reproducibility and robustness guarantees beyond them (bitwise layout / "
                         "dim / shift invariance, overflow-free extremes, the tight reduction-depth bound); "
                         "see docs/tiers.md")
    group.addoption("--properties-log", default=None, metavar="PATH",
                    help="append a line per finished test and every failure's report to PATH as they happen")
    group.addoption("--properties-examples", type=int, default=None, metavar="N",
                    help="examples per property, overriding the profile's max_examples (its shapes stay)")
    group.addoption("--xfails", default=None, metavar="PATH",
                    help="expected failures (default: the built-in target's properties/xfails/<target>.txt); "
                         "see properties/expected.py")
    group.addoption("--properties-failures", default=".properties-failures", metavar="DIR",
                    help="write each failing case as a replay script to DIR (relative to the rootdir; '' turns it off); "
                         "replay: python -m softmax_properties.properties.replay FILE --target TARGET")
    group.addoption("--isolate", default="auto", choices=isolation.MODES,
                    help="run each invariant check in a worker process, so that a crash of the target (a segfault, a "
                         "broken CUDA context, a hang) is a failure Hypothesis shrinks and the run goes on "
                         "(auto, the default: on for every --target but the project's kernels); see properties/isolation.py")
    group.addoption("--isolate-crash-budget", type=float, default=isolation.CRASH_BUDGET, metavar="SECONDS",
                    help="with --isolate: a test whose crashed checks (each restarts the worker) took SECONDS stops "
                         "and reports the smallest crashing case seen; 0: no budget; "
                         f"default {isolation.CRASH_BUDGET:g}")
    group.addoption("--isolate-timeout", type=float, default=isolation.DEFAULT_TIMEOUT, metavar="SECONDS",
                    help="with --isolate: a check without an answer after SECONDS is a crash (a hang); "
                         f"default {isolation.DEFAULT_TIMEOUT:g}")


@pytest.hookimpl(trylast=True)  # after Hypothesis's own plugin has loaded --hypothesis-profile
def pytest_configure(config):
    global _LOG_PATH
    config.addinivalue_line("markers", "properties: property-based correctness tests of softmax-family kernels")
    config.addinivalue_line("markers", "selftest: the project's own tests (properties/selftest/), collected only "
                                       "when --target is the project's kernels")
    config.addinivalue_line("markers", "tier(name): the tier of a test that is not a registered invariant "
                                       "('strict' runs only with --tier strict)")
    try:
        config.option.target = targets.resolve(config.getoption("target"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    config._softmax_in_use = _suite_collected(config)
    if not config._softmax_in_use:
        return
    _LOG_PATH = None if hasattr(config, "workerinput") else config.getoption("properties_log", None)
    _hand_out_one_at_a_time(config.option)
    for line in WARNINGS:
        config.addinivalue_line("filterwarnings", line)
    settings.register_profile("ci", CI_PROFILE)  # takes effect at once where "ci" is already the active profile
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("gpu" if torch.cuda.is_available() else "ci")
    if interpreter.interpreting():  # compiled Triton's autotune, 16-bit rounding and float32 scalar arguments
        interpreter.install()
    prof = _profile_name(config)
    S.set_limits(LIMITS.get(prof, LIMITS["dev"]))
    config._softmax_profile = prof
    n = config.getoption("properties_examples", None)
    if n is not None:
        if n < 1:
            raise pytest.UsageError(f"--properties-examples must be a positive integer, got {n}")
        parent = hypothesis_compat.profile(prof)
        settings.register_profile(f"{prof}-{n}", parent=parent, max_examples=n)
        settings.load_profile(f"{prof}-{n}")
    if not config.getoption("isolate_crash_budget", isolation.CRASH_BUDGET) >= 0:
        raise pytest.UsageError("--isolate-crash-budget must be a non-negative number of seconds, got "
                                f"{config.getoption('isolate_crash_budget')}")
    t = config.getoption("isolate_timeout", isolation.DEFAULT_TIMEOUT)
    if not t > 0:
        raise pytest.UsageError(f"--isolate-timeout must be a positive number of seconds, got {t}")
    wi = getattr(config, "workerinput", None)
    if wi:
        _place_worker(wi)
    else:  # once per run, before any test: a target that cannot be tested at all is one error
        _check_target(config)
    # the skip reasons ("target mykern has no logsumexp") and xfails are part of the verdict:
    # listed at the end even where the repository's own configuration has no -ra (--pyargs runs)
    chars = config.option.reportchars or ""
    if "N" not in chars and "a" not in chars and "A" not in chars:
        config.option.reportchars = chars + "".join(c for c in "fEsxX" if c not in chars)
        tr = config.pluginmanager.get_plugin("terminalreporter")  # configured before this plugin
        if tr is not None:
            from _pytest.terminal import getreportopt
            tr.reportchars = getreportopt(config)


def _check_target(config) -> None:
    """UsageError, naming what to fix, when the target does not import, declares
    NONDETERMINISTIC wrongly, or an offered function cannot take the calls of the contract
    (docs/contract.md)."""
    from .ops import Target, TargetError
    try:
        t = Target(config.getoption("target"))
        t.nondeterministic_ops()
        errors = t.contract_errors()
    except (TargetError, ValueError) as e:
        raise pytest.UsageError(str(e)) from None
    if errors:
        raise pytest.UsageError(
            f"--target {t.name}: {len(errors)} function(s) cannot take the calls of the contract (README, 'Test your "
            "own kernel'); fix or rename them:\n  " + "\n  ".join(errors))


def _place_worker(wi: dict) -> None:
    """pytest-xdist worker gwK: its own GPU, K modulo the visible GPUs (workers round-robin over
    them), and its share of the CPU cores (torch would give every worker all of them). Its
    isolation worker (properties/isolation.py) gets the same GPU and threads."""
    n = max(1, int(wi.get("workercount", 1)))
    isolation.THREADS = max(1, (os.cpu_count() or 1) // n)
    torch.set_num_threads(isolation.THREADS)
    if interpreter.device() == "cuda":
        k = int(str(wi.get("workerid", "gw0")).lstrip("gw") or 0)
        isolation.GPU_INDEX = k % torch.cuda.device_count()
        torch.cuda.set_device(isolation.GPU_INDEX)


def pytest_unconfigure(config):
    isolation.shutdown()


def pytest_collection_modifyitems(config, items):
    if not getattr(config, "_softmax_in_use", False):
        return
    from . import expected
    for item in items:
        name = module_name(item.path)
        if name is not None:
            item.add_marker(pytest.mark.properties)
            if name.startswith(SELFTEST + "."):
                item.add_marker(pytest.mark.selftest)
    # the tier: strict-tier laws run only with --tier strict (before the expected failures are
    # applied, so an xfails entry naming a strict law still matches a collected test)
    if config.getoption("tier") != "strict":
        keep, drop = [], []
        for item in items:
            (drop if item_tier(item) == "strict" else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
            config._softmax_strict_deselected = len(drop)
    items[:] = sorted(items, key=_longest_first)
    # expected failures: runs before -k/-m deselection, so "matches no test" means no test at all;
    # under xdist every worker collects everything, so one of them warns
    worker = getattr(config, "workerinput", {}).get("workerid", "gw0")
    expected.apply(expected.load(config), items, warn=worker == "gw0", device=interpreter.device())


# the laws that took longest on an H200 (gpu profile: 60-190 s, against 20-40 s for most), and
# the families whose laws took longest on average (45-110 s, against 28-39 s): docs/results.md
_LONG_LAWS = ("many_rows_match_oracle", "autograd_backward_twice", "autograd_composition", "dim_argument")
_LONG_FAMILIES = ("attention", "cross_entropy", "merge", "merge_states")
# the project's tests that start pytest or worker processes of their own (10-40 s each on an H200,
# against seconds for the rest): with the laws, so that a run does not end waiting for them
_SLOW_SELFTESTS = ("test_isolation", "test_first_hour", "test_tooling", "test_layout")


def _hand_out_one_at_a_time(option) -> None:
    """pytest-xdist's load scheduling hands each worker a chunk of consecutive tests first (636
    tests, 16 workers: 9 each); one at a time (--maxschedchunk 1, unless the user chose a chunk)
    keeps the longest-first order of _longest_first."""
    if getattr(option, "maxschedchunk", 0) is None:
        option.maxschedchunk = 1


def _longest_first(item) -> int:
    """Run order (a stable sort: collection order within a rank): the stateful merge tests first
    (about 1,000 examples of up to 10 calls each, 140-220 s on an H200), then the laws expected
    to take longest, then the other laws with the project's tests that start processes, and the
    project's other tests (short, mostly seconds) last. pytest-xdist hands tests out in this
    order, one at a time (pytest_configure sets --maxschedchunk 1), so a run ends on short tests
    instead of waiting for a long one handed out late: on a GPU a run's worker time was 6,800 s
    over 16 workers (425 s each) while the run took 567 s. Within a rank the laws keep the
    registry's order, law by law over the ops: workers that start together work on different
    ops and rarely compile the same Triton kernel at the same time (compiling is about a fifth
    of a GPU run's worker time, docs/results.md)."""
    name = module_name(item.path) or ""
    if name.endswith(".test_merge_stateful"):
        return 0
    if name.startswith(SELFTEST + "."):
        return 2 if name.rsplit(".", 1)[-1] in _SLOW_SELFTESTS else 3
    params = getattr(getattr(item, "callspec", None), "params", {})
    inv, op = params.get("inv"), params.get("op")  # the law, and the op's name
    family = getattr(OPS.get(op) if isinstance(op, str) else op, "family", "")
    if getattr(inv, "name", "") in _LONG_LAWS or family in _LONG_FAMILIES:
        return 1
    return 2


def item_tier(item) -> str:
    """The tier of a collected test: its invariant's (test_property), or a tier marker's
    (``@pytest.mark.tier("strict")``); everything else is default."""
    inv = getattr(getattr(item, "callspec", None), "params", {}).get("inv")
    if inv is not None and hasattr(inv, "tier"):
        return inv.tier
    mark = item.get_closest_marker("tier")
    return mark.args[0] if mark else "default"


def pytest_report_header(config):
    if not getattr(config, "_softmax_in_use", False):
        return []
    import triton
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    dev = (f"{n} x {torch.cuda.get_device_name(0)}" if n > 1 else torch.cuda.get_device_name(0)) if n else "cpu (Triton interpreter)"
    from . import replay
    iso = isolation.enabled(config.getoption("isolate"), config.getoption("target"))
    lines = [f"softmax-properties: device={dev} torch={torch.__version__} triton={triton.__version__} "
             f"profile={config._softmax_profile} tier={config.getoption('tier')} target={config.getoption('target')} "
             f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')} isolate={'on' if iso else 'off'}"]
    where = replay.failures_dir(config)
    left = sorted(f for f in os.listdir(where) if f.endswith(replay.PENDING)) if where and os.path.isdir(where) else []
    for f in left:  # a pending file is removed when its test ends: this one's process died during a check
        path = os.path.relpath(os.path.join(where, f))
        lines.append(f"softmax-properties: a run died while checking the case in {path}: "
                     f"python -m softmax_properties.properties.replay {path}")
    return lines + _interpreter_header()


def _interpreter_header() -> list:
    if not interpreter.interpreting():
        return []
    return ["interpreter patches: " + " ".join(f"{k}={v}" for k, v in interpreter.patches().items())]


@pytest.fixture(scope="session")
def target(pytestconfig):
    from .ops import OPS, Target
    t = Target(pytestconfig.getoption("target"))
    t.device = interpreter.device()
    b = getattr(t.module, "block_boundaries", None)
    if callable(b):
        try:  # the project's kernels have per-dtype boundaries; aim at all of them
            S.BOUNDARIES.values = tuple(sorted({v for d in S.DTYPES for v in b(d)}))
        except TypeError:
            S.BOUNDARIES.values = tuple(b())
    S.TARGET.module = t.module  # for what a family's strategies read from it
    S.OFFERED.values = {name: t.offered(name) for name in OPS}
    return t


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if not getattr(config, "_softmax_in_use", False):
        if any(a == "--target" or a.startswith("--target=") for a in config.invocation_params.args):
            tr.write_line("softmax-properties: --target was given, but this run collects none of the suite's tests. "
                          "From your own repository, run the installed suite: python -m pytest --pyargs "
                          f"softmax_properties.properties -m properties --target {config.getoption('target')}",
                          yellow=True, bold=True)
        return
    n = getattr(config, "_softmax_strict_deselected", 0)
    if n:
        tr.write_line(f"softmax-properties: tier=default; {n} strict-tier tests not run (--tier strict runs them)")
    if STATS:
        tr.section("softmax-properties: examples per property")
        total_n = total_t = 0
        for name, (n, t) in sorted(STATS.items()):
            total_n += n
            total_t += t
            tr.write_line(f"{name:70s} {n:6d} examples {n / max(t, 1e-9):9.1f}/s")
        tr.write_line(f"{'all':70s} {total_n:6d} examples {total_n / max(total_t, 1e-9):9.1f}/s  ({total_t:.1f}s)")
    if WORST_ULP:
        tr.section("softmax-properties: largest error found by matches_oracle, as a fraction of each tier's bound")
        tr.write_line(f"{'op':24s} {'dtype':10s} {'default':>8s} {'strict':>8s} {'torch':>8s} {'ulps of ref':>12s}"
                      "  (torch: torch's own error on the same inputs, of the default bound; ulps: of the "
                      "exact value where it is a normal number, large where a sum cancels to near 0)")
        for (op, dt), st_ in sorted(WORST_ULP.items()):
            cells = [f"{st_[k]:8.3f}" if k in st_ else f"{'-':>8s}" for k in ("default", "strict", "torch")]
            ulps = f"{st_['ulps']:12.3g}" if "ulps" in st_ else f"{'-':>12s}"
            tr.write_line(f"{op:24s} {dt:10s} {' '.join(cells)} {ulps}")
    if REPLAYS:
        tr.section("softmax-properties: counterexamples saved")
        for path in REPLAYS:
            tr.write_line(f"python -m softmax_properties.properties.replay {path} [--target TARGET]")
    if COMPILES:
        v = sum(c[0] for c in COMPILES.values())
        n = sum(c[1] for c in COMPILES.values())
        tr.write_line(f"kernel variants requested: {v}; Triton compilations: {n} "
                      f"(over {len(COMPILES)} process{'es' if len(COMPILES) > 1 else ''})")
