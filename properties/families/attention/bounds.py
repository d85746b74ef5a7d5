"""Error bounds of attention's outputs: first-order error analysis of two dot products (length D,
then Lk) around a softmax, for the default tier (any summation order, scores and intermediate
results possibly rounded to a 16-bit input dtype, as torch's eager composition does) and the
strict tier (the tight order of a flash kernel: float32 scores, sequential chains of depth(n)).

Notation (per batch b, query head h, query i, key j; float64 tensors): u the compute precision's
unit roundoff (tolerances.TABLE: 2**-24, 2**-53 for float64); u_in the input dtype's
(2**-precision: 2**-11 float16, 2**-8 bfloat16; u for float32 / float64); A_ij = scale sum_d
|q_id k_jd|; t_ij = scale q_i.k_j, s_ij the (soft-capped) score, P_ij its softmax weight over the
visible keys, m_i the row max, d_ij = s_ij - m_i, H_i = sum_j P_ij |d_ij|, lse_i = m_i + log S_i.

Scores. The dot product of D terms in any order is within gamma_{D-1} A (Higham 3.1: depth_any(D)
u A); the scale's product and its constant (log2(e) folded in by base-2 kernels) add 3u |t|. The
default tier also lets the scores be rounded to u_in twice (the matmul's output and the scaled
product in the input dtype: torch's eager composition for 16-bit inputs): + 2 u_in |t|. Softcap
c tanh(t / c) passes an error of t with factor sech^2 <= 1 and adds 6u |s| (division, tanh,
product). So |err s_ij| <= E_ij = (dep_D u + 3u + n u_in) A_ij + 6u |s_ij| [softcap], n = 2
(default, 16-bit inputs) or 0 (strict, or 32/64-bit inputs, where u_in = u and 3u covers it);
the default tier adds a 16-bit softcap's roundings ("In the default tier", (4), below).

Weights. P_ij = exp(s_ij - lse_i). lse is 1-Lipschitz in the max norm, so the computed scores
move lse by at most Emax_i = max over visible j of E_ij, and P_ij by the factor exp(E_ij + Emax_i)
at most (not first order: scores of thousands in 16 bits carry errors of order 1, and the bound
must then allow any redistribution of the weights). The softmax itself adds, relative to P_ij,
r_ij = u (2 |d_ij| + 2 H_i + 5 dep_L + 10) (softmax_bound's terms; an online softmax rescales a
term once per later key block with a 4u exp each, at most dep_L times); P rounded to the input
dtype for the P V product (every 16-bit flash kernel and torch's composition) adds u_in (16-bit
only), and below that dtype's normal range half its subnormal spacing, sub = 2**(emin -
precision), absolutely. On a GPU a weight below the compute precision's smallest normal tiny_c
may also flush to zero (exp2 and products with FTZ: the float32 ex2.approx.ftz), off by up to
tiny_c absolutely; the floor the final rounding adds (tolerances.ATOL_FTZ) does not cover it, as
the matmuls that follow multiply it by sum_j |v_j| (o) or sum_i |q_i| (dk), and a dk of 3e-37
made of flushed weights came out 0. |err P_ij| <= dP_ij = min(P_ij (expm1(E_ij + Emax_i +
r_ij) + u_P) + sub + tiny_c, 1).

o_ic = sum_j P_ij v_jc: |err| <= sum_j dP_ij |v_jc| + dep_L u sum_j P_ij |v_jc| (the sum), before
the final rounding to the output dtype (tolerances.total_tolerance adds half an ulp and the FTZ
floor). lse_i: Emax_i + u (2 H_i + 5 dep_L + 7 + 4 |log S_i| + |lse_i|) (ce_lse_error's online
analysis: the sum, its rescales, log and the addition of m).

The backward (dq, dk, dv of o's cotangent do): dP_ij = do_i . v_j within (dep_Dv u + n u_in)
|do_i|.|v_j| (=: F_ij); Delta_i = sum_j P_ij dP_ij (or o_i . do_i from the rounded o: both routes
are added) within sum_j (dP_ij |dP_ij| + P_ij F_ij) + dep_L u sum_j P_ij |dP_ij| + (eps_o_i +
ulp(o_i)) . |do_i| + dep_Dv u |o_i|.|do_i|; dS_ij = P_ij (dP_ij - Delta_i) within
dP_ij |dP_ij - Delta_i| + P_ij (F_ij + eps_Delta_i) + (3u + u_in) |dS_ij| (rounded to the input
dtype for the next matmuls in 16 bits) + sub (that rounding below the 16-bit dtype's normal range,
absolute, as for P: a float16 dS below 6.1e-5 is off by up to 3e-8, and a dk of 6e-7 made of such
terms by 1.7e-7) + tiny_c (a product below the normal range flushed);
with softcap dT = dS (1 - tanh^2(t / c)), within
eps_dS f + |dS| (0.77 E_ij / c + 6u) (|d/dx (1 - tanh^2 x)| <= 0.77), the absolute terms (sub,
tiny_c) added after the factor f, since the rounding and the flush happen on the last product;
dq_i = scale sum_j dT_ij k_j within scale (sum_j eps_dT_ij |k_j| + dep_L u sum_j |dT_ij| |k_j|) +
u |dq_i|; dk_j = scale
sum_i dT_ij q_i and dv_j = sum_i P_ij do_i, summed over the G query heads of a key / value head,
likewise with dep_(G Lq). The explicit backward's P is formed from the given lse (float32): its
rounding, u |lse_i|, adds to the exponent of dP. The default tier adds a composition's roundings
to these ("In the default tier", below).

In the default tier, with 16-bit inputs, the bounds also allow the roundings of the compositions
that write attention from torch ops in the input dtype (torch eager and HF's eager attention,
torch's SDPA math backend, flash-attention 2's grouped-head sum), none of which a flash kernel
makes: (1) autograd through (q k^T) * scale in 16 bits rounds the scaled score gradient scale dT
once more: u_in |dT| + sub / scale in e_dT (below the normal range the rounding is absolute and
the scale does not shrink it: torch eager's float16 dk at q x 32, scale 1/8 is 0 where the exact
value is 1.2e-6, every scaled term rounded to 0 or to one subnormal spacing (2**-24), and the
bound without it allowed 7.3e-7); (2) the scale folded into q or k before the matmul (the math
backend scales both by sqrt(scale)) or applied to its rounded product: two relative roundings, 2
u_in scale sum_j |dT_ij| |k_j| on dq (likewise dk), and the product's subnormal rounding times
the factor after it, max(1, scale) sub; (3) k and v repeated to the query heads
(repeat_interleave, expand) or flash-attention 2's mha_bwd: each query head's dk and dv rounded
to the input dtype before the sum over the G heads of a group (a torch reduction, accumulated at
compute precision: dep_(G Lq) covers it): u_in |dk_h| + sub per head (torch eager, float16, G =
2: dv -8.297 where the exact value is -8.289, the bound without it 8.1e-3); (4) softcap in the
input dtype (Gemma-2's eager attention: t / c, tanh and the product by c each rounded to it):
u_in |t| (t / c's rounding, through tanh's slope <= 1) + 2 u_in |s| + (2 c + 1) sub in E_ij, and
in the backward, where autograd forms dS c, times 1 - y^2 (y tanh's rounded output, off by at
most 2 u_in in 1 - y^2 <= 1) and over c, each rounded: 2 u_in |dS| + 3 u_in |dT| + (1 + 2 / c)
sub in e_dT (Gemma-2's composition, bfloat16, softcap 5, one key: lse 1.34375 where the exact
value is 1.35788, the bound without it 1.09e-2). The cases are
properties/selftest/test_attention_family.py's. An element of a scaled operand (q scale, k
sqrt(scale)) below the input dtype's normal range is not allowed its absolute rounding: the
forward does not allow it either.

lse's cotangent dlse_i (autograd through lse) adds P_ij dlse_i to dS_ij: a kernel folds it into
Delta (Delta_i - dlse_i, one more rounding: + u (|Delta_i| + |dlse_i|) in eps_Delta_i), a
composition adds lse's gradient P_ij dlse_i (with P's own error) to the softmax's and rounds the
sum, in 16 bits for 16-bit scores. So dP_ij |dP_ij - Delta_i| becomes dP_ij (|dP_ij - Delta_i| +
|dlse_i|) (|a + b| <= |a| + |b| covers both routes), and the roundings of the two shares and their
sum add (u + 2 u_in) (|P_ij (dP_ij - Delta_i)| + P_ij |dlse_i|) (u + 2u where u_in = 0), a term
taken only with dlse: without it the bound is the one above.

Each bound is also evaluated at tolerances.U_ORACLE (the FP64 oracle's own error) and added."""
from __future__ import annotations

