"""The suite's tooling for third-party targets: expected-failure files (properties/expected.py),
saved counterexamples and their replay (properties/replay.py), the autotune patch for the
interpreter (properties/interpreter.py) and the adapters' argument checks (properties/targets/)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from .. import expected, failures, interpreter, replay, strategies as S
from ..case import Case
from ..families.attention.case import AttnCase
from ..strategies import Input, Layout, Logits
from . import ROOT


# softmax of one float32 element at finfo.max: exp(x) overflows without the max subtraction
OVERFLOW = Case("softmax", torch.float32, (Input(Logits(1, 1, "float32", ("const", 3.4028234663852886e+38),
                                                      family="huge"), (), Layout()),))


@dataclass(frozen=True)
class ToyCase(Case):
    """A case type of a family the replay module knows nothing of (test_replay_files_import_...)."""

    scale: float = 1.0


# ---- expected failures ------------------------------------------------------------------------
def _write(path, text):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return str(path)


def _env(tmp_path) -> dict:
    """The environment of a subprocess that imports the target modules written to tmp_path."""
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _suite(tmp_path, *args):
    """`pytest -m properties` of properties/test_properties.py in the checkout, ci profile, with the
    modules in tmp_path importable: (exit status, output)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "properties", "-q", "-p", "no:randomly",
                          "--hypothesis-profile=ci", *args, "properties/test_properties.py"],
                         cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout + out.stderr


def test_xfails_parse_and_match(tmp_path):
    p = _write(tmp_path / "x.txt", """\
        # a comment line
        test_property[matches_oracle-softmax]  # literal brackets
        properties/test_properties.py::test_property[*-cross_entropy_backward]  # a glob

        test_property[deterministic-?ogsumexp]  # one character
        """)
    a, b, c = expected.parse(p)
    assert (a.reason, a.where) == ("literal brackets", f"{p}:2")
    assert a.matches("properties/test_properties.py::test_property[matches_oracle-softmax]")
    assert not a.matches("properties/test_properties.py::test_property[matches_oracle-softmax_backward]")
    assert not expected.Entry("test_property[matches_oracle-softma]", "r", "").matches("test_property[matches_oracle-softmax]")
    assert not expected.Entry("test_property[m]", "r", "").matches("test_property[m]x")  # brackets are literal
    assert b.matches("properties/test_properties.py::test_property[ce_matches_oracle-cross_entropy_backward]")
    assert not b.matches("properties/test_properties.py::test_property[ce_matches_oracle-cross_entropy]")
    assert c.matches("x.py::test_property[deterministic-logsumexp]")


@pytest.mark.parametrize("line", ["test_property[a-b]", "test_property[a-b]  #   ", "two words  # reason"])
def test_xfails_bad_line_names_file_and_line(tmp_path, line):
    p = _write(tmp_path / "bad.txt", f"# ok\n{line}\n")
    with pytest.raises(ValueError, match=rf"bad\.txt:2: "):
        expected.parse(p)


class _Item:
    def __init__(self, nodeid):
        self.nodeid, self.markers = nodeid, []

    def add_marker(self, m):
        self.markers.append(m)


def test_xfails_apply_marks_and_warns(tmp_path):
    entries = expected.parse(_write(tmp_path / "x.txt", "test_property[a-*]  # known\ntest_property[zz-*]  # stale\n"))
    items = [_Item("p.py::test_property[a-softmax]"), _Item("p.py::test_property[b-softmax]")]
    with pytest.warns(expected.XfailsWarning, match=r"x\.txt:2: expected failure 'test_property\[zz-\*\]' matches no collected test"):
        marked = expected.apply(entries, items)
    assert marked == {"p.py::test_property[a-softmax]": "known"}
    (m,) = items[0].markers
    assert m.name == "xfail" and m.kwargs["strict"] is False and "known" in m.kwargs["reason"]
    assert items[1].markers == []


