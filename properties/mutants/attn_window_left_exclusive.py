"""attention whose sliding window leaves out its left edge: key j is visible from query i only for
j > i + d - left, where the contract (flash-attention's window_size) has j >= i + d - left, so a
query with keys that far back sees one key too few. The bug class: a window counted as the number
of keys up to and including the query's own (a sliding_window of W read as W - 1 keys back, or
the reverse) in a kernel that takes the contract's (left, right)."""
import torch

from . import _attn_base as A


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    Lq, Lk = q.shape[2], k.shape[2]
    vis = A.visible(Lq, Lk, causal, window, q.device)
    if window is not None and window[0] != -1:
        i = torch.arange(Lq, device=q.device)[:, None]
        j = torch.arange(Lk, device=q.device)[None, :]
        vis = vis & (j != i + (Lk - Lq) - window[0])  # BUG: the left edge itself left out
    s, ct, g = A.scores(q, k, False, scale, None, softcap, vis=vis)
    return A.finish(s, v, ct, g, q.dtype)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
