"""FP64 truth for every op, an mpmath oracle that checks it, finite differences, and the
semantics table of edge rows; the FP64 merges of (softmax, logsumexp) states (merge.py). Everything reduces over the last axis,
except scaled dot-product attention (sdpa.py: q, k, v -> (o, lse) and its VJP)."""
from .reference import (
    fd_grad, log_softmax, log_softmax_backward, logsumexp, row_stats, softmax, softmax_backward,
)
from .mp import mp_log_softmax, mp_logsumexp, mp_softmax
from .semantics import ATTENTION_SEMANTICS, CE_SEMANTICS, MERGE_SEMANTICS, SEMANTICS
from .merge import attention, attention_abs, attention_merge, merge_states, merge_weights, softmax_merge
from . import cross_entropy as ce
from . import sdpa
from . import linear_cross_entropy as lce

__all__ = [
    "softmax", "log_softmax", "logsumexp", "softmax_backward", "log_softmax_backward", "row_stats",
    "fd_grad", "mp_softmax", "mp_log_softmax", "mp_logsumexp", "SEMANTICS",
    "MERGE_SEMANTICS", "softmax_merge", "attention_merge", "merge_states", "attention", "attention_abs", "merge_weights",
    "ce", "CE_SEMANTICS", "sdpa", "ATTENTION_SEMANTICS", "lce",
]
