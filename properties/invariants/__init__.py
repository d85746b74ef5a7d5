"""The invariants: every law the suite checks, registered with the ops it applies to.

* ``_registry.py``: the registry (``@invariant``, tiers, ``fail``, which ops a law applies to);
* ``_checks.py``: what laws share (calling the target, comparisons, the run's statistics);
* ``generic.py``: the laws written once over op specs (inputs unmodified, all outputs written,
  determinism, output dtype / shape / device, many rows, autograd composition);
* ``softmax.py``, ``merge.py``, ``merge_states.py``, ``cross_entropy.py``: each family's laws.

Each law is one small registered function; its docstring states the law and where its bound comes
from. The runner (properties/test_properties.py) parametrizes over REGISTRY x each law's ops.
Importing this package registers the built-in ops (properties/ops.py) and every law.
"""
from .. import ops  # noqa: F401  (registers the built-in ops the laws apply to)
from ._registry import REGISTRY, TIERS, Invariant, checking, fail, invariant, law, laws_for
from ._checks import WORST_ULP, record_worst, refusals, run
from . import softmax, generic, merge, merge_states, cross_entropy  # noqa: F401,E402  (registration order)

__all__ = ["REGISTRY", "TIERS", "Invariant", "WORST_ULP", "checking", "fail", "invariant", "law", "laws_for",
           "record_worst", "refusals", "run"]
