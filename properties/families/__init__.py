"""The op families, one package each: its case type, strategies, FP64 truth and bounds, laws, and
the OpSpec registrations of its ops (docs/extending.md). Importing this package registers every
built-in op and its family's laws, in the order the suite lists them.

A family imports the shared core (properties/spec.py, case.py, strategies.py, truth.py,
tolerances.py, invariants/) and never another family, except the public modules of a family it
composes, which it names in its ``COMPOSES`` (merge_states composes the two-state merges);
properties/selftest/test_imports.py checks both."""


from . import softmax, merge, merge_states, cross_entropy, attention  # noqa: F401  (registration order)
