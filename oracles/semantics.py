"""The semantics table: what every op returns for edge rows. torch's CPU float64 ops are the
reference for meaning; properties/selftest/test_meta.py checks that the FP64 oracle and torch both agree
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
#   log_softmax_backward: dx = dz - exp(z) * sum(dz), with exp(z) > 0 for every z > -inf: an
#                         infinite sum(dz) gives an infinite dx there even where exp(z) underflows
# Only rows are coupled: other rows are never affected by a poisoned row.


# ----------------------------------------------------------------------------------------------
# merges of (softmax or attention output, logsumexp) states (oracles/merge.py, kernels/_merge.py)
# ----------------------------------------------------------------------------------------------
# A state (x, lse) describes a chunk of a row's columns (keys): x its softmax p (softmax_merge) or
# its attention output o (attention_merge), lse its logsumexp, so lse = -inf is an empty or fully
# masked chunk. The rules follow from the one-shot table above applied to the concatenated row:
#   * lse = -inf on one side: the exact identity (the other side's values bitwise), whatever the
#     empty side's x holds (NaN, inf, anything): its values never reach the output. Its softmax
#     columns are 0, as a -inf logit's softmax is 0.
#   * both -inf: softmax gives NaN p and lse -inf (the all -inf row); attention gives o = 0 and
#     lse -inf, with no NaN (the convention of flash/ring attention for a fully masked query).
#   * a NaN lse poisons the row (NaN everywhere, lse NaN), as a NaN logit does; NaN beats +inf.
#   * otherwise a +inf lse gives NaN p / o and lse +inf, as a +inf logit does.
#   * finite lse: x must be finite (non-finite values there are outside the contract).
#
# Each entry: (what, lse_a, x_a, lse_b, x_b, softmax_merge p, attention_merge o, lse). x_a and
# x_b are used as p (softmax_merge) and as o (attention_merge, None: not applicable).
MERGE_SEMANTICS = [
    # what                                      lse_a       x_a      lse_b     x_b      p                o        lse
    ("equal lse weighs both halves",           0.0,        [2.0],   0.0,      [4.0],   [1.0, 2.0],      [3.0],   math.log(2)),
    ("lse log 3 against 0: weights 3/4, 1/4",  math.log(3), [1.0],  0.0,      [1.0],   [0.75, 0.25],    [1.0],   math.log(4)),
    ("empty b is the identity (NaN ignored)",  1.5,        [0.25],  -inf,     [nan],   [0.25, 0.0],     [0.25],  1.5),
    ("empty a is the identity (inf ignored)",  -inf,       [inf],   -2.0,     [0.5],   [0.0, 0.5],      [0.5],   -2.0),
    ("identity keeps -0.0 bitwise",            -inf,       [nan],   0.0,      [-0.0],  [0.0, -0.0],     [-0.0],  0.0),
    ("both empty",                             -inf,       [nan],   -inf,     [nan],   [nan, nan],      [0.0],   -inf),
    ("a NaN lse poisons the row",              nan,        [1.0],   0.0,      [1.0],   [nan, nan],      [nan],   nan),
    ("NaN lse beside an empty side",           nan,        [1.0],   -inf,     [1.0],   [nan, nan],      [nan],   nan),
    ("NaN beats +inf",                         nan,        [1.0],   inf,      [1.0],   [nan, nan],      [nan],   nan),
    ("+inf lse: NaN values, lse +inf",         inf,        [1.0],   0.0,      [1.0],   [nan, nan],      [nan],   inf),
    ("+inf beside an empty side",              inf,        [1.0],   -inf,     [1.0],   [nan, nan],      [nan],   inf),
    ("huge lse does not overflow",             3e38,       [1.0],   3e38,     [1.0],   [0.5, 0.5],      [1.0],   3e38 + math.log(2)),
    ("a far smaller lse weighs 0",             0.0,        [1.0],   -1000.0,  [1.0],   [1.0, 0.0],      [1.0],   0.0),
    ("zero-width empty chunk",                 -inf,       [],      0.5,      [1.0],   [1.0],           None,    0.5),
]


# ----------------------------------------------------------------------------------------------
# cross-entropy (class-index targets; torch.nn.functional.cross_entropy in float64 is the
# reference for meaning). Each entry: (what, logits, target, label_smoothing, reduction, loss,
# grad, torch_grad). grad is d(loss)/d(logits) for dloss = 1 (ones for "none"); torch_grad is
# None where torch agrees, else what torch gives (the one deliberate difference: an ignored row
# holding NaN/inf logits gets an exactly zero gradient here, NaN in torch, whose log_softmax
# backward forms 0 * NaN). Default ignore_index -100.
# ----------------------------------------------------------------------------------------------
_L2 = math.log(2)
_P = 1 / (1 + math.e)  # softmax([0, 1])[0]

CE_SEMANTICS = [
    # what                                         logits                 target    eps   red     loss             grad                                  torch_grad
    ("ordinary row",                               [[0.0, 1.0]],          [1],      0.0,  "none", [math.log1p(math.exp(-1))], [[_P, -_P]],     None),
    ("uniform row, smoothing",                     [[0.0, 0.0]],          [0],      0.5,  "none", [_L2],           [[-0.25, 0.25]],                        None),
    ("-inf non-target logit: finite loss",         [[0.0, -inf]],         [0],      0.0,  "none", [0.0],           [[0.0, 0.0]],                          None),
    ("-inf target logit: loss +inf",               [[0.0, -inf]],         [1],      0.0,  "none", [inf],           [[1.0, -1.0]],                         None),
    ("-inf non-target logit with smoothing: +inf", [[0.0, -inf]],         [0],      0.1,  "none", [inf],           [[0.05, -0.05]],                       None),
    ("-inf target logit, eps = 1: 0 * inf = NaN",  [[0.0, -inf]],         [1],      1.0,  "none", [nan],           [[0.5, -0.5]],                         None),
    ("all -inf row: NaN",                          [[-inf, -inf]],        [0],      0.0,  "none", [nan],           [[nan, nan]],                          None),
    ("all -inf row with smoothing: NaN",           [[-inf, -inf]],        [0],      0.1,  "none", [nan],           [[nan, nan]],                          None),
    ("a NaN logit poisons the row",                [[nan, 0.0]],          [1],      0.0,  "none", [nan],           [[nan, nan]],                          None),
    ("a +inf logit poisons the row",               [[inf, 0.0]],          [1],      0.0,  "none", [nan],           [[nan, nan]],                          None),
    ("+inf target logit: NaN",                     [[inf, 0.0]],          [0],      0.3,  "none", [nan],           [[nan, nan]],                          None),
    ("huge finite logits do not overflow",         [[3e38, -3e38]],       [0],      1.0,  "none", [3e38],          [[0.5, -0.5]],                         None),
    ("ignored row: loss 0, gradient 0",            [[0.0, 1.0], [0.0, 1.0]], [-100, 1], 0.0, "none", [0.0, math.log1p(math.exp(-1))], [[0.0, 0.0], [_P, -_P]], None),
    ("ignored row does not count in the mean",     [[5.0, 1.0], [0.0, 1.0]], [-100, 1], 0.0, "mean", math.log1p(math.exp(-1)), [[0.0, 0.0], [_P, -_P]], None),
    ("ignored NaN row: loss 0, gradient 0",        [[nan, 1.0], [0.0, 1.0]], [-100, 1], 0.0, "sum", math.log1p(math.exp(-1)), [[0.0, 0.0], [_P, -_P]], [[nan, nan], [_P, -_P]]),
    ("all-ignored batch, mean: NaN (0 / 0)",       [[0.0, 1.0]],          [-100],   0.1,  "mean", nan,             [[0.0, 0.0]],                          None),
    ("all-ignored batch, sum: 0",                  [[0.0, 1.0]],          [-100],   0.0,  "sum",  0.0,             [[0.0, 0.0]],                          None),
    ("empty batch, mean: NaN",                     [[], [], []][:0],      [],       0.0,  "mean", nan,             [],                                    None),
    ("empty batch, sum: 0",                        [[], [], []][:0],      [],       0.0,  "sum",  0.0,             [],                                    None),
]


# ----------------------------------------------------------------------------------------------
# attention (oracles/sdpa.py, kernels/_attention.py): edge rows of o and lse. B = Hq = Hkv = 1;
# q (Lq, D), k (Lk, D), v (Lk, Dv) as nested lists; options as keywords of attention() (scale=1
# unless given). Bottom-right causal alignment unless causal_alignment says otherwise. Rows follow
# the one-shot table above applied to each query's scores over its visible keys, with the empty
# state of the merges for a query that sees no key (o = 0, lse = -inf, as flash and ring
# attention). Keys a query cannot see never enter its row: NaN in an invisible key's k changes
# nothing (a tiled kernel multiplies an invisible key's v by a zero weight inside a block, so
# non-finite v there is not required to stay out).
# Each entry: (what, q, k, v, options, o, lse). test_meta.py does not check this table yet.
# ----------------------------------------------------------------------------------------------
_L3 = math.log(3)

ATTENTION_SEMANTICS = [
    # what                                      q                k                     v                 options                                              o                        lse
    ("ordinary row",                            [[1.0]],         [[0.0], [_L3]],       [[2.0], [6.0]],   {"scale": 1.0},                                      [[5.0]],                 [math.log(4)]),
    ("no keys (Lk = 0): o = 0, lse = -inf",     [[1.0], [2.0]],  [],                   [],               {"scale": 1.0},                                      [[0.0], [0.0]],          [-inf, -inf]),
    ("causal, Lq > Lk: bottom-right leaves the first query no key", [[1.0], [1.0]], [[0.0]], [[3.0]], {"scale": 1.0, "causal": True},                   [[0.0], [3.0]],          [-inf, 0.0]),
    ("causal top-left, Lq < Lk: query 0 sees key 0 only", [[1.0]], [[0.0], [5.0]],     [[3.0], [7.0]],   {"scale": 1.0, "causal": True, "causal_alignment": "top_left"}, [[3.0]],   [0.0]),
    ("causal bottom-right, Lq < Lk: the last query sees every key", [[1.0]], [[0.0], [0.0]], [[3.0], [7.0]], {"scale": 1.0, "causal": True},               [[5.0]],                 [math.log(2)]),
    ("window (0, 0): each query sees its own key", [[1.0], [1.0]], [[0.0], [9.0]],     [[3.0], [7.0]],   {"scale": 1.0, "window": (0, 0)},                    [[3.0], [7.0]],          [0.0, 9.0]),
    ("window (-1, 0) is causal",                [[1.0], [1.0]],  [[0.0], [0.0]],       [[3.0], [7.0]],   {"scale": 1.0, "window": (-1, 0)},                   [[3.0], [5.0]],          [0.0, math.log(2)]),
    ("softcap saturates huge scores",           [[1000.0]],      [[1.0], [0.0]],       [[1.0], [0.0]],   {"scale": 1.0, "softcap": 1.0},                      [[math.e / (math.e + 1)]], [1.0 + math.log1p(math.exp(-1.0))]),
    ("default scale 1/sqrt(D)",                 [[2.0, 0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], [[1.0], [0.0]], {}, [[math.e / (math.e + 1)]], [1.0 + math.log1p(math.exp(-1.0))]),
    ("a NaN score poisons its row",             [[nan], [1.0]],  [[1.0], [1.0]],       [[1.0], [2.0]],   {"scale": 1.0},                                      [[nan], [1.5]],          [nan, math.log(2) + 1.0]),
    ("a +inf score: o NaN, lse +inf",           [[inf]],         [[1.0], [-1.0]],      [[1.0], [2.0]],   {"scale": 1.0},                                      [[nan]],                 [inf]),
    ("NaN in an invisible key changes nothing", [[1.0], [1.0]],  [[0.0], [nan]],       [[3.0], [7.0]],   {"scale": 1.0, "causal": True},                      [[3.0], [nan]],          [0.0, nan]),
    ("huge finite scores do not overflow",      [[3e38]],        [[1.0], [-1.0]],      [[1.0], [2.0]],   {"scale": 1.0},                                      [[1.0]],                 [3e38]),
]
