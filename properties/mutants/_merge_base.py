"""Shared code for the merge mutants: states made contiguous, one program per row (launch), and
the row's lse pair every kernel reads first (row_lses)."""
import math

import torch
import triton
import triton.language as tl

from softmax_properties.kernels._launch import check_tensor


@triton.jit
def row_lses(LA, LB, F64: tl.constexpr):
    """This program's row and its two states' lse in the compute type: (row, la, lb)."""
    CT: tl.constexpr = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    return row, tl.load(LA + row).to(CT), tl.load(LB + row).to(CT)


def rows_of(t: torch.Tensor, width: int) -> torch.Tensor:
    return t.contiguous().reshape(math.prod(t.shape[:-1]) if t.ndim else 1, width)


def launch(kernel, xa, la, xb, lb, name: str, concat: bool):
    """concat: softmax_merge (output columns [a, b]); else attention_merge (same width)."""
    for n, t in (("x_a", xa), ("lse_a", la), ("x_b", xb), ("lse_b", lb)):
        check_tensor(n, t, name)
    da, db = xa.shape[-1], xb.shape[-1]
    a2, b2 = rows_of(xa, da), rows_of(xb, db)
    l1, l2 = la.contiguous().reshape(-1), lb.contiguous().reshape(-1)
    width = da + db if concat else da
    out = torch.empty((a2.shape[0], width), dtype=xa.dtype, device=xa.device)
    lse = torch.empty(l1.shape, dtype=la.dtype, device=xa.device)
    if a2.shape[0]:
        kernel[(a2.shape[0],)](a2, l1, b2, l2, out, lse, da, db, F64=xa.dtype == torch.float64,
                               BLOCK=max(16, triton.next_power_of_2(max(da, db, 1))))
    return out.reshape(*xa.shape[:-1], width), lse.reshape(la.shape)


def launch_states(kernel, o, lse):
    """merge_states mutants: o (..., S, Dv) and lse (..., S) made contiguous, one program per row;
    a kernel takes (O, L, OUT, LO, S, Dv) and a BLOCK of at least Dv columns."""
    check_tensor("o", o, "merge_states")
    check_tensor("lse", lse, "merge_states")
    S, dv = o.shape[-2], o.shape[-1]
    rows = math.prod(o.shape[:-2])
    o3 = o.contiguous().reshape(rows, S, dv)
    l2 = lse.contiguous().reshape(rows, S)
    out = torch.empty((rows, dv), dtype=o.dtype, device=o.device)
    lse_out = torch.empty((rows,), dtype=lse.dtype, device=o.device)
    if rows:
        kernel[(rows,)](o3, l2, out, lse_out, S, dv, F64=o.dtype == torch.float64,
                        BLOCK=max(16, triton.next_power_of_2(max(dv, 1))))
    return out.reshape(*o.shape[:-2], dv), lse_out.reshape(lse.shape[:-1])