import math

import torch

from ... import tolerances

_INPUT_U = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def input_u(dtype) -> float:
    """u_in: the unit roundoff of a 16-bit input dtype (0 for float32 / float64, whose roundings
    are the compute precision's)."""
    return _INPUT_U.get(dtype, 0.0)


def _expand(t: torch.Tensor, g: int) -> torch.Tensor:
    return t if g == 1 else t.repeat_interleave(g, dim=1)


class Pieces:
    """The float64 quantities the bounds are made of, for one case's q, k, v (as laid out)."""

    def __init__(self, case, q, k, v):
        from softmax_properties.oracles import sdpa
        self.case = case
        g = case.group
        self.q, self.k, self.v = (t.detach().to(torch.float64) for t in (q, k, v))
        self.ke, self.ve = _expand(self.k, g), _expand(self.v, g)
        Lq, Lk = self.q.shape[2], self.k.shape[2]
        self.vis = sdpa.visible(Lq, Lk, case.causal, case.window, case.alignment, device=self.q.device)
        sc = case.scale_value
        self.scale = sc
        self.A = sc * torch.einsum("bhid,bhjd->bhij", self.q.abs(), self.ke.abs())
        self.t = sc * torch.einsum("bhid,bhjd->bhij", self.q, self.ke)
        c = case.softcap or None
        self.s = c * torch.tanh(self.t / c) if c else self.t
        s = torch.where(self.vis, self.s, -math.inf)
        self.P = sdpa.probabilities(self.q, self.k, **case.oracle_options())
        m = s.amax(-1) if Lk else torch.full(s.shape[:-1], -math.inf, dtype=torch.float64, device=s.device)
        fin = torch.isfinite(m)
        ms = torch.where(fin, m, 0.0)
        self.d = torch.where(self.vis & fin[..., None], (s - ms[..., None]).abs(), 0.0)
        self.H = (self.P * self.d).sum(-1)
        S_ = torch.where(self.vis & fin[..., None], torch.exp(s - ms[..., None]), 0.0).sum(-1)
        self.logS = torch.where(fin, torch.log(S_.clamp_min(1e-300)), 0.0)
        self.lse = torch.where(fin, ms + self.logS, -math.inf)


