"""The merge case: a row split into chunks, each chunk's (x, lse) state, and a merge tree over them."""
from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from ...case import OpCase, preamble, value_or_recipe
from ...snippets import built
from ...spec import lse_dtype


# ----------------------------------------------------------------------------------------------
# merge cases: a row split into chunks, each chunk's (x, lse) state, and a merge tree over them
# ----------------------------------------------------------------------------------------------
# how an lse tensor is laid out; ``code`` builds tensor {name} from values V, as Layout.code does
LSE_LAYOUTS = {
    "contiguous": "{name} = V.clone()",
    "offset": ("base = torch.full((V.numel() + 3,), float('nan'), dtype=V.dtype, device=V.device)\n"
               "base[3:] = V.reshape(-1)\n{name} = base[3:].view(V.shape)"),
    "strided": ("base = torch.full((*V.shape, 2), float('nan'), dtype=V.dtype, device=V.device)\n"
                "base[..., 0] = V\n{name} = base[..., 0]"),
    # stride 0 along the last batch axis (e.g. one lse per (batch, query) shared by every head);
    # the case makes the values equal along that axis
    "broadcast": "{name} = V[..., :1].expand(V.shape)",
}


def lse_layout_code(kind: str, name: str, layout) -> str:
    code = LSE_LAYOUTS[kind].format(name=name)
    if layout.kind == "expanded":  # the values got a stride-0 leading axis: so does their lse
        code += f"\n{name} = {name}.unsqueeze(0).expand({layout.k}, *{name}.shape)"
    return code


def tree_leaves(tree) -> list:
    return [tree] if isinstance(tree, int) else tree_leaves(tree[0]) + tree_leaves(tree[1])


def tree_depth(tree) -> int:
    return 0 if isinstance(tree, int) else 1 + max(tree_depth(tree[0]), tree_depth(tree[1]))


def tree_code(tree, op: str, out: str = "out", prefix: str = "m") -> list:
    """Lines that evaluate a merge tree with target.{op}: leaves are x{c}, lse{c}; each merge
    result is {prefix}{i}, the root's is {out} (a single leaf is copied to {out} as a tuple)."""
    steps = []

    def walk(t):
        if isinstance(t, int):
            return f"x{t}, lse{t}"
        left, right = walk(t[0]), walk(t[1])
        steps.append([f"{prefix}{len(steps)}", left, right])
        return f"*{steps[-1][0]}"

    expr = walk(tree)
    if not steps:
        return [f"{out} = ({expr})  # one chunk: no merge"]
    steps[-1][0] = out
    return [f"{name} = target.{op}({left}, {right})" for name, left, right in steps]


# The values and chunk states of the two cases in use, each computed once. A many-row case's laws
# read them several times per example (every chunk's state for the call and again for the bound's
# Lam, the scores for each state and for the one-shot truth), and each is CPU work on up to 2**21
# elements, by design: the states are FP64 truths formed on the CPU so that every device is fed
# the same bits. Readers get copies (Tensor.to(device, copy=True)), never the memo's tensors.
_MEMO: "collections.OrderedDict" = collections.OrderedDict()
_MEMO_CASES = 2  # a law compares a case with one variant of it at most (row independence)


def _memo(case, what, make):
    entry = _MEMO.get(case)
    if entry is None:
        entry = _MEMO[case] = {}
        while len(_MEMO) > _MEMO_CASES:
            _MEMO.popitem(last=False)
    else:
        _MEMO.move_to_end(case)
    if what not in entry:
        entry[what] = make()
    return entry[what]


