"""The law registry and what laws share; the laws themselves live with their op family.

* ``_registry.py``: the registry (``@invariant``, tiers, ``fail``, which ops a law applies to);
* ``_checks.py``: what laws share (calling the target, comparisons, the run's statistics);
* ``generic.py``: the laws written once over op specs (inputs unmodified, all outputs written,
  determinism, output dtype / shape / device, many rows, autograd composition);
* each family's laws: ``properties/families/<family>/laws.py``.

Each law is one small registered function; its docstring states the law and where its bound comes
from. The runner (properties/test_properties.py) parametrizes over REGISTRY x each law's ops.
Importing this package registers the generic laws, then every built-in family's ops and laws
(properties/families/).
"""
from ._registry import REGISTRY, TIERS, Invariant, checking, fail, invariant, law, laws_for
from ._checks import run
from ..record import record_worst
from . import generic  # noqa: F401,E402  (the laws of every op)
from .. import families  # noqa: F401,E402  (each family's ops and laws)

__all__ = ["REGISTRY", "TIERS", "Invariant", "checking", "fail", "invariant", "law", "laws_for", "record_worst",
           "run"]