def _score_error(p: Pieces, u, u_in, dep_D, n_in) -> torch.Tensor:
    E = (dep_D * u + 3 * u + n_in * u_in) * p.A
    c = p.case.softcap
    if c:
        E = E + 6 * u * p.s.abs()
        if n_in:  # softcap in the input dtype (module docstring, "In the default tier", (4))
            E = E + u_in * (p.t.abs() + 2 * p.s.abs()) + (2 * c + 1) * tolerances.half_subnormal(p.case.dtype)
    return torch.where(p.vis, E, 0.0)


def _weights_error(p: Pieces, E, u, u_P, dep_L, extra=None, ftz=0.0) -> torch.Tensor:
    """dP_ij, the bound on the error of a computed weight (module docstring); ftz: tiny_c, or 0
    for the FP64 oracle's own error."""
    Emax = E.amax(-1, keepdim=True) if E.shape[-1] else E.sum(-1, keepdim=True)
    r = u * (2 * p.d + 2 * p.H[..., None] + 5 * dep_L + 10)
    x = E + Emax + r
    if extra is not None:
        x = x + extra[..., None]
    # rounded to a 16-bit dtype (u_P > 0), a weight below its normal range is off by up to half its
    # subnormal spacing, 2**(emin - precision), whatever its size (float16: 3e-8 for weights below
    # 6.1e-5)
    sub = tolerances.half_subnormal(p.case.dtype) if u_P else 0.0
    return torch.where(p.P > 0, torch.clamp(p.P * (torch.expm1(x) + u_P) + sub + ftz, max=1.0), 0.0)