def test_xfails_device_qualified_entries(tmp_path):
    """An entry after "cuda:" (or "cpu:") marks tests only in runs on that device; it matches, so it
    is not stale, on the other; an unqualified entry holds on both."""
    entries = expected.parse(_write(tmp_path / "x.txt", "cuda: test_property[a-*]  # a CUDA kernel's bug\n"
                                                        "cpu:test_property[b-*]  # a CPU kernel's bug\n"
                                                        "test_property[c-*]  # both\n"))
    assert [(e.pattern, e.device) for e in entries] == [("test_property[a-*]", "cuda"), ("test_property[b-*]", "cpu"),
                                                        ("test_property[c-*]", None)]
    ids = ["p.py::test_property[a-softmax]", "p.py::test_property[b-softmax]", "p.py::test_property[c-softmax]"]
    for device, want in (("cuda", {ids[0], ids[2]}), ("cpu", {ids[1], ids[2]})):
        items = [_Item(i) for i in ids]
        with warnings.catch_warnings():
            warnings.simplefilter("error", expected.XfailsWarning)  # none is stale on either device
            assert set(expected.apply(entries, items, device=device)) == want
    with pytest.raises(ValueError, match=r"x\.txt:1: the pattern must be one node id"):
        expected.parse(_write(tmp_path / "x.txt", "gpu: test_property[a-*]  # not a device qualifier\n"))


def test_xfails_when_clause_parse_and_hold(tmp_path):
    """A when clause: conditions on the failing example's case (numbers compared as numbers); such
    an entry marks nothing at collection but is handed to the test; a bad condition names its line."""
    (e,) = expected.parse(_write(tmp_path / "x.txt", "test_property[a-*] when dtype=float16 label_smoothing>0 rows>=3"
                                                     "  # a float16 bug\n"))
    assert e.pattern == "test_property[a-*]" and e.when == (("dtype", "=", "float16"), ("label_smoothing", ">", 0.0),
                                                             ("rows", ">=", 3.0))

    class C:
        op, dtype, reduction, label_smoothing, batch = "cross_entropy", torch.float16, "mean", 0.1, (3, 1)
    assert e.holds_for(C())
    C.label_smoothing = 0.0
    assert not e.holds_for(C())
    C.label_smoothing, C.dtype = 0.1, torch.bfloat16
    assert not e.holds_for(C())
    assert not e.holds_for(OVERFLOW)  # no label_smoothing: the condition cannot hold
    C.label_smoothing, C.dtype = 0.1, torch.float16
    (k,) = expected.parse(_write(tmp_path / "x.txt", "test_property[a-*] when dtype=float16 failure=UnexpectedInf  # inf\n"))
    (n,) = expected.parse(_write(tmp_path / "x.txt", "test_property[a-*] when failure!=UnexpectedInf  # not inf\n"))
    inf = failures.failure_class(failures.UnexpectedInf, "float16")("inf where finite")  # a qualified subclass
    off = failures.OutOfTolerance("beyond the bound")
    assert k.holds_for(C(), inf) and not k.holds_for(C(), off) and not k.holds_for(C())  # another kind: a second bug
    assert n.holds_for(C(), off) and not n.holds_for(C(), inf)
    (m,) = expected.parse(_write(tmp_path / "x.txt", "test_property[a-*] when target_min<0  # a negative index\n"))
    C.ignore_index, C.targets = -100, type("T", (), {"values": (3, -100, -1)})
    assert expected.facts(C())["target_min"] == -1 and m.holds_for(C(), off)  # ignore_index is not a class index
    C.targets.values = (3, -100, 0)
    assert not m.holds_for(C(), off)
    (g,) = expected.parse(_write(tmp_path / "x.txt", "test_property[a-*] when groups>1 masked=1  # grouped, masked\n"))
    a = AttnCase("attention", torch.float32, B=1, Hq=4, Hkv=2, Lq=5, Lk=5, D=16, Dv=16, causal=True)
    assert expected.facts(a)["groups"] == 2 and g.holds_for(a, off)
    assert g.holds_for(replace(a, causal=False, window=(3, 0)), off)  # a window is a mask too
    assert not g.holds_for(replace(a, causal=False), off)
    assert not g.holds_for(replace(a, Hkv=4), off)  # one query head per key head
    assert not g.holds_for(C(), off)  # not attention
    items = [_Item("p.py::test_property[a-softmax]")]
    assert expected.apply([e], items) == {} and items[0].markers == []
    assert expected.CONDITIONAL == {"p.py::test_property[a-softmax]": [e]}
    for bad, msg in (("colour=red", "unknown condition key 'colour'"), ("rows>many", "needs a number"),
                     ("dtype", "must read KEY<op>VALUE"), ("failure=Wrong", "a failure kind"),
                     ("failure>UnexpectedInf", "a failure kind")):
        with pytest.raises(ValueError, match=rf"x\.txt:1: .*{msg}"):
            expected.parse(_write(tmp_path / "x.txt", f"test_property[a-*] when {bad}  # r\n"))


