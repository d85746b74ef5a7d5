"""softmax backward whose row dot products sum(y * g) are split into column chunks whose partial
sums are added into a zeroed per-row buffer, declared nondeterministic (NONDETERMINISTIC) as a
kernel summing with float atomics rightly is, but whose adds are plain read-modify-writes: two
programs that read the buffer before either writes lose one of their partial sums. The bug class:
a lost update (a load, add and store where an atomic add was meant, or an atomic on a copy), which
a declaration of nondeterminism must not excuse: the sum it loses is far beyond the bounds that
reordering the adds stays within. The stand-in for the scheduler, the only artificial part: every
other call loses the last chunk's add of each row of more than one chunk."""
from .atomic_order_split_dot import split_dot_backward

NONDETERMINISTIC = ("softmax_backward",)  # declared: reordered adds are within the bounds, lost ones are not
_CALLS = [0]  # the stand-in for the scheduler: a chunk's add lost on odd calls


def softmax_backward(y, dy):
    _CALLS[0] += 1
    odd = _CALLS[0] % 2 == 1
    return split_dot_backward(y, dy, reverse=odd, lose_last=odd)  # BUG: the last chunk's add lost


OP = "softmax_backward"  # the op it breaks: split dot product with an update lost every other call
CAUGHT_BY = ('deterministic',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