def _params(dtype, strict, u):
    """(u_in, n_in, u_P): the 16-bit roundings the tier allows at compute precision u."""
    u_in = input_u(dtype)
    if u_in == 0.0 or u < tolerances.TABLE[dtype].u_c:  # 32/64-bit inputs, or the FP64 oracle's own error
        return 0.0, 0, 0.0
    return u_in, (0 if strict else 2), u_in


def _ftz(dtype, u) -> float:
    """tiny_c at the compute precision (a flushed weight or product, module docstring), 0 for the
    FP64 oracle's own error."""
    return tolerances.TABLE[dtype].tiny_c if u >= tolerances.TABLE[dtype].u_c else 0.0


def _depth(n, strict):
    return tolerances.depth(n) if strict else tolerances.depth_any(n)


def forward_eps(p: Pieces, dtype, strict: bool):
    """(eps_o (B, Hq, Lq, Dv), eps_lse (B, Hq, Lq)) before the final rounding."""
    D, Lk = p.q.shape[-1], p.k.shape[2]
    eo = el = 0.0
    for u in (tolerances.TABLE[dtype].u_c, tolerances.U_ORACLE):
        u_in, n_in, u_P = _params(dtype, strict, u)
        dep_D, dep_L = _depth(D, strict), _depth(Lk, strict)
        E = _score_error(p, u, u_in, dep_D, n_in)
        dP = _weights_error(p, E, u, u_P, dep_L, ftz=_ftz(dtype, u))
        eo = eo + torch.einsum("bhij,bhjd->bhid", dP, p.ve.abs()) \
            + dep_L * u * torch.einsum("bhij,bhjd->bhid", p.P, p.ve.abs())
        Emax = E.amax(-1) if Lk else E.sum(-1)
        el = el + Emax + u * (2 * p.H + 5 * dep_L + 7 + 4 * p.logS.abs() + torch.nan_to_num(p.lse.abs(), posinf=0.0))
    return torch.nan_to_num(eo, nan=0.0), torch.nan_to_num(el, nan=0.0)


