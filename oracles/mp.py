"""mpmath oracle for short rows (50 significant digits), used to check the FP64 oracle itself."""
from __future__ import annotations

import math

import mpmath

_DPS = 50


def _row_max(row):
    if any(math.isnan(v) for v in row):
        return math.nan
    return max(row) if row else -math.inf


def mp_logsumexp(row) -> float:
    row = [float(v) for v in row]
    m = _row_max(row)
    if not math.isfinite(m):
        return m
    with mpmath.workdps(_DPS):
        return float(mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(v)) for v in row if v != -math.inf)))


def mp_softmax(row) -> list:
    row = [float(v) for v in row]
    m = _row_max(row)
    if not math.isfinite(m):
        return [math.nan] * len(row)
    with mpmath.workdps(_DPS):
        ex = [mpmath.exp(mpmath.mpf(v)) if v != -math.inf else mpmath.mpf(0) for v in row]
        s = mpmath.fsum(ex)
        return [float(e / s) for e in ex]


def mp_log_softmax(row) -> list:
    row = [float(v) for v in row]
    m = _row_max(row)
    if not math.isfinite(m):
        return [math.nan] * len(row)
    with mpmath.workdps(_DPS):
        lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(v)) for v in row if v != -math.inf))
        return [float(mpmath.mpf(v) - lse) if v != -math.inf else -math.inf for v in row]
