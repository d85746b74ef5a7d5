"""Deliberately broken kernels: each module is a --target that offers one op with one realistic
bug. properties/selftest/test_mutants.py checks that the suite catches every one of them and shrinks the
counterexample to a small tensor; run one by hand with

    python -m pytest -m properties --target softmax_properties.properties.mutants.no_max_subtraction

Most kernels are one-row-per-program Triton kernels, the textbook form (whole row in one
block, rows made contiguous first; the cross-entropy ones loop over tiles, _ce_base.py), correct
except for their named bug, marked ``# BUG``. Some bugs live in the launcher or the autograd wiring
around a kernel (a reduction, a stride, a saved tensor, an in-place write-back); those modules call
the project's Triton kernels and break only that step. A module may also offer the project's
correct ops beside its broken one, so identities between ops can see the bug.

Each module declares ``CAUGHT_BY``: the invariants that catch it on their own. Together the
declarations cover every invariant in properties/invariants/ (test_zoo_covers_every_invariant),
and each declared pair is checked by a search over that invariant alone
(test_invariant_catches_mutant).
"""