def backward_eps(p: Pieces, do, o_ref, eps_o, dtype, strict: bool, dlse=None):
    """(eps_dq, eps_dk, eps_dv) before the final rounding (module docstring). do: float64
    cotangent; o_ref: the FP64 o; eps_o: forward_eps's bound on o; dlse: lse's cotangent
    (module docstring: it enters dS beside dP - Delta, either way)."""
    case = p.case
    g = case.group
    B, Hq, Lq, D = p.q.shape
    Hkv, Lk, Dv = p.k.shape[1], p.k.shape[2], p.v.shape[3]
    do = do.detach().to(torch.float64)
    dPv = torch.einsum("bhid,bhjd->bhij", do, p.ve)
    Bd = torch.einsum("bhid,bhjd->bhij", do.abs(), p.ve.abs())
    delta = (p.P * dPv).sum(-1)
    gl = torch.zeros_like(delta) if dlse is None else dlse.detach().to(torch.float64).to(delta.device)
    dS = p.P * (dPv - delta[..., None] + gl[..., None])
    # with dlse: the two shares of dS (o's cotangent's, lse's P dlse), which a composition forms
    # and rounds apart
    shares = 0.0 if dlse is None else (p.P * (dPv - delta[..., None])).abs() + p.P * gl.abs()[..., None]
    f = 1 - torch.tanh(p.t / case.softcap) ** 2 if case.softcap else None
    dT = dS * f if f is not None else dS
    ulp_o = tolerances.ulp(o_ref, dtype)
    edq = edk = edv = 0.0
    for u in (tolerances.TABLE[dtype].u_c, tolerances.U_ORACLE):
        u_in, n_in, u_P = _params(dtype, strict, u)
        u_r = u_in or u  # a 16-bit rounding of an intermediate result, else the compute precision's
        dep_D, dep_L, dep_Dv, dep_Q = (_depth(n, strict) for n in (D, Lk, Dv, g * Lq))
        E = _score_error(p, u, u_in, dep_D, n_in)
        lse_round = u * torch.nan_to_num(p.lse.abs(), posinf=0.0, neginf=0.0)
        dP = _weights_error(p, E, u, u_P, dep_L, extra=lse_round, ftz=_ftz(dtype, u))
        F = (dep_Dv * u + n_in * u_in) * Bd
        e_delta = ((dP * dPv.abs()).sum(-1) + (p.P * F).sum(-1) + dep_L * u * (p.P * dPv.abs()).sum(-1)
                   + ((eps_o + ulp_o) * do.abs()).sum(-1) + dep_Dv * u * (o_ref.abs() * do.abs()).sum(-1)
                   + u * (delta.abs() + gl.abs()))
        e_dS = (dP * ((dPv - delta[..., None]).abs() + gl.abs()[..., None]) + p.P * (F + e_delta[..., None])
                + (3 * u + u_r) * dS.abs() + (u + 2 * u_r) * shares)
        if f is not None:
            e_dT = e_dS * f + dS.abs() * (0.77 * E / case.softcap + 6 * u)
        else:
            e_dT = e_dS
        # the last product (dT, with softcap's factor) rounded to a 16-bit dtype for the next
        # matmuls: below its normal range off by up to half its subnormal spacing whatever its size
        # (as P, _weights_error); or flushed below the compute precision's: absolute, unscaled by f
        sub = tolerances.half_subnormal(dtype) if u_P else 0.0
        e_dT = e_dT + sub + _ftz(dtype, u)
        sc = abs(p.scale)
        if n_in:
            # a composition's roundings (module docstring, "In the default tier"): the 16-bit
            # score gradient times the scale, rounded again; with softcap, its three products
            # in the input dtype and tanh's rounded output in 1 - tanh^2
            e_dT = e_dT + u_in * dT.abs() + (sub / sc if sc else 0.0)
            if f is not None:
                e_dT = e_dT + 2 * u_in * dS.abs() + 3 * u_in * dT.abs() + (1 + 2 / case.softcap) * sub
        e_dT = torch.where(p.vis, e_dT, 0.0)
        qk_sum = torch.einsum("bhij,bhjd->bhid", dT.abs(), p.ke.abs())
        edq = edq + sc * (torch.einsum("bhij,bhjd->bhid", e_dT, p.ke.abs()) + dep_L * u * qk_sum)
        edq = edq + u * (p.scale * torch.einsum("bhij,bhjd->bhid", dT, p.ke)).abs()
        kq_sum = torch.einsum("bhij,bhid->bhjd", dT.abs(), p.q.abs())
        ek = sc * (torch.einsum("bhij,bhid->bhjd", e_dT, p.q.abs()) + dep_Q * u * kq_sum)
        ev = (torch.einsum("bhij,bhid->bhjd", dP, do.abs())
              + dep_Q * u * torch.einsum("bhij,bhid->bhjd", p.P, do.abs()))
        dk_abs = (p.scale * torch.einsum("bhij,bhid->bhjd", dT, p.q)).abs()
        if n_in:
            # the scale folded into an operand, or applied to the product, in 16 bits (two
            # relative roundings, and the product's subnormal rounding times the factor after
            # it); each query head's dk and dv rounded before the group's sum
            edq = edq + 2 * u_in * sc * qk_sum + max(1.0, sc) * sub
            ek = ek + 2 * u_in * sc * kq_sum + max(1.0, sc) * sub
            if g > 1:
                dv_abs = torch.einsum("bhij,bhid->bhjd", p.P, do).abs()
                ek = ek + u_in * dk_abs + sub
                ev = ev + u_in * dv_abs + sub
        edk = edk + ek.reshape(B, Hkv, g, Lk, D).sum(2) + u * dk_abs.reshape(B, Hkv, g, Lk, D).sum(2)
        edv = edv + ev.reshape(B, Hkv, g, Lk, Dv).sum(2)
    return tuple(torch.nan_to_num(e, nan=0.0) for e in (edq, edk, edv))


