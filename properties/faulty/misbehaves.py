"""A softmax that misbehaves by row length, one way each, for the worker tests in
properties/selftest/test_isolation.py: 10 columns segfault (a read of address 1), 5 hang, 6 raise
IndexError, 7 refuse (NotImplementedError, a declared refusal), 9 are 1% off; others are right."""
import ctypes
import time

import torch

SUITE_REFUSALS = (NotImplementedError,)
HANG_SECONDS = 3600


def softmax(x):
    n = x.shape[-1]
    if n == 10:
        ctypes.string_at(1)  # reads address 1: SIGSEGV
    if n == 5:
        time.sleep(HANG_SECONDS)
    if n == 6:
        raise IndexError("six columns")
    if n == 7:
        raise NotImplementedError("seven columns")
    y = torch.softmax(x.double(), -1)
    return (y * 1.01 if n == 9 else y).to(x.dtype)
