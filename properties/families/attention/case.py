"""AttnCase: one attention call, rebuilt exactly from its recipe (shapes, seeds, magnitudes,
layouts, options), and its reproducer."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...case import OpCase, preamble
from ...snippets import built
from ...spec import lse_dtype

# how each tensor is laid out; ``code`` builds tensor {name} from its logical values V (B, H, L, D)
LAYOUTS = {
    "contiguous": "{name} = V.clone()",
    # flash-attention's (B, L, H, D) memory layout, as a permuted view
    "blhd": "{name} = V.transpose(1, 2).contiguous().transpose(1, 2)",
    # every row padded with NaN columns (a head dimension inside a wider buffer)
    "padded": ("base = torch.full((*V.shape[:-1], V.shape[-1] + 5), float('nan'), dtype=V.dtype, device=V.device)\n"
               "base[..., :V.shape[-1]] = V\n{name} = base[..., :V.shape[-1]]"),
    # one key / value head shared by every head: stride 0 along the heads (the values are equal
    # along them, AttnCase.logical)
    "expanded": "{name} = V[:, :1].expand(V.shape)",
}
KV_ONLY = ("expanded",)


def _seeded_code(seed: int, shape) -> str:
    return (f"torch.randn({tuple(shape)}, generator=torch.Generator().manual_seed({seed}), "
            f"dtype=torch.float64)")


@dataclass(frozen=True)
class AttnCase(OpCase):
    """An attention case: q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv) and, for the
    backward, o and lse (the FP64 forward rounded to the dtype and to lse's float32 / float64) and
    do (B, Hq, Lq, Dv). Values: seeded normal float64, times a power-of-two magnitude per tensor
    (``mags``: q, k, v, do), rounded to dtype; ``constant_keys``: every key of a head equal to its
    first (uniform weights). ``layouts``: one LAYOUTS key per tensor (q, k, v, do). Options: those
    whose value is not the default go into every call (``kwargs``); ``alignment``: the causal
    alignment the target declares (the truth's, never passed); ``empty_lse``: the lse it declares
    for a query that sees no key (-inf, or flash-attention's +inf), in the truth and in the lse a
    backward is given."""

    op: str
    dtype: torch.dtype
    B: int
    Hq: int
    Hkv: int
    Lq: int
    Lk: int
    D: int
    Dv: int
    seed: int = 0
    mags: tuple = (1.0, 1.0, 1.0, 1.0)
    constant_keys: bool = False
    layouts: tuple = ("contiguous",) * 4
    causal: bool = False
    scale: object = None
    window: object = None
    softcap: object = None
    alignment: str = "bottom_right"
    empty_lse: float = -math.inf

    # ---- options
    def kwargs(self) -> dict:
        kw = {}
        if self.causal:
            kw["causal"] = True
        for name in ("scale", "window", "softcap"):
            if getattr(self, name) is not None:
                kw[name] = getattr(self, name)
        return kw

    def oracle_options(self) -> dict:
        """The options as the FP64 oracle takes them (the declared alignment included)."""
        return dict(causal=self.causal, scale=self.scale, window=self.window, softcap=self.softcap,
                    causal_alignment=self.alignment)

    def declared_lse(self, lse: torch.Tensor) -> torch.Tensor:
        """lse with the empty rows' -inf replaced by the declared empty_lse."""
        return lse if self.empty_lse == -math.inf else lse.masked_fill(lse == -math.inf, self.empty_lse)

    @property
    def backward(self) -> bool:
        return self.op == "attention_backward"

    @property
    def group(self) -> int:
        return self.Hq // self.Hkv

    @property
    def masked(self) -> bool:
        """A causal or window mask applies (its positions are not all visible)."""
        return self.causal or self.window is not None

    @property
    def scale_value(self) -> float:
        return 1.0 / math.sqrt(self.D) if self.scale is None else float(self.scale)

    # ---- the logical values
    def shapes(self) -> dict:
        return dict(q=(self.B, self.Hq, self.Lq, self.D), k=(self.B, self.Hkv, self.Lk, self.D),
                    v=(self.B, self.Hkv, self.Lk, self.Dv), do=(self.B, self.Hq, self.Lq, self.Dv))

    def _value_code(self, i: int, name: str) -> str:
        """Code leaving in V the logical values of tensor name (index i of q, k, v, do)."""
        dt = f"torch.{str(self.dtype).replace('torch.', '')}"
        shape = self.shapes()[name]
        src = _seeded_code(self.seed * 4 + i, shape)
        if name == "k" and self.constant_keys:
            src += "[:, :, :1].expand(" + repr(shape) + ")"
        if self.layouts[i] == "expanded":
            src += "[:, :1].expand(" + repr(shape) + ")"
        return f"V = ({src} * {self.mags[i]!r}).to({dt}).to(device)"

    def dlse_code(self) -> str:
        """Code leaving in dlse a cotangent of lse (B, Hq, Lq) in lse's dtype: seeded normal values
        (a seed no tensor of any case uses) times do's magnitude."""
        dt = f"torch.{str(lse_dtype(self.dtype)).replace('torch.', '')}"
        src = _seeded_code(-1 - self.seed, (self.B, self.Hq, self.Lq))
        return f"dlse = ({src} * {self.mags[3]!r}).to({dt}).to(device)"

    def lse_cotangent(self, device="cpu") -> torch.Tensor:
        return built(self.dlse_code(), "dlse", device=device)

    def logical(self, name: str, device="cpu") -> torch.Tensor:
        i = "qkvd".index(name[0])
        return built(self._value_code(i, name), "V", device=device)

    def values(self, device="cpu") -> dict:
        """{q, k, v(, do)}: the logical values in dtype (before layout)."""
        names = ("q", "k", "v", "do") if self.backward else ("q", "k", "v")
        return {n: self.logical(n, device) for n in names}

    def forward64(self, device="cpu"):
        """The FP64 forward (o, lse) of the case's q, k, v."""
        from softmax_properties.oracles import sdpa
        vals = self.values(device)
        return sdpa.attention(vals["q"], vals["k"], vals["v"], **self.oracle_options())

    def _laid_out(self, name: str, V: torch.Tensor) -> torch.Tensor:
        i = "qkvd".index(name[0])
        return built(LAYOUTS[self.layouts[i]].format(name=name), name, V=V)

    def tensors(self, device="cpu") -> list:
        """Fresh tensors, laid out, in argument order: (q, k, v) or (q, k, v, o, lse, do)."""
        vals = self.values(device)
        q, k, v = (self._laid_out(n, vals[n]) for n in ("q", "k", "v"))
        if not self.backward:
            return [q, k, v]
        o, lse = self.forward64(device)
        lse = self.declared_lse(lse)
        return [q, k, v, o.to(self.dtype), lse.to(lse_dtype(self.dtype)), self._laid_out("do", vals["do"])]

    def tensor_names(self) -> tuple:
        return self.spec.args

    def family(self) -> str:
        return "attention"

    def describe(self, device="cpu") -> str:
        ts = self.tensors(device)
        parts = [f"op={self.op}", f"dtype={str(self.dtype).replace('torch.', '')}",
                 f"options: {self.kwargs()} (causal alignment {self.alignment}"
                 + (", lse of a query without a key +inf)" if self.empty_lse != -math.inf else ")")]
        lays = dict(zip(("q", "k", "v", "do"), self.layouts))
        mags = dict(zip(("q", "k", "v", "do"), self.mags))
        for name, t in zip(self.tensor_names(), ts):
            extra = f" layout={lays[name]} magnitude={mags[name]}" if name in lays else ""
            parts.append(f"{name}: shape={tuple(t.shape)} strides={tuple(t.stride())}{extra}")
        if self.constant_keys:
            parts.append("every key of a head equal to its first")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        names = ("q", "k", "v", "do") if self.backward else ("q", "k", "v")
        for i, name in enumerate(names):
            lines.append(self._value_code(i, name))
            lines.append(LAYOUTS[self.layouts[i]].format(name=name))
        if self.backward:
            lines.append("from softmax_properties.oracles import sdpa  # the suite's FP64 attention: o, lse rounded")
            lines.append(f"o, lse = sdpa.attention(q, k, v, **{self.oracle_options()!r})")
            lines.append(f"o, lse = o.to(q.dtype), lse.to(torch.{str(lse_dtype(self.dtype)).replace('torch.', '')})")
            if self.empty_lse != -math.inf:
                lines.append("lse = lse.masked_fill(lse == -inf, inf)  # the declared ATTENTION_EMPTY_LSE")
        lines.append(call or self.call_code())
        lines.append("print(out)")
        return "\n".join(lines)
