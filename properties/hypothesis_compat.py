"""The few places the suite reaches past Hypothesis's public API, in one module, each with the
reason no public API serves. Checked on Hypothesis 6.155.2, 6.168.3 and 6.170.17.

* ``profile_name()``: the loaded profile's name (the report header, the shape limits): the public
  ``settings.get_current_profile_name()`` where the release has it (the three above do), else
  the private ``settings._current_profile`` of older releases.
* ``profile(name)``: a registered profile, to derive ``--properties-examples``' profile from it:
  the public ``settings.get_profile`` where the release has it, else the private table
  ``settings._profiles``.
* ``set_database_key(test, key)``: the example-database key (and, under ``derandomize``, the seed)
  of a ``@given`` function defined inside a parametrized test. Hypothesis derives both from the
  function's source, which is the same for every parametrization, so without a key of its own every
  (law, op) pair would share one database entry and one seed. No public setting names the key;
  ``_hypothesis_internal_add_digest`` on the inner test is what Hypothesis itself adds to the digest
  (hypothesis/core.py, ``function_digest``), present in every release above.
* ``UnsatisfiedAssumption``: what ``assume(False)`` and ``reject()`` raise, which the isolation
  worker catches to answer "rejected" for a check it ran outside any ``@given`` test.
  ``hypothesis.errors`` documents it as internal; no public name exists.
* ``redirect_target(fn)``: the isolation worker runs checks outside ``@given``, where
  ``hypothesis.target`` cannot target; it replaces the module's function so that the worker
  records the observations and the pytest process replays them into its own test.
"""
from __future__ import annotations

import hypothesis
from hypothesis import settings
from hypothesis.errors import UnsatisfiedAssumption  # noqa: F401 (re-exported: see above)


def profile_name() -> str:
    get = getattr(settings, "get_current_profile_name", None)
    return get() if get else getattr(settings, "_current_profile", "default")


def profile(name: str) -> settings:
    get = getattr(settings, "get_profile", None)
    return get(name) if get else settings._profiles[name]


def set_database_key(test, key: str) -> None:
    """test: the function @given returned."""
    test.hypothesis.inner_test._hypothesis_internal_add_digest = key.encode()


def redirect_target(fn) -> None:
    """hypothesis.target(observation, label=...) calls fn from now on, in this process."""
    hypothesis.target = fn
