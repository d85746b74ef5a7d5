"""A softmax with two independent bugs: a row holding a logit above 50 comes out NaN, and a row
longer than 4 columns comes out 1% too large. Each shows on cases without the other (one long row
of small logits; one short row with a large one), so the suite must report both from the one test
matches_oracle-softmax, each with its own smallest case.

    python -m pytest -m properties --target softmax_properties.properties.faulty.two_bugs -k matches_oracle-softmax
"""
import torch

SUITE_REFUSALS = ()


def softmax(x):
    y = torch.softmax(x.double(), -1)
    if x.shape[-1] > 4:
        y = y * 1.01  # BUG 1: long rows 1% too large
    y = torch.where((x.double() > 50).any(-1, keepdim=True), float("nan"), y)  # BUG 2: NaN rows
    return y.to(x.dtype)
