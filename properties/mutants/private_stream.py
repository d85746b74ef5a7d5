"""softmax whose kernels run on a stream of its own (one per device, created once, as libraries
that keep a private stream for their work do) without ordering it after the caller's current
stream: inputs the caller has just written on its stream are read before they are there, and the
caller's next work on its stream may read the output before it is written. On the CPU (the
interpreter) there are no streams, and it is the project's softmax."""
import torch

from softmax_properties import kernels

_PRIVATE = {}  # device -> the stream


def softmax(x):
    if x.device.type != "cuda":
        return kernels.softmax(x)
    stream = _PRIVATE.setdefault(x.device, torch.cuda.Stream(device=x.device))
    with torch.cuda.stream(stream):  # BUG: no stream.wait_stream(torch.cuda.current_stream()), nor the reverse
        return kernels.softmax(x)


OP = "softmax"  # the op it breaks: works on a stream other than the caller's current one
CAUGHT_BY = ('follows_current_stream',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
