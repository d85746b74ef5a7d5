"""``--target`` values, and adapters that make third-party kernels targets.

The built-in targets have short names (``BUILTIN``): the project's own Triton kernels (``kernels``,
the default), PyTorch eager and compiled, a textbook Triton softmax, and adapters for two kernel
libraries. Each adapter module offers the functions of the README's "Test your own kernel"
contract that its library really has, calling the library's own kernels, and refuses
(NotImplementedError, its only SUITE_REFUSALS) just what the library documents as unsupported:

* ``liger``: liger-kernel 0.8.5 (the ``liger`` extra: ``pip install -e ".[liger]"`` in a checkout)
* ``fla``: fla-core 0.6.0 (the ``fla`` extra)

Any other ``--target`` is an importable module path (``mypackage.mykernels``) or a Python file
(``path/to/mykern.py``).
"""
from __future__ import annotations

import importlib.util
import os

OWN_KERNELS = "softmax_properties.kernels"  # the default target: the project's own kernels
BUILTIN = {
    "kernels": OWN_KERNELS,
    "torch": f"{__name__}.torch",
    "torch_compile": f"{__name__}.torch_compile",
    "naive_triton": f"{__name__}.naive_triton",
    "liger": f"{__name__}.liger",
    "fla": f"{__name__}.fla",
}
_FOLDERS = ("kernels", "oracles", "properties")  # the checkout's folders, installed under softmax_properties


def resolve(name: str) -> str:
    """The module path a ``--target`` value names: a built-in's short name, a module path, or a
    Python file (``path/to/mykern.py``, whose folder then goes on ``sys.path`` and ``PYTHONPATH``
    so that every process of the run imports it by its file name). ValueError naming the value,
    what was expected and how to fix it when it is none of them. Only the top-level package is
    looked up here (nothing is imported: a target may set up CUDA when imported, which waits for
    the test process to choose its device)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"--target: expected a built-in target ({', '.join(BUILTIN)}), an importable module path or "
                         f"a Python file, got {name!r}")
    name = name.strip()
    if name in BUILTIN:
        return BUILTIN[name]
    if name.endswith(".py") or os.sep in name or (os.altsep and os.altsep in name):
        return _from_file(name)
    top = name.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as e:
        raise ValueError(f"--target {name!r}: expected a built-in target ({', '.join(BUILTIN)}) or an importable "
                         f"module path; looking up {top!r} failed: {e}") from None
    if spec is None:
        raise ValueError(
            f"--target {name!r}: no module named {top!r} is importable from here ({os.getcwd()}). Either run pytest "
            f"from the directory that holds {top}.py (or the package folder {top}/), or put that directory on "
            f"PYTHONPATH (PYTHONPATH=/path/to/dir python -m pytest ...), or install your package into this "
            f"environment, or pass the file itself: --target path/to/{top}.py")
    if top in _FOLDERS and _is_project_folder(spec, top):
        # the checkout's folder reached through the current directory: a second copy of the
        # suite's modules beside softmax_properties.*, with registries of their own
        full = f"softmax_properties.{name}"
        raise ValueError(f"--target {name!r} names the checkout's {top}/ folder, which installs as "
                         f"softmax_properties.{top}; use --target {short_name(full)}")
    return name


def _from_file(path: str) -> str:
    """The module name of the Python file `path` (its stem), its folder put first on sys.path and
    PYTHONPATH (the run's xdist workers resolve the option again; isolation workers inherit both)."""
    full = os.path.realpath(path)
    if not os.path.isfile(full) or not full.endswith(".py"):
        raise ValueError(f"--target {path!r}: expected a Python file (path/to/mykern.py), a built-in target "
                         f"({', '.join(BUILTIN)}) or an importable module path; {full} is not a .py file")
    folder, stem = os.path.split(full[:-3])
    if not stem.isidentifier():
        raise ValueError(f"--target {path!r}: the file's name must be a Python identifier to import it "
                         f"(rename {os.path.basename(full)})")
    import sys
    spec = importlib.util.find_spec(stem) if stem not in sys.modules else sys.modules[stem].__spec__
    origin = os.path.realpath(spec.origin) if spec is not None and spec.origin not in (None, "namespace") else None
    if spec is not None and origin != full:
        raise ValueError(f"--target {path!r}: a module named {stem!r} is already importable from "
                         f"{origin or spec.name}, which would shadow the file; rename the file")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if folder not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder] + [p for p in paths if p])
    return stem


def short_name(module: str) -> str:
    """A target's short name where it is built in, else its module path (file names, xfails)."""
    return next((k for k, v in BUILTIN.items() if v == module), module)


def _is_project_folder(spec, top: str) -> bool:
    def where(s):
        return {os.path.realpath(p) for p in (s.submodule_search_locations or ())} if s else set()
    # find_spec of a submodule imports only its parent, the namespace package: kernels/ is not run
    return bool(where(spec) & where(importlib.util.find_spec(f"softmax_properties.{top}")))