FP16_BUG_TARGET = '''
import torch
SUITE_REFUSALS = ()
def logsumexp(x):  # float16 rows come out 1 too large; with FLOAT32_TOO, float32 rows as well
    out = torch.logsumexp(x.float() if x.dtype in (torch.float16, torch.bfloat16) else x, -1)  # float32 for 16-bit
    if x.dtype == torch.float16 or (FLOAT32_TOO and x.dtype == torch.float32):
        out = out + 1
    return out
FLOAT32_TOO = {float32_too}
'''


@pytest.mark.parametrize("float32_too", [False, True])
def test_xfails_when_clause_end_to_end(tmp_path, float32_too):
    """An entry naming the float16 examples of matches_oracle: a target wrong only on float16 ends
    xfailed (its float16 failures passed over, its other examples judged; the progress log says
    XFAIL); wrong on float32 too, the test fails, on a float32 example."""
    _write(tmp_path / "fp16_lse.py", FP16_BUG_TARGET.format(float32_too=float32_too))
    xf = _write(tmp_path / "xf.txt", "test_property[matches_oracle-logsumexp] when dtype=float16 failure=OutOfTolerance"
                                     "  # a float16 bug\n")
    status, text = _suite(tmp_path, "-rxX", "--target", "fp16_lse", "--xfails", xf, "--properties-failures", "",
                          "--properties-log", str(tmp_path / "progress.log"),
                          "-k", "matches_oracle-logsumexp and not strict")
    if float32_too:
        assert status == 1 and "1 failed" in text and "dtype=float32" in text, text
    else:
        assert status == 0 and "1 xfailed" in text and "of its inputs: a float16 bug [first: OutOfTolerance" in text, text
        assert (tmp_path / "progress.log").read_text().startswith("XFAIL    call"), "the progress log names the outcome"


BROKEN_TARGET = '''
import torch
SUITE_REFUSALS = ()
def logsumexp(x):  # float64 whatever the input: output_dtype_and_shape fails on any example
    return torch.logsumexp(x.double(), -1)
'''


