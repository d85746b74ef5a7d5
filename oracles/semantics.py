"""The semantics table: what every op returns for edge rows. torch's CPU float64 ops are the
reference for meaning; properties/test_meta.py checks that the FP64 oracle and torch both agree
with every row of this table, so the table cannot drift from either.

Each entry: (what, row, softmax, log_softmax, logsumexp). "nan" marks NaN outputs.
"""
import math

inf, nan = math.inf, math.nan

SEMANTICS = [
    # what                                   row                  softmax              log_softmax            logsumexp
    ("ordinary row",                         [0.0, math.log(3)],  [0.25, 0.75],        [math.log(0.25), math.log(0.75)], math.log(4)),
    ("a -inf element gets 0 / -inf",         [0.0, -inf],         [1.0, 0.0],          [0.0, -inf],           0.0),
    ("all -inf row (fully masked)",          [-inf, -inf],        [nan, nan],          [nan, nan],            -inf),
    ("a +inf element poisons the row",       [inf, 0.0],          [nan, nan],          [nan, nan],            inf),
    ("+inf beside -inf",                     [inf, -inf],         [nan, nan],          [nan, nan],            inf),
    ("a NaN element poisons the row",        [nan, 0.0],          [nan, nan],          [nan, nan],            nan),
    ("NaN beats +inf",                       [nan, inf],          [nan, nan],          [nan, nan],            nan),
    ("huge finite logits do not overflow",   [3e38, -3e38],       [1.0, 0.0],          [0.0, -6e38],          3e38),
    ("constant row is uniform",              [7.0, 7.0, 7.0, 7.0], [0.25] * 4,         [-math.log(4)] * 4,    7.0 + math.log(4)),
    ("one element",                          [-5.0],              [1.0],               [0.0],                 -5.0),
    ("empty row",                            [],                  [],                  [],                    -inf),
]

# Backward (explicit VJPs) follow their formulas literally, with IEEE NaN semantics:
#   softmax_backward:     dx = y * (dy - sum(y * dy))   -> a NaN or inf in y or dy poisons the row
#   log_softmax_backward: dx = dz - exp(z) * sum(dz)
# Only rows are coupled: other rows are never affected by a poisoned row.
