"""The merge_states case: the chunk states of a row stacked along a states axis."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...case import OpCase, preamble, value_or_recipe
from ...snippets import built
from ..merge.case import LSE_LAYOUTS, MergeCase, tree_leaves


# ----------------------------------------------------------------------------------------------
# N-way merges (merge_states): the chunk states of a row stacked along a states axis
# ----------------------------------------------------------------------------------------------
# how merge_states' lse (..., S) is laid out; ``code`` builds tensor {name} from values V
STATES_LSE_LAYOUTS = {
    "contiguous": LSE_LAYOUTS["contiguous"],
    "offset": LSE_LAYOUTS["offset"],
    "strided": LSE_LAYOUTS["strided"],
    # stride 0 along the last batch axis (one lse per (batch, query) shared by every head); the
    # case makes the values equal along that axis
    "broadcast": "{name} = V[..., :1, :].expand(V.shape)",
    # the states axis outermost in memory: split-KV partials stored as (S, ..., Dv)
    "states_outer": "{name} = V.movedim(-1, 0).contiguous().movedim(0, -1)",
}


@dataclass(frozen=True)
class StatesCase(MergeCase):
    """A merge_states case: the chunk states of a MergeCase (attention scores over N keys cut
    into S = len(bounds()) chunks, masked and empty chunks, finite garbage in empty states'
    values) stacked in the order of ``tree``'s leaves (a left chain: the order a fold of
    attention_merge takes) along a states axis, o (..., S, Dv) and lse (..., S). ``layout`` lays
    out o (Layout kinds, "states_outer" included), ``lse_layout`` the lse (STATES_LSE_LAYOUTS).
    ``lse_shift``: added to every score (float64) before the states are formed, so the states'
    lse reach any magnitude up to the lse dtype's finfo.max (strategies.states_cases keeps the
    sum of the shift and the scores inside the range)."""

    lse_shift: float = 0.0

    @property
    def order(self) -> list:
        return tree_leaves(self.tree)

    def natural(self) -> "StatesCase":
        """The case itself: its empty states hold finite values only (strategies.FINITE_GARBAGE),
        which the default tier feeds (the contract leaves an empty state's o unspecified)."""
        return self

    def evaluate(self, fn, tensors):
        return OpCase.evaluate(self, fn, tensors)

    def tensor_names(self) -> tuple:
        return OpCase.tensor_names(self)

    def call_code(self) -> str:
        return OpCase.call_code(self)

    def score_values(self, device="cpu") -> torch.Tensor:
        s = super().score_values(device)
        return s + self.lse_shift if self.lse_shift else s

    def stacked_values(self):
        """(o, lse) logical (before layout), on the CPU: the states in order, stacked."""
        xs, ls = zip(*(self.state([c]) for c in self.order))
        return torch.stack(xs, -2), torch.stack(ls, -1)

    def lay_out_stacked(self, o, lse):
        """o and lse laid out by the code the reproducer prints."""
        return built(self.layout.code("o"), "o", V=o), built(self._lse_code(), "lse", V=lse)

    def _lse_code(self) -> str:
        code = STATES_LSE_LAYOUTS[self.lse_layout].format(name="lse")
        if self.layout.kind == "expanded":  # the values got a stride-0 leading axis: so does their lse
            code += f"\nlse = lse.unsqueeze(0).expand({self.layout.k}, *lse.shape)"
        return code

    def stacked(self, device="cpu"):
        """(o (..., S, Dv), lse (..., S)) as the target sees them."""
        o, lse = self.stacked_values()
        return self.lay_out_stacked(o.to(device), lse.to(device))

    def tensors(self, device="cpu") -> list:
        return list(self.stacked(device))

    def describe(self, device="cpu") -> str:
        o, lse = self.stacked(device)
        lay = self.layout
        parts = [f"op={self.op}", f"dtype={str(self.dtype).replace('torch.', '')}",
                 f"states: S={len(self.order)} order={self.order} bounds={self.bounds()} masked={list(self.masked)} "
                 f"garbage={list(self.garbage)} lse_shift={self.lse_shift!r} scores family={self.family()} dv={self.dv}",
                 f"o: shape={tuple(o.shape)} strides={tuple(o.stride())} layout={lay.kind}{'(' + str(lay.k) + ')' if lay.k else ''}",
                 f"lse: shape={tuple(lse.shape)} strides={tuple(lse.stride())} layout={self.lse_layout}"]
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        o, lse = self.stacked_values()
        big = False
        for var, V in (("o", o), ("lse", lse)):
            big = value_or_recipe(lines, V, f"case.stacked_values()[{0 if var == 'o' else 1}].to(device)", self,
                                  "from softmax_properties.properties.families.merge_states.case import StatesCase", big)
            lines.append(self.layout.code("o") if var == "o" else self._lse_code())
        lines += (call or self.call_code()).splitlines()
        lines.append("print(out)")
        return "\n".join(lines)
