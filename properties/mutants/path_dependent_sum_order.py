"""softmax whose row sum runs in another order when the input is strided, the axis is not the
last, or the batch holds a non-finite value (a fast path for clean contiguous input, a general
one otherwise): both orders are accurate, so the default tier accepts it, but the result's bits
depend on how the tensor is stored, which axis is reduced and what the other rows hold, which
the strict tier's bitwise layout, dim and row laws reject."""
import torch


def softmax(x, dim=-1):
    moved = dim not in (-1, x.ndim - 1)
    if moved:
        x = x.movedim(dim, -1)
    c = torch.float64 if x.dtype == torch.float64 else torch.float32
    xc = x.to(c)
    if xc.shape[-1] == 0:
        out = x.clone()
    else:
        m = xc.amax(-1, keepdim=True)
        e = torch.exp(xc - torch.where(torch.isfinite(m), m, 0.0))
        general = moved or not x.is_contiguous() or not bool(torch.isfinite(xc).all())
        s = torch.zeros_like(m[..., 0])
        for j in (range(e.shape[-1] - 1, -1, -1) if general else range(e.shape[-1])):  # BUG (strict): path-dependent order
            s = s + e[..., j]
        out = torch.where(torch.isnan(m) | (m == float("inf")), float("nan"), e / s[..., None]).to(x.dtype)
    return out.movedim(-1, dim) if moved else out


OP = "softmax"  # the op it breaks: sum order depends on layout, dim and other rows
CAUGHT_BY = ('layout_invariance_bitwise', 'dim_argument_bitwise', 'row_independence_bitwise')  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
