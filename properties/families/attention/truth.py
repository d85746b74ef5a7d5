"""The FP64 truth of attention's outputs and their bounds (bounds.py derives them)."""
from __future__ import annotations

from softmax_properties.oracles import sdpa

from ... import tolerances
from ...spec import OutputTruth, Truth, lse_dtype
from . import bounds


def forward_truth(case, q, k, v, strict=False):
    """(OutputTruth o, OutputTruth lse) of attention(q, k, v) with the case's options; a query
    without a key has the lse the target declares (case.empty_lse)."""
    o, lse = sdpa.attention(q, k, v, **case.oracle_options())
    lse = case.declared_lse(lse)
    p = bounds.Pieces(case, q, k, v)
    eo, el = bounds.forward_eps(p, case.dtype, strict)
    dev = o.device
    o_tol = tolerances.total_tolerance(eo.to(dev), o, case.dtype, case.dtype)
    l_tol = tolerances.total_tolerance(el.to(dev), lse, lse_dtype(case.dtype), case.dtype)
    return (OutputTruth("o", o, o_tol, case.dtype), OutputTruth("lse", lse, l_tol, lse_dtype(case.dtype))), (p, o, eo)


def attention_truth(case, args, strict=False) -> Truth:
    """The truth of attention (q, k, v) -> (o, lse) (OpSpec.truth)."""
    outs, _ = forward_truth(case, *args[:3], strict=strict)
    return Truth(outs)


def grads_truth(case, q, k, v, do, strict=False, dlse=None) -> tuple:
    """(OutputTruth dq, dk, dv): the FP64 VJP of o with cotangent do (and of lse with dlse, when
    given) and its bounds."""
    dq, dk, dv = sdpa.attention_backward(q, k, v, do, **case.oracle_options(), dlse=dlse)
    _, (p, o, eo) = forward_truth(case, q, k, v, strict)
    eq, ek, ev = bounds.backward_eps(p, do, o, eo, case.dtype, strict, dlse=dlse)
    dev = dq.device
    return tuple(OutputTruth(n, r, tolerances.total_tolerance(e.to(dev), r, case.dtype, case.dtype), case.dtype)
                 for n, r, e in (("dq", dq, eq), ("dk", dk, ek), ("dv", dv, ev)))


def attention_backward_truth(case, args, strict=False) -> Truth:
    """The truth of attention_backward (q, k, v, o, lse, do) -> (dq, dk, dv) (OpSpec.truth)."""
    q, k, v, _, _, do = args
    return Truth(grads_truth(case, q, k, v, do, strict))
