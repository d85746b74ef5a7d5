"""The distribution's layout: the checkout's folders install as softmax_properties.*, pytest loads
the plugin once and imports each module once (under its package name), a ``--target`` of one's
own runs only the target-facing tests, bad ``--target`` values name what was expected, and the
plugin leaves a run that does not collect the suite alone."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from .. import plugin, targets
from . import ROOT

PROBE = '''
import json, os, sys

import pytest

@pytest.hookimpl(trylast=True)  # after every other plugin has selected the items
def pytest_collection_modifyitems(config, items):
    from softmax_properties.properties import plugin
    pm = config.pluginmanager
    json.dump({
        "modules": sorted(sys.modules),
        "plugin_names": [name for name, p in pm.list_name_plugin() if p is plugin],
        "items": [[item.nodeid, sorted(getattr(item, "fixturenames", ()))] for item in items],
        "loaders": {m: type(getattr(sys.modules[m], "__loader__", None)).__name__
                    for m in sys.modules if m.rpartition(".")[2].startswith("test_")},
    }, open(os.environ["LAYOUT_PROBE_OUT"], "w"))
'''


def _collect(tmp_path, *args):
    """Collect the suite in a pytest subprocess from the checkout's root, as the README's command
    does; returns what the probe plugin saw there."""
    (tmp_path / "layout_probe.py").write_text(PROBE)
    out = tmp_path / "probe.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "LAYOUT_PROBE_OUT": str(out)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "layout_probe", "-m", "properties", "--co", "-q",
                          "--tier", "strict", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(out.read_text())


def test_packages_match_the_folders():
    """pyproject.toml's package list is every package folder under kernels/, oracles/ and
    properties/ except the project's own tests (which the wheel leaves out)."""
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    folders = {"kernels": "softmax_properties.kernels", "oracles": "softmax_properties.oracles",
               "properties": "softmax_properties.properties"}
    assert tool["package-dir"] == {v: k for k, v in folders.items()}
    found = set()
    for folder, package in folders.items():
        for where, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            rel = os.path.relpath(where, os.path.join(ROOT, folder))
            if "__init__.py" in files:
                found.add(package if rel == os.curdir else ".".join([package, *rel.split(os.sep)]))
    assert len(tool["packages"]) == len(set(tool["packages"])), "a package is listed twice"
    assert set(tool["packages"]) == found - {plugin.SELFTEST}


def test_one_copy_of_each_module_and_one_plugin(tmp_path):
    """A checkout run imports the suite only as softmax_properties.* (never a top-level
    `properties`, `kernels` or `oracles`: a second copy would hold registries of its own), loads
    the plugin once through its entry point, and keeps pytest's assertion rewriting for the test
    modules it imports by package name."""
    seen = _collect(tmp_path)
    copies = [m for m in seen["modules"] if m.partition(".")[0] in targets._FOLDERS]
    assert not copies, copies
    assert seen["plugin_names"] == ["softmax_properties"], seen["plugin_names"]
    ours = {m: loader for m, loader in seen["loaders"].items() if m.startswith("softmax_properties.")}
    assert f"{plugin.SELFTEST}.test_layout" in ours and f"{plugin.__package__}.test_properties" in ours, ours
    assert set(ours.values()) == {"AssertionRewritingHook"}, ours


def test_a_target_of_ones_own_runs_only_the_target_facing_tests(tmp_path):
    """--target other than the project's kernels collects no project test (nothing under
    properties/selftest/) and only tests that take the target; the default run collects both."""
    own = _collect(tmp_path, "--target", "torch")["items"]
    assert own and not [n for n, _ in own if "/selftest/" in n], [n for n, _ in own if "/selftest/" in n]
    assert not [n for n, fixtures in own if "target" not in fixtures], [n for n, f in own if "target" not in f]
    default = [n for n, _ in _collect(tmp_path)["items"]]
    assert {n for n, _ in own} < set(default) and any("/selftest/" in n for n in default)


def test_target_values():
    """Short names of the built-in targets, module paths as they are, a clear error otherwise."""
    assert targets.resolve("kernels") == targets.OWN_KERNELS == "softmax_properties.kernels"
    assert targets.resolve("torch") == "softmax_properties.properties.targets.torch"
    assert targets.resolve("softmax_properties.properties.targets.torch") == targets.resolve("torch")
    assert targets.short_name(targets.resolve("torch_compile")) == "torch_compile"
    assert targets.short_name("mypackage.mykernels") == "mypackage.mykernels"
    with pytest.raises(ValueError, match=r"--target 'no_such_module': no module named 'no_such_module' is importable "
                                         r"from here .* put that directory on PYTHONPATH .* --target path/to/"
                                         r"no_such_module.py"):
        targets.resolve("no_such_module")
    with pytest.raises(ValueError, match=r"--target: expected a built-in target .* got ''"):
        targets.resolve("")


def test_the_checkout_folder_is_no_target(monkeypatch):
    """properties.targets.torch, importable from the checkout's root through the current
    directory, would be a second copy of the suite: the error names the target to use."""
    monkeypatch.syspath_prepend(ROOT)
    with pytest.raises(ValueError, match=r"names the checkout's properties/ folder, which installs as "
                                         r"softmax_properties.properties; use --target torch"):
        targets.resolve("properties.targets.torch")


def test_bad_target_is_a_usage_error():
    run = subprocess.run([sys.executable, "-m", "pytest", "-m", "properties", "--co", "-q", "--target", "no_such_module",
                          "properties/test_properties.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert "--target 'no_such_module': no module named 'no_such_module'" in run.stderr, run.stderr


def test_plugin_leaves_other_runs_alone(tmp_path):
    """Installed, the plugin loads in every pytest run of the environment: a run that does not
    collect the suite gets the Hypothesis settings it gets without the plugin, and no report
    header of the suite."""
    (tmp_path / "test_theirs.py").write_text(textwrap.dedent("""\
        import os

        from hypothesis import settings

        def test_record_the_default_profile():
            with open(os.environ["THEIR_SETTINGS"], "w") as f:
                f.write(repr(settings.default))
        """))
    seen = []
    for extra in ([], ["-p", "no:softmax_properties"]):
        out = tmp_path / f"settings{len(seen)}.txt"
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(tmp_path)],
                             cwd=tmp_path, env={**os.environ, "THEIR_SETTINGS": str(out)}, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0 and "softmax-properties" not in run.stdout, run.stdout + run.stderr
        seen.append(out.read_text())
    assert seen[0] == seen[1], seen


def test_no_sys_path_patching():
    """The suite is imported as an installed package: no file of the repository edits sys.path,
    but for the one place that makes a user's file (``--target path/to/mykern.py``) importable."""
    pattern = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\s*=|sys\.path\s*\+=")
    bad = []
    for where, dirs, files in os.walk(ROOT):
        # build/ and dist/: what `pip install .` or `pip wheel .` of the checkout leaves (copies)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "build", "dist")]
        for f in files:
            if f.endswith((".py", ".sh")):
                path = os.path.join(where, f)
                with open(path, errors="replace") as fh:
                    bad += [f"{os.path.relpath(path, ROOT)}:{n}" for n, line in enumerate(fh, 1) if pattern.search(line)]
    bad = [b for b in bad if not b.startswith(os.path.join("properties", "selftest", "test_layout.py"))]
    files = [b for b in bad if b.startswith(os.path.join("properties", "targets", "__init__.py") + ":")]
    assert len(files) == 1, files  # targets._from_file
    bad = [b for b in bad if b not in files]
    assert not bad, bad
