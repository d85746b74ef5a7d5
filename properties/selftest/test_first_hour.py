"""A kernel author's first runs against a module of their own: a broken module never goes green,
each mistake gives one clear error that says what to do, and a failure's report reads at a
glance. Each test runs pytest in a subprocess, as the author would, on a module written to a
temporary folder."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ..failures import KINDS

KINDS = {f"{k}{q}" for k in KINDS for q in ("", "[16-bit]")}  # how a report's first line names its class

ONE = "matches_oracle-softmax and not backward and not merge"  # one test: matches_oracle on softmax
CORRECT = """\
import torch

def softmax(x):
    return torch.softmax(x.double(), -1).to(x.dtype)
"""


def _pytest(cwd, *args, timeout=300, env=None):
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return run.returncode, run.stdout + run.stderr


def _suite(tmp_path, target, *args, **kw):
    """The installed suite, run from tmp_path (the author's repository) with --pyargs."""
    return _pytest(tmp_path, "--pyargs", "softmax_properties.properties.test_properties", "-m", "properties",
                   "--hypothesis-profile=ci",  # small shapes on a GPU too: these tests are about the run, not the kernels
                   "--target", target, "--properties-failures", "", "--properties-examples", "5", "--isolate", "off", *args,
                   **kw)


def _module(tmp_path, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))


def test_a_function_that_cannot_take_the_call_is_one_usage_error(tmp_path):
    """softmax(x, scale) and log_softmax() raised TypeError on every call, which the suite took
    as refusals: every law skipped, exit status 0."""
    _module(tmp_path, "badsig", """\
        import torch

        def softmax(x, scale):
            return torch.softmax(x * scale, -1)

        def log_softmax():
            pass
        """)
    rc, out = _suite(tmp_path, "badsig", "-k", "matches_oracle")
    assert rc == 4, out  # pytest's usage error: no test ran
    assert "badsig.softmax(x, scale): missing a required argument: 'scale'; expected softmax(x)" in out, out
    assert "badsig.log_softmax(): too many positional arguments; expected log_softmax(x)" in out, out


def test_a_module_that_does_not_import_is_one_error_with_its_traceback_once(tmp_path):
    _module(tmp_path, "broken", """\
        import torch
        import a_dependency_that_is_missing

        def softmax(x):
            return torch.softmax(x, -1)
        """)
    rc, out = _suite(tmp_path, "broken")
    assert rc != 0, out
    assert "--target 'broken': importing the module raised ModuleNotFoundError" in out, out
    assert out.count("import a_dependency_that_is_missing") == 1, out
    assert len(out.splitlines()) < 20, out


def test_not_importable_says_how_and_a_file_path_is_a_target(tmp_path):
    kern = tmp_path / "elsewhere"
    kern.mkdir()
    _module(kern, "mykern", CORRECT)
    rc, out = _suite(tmp_path, "mykern", "-k", ONE)
    assert rc == 4 and "no module named 'mykern' is importable from here" in out, out
    assert "PYTHONPATH" in out and "--target path/to/mykern.py" in out, out
    rc, out = _suite(tmp_path, os.path.join("elsewhere", "mykern.py"), "-k", ONE, "-n", "1")
    assert rc == 0 and "1 passed" in out, out  # under xdist too: the worker imports the file


def test_forgotten_pyargs_says_what_to_run_and_skip_reasons_are_listed(tmp_path):
    _module(tmp_path, "mykern", CORRECT)
    rc, out = _pytest(tmp_path, "-m", "properties", "--target", "mykern")
    assert rc == 5, out  # no tests ran
    assert ("python -m pytest --pyargs softmax_properties.properties -m properties --target mykern" in out), out
    rc, out = _suite(tmp_path, "mykern", "-k", "matches_oracle and (softmax or logsumexp)")
    assert rc == 0, out
    assert "SKIPPED" in out and "target mykern has no logsumexp" in out, out  # without -ra in any configuration


def test_a_law_every_example_of_which_is_refused_unannounced_fails(tmp_path):
    """NotImplementedError is a refusal by default; a law that judged nothing because of
    refusals the module did not declare fails, and declared ones skip it."""
    src = """\
        def softmax(x):
            raise NotImplementedError("not yet")
        """
    _module(tmp_path, "refuses", src)
    rc, out = _suite(tmp_path, "refuses", "-k", ONE)
    assert rc == 1 and "the law judged no example" in out and "does not declare SUITE_REFUSALS" in out, out
    _module(tmp_path, "declares", src + "SUITE_REFUSALS = (NotImplementedError,)\n")
    rc, out = _suite(tmp_path, "declares", "-k", ONE)
    assert rc == 0 and "1 skipped" in out and "the target refused" in out, out


def test_value_and_type_errors_are_failures_unless_declared(tmp_path):
    _module(tmp_path, "checks", """\
        import torch

        def softmax(x):
            if x.dim() != 2:
                raise ValueError(f"x must be 2-D, got {x.dim()} dimensions")
            return torch.softmax(x.double(), -1).to(x.dtype)
        """)
    rc, out = _suite(tmp_path, "checks", "-k", ONE, "--properties-examples", "30")
    assert rc == 1 and "ValueError: x must be 2-D" in out, out


def test_a_failure_reads_message_first_without_the_runners_source(tmp_path):
    _module(tmp_path, "nomax", """\
        import torch

        def softmax(x):
            e = torch.exp(x.double())
            return (e / e.sum(-1, keepdim=True)).to(x.dtype)
        """)
    rc, out = _suite(tmp_path, "nomax", "-k", ONE, "--properties-examples", "50")
    assert rc == 1, out
    report = out[out.index("test_property[matches_oracle-softmax] _"):]
    head = report.splitlines()[1:4]  # "N distinct failures" and a rule may come first
    assert any(line.split(":")[0] in KINDS and "[matches_oracle] (default tier)" in line for line in head), report
    assert "def test_property" not in out and "def check" not in out, out
    assert "reproducer:" in report and "law: properties/families/softmax/laws.py:" in report, report
    assert "from hypothesis import reproduce_failure" in report, report
    rc, out = _suite(tmp_path, "nomax", "-k", ONE, "--properties-examples", "50", "--tb=long")
    # --tb brings pytest's own report back: the runner's source for one failure, Python's
    # traceback of the group for several
    assert rc == 1 and ("def test_property" in out or "Traceback (most recent call last)" in out), out
