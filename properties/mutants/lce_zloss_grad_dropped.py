"""Fused linear cross-entropy that adds the z-loss z lse^2 to the loss but leaves its term,
2 z lse softmax, out of the d logits (the class of a fused kernel whose backward pass was written
for the plain loss and never taught the z-loss the forward gained): the loss is the project's
kernels', the gradients those of the loss without the z-loss."""
from ._lce_base import cross_entropy, kernel_grads, with_backward  # noqa: F401 (cross_entropy: the op it composes)


def _grads(hidden, weight, bias, target, dloss, options):
    return kernel_grads(hidden, weight, bias, target, dloss, {**options, "z_loss": 0.0})  # BUG: no z term


linear_cross_entropy = with_backward(_grads)
OP = "linear_cross_entropy"  # the op it breaks: the z-loss's share of the gradients
CAUGHT_BY = ("lce_gradients_match_oracle",)  # the invariants that catch it on their own (properties/selftest/test_mutants.py)
