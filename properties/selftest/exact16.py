"""The exact 16-bit reference of the interpreter tests: every finite bfloat16 / float16 value
enumerated, and the IEEE rounding of a float64 to either format found on that grid, as a bit
pattern (round to nearest even, or toward zero)."""
from __future__ import annotations

import bisect
import math
from fractions import Fraction

import numpy as np
import torch

SIXTEEN = {torch.bfloat16: (0x7F80, 127), torch.float16: (0x7C00, 15)}  # inf pattern, emax


def bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


_GRID: dict = {}


def positive_grid(dtype) -> list:
    """Every non-negative finite value of dtype, in order of its bit pattern (which is the value's
    order), then 2**(emax+1), where the next binade would start: rounding there means inf."""
    if dtype not in _GRID:
        inf_bits, emax = SIXTEEN[dtype]
        v = torch.arange(inf_bits, dtype=torch.int32).to(torch.int16).view(dtype).double().tolist()
        _GRID[dtype] = v + [2.0 ** (emax + 1)]
    return _GRID[dtype]


def exact_bits(x: float, dtype, mode: str) -> int | None:
    """The IEEE result of rounding x (a float64) to dtype, as its bit pattern; None for NaN."""
    if math.isnan(x):
        return None
    inf_bits, _ = SIXTEEN[dtype]
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a, grid = abs(x), positive_grid(dtype)
    if a == math.inf:
        return sign | inf_bits
    if a >= grid[-1]:
        return sign | (inf_bits if mode == "rtne" else inf_bits - 1)
    i = bisect.bisect_right(grid, a) - 1  # grid[i] <= a < grid[i + 1]
    if grid[i] == a or mode == "rtz":
        return sign | i
    lo, hi = Fraction(a) - Fraction(grid[i]), Fraction(grid[i + 1]) - Fraction(a)
    return sign | (i if lo < hi or (lo == hi and i % 2 == 0) else i + 1)
