"""The import graph of kernels/, oracles/ and properties/ has no cycle, no module imports a test
module, and each op family (properties/families/) imports the core and the families it composes
only.

The graph is read from the source with ``ast``: an edge a -> b for every import of b anywhere in
a, at module level and inside functions alike (a function-level import defers the dependency, it
does not remove it: the two modules still need each other, and the cycle is back as soon as the
import moves to the top). Relative imports are resolved; ``from package import name`` is an edge
to the submodule when ``name`` is one, else to the package. Left out: imports under ``if
TYPE_CHECKING:``, which never run, and the implicit import of a module's parent packages (every
package's ``__init__`` re-exporting its submodules would otherwise be a cycle)."""
from __future__ import annotations

import ast
import os

import pytest

from . import ROOT

FOLDERS = {"kernels": "softmax_properties.kernels", "oracles": "softmax_properties.oracles",
           "properties": "softmax_properties.properties"}


def project_modules() -> dict:
    """{module name: (path, is_package)} of every Python file under the three folders."""
    found = {}
    for folder, package in FOLDERS.items():
        for where, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(where, os.path.join(ROOT, folder))
            prefix = package if rel == os.curdir else ".".join([package, *rel.split(os.sep)])
            for f in sorted(files):
                if f.endswith(".py"):
                    is_pkg = f == "__init__.py"
                    found[prefix if is_pkg else f"{prefix}.{f[:-3]}"] = (os.path.join(where, f), is_pkg)
    return found


def _type_checking(node) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports_of(source: str, name: str, is_pkg: bool, known) -> set:
    """The modules in ``known`` that module ``name`` (a package's ``__init__`` when is_pkg)
    imports."""
    out = set()
    package = name if is_pkg else name.rpartition(".")[0]

    def visit(node):
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            mod = ".".join(p for p in (base if node.level else "", node.module or "") if p)
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                if sub in known:
                    out.add(sub)
                elif mod in known:
                    out.add(mod)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    out.discard(name)
    return out


def import_graph() -> dict:
    mods = project_modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        with open(path) as f:
            graph[name] = imports_of(f.read(), name, is_pkg, mods)
    return graph


