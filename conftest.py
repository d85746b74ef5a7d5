"""The checkout's conftest. The suite's plugin is not loaded here: it comes from the installed
distribution's pytest11 entry point (``python -m pip install -e .``), in a checkout as in any other
repository, so it is loaded once. This file checks that the installed package is this checkout's
code, so that a run here never tests another copy."""
import os

_ROOT = os.path.dirname(os.path.realpath(__file__))

try:
    from softmax_properties import properties as _suite
except ImportError as e:
    raise ImportError(f"softmax-properties is not installed ({e}); from {_ROOT} run: python -m pip install -e .") from None

_where = os.path.dirname(os.path.realpath(_suite.__file__))
if _where != os.path.join(_ROOT, "properties"):
    raise ImportError(f"softmax_properties.properties resolves to {_where}, not this checkout ({_ROOT}); "
                      f"install the checkout: python -m pip install -e {_ROOT}")
