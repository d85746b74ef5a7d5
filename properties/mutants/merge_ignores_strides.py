"""softmax_merge whose launcher hands the states' data pointers to a kernel that assumes contiguous
rows: a padded, transposed or interleaved p_a / p_b is read from the wrong addresses (a storage
offset is honoured, as a data pointer includes it). The bug class: a stride guard that misses
layouts (NVIDIA/TransformerEngine #2734: cross_entropy_forward's stride check misses transposed
input, and the Triton kernel reads wrong rows). The merge itself is the project's Triton kernel."""
import math

import torch

from softmax_properties.kernels import softmax_merge as _merge


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t's storage from its data pointer with contiguous strides: what a kernel that ignores the
    strides reads. (An expanded tensor whose storage is too short is copied instead: reading past
    the storage would fault on a GPU.)"""
    strides, acc = [], 1
    for s in reversed(t.shape):
        strides.append(acc)
        acc *= s
    need = t.storage_offset() + t.numel()
    if t.untyped_storage().nbytes() < need * t.element_size():
        return t.contiguous()
    return t.as_strided(t.shape, tuple(reversed(strides)), t.storage_offset())  # BUG: t.stride() ignored


def softmax_merge(p_a, lse_a, p_b, lse_b):
    return _merge(_as_if_contiguous(p_a), lse_a, _as_if_contiguous(p_b), lse_b)


OP = "softmax_merge"  # the op it breaks: states read as if contiguous
CAUGHT_BY = ('merge_layout_invariance',)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