# ----------------------------------------------------------------------------------------------
# the laws that compare several calls (laws.py): each bound from the calls' own bounds above
# ----------------------------------------------------------------------------------------------
def split_merge_bounds(parts, ref_lse):
    """split_kv_equivalence: the calls over the key ranges, each within its own bound (parts: the
    [(o truth, lse truth)] of each range, eps_o_c and eps_lse_c with their final rounding),
    merged in FP64 by the lse rule, against the truth over all keys (ref_lse). An error of at
    most L = max_c eps_lse_c in each part's lse moves its weight by a factor of at most exp(2L),
    so the merged o is within sum_c W_c (eps_o_c + |o_c| expm1(2L)) and its lse within L (W_c:
    the FP64 weights exp(lse_c - lse)). Returns (tol_o, tol_lse)."""
    L = parts[0][1].tol
    for _, el in parts[1:]:
        L = torch.maximum(L, el.tol)
    lse_t = torch.stack([el.value for _, el in parts], -1)
    W = torch.nan_to_num(torch.exp(lse_t - ref_lse[..., None]), nan=0.0)
    g = torch.expm1(2 * L)[..., None]
    tol_o = sum(W[..., c, None] * (eo.tol + eo.value.abs() * g) for c, (eo, _) in enumerate(parts))
    return tol_o, L


def shifted_input_bound(e1, e2, effect):
    """Two calls on inputs that differ by a shift rounded to the dtype (k + u, v + c), each within
    its bound of its own FP64 truth (e1, e2): the law's exact effect of the shift plus the FP64
    effect of that rounding, |ref2 - ref1 - effect|, on top of the two bounds."""
    return e1.tol + e2.tol + (e2.value - e1.value - effect).abs()


def shifted_lse_bound(el1, el2, moved, seen):
    """key_shift's lse: shifted_input_bound with the exact move scale q.u (moved) on the rows that
    see a key (seen; the others have no lse to move), plus the float64 rounding of the law's own
    sum l1 + scale q.u (2**-52 of each term's magnitude; an infinite lse adds none)."""
    gap = torch.where(seen, (el2.value - el1.value - moved).abs(), 0.0)
    finite = el1.value.abs().nan_to_num(posinf=0.0, neginf=0.0)
    return el1.tol + el2.tol + gap + 2.0**-52 * (moved.abs() + finite)


def column_sum_bound(tol, got, n_terms, beside=0.0):
    """A float64 sum over axis 2 of values each within tol of its truth: the sum of the bounds,
    plus the sum's own rounding, n_terms u64 (sum |got| + |beside|) (beside: the magnitude of the
    other side of the comparison, summed in float64 too)."""
    return tol.sum(2) + n_terms * 2.0**-52 * (got.double().abs().sum(2) + beside)
