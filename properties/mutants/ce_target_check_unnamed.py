"""cross_entropy that rejects an out-of-range target with an exception that does not say which
argument is wrong (an IndexError from a gather): no silent result, so the default tier accepts
it; the strict tier wants the message to name the target."""
from softmax_properties import kernels


def cross_entropy(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    V = logits.shape[-1]
    bad = (target != ignore_index) & ((target < 0) | (target >= V))
    if bool(bad.any()):
        raise IndexError("index out of range in self")  # BUG (strict): does not name the argument
    return kernels.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction,
                                 label_smoothing=label_smoothing)


OP = "cross_entropy"  # the op it breaks: IndexError without naming the target
CAUGHT_BY = ('ce_out_of_range_target_named',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
