"""What every family's truth shares: the FP64 truth and bound of a single-output op at given
arguments, asked of its spec (laws of one op also ask another op's, as log_softmax's ask
logsumexp's), and the bound of an output returned in another dtype the tier accepts. Each
family's own truth is in properties/families/<family>/truth.py."""
from __future__ import annotations

from . import tolerances
from .spec import lookup


def truth_at(op: str, dtype, args, depth=tolerances.depth_any, returned=None, **options):
    """(truth, bound) in float64 of a single-output op of the softmax family (its spec's truth_at)
    at the given (laid-out) arguments. depth: the reduction-depth model of the bound (tolerances.depth_any, the
    default tier's any summation order, or tolerances.depth, the strict tier's). returned: the
    dtype the target returned the output in (returned_bound). options: the case's keyword
    options, for ops that take any."""
    spec = lookup(op)
    ref, tol = spec.truth_at(dtype, args, depth, **options)
    return ref, returned_bound(spec, dtype, ref, tol, returned)


def returned_bound(spec, dtype, ref, tol, returned):
    """tol, the bound of spec's output at spec.out_dtype(dtype), for an output the target
    returned in dtype `returned`: where that is another dtype the default tier accepts
    (spec.default_out_dtypes: logsumexp in the input's dtype, as torch.logsumexp returns it),
    tol plus the rounding to it (tolerances.rerounded: the value of a correct kernel, at the
    contract's dtype or before its final rounding, rounded once more); else tol itself (a dtype
    the tier does not accept is the structure check's failure, not the bound's)."""
    if (returned is None or returned == spec.out_dtype(dtype) or spec.default_out_dtypes is None
            or returned not in spec.default_out_dtypes(dtype)):
        return tol
    return tolerances.rerounded(tol, ref, returned)
