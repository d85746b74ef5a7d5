"""Root conftest: chooses Triton's interpreter when there is no GPU (before triton is imported),
makes sure `kernels`, `oracles` and `properties` resolve to this checkout (PyPI has unrelated
distributions named `kernels` and `properties`), and loads the suite's plugin."""
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
if _ROOT not in sys.path[:1]:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402  (torch does not import triton)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

for _name in ("kernels", "oracles", "properties"):
    _mod = __import__(_name)
    _where = os.path.dirname(os.path.abspath(_mod.__file__))
    if os.path.dirname(_where) != _ROOT:
        raise ImportError(f"'{_name}' resolved to {_where}, not this checkout ({_ROOT}); "
                          f"uninstall the unrelated PyPI package or run pytest from {_ROOT}")

pytest_plugins = ["properties.plugin"]
