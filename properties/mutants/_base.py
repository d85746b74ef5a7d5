"""Shared launch code for the mutant kernels: rows made contiguous, one program per row."""
import math

import torch
import triton

from softmax_properties.kernels._launch import check_pair, check_tensor


def rows_of(t: torch.Tensor) -> torch.Tensor:
    if t.ndim == 0:
        return t.reshape(1, 1)
    return t.contiguous().view(math.prod(t.shape[:-1]), t.shape[-1])


def launch_forward(kernel, x: torch.Tensor, name: str) -> torch.Tensor:
    check_tensor("x", x, name)
    x2 = rows_of(x)
    y = torch.empty_like(x2)
    if x2.numel():
        kernel[(x2.shape[0],)](x2, y, x2.shape[1], F64=x.dtype == torch.float64, BLOCK=max(16, triton.next_power_of_2(x2.shape[1])))
    return y.reshape(x.shape)


def launch_backward(kernel, a: torch.Tensor, g: torch.Tensor, name: str) -> torch.Tensor:
    check_pair(name, "y", a, "dy", g)
    a2, g2 = rows_of(a), rows_of(g)
    dx = torch.empty_like(a2)
    if a2.numel():
        kernel[(a2.shape[0],)](a2, g2, dx, a2.shape[1], F64=a.dtype == torch.float64, BLOCK=max(16, triton.next_power_of_2(a2.shape[1])))
    return dx.reshape(a.shape)
