"""Online accumulation as a Hypothesis state machine: a row's chunk states are fed, in any order
and on either side, to an accumulator built on the target's merge (ring attention / online
softmax), with empty states (garbage values) fed in between. After every step the accumulator,
finalized, must equal the one-shot FP64 oracle over the columns fed so far (in the order they
sit in the accumulator), within the chunked-merge bound at the current merge depth; an empty
state must leave it bitwise unchanged."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, \
    run_state_machine_as_test

from .families.merge import strategies as S
from .invariants import checking, fail, run
from .invariants._checks import bits_equal
from .families.merge.laws import check_one_shot
from .ops import OPS

MERGE_OPS = [name for name, spec in OPS.items() if spec.family == "merge"]


class OnlineMerge(RuleBasedStateMachine):
    TARGET = None  # set by the test: the module under test and the merge op
    OP = None

    @initialize(data=st.data())
    def start(self, data):
        self.case = data.draw(S.merge_cases(self.OP, max_chunks=6), label="case")
        self.leaves = self.case.leaf_tensors(self.TARGET.device)
        self.remaining = set(self.leaves)
        x0, l0 = self.leaves[0]
        width = 0 if self.OP == "softmax_merge" else x0.shape[-1]
        self.acc = (torch.zeros((*x0.shape[:-1], width), dtype=x0.dtype, device=x0.device),
                    torch.full(l0.shape, -math.inf, dtype=l0.dtype, device=l0.device))
        self.order, self.steps = [], 0
        self.code = [f"acc = torch.zeros((*x0.shape[:-1], {width}), dtype=x0.dtype), torch.full(lse0.shape, -inf)"]

    def _merge(self, left, right, left_code, right_code):
        out = run(self.TARGET, self.OP, *left, *right)
        self.code.append(f"acc = target.{self.OP}({left_code}, {right_code})")
        return tuple(out)

    @precondition(lambda self: self.remaining)
    @rule(data=st.data(), on_left=st.booleans())
    def feed_chunk(self, data, on_left):
        c = data.draw(st.sampled_from(sorted(self.remaining)), label="chunk")
        self.remaining.discard(c)
        leaf, code = self.leaves[c], f"x{c}, lse{c}"
        if on_left:
            self.acc = self._merge(leaf, self.acc, code, "*acc")
            self.order.insert(0, c)
        else:
            self.acc = self._merge(self.acc, leaf, "*acc", code)
            self.order.append(c)
        self.steps += 1

    @rule(garbage=st.sampled_from(S.GARBAGE), on_left=st.booleans())
    def feed_empty(self, garbage, on_left):
        """An empty state (lse = -inf; attention: garbage o of the accumulator's width; softmax:
        no columns) leaves the accumulator bitwise unchanged."""
        x, l = self.acc
        width = x.shape[-1] if self.OP == "attention_merge" else 0
        e = (torch.full((*x.shape[:-1], width), garbage, dtype=x.dtype, device=x.device), torch.full_like(l, -math.inf))
        ecode = f"torch.full((*acc[0].shape[:-1], {width}), {garbage!r}, dtype=acc[0].dtype), torch.full_like(acc[1], -inf)"
        before = self.acc
        self.acc = self._merge(e, before, f"*({ecode})", "*acc") if on_left else self._merge(before, e, "*acc", f"*({ecode})")
        for got, want, nm in zip(self.acc, before, ("x", "lse")):
            bad = ~bits_equal(got, want) if got.shape == want.shape else torch.ones(want.shape, dtype=torch.bool, device=want.device)
            if got.shape != want.shape or bool(bad.any()):
                with checking("online_accumulator", "strict"):
                    fail(self.case, self.TARGET, f"merging an empty state changed the accumulator's {nm}",
                         call=self._call())

    def _call(self):
        return "\n".join(self.code + ["out = acc"])

    @invariant()
    def matches_one_shot(self):
        if hasattr(self, "acc"):
            with checking("online_accumulator", "strict"):
                check_one_shot(self.case, self.TARGET, self.acc, self.order, self.steps, self._call())


@pytest.mark.tier("strict")  # empty states hold garbage and must leave the accumulator bitwise unchanged
@pytest.mark.parametrize("op", MERGE_OPS)
def test_online_accumulator(op, target):
    if not target.has(op):
        pytest.skip(f"target {target.name} has no {op}")
    machine = type(f"OnlineMerge_{op}", (OnlineMerge,), {"TARGET": target, "OP": op})
    run_state_machine_as_test(machine, settings=settings(stateful_step_count=10))
