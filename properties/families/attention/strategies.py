"""The attention family's strategies: shapes aimed at the target's block sizes, head dimensions,
grouped heads, magnitudes up to scores of thousands, layouts and options.

Sizes scale with the profile (strategies.LIMITS): the sequence lengths stay below max_cols / 8
/ 32 (ci: 34, gpu: 2048), and the scores of a case (B Hq Lq Lk) below max_elems / 4 but for one
head (the FP64 oracle holds them all, and the interpreter runs a program per block of queries of
each head)."""
from __future__ import annotations

import functools
import math

from hypothesis import strategies as st

from ... import strategies as S
from ...spec import lookup
from .case import AttnCase, KV_ONLY, LAYOUTS

# the head dimensions of models (256: Gemma's); 128 and 256 only where the lengths reach 256 (the
# gpu profile): under the interpreter a wider head costs every program's tiles, not more programs
HEAD_DIMS = (16, 32, 64, 128, 256)
ODD_HEAD_DIMS = (1, 3, 8, 24, 40, 72)
SCALES = (0.5, 0.125, 1.0, 0.03125)
SOFTCAPS = (1.0, 5.0, 30.0)
# magnitudes (powers of two: exact in every dtype) of q, k, v, do; q x 64 with k x 4 gives scores
# of thousands at D = 64 (one-hot rows, softcap saturation)
Q_MAGS = (1.0, 1.0, 1.0, 8.0, 64.0)
K_MAGS = (1.0, 1.0, 4.0)


