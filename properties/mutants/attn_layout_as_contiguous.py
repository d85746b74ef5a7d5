"""attention that reads q, k and v as if they were laid out contiguously in (B, H, L, D) order:
from each tensor's storage offset, with contiguous strides, whatever its strides. A (B, L, H, D)
tensor (flash-attention's layout, a permuted view here) then gives the heads' rows in the wrong
order, and a head dimension inside a wider buffer gives the padding. The bug class: a kernel
written for one memory layout called with the other (or a data pointer passed without its
strides). A tensor whose storage is too small for the contiguous reading (stride 0 along the
heads) is read correctly."""
import torch

from . import _attn_base as A


def _as_contiguous(t):
    strides = torch.empty(t.shape, device="meta").stride()
    if t.untyped_storage().nbytes() // t.element_size() < t.storage_offset() + t.numel():
        return t
    return torch.as_strided(t, t.shape, strides, t.storage_offset())  # BUG: t's strides ignored


def attention(q, k, v, *, causal=False, scale=None, window=None, softcap=None):
    q, k, v = (_as_contiguous(t) for t in (q, k, v))
    return A.attention(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap)


OP = "attention"
CAUGHT_BY = ("attention_matches_oracle",)