def test_xfails_and_replay_end_to_end(tmp_path, monkeypatch):
    """A pytest run against a broken pure-torch target: the xfails entry marks the failing test
    xfailed, the stale entry warns, the failure is saved as a replay file, and replaying that
    file fails against the broken target and passes against the project's kernels."""
    _write(tmp_path / "broken_lse.py", BROKEN_TARGET)
    xf = _write(tmp_path / "xf.txt", "test_property[output_dtype_and_shape-logsumexp]  # returns float64\n"
                                     "test_property[no_such_invariant-*]  # stale entry\n")
    status, text = _suite(tmp_path, "--target", "broken_lse", "--xfails", xf, "--properties-failures",
                          str(tmp_path / "fail"), "-k", "output_dtype_and_shape-logsumexp",
                          "-W", "default::pytest.PytestWarning")
    assert status == 0, text
    assert "1 xfailed" in text and "returns float64" in text, text
    assert "XfailsWarning" in text and "no_such_invariant" in text, text
    saved = tmp_path / "fail" / "broken_lse.output_dtype_and_shape-logsumexp.py"
    assert saved.is_file(), text
    inv, case, tname = replay.load(str(saved))
    assert (inv, case.op, tname) == ("output_dtype_and_shape", "logsumexp", "broken_lse")
    monkeypatch.syspath_prepend(tmp_path)  # the target module of one's own, as PYTHONPATH gave the subprocess
    status, report = replay.replay(inv, case, "broken_lse")
    assert status == "FAIL" and "[output_dtype_and_shape]" in report and "reproducer:" in report
    assert replay.replay(inv, case, "kernels")[0] == "PASS"
    # the command line, in a fresh process (nothing imported beforehand registers the ops for it)
    cli = subprocess.run([sys.executable, "-m", "softmax_properties.properties.replay", str(saved), "--target", "kernels"],
                         cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and cli.stdout.startswith("PASS"), cli.stdout + cli.stderr


# ---- replay -----------------------------------------------------------------------------------
def test_replay_files_import_every_recipe_class_from_its_module(tmp_path):
    """A replay file imports the classes of the case's recipe from where each is defined, so a
    case type of a new family (here one defined in this test module) replays without being listed
    anywhere; every built-in case type round-trips."""
    from softmax_properties.properties.spec import OPS

    @settings(max_examples=3, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def round_trip(data):
        op = data.draw(st.sampled_from(sorted(OPS)))
        case = data.draw(S.cases(op))
        path = tmp_path / "case.py"
        path.write_text(replay.render("matches_oracle", "kernels", case))
        assert repr(replay.load(str(path))[1]) == repr(case)

    round_trip()
    toy = ToyCase("softmax", torch.float32, (OVERFLOW.inputs[0],), scale=2.0)
    text = replay.render("matches_oracle", "kernels", toy)
    assert f"from {__name__} import ToyCase" in text, text
    path = tmp_path / "toy.py"
    path.write_text(text)
    assert replay.load(str(path))[1] == toy


@pytest.mark.parametrize("target,status", [("softmax_properties.properties.mutants.no_max_subtraction", "FAIL"), ("kernels", "PASS")])
def test_replay_saved_failure(tmp_path, target, status):
    path = tmp_path / "saved.py"
    path.write_text(replay.render("matches_oracle", "softmax_properties.properties.mutants.no_max_subtraction", OVERFLOW, "", str(path)))
    inv, case, failed_on = replay.load(str(path))
    assert (inv, case, failed_on) == ("matches_oracle", OVERFLOW, "softmax_properties.properties.mutants.no_max_subtraction")
    got, text = replay.replay(inv, case, target)
    assert got == status, text
    if status == "FAIL":
        assert text.startswith("[matches_oracle] (default tier) differs from the FP64 oracle") and "actual=nan" in text


def test_replay_judges_by_the_replayed_targets_declarations(tmp_path):
    """A case carries the declarations of the target it was drawn for (CE_EMPTY_MEAN = 0.0
    here); replayed against another target it is judged by that one's: torch's NaN mean over no
    counted rows passes, the same case with the declaration kept fails it."""
    from .meta_support import all_ignored_mean
    case = all_ignored_mean(empty_mean_zero=True)
    path = tmp_path / "saved.py"
    path.write_text(replay.render("ce_matches_oracle", "liger", case))
    inv, loaded, _ = replay.load(str(path))
    before = S.TARGET.module
    assert replay.replay(inv, loaded, "torch")[0] == "PASS"
    assert S.TARGET.module is before
    from ..invariants import law
    from ..ops import Target
    from ..targets import torch as torch_target
    plain = Target(torch_target)
    plain.device = interpreter.device()
    with pytest.raises(failures.PropertyFailure, match="actual is NaN where expected is not"):
        law("ce_matches_oracle").check(loaded, plain)


def test_replay_cli(tmp_path, capsys):
    path = tmp_path / "saved.py"
    path.write_text(replay.render("matches_oracle", "softmax_properties.properties.mutants.no_max_subtraction", OVERFLOW))
    assert replay.main([str(path)]) == 1
    assert replay.main([str(tmp_path), "--target", "kernels"]) == 0
    (tmp_path / "junk.py").write_text("x = 1\n")
    assert replay.main([str(tmp_path / "junk.py")]) == 2
    assert replay.main([str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert "not a replay file (no INVARIANT, CASE, TARGET)" in err and "missing.py: no such file" in err
    with pytest.raises(ValueError, match="unknown invariant 'nope'"):
        replay.replay("nope", OVERFLOW, "kernels")
    with pytest.raises(ValueError, match="does not apply to op 'softmax'"):
        replay.replay("ce_matches_oracle", OVERFLOW, "kernels")


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), op=st.sampled_from(["softmax", "softmax_backward", "attention_merge", "cross_entropy_backward"]))
def test_replay_file_rebuilds_the_case(tmp_path_factory, data, op):
    """Every kind of case (Case, MergeCase, CECase) survives the replay file: its repr evaluates
    back to the same case (compared by repr: a NaN fill is not == itself)."""
    case = data.draw(S.cases(op))
    path = tmp_path_factory.mktemp("r") / "c.py"
    path.write_text(replay.render("matches_oracle", "kernels", case))
    back = replay.load(str(path))[1]
    assert type(back) is type(case) and repr(back) == repr(case)


# ---- the interpreter's autotune patch ---------------------------------------------------------
@pytest.mark.skipif(not interpreter.interpreting(), reason="the patch is for Triton's interpreter (TRITON_INTERPRET=1)")
def test_autotuned_kernel_runs_first_pruned_config():
    import triton
    import triton.language as tl

    assert interpreter.install()  # the plugin installed it already; idempotent

    def drop_first(configs, named_args, **kwargs):
        return configs[1:]

    @triton.autotune(configs=[triton.Config({"BLOCK": 2}), triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})],
                     key=["n"], prune_configs_by={"early_config_prune": drop_first})
    @triton.jit
    def double(x, y, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + o, 2 * tl.load(x + o, mask=o < n), mask=o < n)

    x = torch.arange(10, dtype=torch.float32)
    y = torch.empty_like(x)
    double[lambda meta: (triton.cdiv(10, meta["BLOCK"]),)](x, y, 10)
    assert torch.equal(y, 2 * x)
    assert double.best_config.kwargs == {"BLOCK": 4}  # the first config the kernel's own pruning kept