def max_len() -> int:
    """The longest sequence: ci 34 (the interpreter runs a program per block of queries, and each
    walks the key blocks), dev 131, gpu 2048."""
    return max(16, min(S.LIMITS.max_cols // 32, 2048))


TARGET = S.TARGET  # the target module, for its attention declarations (alignment, block sizes)


def alignment() -> str:
    """The causal alignment the target declares (ATTENTION_CAUSAL_ALIGNMENT), bottom-right by
    default (flash-attention >= 2.1)."""
    a = getattr(TARGET.module, "ATTENTION_CAUSAL_ALIGNMENT", "bottom_right")
    if a not in ("bottom_right", "top_left"):
        raise ValueError(f"ATTENTION_CAUSAL_ALIGNMENT must be 'bottom_right' or 'top_left', got {a!r}")
    return a


def empty_lse() -> float:
    """The lse the target returns for a query that sees no key (ATTENTION_EMPTY_LSE): -inf by
    default, the natural log of an empty sum and the merges' empty state; +inf is
    flash-attention's convention (its kernels write INFINITY where the row's sum is 0, so that
    the backward's exp(s - lse) is 0 for every key without a test), a declaration, not a bug."""
    v = getattr(TARGET.module, "ATTENTION_EMPTY_LSE", -math.inf)
    if not (isinstance(v, (int, float)) and math.isinf(v)):
        raise ValueError(f"ATTENTION_EMPTY_LSE must be -math.inf (the default) or math.inf, got {v!r}")
    return float(v)


S.DECLARATIONS.update(alignment=alignment, empty_lse=empty_lse)


@functools.lru_cache(maxsize=64)
def _boundaries(module, dtype, head_dim) -> tuple:
    fn = getattr(module, "attention_block_boundaries", None)
    if not callable(fn):
        return (16, 32, 64, 128)
    try:
        return tuple(fn(dtype, head_dim))
    except TypeError:
        return tuple(fn())


def lengths(dtype, head_dim, cap):
    """0, 1, the target's block sizes +-1 (attention_block_boundaries(dtype, head_dim), if it
    offers one; else 16 ... 128), and small lengths; all up to cap."""
    special = sorted({n + d for n in _boundaries(TARGET.module, dtype, head_dim) for d in (-1, 0, 1)
                      if 2 <= n + d <= cap})
    # a block boundary one draw in four, else a small length: each block of queries and of keys
    # costs the interpreter about a hundred Python-level operations per program
    small = st.integers(2, min(cap, 12))
    out = S.rarely(st.sampled_from(special), small, 4) if special else small
    return S.rarely(st.sampled_from((0, 1)), out, 6)


@st.composite
def attn_cases(draw, op: str, options=True, empty=False, masked=False, unmasked=False, grouped=False):
    """An AttnCase of op (attention or attention_backward). options=False: no option; else each
    option the target offers (OpSpec.offered, strategies.OFFERED); empty: some query sees no key
    (Lk = 0, or Lq > Lk under a causal mask or a window (0, 0)). The preconditions of the laws
    that need them, drawn directly rather than filtered (a law rejecting three draws in four
    draws four cases per example): masked, a causal mask or a window and Lq, Lk >= 2; unmasked,
    neither and Lk >= 2; grouped, Hq = G Hkv with G > 1."""
    dtype = draw(S.dtypes(), label="dtype")
    D = draw(S.rarely(st.sampled_from(ODD_HEAD_DIMS), st.sampled_from(HEAD_DIMS[:3] if max_len() < 256
                                                                        else HEAD_DIMS), 5), label="D")
    Dv = draw(S.rarely(st.sampled_from(HEAD_DIMS[:2] + ODD_HEAD_DIMS[:3]), st.just(D), 5), label="Dv")
    cap = max_len()
    Lq = draw(lengths(dtype, D, cap), label="Lq")
    Lk = draw(S.rarely(st.just(Lq), lengths(dtype, D, cap), 3), label="Lk")
    if masked:
        Lq = max(Lq, 2)
    if masked or unmasked:
        Lk = max(Lk, 2)
    if empty:
        Lq = max(Lq, 2)
        Lk = draw(st.one_of(st.just(0), st.integers(1, Lq - 1)), label="Lk_empty")
    # heads and batch within the score budget (B Hq Lq Lk <= max_elems / 4: ci 2048, the
    # interpreter's time grows with the programs, B Hq blocks of queries); one head always
    room = max(1, S.LIMITS.max_elems // 4 // max(Lq * max(Lk, 1), 1))
    # and B Hq at most max_elems / 2048 (ci: 4; gpu: 1024): under the interpreter each (batch,
    # head) is its own programs, 20-40 ms each per call (a case of 2 x 6 heads took 0.4 s forward
    # and 1 s backward, against 0.08 and 0.2 s for 2 heads)
    room = min(room, max(4, S.LIMITS.max_elems // 2048))
    if grouped:  # two heads at least, whatever the budget (a case of up to twice its scores)
        room = max(room, 2)
    Hkv = draw(st.integers(1, min(2, room // 2 if grouped else room)), label="Hkv")
    groups = (2, 3) if grouped else (1, 1, 2, 3)
    G = draw(st.sampled_from([g for g in groups if Hkv * g <= max(room, 1)] or [2 if grouped else 1]), label="group")
    B = draw(st.integers(1, max(1, min(2, room // (Hkv * G)))), label="B")
    seed = draw(st.integers(0, 2**16), label="seed")
    mags = (draw(st.sampled_from(Q_MAGS), label="q_mag"), draw(st.sampled_from(K_MAGS), label="k_mag"),
            draw(st.sampled_from((1.0, 1.0, 16.0)), label="v_mag"), 1.0)
    constant_keys = draw(S.rarely(st.just(True), st.just(False), 8), label="constant_keys")
    plain = st.just("contiguous")
    lay = st.sampled_from([k for k in LAYOUTS if k not in KV_ONLY])
    kv_lay = st.sampled_from(list(LAYOUTS)) if Hkv > 1 else lay
    layouts = (draw(S.rarely(lay, plain, 3), label="q_layout"), draw(S.rarely(kv_lay, plain, 3), label="k_layout"),
               draw(S.rarely(kv_lay, plain, 3), label="v_layout"), draw(S.rarely(lay, plain, 3), label="do_layout"))
    causal, scale, window, softcap = False, None, None, None
    offered = S.OFFERED.of(lookup(op))  # the options the target's function takes (all: drawn as before)
    if options:
        if "causal" in offered and not unmasked:
            causal = draw(st.booleans(), label="causal")
        if "scale" in offered:
            scale = draw(S.rarely(st.sampled_from(SCALES), st.just(None), 4), label="scale")
        if "window" in offered and not unmasked:
            side = st.one_of(st.integers(0, 8), st.just(-1))
            window = draw(S.rarely(st.tuples(side, side), st.just(None), 4), label="window")
        if masked and not causal and window is None:  # the law needs a mask: causal, or a window
            if "window" in offered:
                window = draw(st.one_of(st.just(None), st.tuples(side, side)), label="mask")
            causal = window is None and "causal" in offered
        if masked and not causal and window == (-1, -1):  # unbounded both sides: a mask of nothing
            window = (-1, 0)
        if "softcap" in offered:
            softcap = draw(S.rarely(st.sampled_from(SOFTCAPS), st.just(None), 4), label="softcap")
    if empty and Lk > 0 and not causal:
        if "window" in offered:
            window = (0, 0)
        else:  # without a window, only an empty key set leaves a query no key
            Lk = 0
    return AttnCase(op, dtype, B, Hkv * G, Hkv, Lq, Lk, D, Dv, seed, mags, constant_keys, layouts, causal, scale,
                    window, softcap, alignment(), empty_lse())


def attn_case(draw, spec, families=None, max_cols=None):
    """The case of attention or attention_backward (OpSpec.cases)."""
    fam = set(families or ())
    return draw(attn_cases(spec.name, empty="empty" in fam, masked="masked" in fam, unmasked="unmasked" in fam,
                           grouped="grouped" in fam), label="case")
