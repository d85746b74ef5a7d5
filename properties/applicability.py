"""Whether an invariant can judge a target's op at all: the test runner, replay and the mutant
search skip a (law, op) pair the target cannot be asked about, with the reason."""
from __future__ import annotations

import torch


def device_reason(inv, target):
    """Why inv cannot run where target runs (a law about CUDA semantics, on the CPU), or None."""
    if "cuda" in inv.needs and not str(target.device).startswith("cuda"):
        return f"the law needs a CUDA device; the target runs on {target.device}"
    return None


def skip_reason(inv, op, target):
    """Why inv cannot run on target's op (it lacks the op, a dim argument, autograd (in any dtype;
    in float64 for a law that needs float64), another op or an option the law needs, or runs where the law
    cannot: device_reason), or None when it can."""
    if not target.has(op):
        return f"target {target.name} has no {op}"
    where = device_reason(inv, target)
    if where:
        return where
    for need in inv.needs:
        if need == "dim" and not target.accepts_dim(op):
            return f"{target.name}.{op} takes no dim argument"
        if need == "autograd" and not target.supports_autograd(op):
            return (f"{target.name}.{op} is not differentiable in any dtype (its autograd probe: "
                    f"{target.autograd_refused(op)})")
        if need == "float64" and not target.supports_autograd(op, torch.float64):
            return (f"{target.name}.{op} is not differentiable in float64, and the law runs in float64 only (its "
                    f"autograd probe: {target.autograd_refused(op, (torch.float64,))})")
        if need.startswith("op:") and not target.has(need[3:]):
            return f"the law needs {need[3:]}, which target {target.name} does not offer"
        if need == "option:any" and not target.offered(op):
            return f"the law needs an option of {op} beyond {target.name}.{op}'s signature: it takes none"
        if need.startswith("option:") and need != "option:any" and not target.offers(op, need[7:]):
            return f"the law needs the option {need[7:]}=, which {target.name}.{op} does not take"
    return None
