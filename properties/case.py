"""A drawn test case: what it is, how to rebuild it exactly, and how to report a failure on it."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from .failures import PropertyFailure, classify, failure_class, precision_group
from .snippets import built
from .spec import lookup, lse_dtype

EXPLICIT_MAX = 64  # tensors up to this many elements are printed value by value


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def preamble(target_name: str) -> list:
    """The first lines of every reproducer: its tensors live where the suite ran the target (CUDA
    when present and the interpreter is off, else the CPU), so it can be pasted and run on either.
    Without CUDA, Triton's interpreter runs the kernels as in the suite's CPU runs: chosen before
    the target imports triton (importing the suite's package does that), and patched to round as
    compiled Triton does (properties/interpreter.py; the unpatched interpreter truncates to
    bfloat16, and a failure found with the patches would not show)."""
    return ["import os", "import torch",
            "from softmax_properties.properties import interpreter  # no CUDA: Triton's interpreter, as in the suite",
            "if interpreter.interpreting():", "    interpreter.install()",
            f"import {target_name} as target", 'inf, nan = float("inf"), float("nan")',
            'device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"']


def explicit_code(V: torch.Tensor, var: str = "V") -> str:
    """Code that rebuilds V from its values written out, exactly, on the reproducer's device."""
    dt = f"torch.{str(V.dtype).replace('torch.', '')}"
    flat = ", ".join(_fmt(v) for v in V.double().reshape(-1).tolist())
    return f"{var} = torch.tensor([{flat}], dtype=torch.float64).to({dt}).reshape({tuple(V.shape)}).to(device)"


def values_code(V: torch.Tensor, inp, var: str = "V") -> str:
    """Code that rebuilds the logical values V exactly, as the variable `var`."""
    if V.numel() <= EXPLICIT_MAX:
        return explicit_code(V, var)
    return (f"from softmax_properties.properties.strategies import Logits\n"
            f"{var} = {inp.logits!r}.values().reshape({inp.shape}).to(device)")


class OpCase:
    """What every case type offers the laws beside its own fields (op, dtype, ...): its op's spec,
    the call's keyword options, the case as the default tier feeds it, how to evaluate the op on
    its tensors and how a reproducer names and calls them. A case type of a new op subclasses
    this (or Case) and overrides what differs."""

    @property
    def spec(self):
        return lookup(self.op)

    def kwargs(self) -> dict:
        """The keyword options every call of the op passes (none here)."""
        return {}

    def natural(self):
        """The case as the default tier feeds it: itself (merge cases drop their garbage)."""
        return self

    def evaluate(self, fn, tensors):
        """The op's result on these argument tensors, fn(*tensors, **options) calling it once."""
        return fn(*tensors, **self.kwargs())

    def tensor_names(self) -> tuple:
        """How reports and reproducers name the tensors of tensors(), in order."""
        return self.spec.args

    def call_code(self) -> str:
        """The reproducer's line that calls the op on the case's tensors."""
        kw = "".join(f", {k}={v!r}" for k, v in self.kwargs().items())
        return f"out = target.{self.op}({', '.join(self.tensor_names())}{kw})"

    def poisoned_call_code(self) -> str:
        """call_code() under NaN-poisoned allocations, as the laws that look for unwritten outputs
        call the op (invariants._checks.poisoned_allocations)."""
        body = "\n".join("    " + line for line in self.call_code().splitlines())
        return ("from softmax_properties.properties.invariants._checks import poisoned_allocations\n"
                "with poisoned_allocations():  # torch.empty returns NaN: an output element never written reads NaN\n"
                + body)


@dataclass(frozen=True)
class Case(OpCase):
    """op, dtype and the drawn inputs. For an explicit VJP, ``inputs[0]`` holds the forward's
    logits: its first argument is the FP64 forward of those logits, rounded to dtype."""

    op: str
    dtype: torch.dtype
    inputs: tuple  # of Input, one per op argument

    def logical(self, i: int, device="cpu") -> torch.Tensor:
        """The i-th argument's values in dtype, before layout."""
        V = self.inputs[i].values(device)
        if i == 0 and self.spec.is_vjp:
            V = lookup(self.spec.forward).oracle(V).to(self.dtype)
        return V

    def tensors(self, device="cpu") -> list:
        """Fresh tensors, laid out, in argument order."""
        return [inp.layout.apply(self.logical(i, device), name)
                for i, (inp, name) in enumerate(zip(self.inputs, self.spec.args))]

    def family(self) -> str:
        return "/".join(inp.logits.family for inp in self.inputs)

    def describe(self, device="cpu") -> str:
        ts = self.tensors(device)
        parts = [f"op={self.op}", f"dtype={str(self.dtype).replace('torch.', '')}"]
        for name, t, inp in zip(self.spec.args, ts, self.inputs):
            parts.append(f"{name}: shape={tuple(t.shape)} strides={tuple(t.stride())} "
                         f"layout={inp.layout.kind}{'(' + str(inp.layout.k) + ')' if inp.layout.k else ''} "
                         f"family={inp.logits.family}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        for i, (inp, name) in enumerate(zip(self.inputs, self.spec.args)):
            if i == 0 and self.spec.is_vjp:
                lines.append("from softmax_properties import oracles  # the suite's FP64 oracles")
                lines.append(values_code(inp.values(), inp, var="X"))
                lines.append(f"V = oracles.{self.spec.forward}(X).to(torch.{str(self.dtype).replace('torch.', '')})")
            else:
                lines.append(values_code(inp.values(), inp))
            lines.append(inp.layout.code(name))
        lines.append(call or self.call_code())
        lines.append("print(out)")
        return "\n".join(lines)


def fail(invariant: str, case: Case, target, what: str, index=None, expected=None, actual=None, tol=None,
         call: str = None, out_name: str = "out", kind=None, tier: str = None):
    """Raise PropertyFailure: the invariant (of the given tier) and what broke, the case, the worst
    element of the output named out_name (index None: no element), and the case's reproducer.
    case: any case type (anything with describe() and reproducer(target_name, call)). The
    exception's class (properties/failures.py) is kind (default: from the worst element, else
    PropertyFailure), qualified by out_name and the case's precision group, so that each kind of
    bug is reported and shrunk on its own. Laws call invariants.fail, which names the law."""
    msg = [f"[{invariant}] {f'({tier} tier) ' if tier else ''}{what}", "  " + case.describe()]
    if index is not None:
        where = f"{out_name}[{', '.join(map(str, index))}]" if len(index) else out_name
        msg.append(f"  worst element {where}: actual={_fmt(float(actual))} expected={_fmt(float(expected))}"
                   f" tolerance={float(tol):.3g}" if tol is not None else
                   f"  worst element {where}: actual={_fmt(float(actual))} expected={_fmt(float(expected))}")
    msg.append("  reproducer:\n" + "\n".join("    " + line for line in case.reproducer(target.name, call).splitlines()))
    if kind is None:
        kind = classify(expected, actual, tol) if index is not None and expected is not None else PropertyFailure
    cls = failure_class(kind, "" if out_name == "out" else out_name, precision_group(getattr(case, "dtype", None)))
    raise cls("\n".join(msg))


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
        return s.to(device)

    def v_values(self, device="cpu") -> torch.Tensor:
        rng = np.random.default_rng(self.v_seed)
        v = torch.from_numpy(rng.standard_normal((*self.batch, self.n_keys, self.dv)))
        return v.to(self.dtype).double().to(device)

    def state(self, chunks, device="cpu"):
        """(x, lse) of the union of the given chunks' columns (in that order): FP64 one-shot truth
        rounded to dtype / lse dtype, garbage where lse is -inf (from the first listed chunk that
        has a garbage value). Computed on the CPU and then moved to device, so the states are the
        same bits on every device: those the reproducer prints are those the target was fed
        (a GPU's float64 exp/log can differ from the CPU's in the last bit)."""
        x, lse = self._state_cpu(tuple(chunks))
        return x.to(device), lse.to(device)

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
                x = torch.where((lse == -math.inf)[..., None], torch.tensor(g[c], dtype=torch.float64).to(self.dtype).to(x.device), x)
                break
        return x, lse

    def reference(self, device="cpu", chunks=None):
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
                         f"layout={self.layout.kind}{'(' + str(self.layout.k) + ')' if self.layout.k else ''}; "
                         f"lse{c}: shape={tuple(lse.shape)} strides={tuple(lse.stride())} layout={self.lse_layout}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        big = False
        for c in range(len(self.bounds())):
            x, lse = self.state([c])
            for var, V in ((f"x{c}", x), (f"lse{c}", lse)):
                if V.numel() <= EXPLICIT_MAX:
                    lines.append(explicit_code(V))
                else:
                    if not big:
                        lines.append("from softmax_properties.properties.case import MergeCase\nfrom softmax_properties.properties.strategies import Layout, Logits")
                        lines.append(f"case = {self!r}")
                        big = True
                    lines.append(f"V = case.state([{c}], device)[{0 if var[0] == 'x' else 1}]")
                code = self.layout.code(var) if var[0] == "x" else lse_layout_code(self.lse_layout, var, self.layout)
                lines.append(code)
        lines += (call or self.call_code()).splitlines()
        lines.append("print(out)")
        return "\n".join(lines)


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
            if V.numel() <= EXPLICIT_MAX:
                lines.append(explicit_code(V))
            else:
                if not big:
                    lines.append("from softmax_properties.properties.case import StatesCase\nfrom softmax_properties.properties.strategies import Layout, Logits")
                    lines.append(f"case = {self!r}")
                    big = True
                lines.append(f"V = case.stacked_values()[{0 if var == 'o' else 1}].to(device)")
            lines.append(self.layout.code("o") if var == "o" else self._lse_code())
        lines += (call or self.call_code()).splitlines()
        lines.append("print(out)")
        return "\n".join(lines)


def ce_batch(inp) -> tuple:
    lay = inp.layout
    return ((lay.k,) if lay.kind == "expanded" else ()) + tuple(inp.batch)


@dataclass(frozen=True)
class CECase(OpCase):
    """A cross-entropy case: logits (an Input: recipe, batch, layout), class-index targets, the
    options, and for the backward the cotangent dloss (its shape follows the reduction)."""

    op: str  # "cross_entropy" or "cross_entropy_backward"
    dtype: torch.dtype
    logits: object  # strategies.Input
    targets: object  # strategies.Targets
    ignore_index: int
    reduction: str
    label_smoothing: float
    dloss: object = None  # strategies.DLoss (backward only)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    @property
    def batch(self) -> tuple:
        """The logits tensor's shape without the class axis (an expanded layout adds an axis)."""
        return ce_batch(self.logits)

    @property
    def loss_shape(self):
        return self.batch if self.reduction == "none" else ()

    def kwargs(self) -> dict:
        return dict(ignore_index=self.ignore_index, reduction=self.reduction, label_smoothing=self.label_smoothing)

    def kwargs_code(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs().items())

    def tensors(self, device="cpu") -> list:
        """Fresh (logits, target[, dloss]), laid out as drawn."""
        x = self.logits.tensor("logits", device)
        t = self.targets.tensor(self.batch, device)
        if self.dloss is None:
            return [x, t]
        return [x, t, self.dloss.tensor(self.loss_shape, self.dtype_name, device)]

    def call(self, target, *tensors, **overrides):
        kw = {**self.kwargs(), **overrides}
        return target.call(self.op, *tensors, **kw)

    def call_code(self) -> str:
        # the class indices are `labels` in a reproducer: `target` is the module under test
        args = "logits, labels" + (", dloss" if self.dloss is not None else "")
        return f"out = target.{self.op}({args}, {self.kwargs_code()})"

    def family(self) -> str:
        return self.logits.logits.family

    def describe(self, device="cpu") -> str:
        ts = self.tensors(device)
        lay = self.logits.layout
        parts = [f"op={self.op}", f"dtype={self.dtype_name}", f"options: {self.kwargs_code()}",
                 f"logits: shape={tuple(ts[0].shape)} strides={tuple(ts[0].stride())} "
                 f"layout={lay.kind}{'(' + str(lay.k) + ')' if lay.k else ''} family={self.family()}",
                 f"target: {list(self.targets.values)}{f' repeated over {self.targets.rows} rows' if self.targets.rows else ''}"
                 f" dtype={self.targets.dtype} strides={tuple(ts[1].stride())}"]
        if self.dloss is not None:
            parts.append(f"dloss: shape={tuple(ts[2].shape)} strides={tuple(ts[2].stride())} "
                         f"layout={self.dloss.layout} fill={self.dloss.fill}")
        return "\n  ".join(parts)

    def reproducer(self, target_name: str, call: str = None) -> str:
        lines = preamble(target_name)
        lines.append(values_code(self.logits.values(), self.logits))
        lines.append(self.logits.layout.code("logits"))
        # the class indices are `labels` here: `target` is the module under test
        lines.append(self.targets.code("labels", self.batch))
        if self.dloss is not None:
            lines.append(self.dloss.code("dloss", self.loss_shape, self.dtype_name))
        lines.append(call or self.call_code())
        lines.append("print(out)")
        return "\n".join(lines)