def cycles(graph: dict) -> list:
    """One cycle (a list of modules, first repeated at the end) through each strongly connected
    component of more than one module, shortest first."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def connect(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found = []
    for comp in comps:
        start = min(comp)
        paths = {start: [start]}  # breadth-first inside the component: the shortest way back to start
        queue = [start]
        while queue:
            v = queue.pop(0)
            for w in sorted(graph[v] & comp):
                if w == start:
                    found.append(paths[v] + [start])
                    queue = []
                    break
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
    return sorted(found, key=len)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join("  " + " -> ".join(c) for c in found)


def test_no_module_imports_a_test_module():
    graph = import_graph()
    bad = sorted(f"{a} imports {b}" for a, deps in graph.items() for b in deps
                 if b.rpartition(".")[2].startswith("test_"))
    assert not bad, "helpers belong in a module of their own, not in a test module:\n  " + "\n  ".join(bad)


def test_the_graph_reads_every_kind_of_import():
    """Relative and absolute, module and function level, package and submodule targets; an
    import under TYPE_CHECKING is no edge, one in its else branch is."""
    known = {"p", "p.a", "p.b", "p.c", "p.sub", "p.sub.d", "q", "r"}
    src = ("from typing import TYPE_CHECKING\nimport q\nfrom . import d\nfrom ..b import thing\n"
           "from .. import a\nif TYPE_CHECKING:\n    from ..c import C\nelse:\n    import r\n"
           "def f():\n    from p import sub\n    import os\n")
    assert imports_of(src, "p.sub.e", False, known) == {"q", "p.sub.d", "p.b", "p.a", "r", "p.sub"}
    assert imports_of("from . import a\nfrom .sub import d\n", "p", True, known) == {"p.a", "p.sub.d"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_the_graph_covers_the_folder(name):
    """Every module of the folder is a node, so a cycle cannot hide in a file the walk missed."""
    graph = import_graph()
    files = sum(1 for _, _, fs in os.walk(os.path.join(ROOT, name)) for f in fs if f.endswith(".py"))
    assert sum(1 for m in graph if m == FOLDERS[name] or m.startswith(FOLDERS[name] + ".")) == files


FAMILIES = "softmax_properties.properties.families"


def _family_of(module: str):
    """The family package a module belongs to (None for the core and for the families package)."""
    if not module.startswith(FAMILIES + "."):
        return None
    return module[len(FAMILIES) + 1:].partition(".")[0]


def composes(family: str) -> set:
    """The families whose public modules a family may import: the COMPOSES of its __init__."""
    path, _ = project_modules()[f"{FAMILIES}.{family}"]
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMPOSES" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path}: a family's __init__ names the families it composes: COMPOSES = (...)")


def _core(module: str) -> bool:
    """A module of the suite that is no family, test, mutant or broken sample target: what every
    family builds on."""
    if not module.startswith("softmax_properties.properties") or module == FAMILIES or _family_of(module):
        return False
    parts = module.split(".")[2:]
    return not any(p in ("selftest", "mutants", "faulty") or p.startswith("test_") for p in parts)


def _is_package(module: str) -> bool:
    found = project_modules().get(module)
    return found is None or found[1]  # an unknown module (a test's graph): a package


def family_import_violations(graph: dict) -> list:
    """A family (a module, or a package of modules) imports the core, and of another family only
    what a family it names in its COMPOSES offers (a module family itself, a package family's
    modules, not the package, which registers it). The core imports no family module,
    only the families package (which registers them all). Tests and mutants may import anything."""
    bad = []
    for a, deps in graph.items():
        fa = _family_of(a)
        for b in deps:
            fb = _family_of(b)
            if fb is None or fb == fa or not (fa or _core(a)):
                continue
            if fa is None:
                bad.append(f"{a} (the core) imports the family module {b}: import the families package instead")
            elif fb not in composes(fa):
                bad.append(f"{a} imports {b}, of the family {fb}, which {fa}'s COMPOSES does not name")
            elif b == f"{FAMILIES}.{fb}" and _is_package(b):
                bad.append(f"{a} imports the package of the family {fb}: import the module it composes")
    return sorted(bad)


def test_every_family_names_what_it_composes():
    """COMPOSES is read only where a family imports another, so a family without it would pass
    until its first such import; every family states it."""
    families = sorted({_family_of(m) for m in project_modules() if _family_of(m)})
    assert "attention" in families and "softmax" in families, families
    for family in families:
        composes(family)


def test_families_import_the_core_and_what_they_compose():
    graph = import_graph()
    families = {_family_of(m) for m in graph} - {None}
    assert {"softmax", "merge", "merge_states", "cross_entropy"} <= families, families
    bad = family_import_violations(graph)
    assert not bad, "\n  ".join(["family imports:"] + bad)


def test_the_family_rule_catches_a_crossing():
    """A family reaching into another it does not compose, and the core reaching into a family,
    are both reported; composing a named family's module, or a test importing a family, is not."""
    f = FAMILIES
    graph = {f"{f}.merge_states.laws": {f"{f}.merge.laws", "softmax_properties.properties.spec"},
             f"{f}.cross_entropy.truth": {f"{f}.softmax.truth"},
             "softmax_properties.properties.plugin": {f"{f}.softmax.laws", f},
             f"{f}.merge.laws": {f"{f}.merge.case"},
             "softmax_properties.properties.selftest.test_x": {f"{f}.softmax.laws"}}
    bad = family_import_violations(graph)
    assert len(bad) == 2, bad
    assert any("cross_entropy's COMPOSES" in b for b in bad) and any("(the core)" in b for b in bad), bad