@dataclass(frozen=True)
class MergeCase(OpCase):
    """A merge test case. ``scores``: the rows' logits (softmax_merge) or attention scores
    (attention_merge) over N columns / keys (with ``qk = (seed, dk)``: q k^T / sqrt(dk) of seeded
    normal q, k instead of ``scores``' values); ``cuts``: interior cut points, chunk c covering
    columns [cut_c, cut_{c+1}) (a repeated cut gives an empty chunk); ``masked``: chunks whose
    scores are all -inf; ``garbage``: (chunk, value) pairs filling the x of rows where that chunk's
    lse is -inf (its values must not matter); ``tree``: nested pairs of chunk indices, the merge
    order and shape (its leaves, left to right, give softmax_merge's output column order); ``dv``
    and ``v_seed``: attention values v (seeded normal, (..., N, dv)); ``layout``: of every chunk x;
    ``lse_layout``: of every chunk lse (a key of LSE_LAYOUTS). Each chunk state is the FP64
    one-shot truth of its columns rounded to dtype (lse: float32, float64 for float64)."""

    op: str
    dtype: torch.dtype
    scores: object  # strategies.Logits, (rows, N); rows = prod(batch) (prod(batch[:-1]) if lse_layout is "broadcast")
    batch: tuple
    cuts: tuple = ()
    masked: tuple = ()
    garbage: tuple = ()
    tree: object = 0
    dv: int = 0
    v_seed: int = 0
    qk: tuple = ()
    layout: object = None  # strategies.Layout
    lse_layout: str = "contiguous"

    @property
    def attention(self) -> bool:
        """Attention states (values o of seeded v, width dv) rather than softmax states (the
        values are the chunk's softmax columns, side by side in a merged state)."""
        return self.op != "softmax_merge"

    def natural(self) -> "MergeCase":
        """The same case with every empty state holding its natural values (its chunk's one-shot
        truth: o = 0 for attention, the NaN softmax of an all -inf row for softmax) instead of
        garbage: what the default tier feeds (flash / ring attention libraries define an empty
        state as o = 0, lse = -inf, and may compute 0 * o there)."""
        return self if not self.garbage else dataclasses.replace(self, garbage=())

    def evaluate(self, fn, tensors):
        """The merged root state of the tree, fn(x_a, lse_a, x_b, lse_b) merging two states, from
        the leaves' tensors as tensors() lists them ([x0, lse0, x1, lse1, ...])."""
        leaves = {c: (tensors[2 * c], tensors[2 * c + 1]) for c in range(len(tensors) // 2)}
        return self.run_tree(fn, leaves=leaves)

    def tensor_names(self) -> tuple:
        return tuple(f"{v}{c}" for c in range(len(self.bounds())) for v in ("x", "lse"))

    def call_code(self) -> str:
        return "\n".join(tree_code(self.tree, self.op))

    # ---- the logical values
    @property
    def n_keys(self) -> int:
        return self.scores.cols

    def bounds(self) -> list:
        c = [0] + list(self.cuts) + [self.n_keys]
        return [(c[i], c[i + 1]) for i in range(len(c) - 1)]

    def chunk_cols(self, chunks) -> list:
        b = self.bounds()
        return [j for c in chunks for j in range(*b[c])]

    def score_values(self, device="cpu") -> torch.Tensor:
        """(*batch, N) float64: the scores, masked chunks set to -inf."""
        return _memo(self, "scores", self._score_values).to(device, copy=True)

    def _score_values(self) -> torch.Tensor:
        N = self.n_keys
        if self.qk:
            seed, dk = self.qk
            rng = np.random.default_rng(seed)
            q = rng.standard_normal((self.scores.rows, dk))
            k = rng.standard_normal((self.scores.rows, N, dk))
            s = torch.from_numpy(np.einsum("rd,rnd->rn", q, k) / math.sqrt(dk))
        else:
            s = self.scores.values().double()
        if self.lse_layout == "broadcast" and self.batch:
            s = s.reshape(*self.batch[:-1], 1, N).expand(*self.batch, N)
        s = s.reshape(*self.batch, N).clone()
        for c in self.masked:
            lo, hi = self.bounds()[c]
            s[..., lo:hi] = -math.inf
        return s

    def v_values(self, device="cpu") -> torch.Tensor:
        return _memo(self, "v", self._v_values).to(device, copy=True)

    def _v_values(self) -> torch.Tensor:
        rng = np.random.default_rng(self.v_seed)
        v = torch.from_numpy(rng.standard_normal((*self.batch, self.n_keys, self.dv)))
        return v.to(self.dtype).double()

    def state(self, chunks, device="cpu"):
        """(x, lse) of the union of the given chunks' columns (in that order): FP64 one-shot truth
        rounded to dtype / lse dtype, garbage where lse is -inf (from the first listed chunk that
        has a garbage value). Computed on the CPU and then moved to device, so the states are the
        same bits on every device: those the reproducer prints are those the target was fed
        (a GPU's float64 exp/log can differ from the CPU's in the last bit)."""
        chunks = tuple(chunks)
        x, lse = _memo(self, ("state", chunks), lambda: self._state_cpu(chunks))
        return x.to(device, copy=True), lse.to(device, copy=True)

    def _state_cpu(self, chunks):
        from softmax_properties import oracles
        device = "cpu"
        cols = torch.tensor(self.chunk_cols(chunks), dtype=torch.long, device=device)
        s = self.score_values(device).index_select(-1, cols)
        if not self.attention:
            x, lse = oracles.softmax(s), oracles.logsumexp(s)
        else:
            x, lse = oracles.attention(s, self.v_values(device).index_select(-2, cols))
        x, lse = x.to(self.dtype), lse.to(lse_dtype(self.dtype))
        g = dict(self.garbage)
        for c in chunks:
            if c in g:
                x = torch.where((lse == -math.inf)[..., None], torch.tensor(g[c], dtype=torch.float64, device=x.device).to(self.dtype), x)
                break
        return x, lse

    def one_shot(self, device="cpu", chunks=None):
        """One-shot FP64 truth over the given chunks' columns (default: the tree's leaves, i.e.
        all), softmax columns in that order: (x_ref, lse_ref, mag, lam) with mag the magnitude
        the value bound scales with (p, or A = sum_j P_j |v_j|) and lam = max(|lse_c|, |lse|)
        over finite values, per row."""
        from softmax_properties import oracles
        chunks = tree_leaves(self.tree) if chunks is None else list(chunks)
        cols = torch.tensor(self.chunk_cols(chunks), dtype=torch.long, device=device)
        s = self.score_values(device).index_select(-1, cols)
        if not self.attention:
            x = oracles.softmax(s)
            mag = torch.nan_to_num(x, nan=0.0)
        else:
            v = self.v_values(device).index_select(-2, cols)
            x, _ = oracles.attention(s, v)
            mag = oracles.attention_abs(s, v)
        lse = oracles.logsumexp(s)
        lam = torch.where(torch.isfinite(lse), lse.abs(), 0.0)
        for c in chunks:
            _, lc = self.state([c], device)
            lc = lc.double()
            lam = torch.maximum(lam, torch.where(torch.isfinite(lc), lc.abs(), 0.0))
        return self.expand(x), self.expand(lse), self.expand(mag), self.expand(lam)

    def expand(self, t: torch.Tensor) -> torch.Tensor:
        """t with the layout's stride-0 leading axis, if it has one (what a target returns)."""
        if self.layout.kind == "expanded":
            return t.unsqueeze(0).expand(self.layout.k, *t.shape)
        return t

    def lay_out(self, x, lse, i):
        """Laid-out tensors x{i}, lse{i} from logical values, by the code the reproducer prints."""
        return (built(self.layout.code(f"x{i}"), f"x{i}", V=x),
                built(lse_layout_code(self.lse_layout, f"lse{i}", self.layout), f"lse{i}", V=lse))

    def leaf_tensors(self, device="cpu") -> dict:
        """{chunk: (x, lse)} laid out as the target sees them."""
        return {c: self.lay_out(*self.state([c], device), c) for c in range(len(self.bounds()))}

    def tensors(self, device="cpu") -> list:
        """Every chunk state's tensors, flat: [x0, lse0, x1, lse1, ...]."""
        return [t for st_ in self.leaf_tensors(device).values() for t in st_]

    # ---- running and reporting
    def run_tree(self, call, device="cpu", tree=None, leaves=None):
        """Evaluate a merge tree with call(x_a, lse_a, x_b, lse_b); returns the root state."""
        tree = self.tree if tree is None else tree
        leaves = self.leaf_tensors(device) if leaves is None else leaves
        if isinstance(tree, int):
            return leaves[tree]
        a = self.run_tree(call, device, tree[0], leaves)
        b = self.run_tree(call, device, tree[1], leaves)
        return tuple(call(*a, *b))

    def family(self) -> str:
        return "qk" if self.qk else self.scores.family

    def describe(self, device="cpu") -> str:
        leaves = self.leaf_tensors(device)
        parts = [f"op={self.op}", f"dtype={str(self.dtype).replace('torch.', '')}",
                 f"chunks: bounds={self.bounds()} masked={list(self.masked)} garbage={list(self.garbage)} "
                 f"tree={self.tree} depth={tree_depth(self.tree)} scores family={self.family()}"
                 + (f" dv={self.dv}" if self.attention else "")]
        for c, (x, lse) in leaves.items():
            parts.append(f"x{c}: shape={tuple(x.shape)} strides={tuple(x.stride())} "
                         f"layout={self.layout.label}; "
                         f"lse{c}: shape={tuple(lse.shape)} strides={tuple(lse.stride())} layout={self.lse_layout}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        big = False
        for c in range(len(self.bounds())):
            x, lse = self.state([c])
            for var, V in ((f"x{c}", x), (f"lse{c}", lse)):
                big = value_or_recipe(lines, V, f"case.state([{c}], device)[{0 if var[0] == 'x' else 1}]", self,
                                      "from softmax_properties.properties.families.merge.case import MergeCase", big)
                code = self.layout.code(var) if var[0] == "x" else lse_layout_code(self.lse_layout, var, self.layout)
                lines.append(code)
        lines += (call or self.call_code()).splitlines()
        lines.append("print(out)")
        return "\n".join(lines)
