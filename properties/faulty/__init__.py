"""Targets with bugs of the kinds the suite's tooling must handle, used by properties/selftest/test_isolation.py:
``oob_read`` crashes (a far out-of-bounds read), ``two_bugs`` has two independent bugs. Unlike
properties/mutants/, whose every module the suite must catch in-process, these are run only in a
pytest subprocess."""
