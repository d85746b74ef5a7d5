"""Every tensor the laws, truths, bounds and oracles create names its device.

Under the interpreter every tensor lives on the CPU, so a law that builds a mask with
``torch.ones(shape, dtype=torch.bool)`` next to the case's tensors passes there and fails on a
GPU with "Expected all tensors to be on the same device" -- a failure of the suite, reported
against a correct kernel, that no CPU run can show. So the rule is read from the source: each
call of a torch factory in those modules passes ``device=`` (``device="cpu"`` where the tensor is
host-side arithmetic on purpose)."""
from __future__ import annotations

import ast
import os

import pytest

from . import ROOT

FACTORIES = {"ones", "zeros", "full", "empty", "tensor", "as_tensor", "arange", "rand", "randn", "randint",
             "eye", "linspace"}
# where the suite computes next to the case's tensors (the kernels, the mutants, the targets and
# the self-tests build their own tensors on purpose, and are judged by the laws themselves)
SCANNED = ("oracles", os.path.join("properties", "families"), os.path.join("properties", "invariants"))
SCANNED_FILES = tuple(os.path.join("properties", f) for f in ("tolerances.py", "truth.py", "case.py", "record.py",
                                                               "spec.py", "test_merge_stateful.py"))


def _files():
    for top in SCANNED:
        for where, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            yield from (os.path.join(where, f) for f in sorted(files) if f.endswith(".py"))
    yield from (os.path.join(ROOT, f) for f in SCANNED_FILES)


def deviceless_factories(source: str) -> list:
    """(line, call) of every torch.<factory>(...) call in source without a device= keyword."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


def test_every_factory_call_names_its_device():
    bad = [f"{os.path.relpath(path, ROOT)}:{line}: {call}"
           for path in _files() for line, call in deviceless_factories(open(path).read())]
    assert not bad, ("torch factory calls without device= (a CPU tensor next to the case's GPU tensors "
                     "fails on a GPU only):\n  " + "\n  ".join(bad))


@pytest.mark.parametrize("code, flagged", [
    ("torch.ones(s.shape, dtype=torch.bool)", True),
    ("torch.ones(s.shape, dtype=torch.bool, device=s.device)", False),
    ("torch.zeros((), device='cpu')", False),
    ("torch.ones_like(s)", False),
    ("'torch.zeros(3)'", False),
])
def test_the_rule_reads_calls_not_strings(code, flagged):
    assert bool(deviceless_factories(code)) == flagged
