"""Deliberately broken kernels: each module is a --target that offers one op with one realistic
bug. properties/test_mutants.py checks that the suite catches every one of them and shrinks the
counterexample to a small tensor; run one by hand with

    python -m pytest -m properties --target properties.mutants.no_max_subtraction

Each kernel is a one-row-per-program Triton kernel in the style of seed 000 (whole row in one
block, rows made contiguous first), correct except for its named bug. The two cross-entropy
mutants (ce_*) are bugs of the launcher around the kernel (the reduction, the cotangent), so they
call the project's CE Triton kernels and break only that step.
"""
