"""logsumexp with a ``dim`` argument that brings the reduced axis last with ``transpose(dim, -1)``
and reduces it: for 3 or more axes the remaining axes come out permuted (the last axis lands where
``dim`` was), where ``movedim(dim, -1)`` keeps their order. Right for 2-D input and for the last
axis, so only the ``dim_argument`` law sees it. The bug class: an axis permutation used as if it
were a move (transpose and movedim agree on 2 axes, and tests are often 2-D). The reduction itself
is the project's Triton kernel."""
from softmax_properties.kernels import logsumexp as _lse


def logsumexp(x, dim=-1):
    if dim not in (-1, x.ndim - 1):
        x = x.transpose(dim, -1)  # BUG: x.movedim(dim, -1) keeps the other axes in order
    return _lse(x)


OP = "logsumexp"  # the op it breaks: takes dim=; transpose where movedim is meant
CAUGHT_BY = ('dim_argument',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