# ---- adapters ---------------------------------------------------------------------------------
def test_missing_library_names_the_extra():
    from ..targets._common import require
    with pytest.raises(ImportError, match=r'needs some-lib==1\.0 .*pip install -e "\.\[xtra\]"'):
        require("no_such_module_for_the_suite", "some-lib==1.0", "xtra")


@pytest.mark.parametrize("name", ["liger", "fla"])
def test_adapter_argument_checks(name):
    pytest.importorskip({"liger": "liger_kernel", "fla": "fla"}[name])
    import importlib
    m = importlib.import_module(f"softmax_properties.properties.targets.{name}")
    x, t = torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)
    assert m.SUITE_REFUSALS == (NotImplementedError,)
    with pytest.raises(TypeError, match="logits must be float16, bfloat16, float32 or float64"):
        m.cross_entropy(x.long(), t)
    with pytest.raises(TypeError, match="target must be int32 or int64"):
        m.cross_entropy(x, t.float())
    with pytest.raises(ValueError, match=r"target must have the logits' batch shape \(2,\)"):
        m.cross_entropy(x, t[:1])
    with pytest.raises(ValueError, match="reduction must be one of"):
        m.cross_entropy(x, t, reduction="avg")
    with pytest.raises(ValueError, match=r"dloss must have the loss's shape \(2,\)"):
        m.cross_entropy_backward(x, t, torch.zeros(()), reduction="none")
    with pytest.raises(ValueError, match=r"dy must have the shape of y"):
        m.softmax_backward(x, x[:1])
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        m.softmax([1.0])
    with pytest.raises(NotImplementedError, match="float64"):
        m.cross_entropy(x.double(), t)


def test_run_order_puts_long_tests_first_and_hands_them_out_one_at_a_time():
    """The order pytest-xdist hands tests out in: the stateful merges, then the laws expected to
    take longest (by law or by the family of the op named in test_property's parameters), then
    the other laws with the project's tests that start processes, then the project's other
    tests; and under
    xdist one test at a time (--maxschedchunk 1) unless the user chose a chunk."""
    from types import SimpleNamespace
    from .. import plugin
    from ..invariants._registry import law
    here = os.path.dirname(plugin.__file__)

    def item(path, inv=None, op=None):
        params = {"inv": inv, "op": op} if inv is not None else {}
        return SimpleNamespace(path=os.path.join(here, path), callspec=SimpleNamespace(params=params))

    items = [item("selftest/test_meta.py"),
             item("selftest/test_isolation.py"),
             item("test_properties.py", law("shift_invariance"), "softmax"),
             item("test_properties.py", law("many_rows_match_oracle"), "softmax"),
             item("test_properties.py", law("inputs_unmodified"), "cross_entropy"),
             item("test_merge_stateful.py")]
    ranks = [plugin._longest_first(i) for i in items]
    assert ranks == [3, 2, 2, 1, 1, 0], ranks
    for given, want in ((None, 1), (4, 4)):
        option = SimpleNamespace(maxschedchunk=given)
        plugin._hand_out_one_at_a_time(option)
        assert option.maxschedchunk == want
    plugin._hand_out_one_at_a_time(SimpleNamespace())  # without pytest-xdist: nothing to set
