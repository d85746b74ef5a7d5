"""Compile the kernels' main variants for sm_90 (H100/H200) on a machine without a GPU, with the
installed triton, and report any compile error. Catches what the CPU interpreter accepts but the
compiler refuses (e.g. non-constexpr globals) before a GPU run.

    python benchmarks/compile_check.py [--attention] [--regs] [--loops]
        --attention: the attention kernels only
        --regs: with each attention kernel, its registers and spill bytes (ptxas -v on its PTX);
                ATTN_KERNELS_FWD / ATTN_KERNELS_BWD (kernels/tuning.py) set the launch shapes
        --loops: with each attention kernel, the SASS instructions of each of its loops
                 (benchmarks/sass_loops.py; the main loops' counts are what a step issues)
"""

import os
import sys

import triton

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from softmax_properties.kernels import _softmax as K
tgt = GPUTarget("cuda", 90, 32)
_LSE = {"bf16": "fp32", "fp16": "fp32", "fp32": "fp32", "fp64": "fp64"}
ATTENTION_ONLY = "--attention" in sys.argv[1:]
REGS = "--regs" in sys.argv[1:]
LOOPS = "--loops" in sys.argv[1:]


def loops_report(kernel) -> str:
    """' (loops: N, N, ... SASS instructions)' of the compiled kernel, or '' without --loops."""
    if not LOOPS:
        return ""
    from sass_loops import disassemble, loops  # beside this script, which runs as one (its folder on the path)
    return f" (loops: {', '.join(str(lp.size) for lp in loops(disassemble(kernel.asm['cubin'])))} SASS instructions)"


# the shared memory one block may opt into on sm_90 (H100, H200): 227 KiB
SM90_SHARED = 232448


def ptxas_report(kernel) -> str:
    """' (R registers, S bytes spilled, L loaded, M bytes shared)' from ptxas -v on the compiled
    kernel's PTX and its shared memory (at most SM90_SHARED, or its launch fails), or '' without
    --regs: the first ptxas beside triton's that takes that PTX's version."""
    if kernel.metadata.shared > SM90_SHARED:
        raise SystemExit(f"{kernel.name}: {kernel.metadata.shared} bytes of shared memory, more than an sm_90 "
                         f"block may take ({SM90_SHARED})")
    if not REGS:
        return ""
    import re
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    from sass_loops import triton_tool  # beside this script, which runs as one (its folder on the path)
    try:
        for exe in ("ptxas-blackwell", "ptxas"):
            path = triton_tool(exe)
            if not os.path.exists(path):
                continue
            r = subprocess.run([path, "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
            if r.returncode == 0:
                text = r.stdout + r.stderr
                regs = re.search(r"Used (\d+) registers", text)
                st = re.search(r"(\d+) bytes spill stores", text)
                ld = re.search(r"(\d+) bytes spill loads", text)
                return (f" ({regs.group(1) if regs else '?'} registers, {st.group(1) if st else '?'} bytes spilled, "
                        f"{ld.group(1) if ld else '?'} loaded, {kernel.metadata.shared} bytes shared)")
        return " (no ptxas here takes this PTX)"
    finally:
        os.unlink(f.name)


# attention (kernels/_attention.py): forward, the backward's dq (with delta) and dk/dv kernels, every
# dtype at its GPU block shapes (kernels/tuning.py) for head dimensions 64, 128 and 256, full
# blocks with 16-byte vectors (FULL) or not, with and without softcap (the window is a runtime
# argument); with the launcher's compile options (kernels/_launch.py, DEFAULT_OPTIONS: FP fusion
# on, which Triton 3.10 turns off by default)
def check_attention():
    import time
    import torch
    from softmax_properties.kernels import _attention as AT
    _TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
    # the launch shapes are the kernels' own (fwd_config, bwd_config: the tables, or ATTN_KERNELS_FWD
    # / _BWD); an override is a 16-bit launch shape (the tuning's), so with one set the 32/64-bit
    # variants are left out
    overridden = any(AT.L.knob(f"ATTN_KERNELS_{k}") for k in ("FWD", "BWD"))
    for dt, bd, full, softcap in (("bf16", 64, True, False), ("bf16", 128, True, False), ("bf16", 128, True, True),
                                  ("fp16", 128, False, True),
                                  ("bf16", 256, True, False), ("bf16", 16, True, True), ("fp32", 64, True, False),
                                  ("fp32", 128, False, True), ("fp64", 64, False, True), ("fp64", 256, True, False),
                                  ("fp32", 256, False, True)):
        if overridden and dt not in ("bf16", "fp16"):
            continue
        lse = _LSE[dt]
        flags = {"F64": dt == "fp64", "SOFTCAP": softcap, "FULL": full, "BLOCK_D": bd, "BLOCK_DV": bd}
        bm, bn, warps, stages = AT.fwd_config(_TORCH[dt], bd, bd)
        s = {"Q": f"*{dt}", "K": f"*{dt}", "V": f"*{dt}", "O": f"*{dt}", "LSE": f"*{lse}",
             **{n: "i32" for n in AT._FWD_INTS},
             **{n: "fp32" for n in ("sc0", "sc1", "sc2", "cm0", "cm1", "cm2")}}
        c = dict(flags, BLOCK_M=bm, BLOCK_N=bn)
        try:
            t0 = time.perf_counter()
            compiled = triton.compile(ASTSource(AT._attn_fwd_kernel, dict(s, **{k: "constexpr" for k in c}), c),
                                      target=tgt,
                                      options=dict(AT.L.DEFAULT_OPTIONS, num_warps=warps, num_stages=stages))
            print(f"attention fwd ok {dt} D={bd} FULL={full} SOFTCAP={softcap} ({time.perf_counter() - t0:.1f} s)"
                  + ptxas_report(compiled) + loops_report(compiled))
        except Exception as e:
            print("attention fwd FAIL", dt, bd, str(e)[-1500:]); raise SystemExit(1)
        # the backward's launch at short sequences, and its long-sequence launches (causal and
        # not) where it has them
        at = AT.T.ATTN_BWD_LONG_FROM
        long = AT.bwd_long(_TORCH[dt], bd, bd, softcap, at)
        for Lq, causal in ((0, False), (at, False), (at, True)) if long else ((0, False),):
            cfg = AT.bwd_config(_TORCH[dt], bd, bd, softcap, Lq, causal)
            if causal and cfg == AT.bwd_config(_TORCH[dt], bd, bd, softcap, Lq):
                continue  # no causal launch of its own
            bm1, bn1, w1, s1, bm2, bn2, w2, s2 = cfg
            s = {"Q": f"*{dt}", "K": f"*{dt}", "V": f"*{dt}", "DO": f"*{dt}", "LSEB": f"*{lse}", "DELTA": f"*{lse}",
                 "GA": f"*{dt}", "GB": f"*{dt}", **{n: "i32" for n in AT._BWD_INTS},
                 **{n: "fp32" for n in ("sc0", "sc1", "sc2", "cm0", "cm1", "cm2", "gs0", "gs1", "gs2")}, "Lqp": "i32"}
            sq = {n: t for n, t in s.items() if n not in ("GB", "sub", "suh", "sun", "sud")}
            sq.update(O=f"*{dt}", DLSE=f"*{lse}", LSE=f"*{lse}", **{n: "i32" for n in AT._DQ_INTS})
            for kern, sig, bm, bn, warps, stages in ((AT._attn_bwd_dkdv_kernel, s, bm1, bn1, w1, s1),
                                                     (AT._attn_bwd_dq_kernel, sq, bm2, bn2, w2, s2)):
                c = dict(flags, BLOCK_M=bm, BLOCK_N=bn)
                if kern is AT._attn_bwd_dq_kernel:
                    c["HAS_DLSE"] = full
                else:
                    c["DP_FIRST"] = AT.dp_first(_TORCH[dt], bd)
                    head = torch.empty((1, 1, 4096, bd), dtype=_TORCH[dt], device="meta")  # a head at L 4096
                    c["OFF32"] = AT.off32(head, head, bm, bd, bool(Lq))
                try:
                    t0 = time.perf_counter()
                    compiled = triton.compile(ASTSource(kern, dict(sig, **{k: "constexpr" for k in c}), c),
                                              target=tgt,
                                              options=dict(AT.L.DEFAULT_OPTIONS, num_warps=warps, num_stages=stages))
                    print(f"attention {kern.__name__} ok {dt} D={bd} FULL={full} SOFTCAP={softcap}"
                          f"{' long' if Lq else ''}{' causal' if causal else ''} ({time.perf_counter() - t0:.1f} s)"
                          + ptxas_report(compiled) + loops_report(compiled))
                except Exception as e:
                    print("attention", kern.__name__, "FAIL", dt, bd, str(e)[-1500:]); raise SystemExit(1)

if ATTENTION_ONLY:
    check_attention()
    raise SystemExit(0)
for F64 in (False, True):
    for dt in ("bf16", "fp32") if not F64 else ("fp64",):
        for phase in (0, 1, 2):
            for op in (0, 1, 2):
                s = {"X": f"*{dt}", "Y": f"*{'fp32' if op==2 and not F64 else ('fp64' if F64 else dt)}", "PM": "*fp64", "PS": "*fp64",
                     "n_rows": "i32", "n_cols": "i32", "n1": "i32", "sx0": "i64", "sx1": "i64", "sy0": "i64", "sy1": "i64", "syc": "i32", "n_chunks": "i32",
                     "OP": "constexpr", "PHASE": "constexpr", "F64": "constexpr", "YCOL": "constexpr", "VEC": "constexpr", "TWO_AXES": "constexpr", "BLOCK_R": "constexpr", "BLOCK_D": "constexpr", "NC": "constexpr", "SUB": "constexpr"}
                c = {"OP": op, "PHASE": phase, "F64": F64, "YCOL": 0, "VEC": True, "TWO_AXES": phase == 0, "BLOCK_R": 1 if phase else 32, "BLOCK_D": 1024 if phase else 128, "NC": 8 if phase else 1,
                     "SUB": 4 if op == 2 and phase == 0 and not F64 else 1}
                try:
                    k = triton.compile(ASTSource(K._fwd_kernel, s, c), target=tgt, options={"num_warps": 4})
                    print("fwd ok", dt, phase, op, k.metadata.shared if hasattr(k, "metadata") else "")
                except Exception as e:
                    print("fwd FAIL", dt, phase, op, str(e)[-1500:]); raise SystemExit(1)
            for op in (0, 1):
                s = {"A": f"*{dt}", "G": f"*{dt}", "DX": f"*{dt}", "PS": "*fp64", "PK": "*fp64", "n_rows": "i32", "n_cols": "i32", "n1": "i32",
                     "sa0": "i64", "sa1": "i64", "sg0": "i64", "sg1": "i64", "sd0": "i64", "sd1": "i64", "sdc": "i32", "n_chunks": "i32",
                     "OP": "constexpr", "PHASE": "constexpr", "F64": "constexpr", "DCOL": "constexpr", "VEC": "constexpr", "TWO_AXES": "constexpr", "BLOCK_R": "constexpr", "BLOCK_D": "constexpr", "NC": "constexpr", "RELOAD": "constexpr"}
                c = {"OP": op, "PHASE": phase, "F64": F64, "DCOL": 0, "VEC": True, "TWO_AXES": phase == 0, "BLOCK_R": 1 if phase else 32, "BLOCK_D": 1024 if phase else 128, "NC": 8 if phase else 1,
                     "RELOAD": (2 if op == 0 else 1) if not F64 and phase == 0 else 0}
                try:
                    # the 16/32-bit whole rows under the register cap (kernels._launch.bwd_maxnreg)
                    cap = {"maxnreg": 64} if phase == 0 and not F64 else {}
                    k = triton.compile(ASTSource(K._bwd_kernel, s, c), target=tgt, options={"num_warps": 4, **cap})
                    print("bwd ok", dt, phase, op, cap)
                except Exception as e:
                    print("bwd FAIL", dt, phase, op, str(e)[-1500:]); raise SystemExit(1)

# the merge kernels (kernels/_merge.py): every dtype, a few tile shapes, one and two batch axes
from softmax_properties.kernels import _merge as M
for dt in ("bf16", "fp16", "fp32", "fp64"):
    for BR, BD in ((32, 128), (1, 4096), (64, 16)):
        s = {"OA": f"*{dt}", "LA": f"*{_LSE[dt]}", "OB": f"*{dt}", "LB": f"*{_LSE[dt]}", "O": f"*{dt}", "LO": f"*{_LSE[dt]}",
             "n_rows": "i32", "n_cols": "i32", "n1": "i32", "soa0": "i64", "soa1": "i64", "sla0": "i64", "sla1": "i64",
             "sob0": "i64", "sob1": "i64", "slb0": "i64", "slb1": "i64", "so0": "i64", "so1": "i64", "slo0": "i64", "slo1": "i64",
             "F64": "constexpr", "TWO_AXES": "constexpr", "VEC": "constexpr", "BLOCK_R": "constexpr", "BLOCK_D": "constexpr"}
        c = {"F64": dt == "fp64", "TWO_AXES": BR == 32, "VEC": BR != 64, "BLOCK_R": BR, "BLOCK_D": BD}
        try:
            k = triton.compile(ASTSource(M._attention_merge_kernel, s, c), target=tgt, options={"num_warps": 8})
            print("attention_merge ok", dt, BR, BD)
        except Exception as e:
            print("attention_merge FAIL", dt, BR, BD, str(e)[-1500:]); raise SystemExit(1)
        s = {"PA": f"*{dt}", "LA": f"*{_LSE[dt]}", "PB": f"*{dt}", "LB": f"*{_LSE[dt]}", "P": f"*{dt}", "LO": f"*{_LSE[dt]}",
             "n_rows": "i32", "n1": "i32", "da": "i32", "db": "i32", "spa0": "i64", "spa1": "i64", "sla0": "i64", "sla1": "i64",
             "spb0": "i64", "spb1": "i64", "slb0": "i64", "slb1": "i64", "sp0": "i64", "sp1": "i64", "slo0": "i64", "slo1": "i64",
             "n_cb": "i32", "F64": "constexpr", "TWO_AXES": "constexpr", "VEC": "constexpr", "BLOCK_R": "constexpr", "BLOCK_D": "constexpr", "GW": "constexpr"}
        try:
            gw = (16 if dt == "fp64" else 32) if c["VEC"] else 1
            k = triton.compile(ASTSource(M._softmax_merge_kernel, s, dict(c, GW=gw)), target=tgt, options={"num_warps": 8})
            print("softmax_merge ok", dt, BR, BD)
        except Exception as e:
            print("softmax_merge FAIL", dt, BR, BD, str(e)[-1500:]); raise SystemExit(1)

# cross-entropy: forward (whole-row and split), merge and backward, 16-bit / fp32 / fp64, with and
# without label smoothing, at the GPU tile sizes (4096 / 4096 / 2048 columns) and a small-V 2-D tile;
# the target statistics and the loss reduction
from softmax_properties.kernels import _cross_entropy as CE
_ISZ = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}
for dt, blk, F64 in (("bf16", 4096, False), ("fp16", 4096, False), ("fp32", 4096, False), ("fp64", 2048, True)):
    ct = "fp64" if F64 else "fp32"
    for tdt in ("i64", "i32"):
        for smooth in (False, True):
            for split in (False, True):
                for br, bd in ((1, blk), (64, 128)):
                    s = {"X": f"*{dt}", "T": f"*{tdt}", "LOSS": f"*{ct}", "LSE": f"*{ct}", "PM": f"*{ct}", "PS": f"*{ct}",
                         "PX": f"*{ct}", "EPS": "*fp64", "W": f"*{ct}", "OPT": "*fp64", "LZ": "*fp64", "n_rows": "i32", "V": "i32", "sxr": "i64", "st": "i64",
                         "ignore_index": "i64", "n_chunks": "i32", "chunk_cols": "i32", "eps": "fp32", "inv_v": "fp32", "flags": "i32",
                         "F64": "constexpr", "SMOOTH": "constexpr", "SPLIT": "constexpr", "VEC": "constexpr", "OPTS": "constexpr",
                         "BLOCK_R": "constexpr", "BLOCK": "constexpr", "GS": "constexpr"}
                    c = {"F64": F64, "SMOOTH": smooth, "SPLIT": split, "VEC": 2 if br == 1 else 0, "OPTS": split == smooth,
                         "BLOCK_R": br, "BLOCK": bd, "GS": 16 // _ISZ[dt]}
                    try:
                        triton.compile(ASTSource(CE._ce_fwd_kernel, s, c), target=tgt, options={"num_warps": 8})
                        print("ce fwd ok", dt, tdt, smooth, split, br, bd)
                    except Exception as e:
                        print("ce fwd FAIL", dt, tdt, smooth, split, br, bd, str(e)[-1500:]); raise SystemExit(1)
            s = {"X": f"*{dt}", "T": f"*{tdt}", "LOSS": f"*{ct}", "LSE": f"*{ct}", "PM": f"*{ct}", "PS": f"*{ct}",
                 "PX": f"*{ct}", "EPS": "*fp64", "W": f"*{ct}", "OPT": "*fp64", "LZ": "*fp64", "n_rows": "i32", "V": "i32", "sxr": "i64", "st": "i64",
                 "ignore_index": "i64", "n_chunks": "i32", "eps": "fp32", "flags": "i32",
                 "F64": "constexpr", "SMOOTH": "constexpr", "BLOCK_R": "constexpr", "NC": "constexpr"}
            try:
                triton.compile(ASTSource(CE._ce_merge_kernel, s, {"F64": F64, "SMOOTH": smooth, "BLOCK_R": 64, "NC": 16}),
                               target=tgt, options={"num_warps": 4})
                print("ce merge ok", dt, tdt, smooth)
            except Exception as e:
                print("ce merge FAIL", dt, tdt, smooth, str(e)[-1500:]); raise SystemExit(1)
            for sdt, mean in (("fp32", False), ("bf16", True), (dt, True)):
                for br, bd in ((1, blk), (64, 128)):
                    s = {"X": f"*{dt}", "T": f"*{tdt}", "LSE": f"*{ct}", "SC": f"*{sdt}", "STATS": "*i64", "DX": f"*{dt}",
                         "EPS": "*fp64", "W": f"*{ct}", "OPT": "*fp64", "n_rows": "i32", "V": "i32", "sxr": "i64", "st": "i64", "ss": "i64", "sdr": "i64",
                         "ignore_index": "i64", "n_chunks": "i32", "chunk_cols": "i32", "eps": "fp32", "inv_v": "fp32", "flags": "i32",
                         "mean": "i32", "F64": "constexpr", "SMOOTH": "constexpr", "VEC": "constexpr", "OPTS": "constexpr",
                         "BLOCK_R": "constexpr", "BLOCK": "constexpr"}
                    c = {"F64": F64, "SMOOTH": smooth, "VEC": 2 if br == 1 else 1, "OPTS": mean == (br == 1), "BLOCK_R": br,
                         "BLOCK": bd}
                    try:
                        triton.compile(ASTSource(CE._ce_bwd_kernel, s, c), target=tgt, options={"num_warps": 8})
                        print("ce bwd ok", dt, tdt, smooth, sdt, mean, br, bd)
                    except Exception as e:
                        print("ce bwd FAIL", dt, tdt, smooth, sdt, mean, br, bd, str(e)[-1500:]); raise SystemExit(1)
for tdt in ("i32", "i64"):
    try:
        triton.compile(ASTSource(CE._ce_targets_kernel, {"T": f"*{tdt}", "OUT": "*i64", "n": "i32", "st": "i32",
                                                         "ignore_index": "i64", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
                       target=tgt, options={"num_warps": 4})
        print("ce targets ok", tdt)
    except Exception as e:
        print("ce targets FAIL", tdt, str(e)[-1500:]); raise SystemExit(1)
for lr, out in (("fp32", "bf16"), ("fp32", "fp16"), ("fp32", "fp32"), ("fp64", "fp64")):
    for mean in (False, True):
        try:
            triton.compile(ASTSource(CE._ce_reduce_kernel, {"LR": f"*{lr}", "STATS": "*i64", "OUT": f"*{out}", "LZ": "*fp64",
                                                            "OPT": "*fp64", "n": "i32", "flags": "i32",
                                                            "MEAN": "constexpr", "BLOCK": "constexpr"}, {"MEAN": mean, "BLOCK": 1024}),
                           target=tgt, options={"num_warps": 4})
            print("ce reduce ok", lr, out, mean)
        except Exception as e:
            print("ce reduce FAIL", lr, out, mean, str(e)[-1500:]); raise SystemExit(1)

# the looped long-row kernels (16/32-bit only)
for dt in ("bf16", "fp16", "fp32"):
    for op in (0, 1, 2):
        s = {"X": f"*{dt}", "Y": f"*{'fp32' if op == 2 else dt}", "n_rows": "i32", "n_cols": "i32", "n1": "i32",
             "sx0": "i64", "sx1": "i64", "sy0": "i64", "sy1": "i64", "syc": "i32",
             "OP": "constexpr", "VEC": "constexpr", "TWO_AXES": "constexpr", "YCOL": "constexpr", "BLOCK_D": "constexpr"}
        c = {"OP": op, "VEC": op != 1, "TWO_AXES": op == 1, "YCOL": op, "BLOCK_D": 8192}
        try:
            k = triton.compile(ASTSource(K._fwd_loop_kernel, s, c), target=tgt, options={"num_warps": 16, "enable_fp_fusion": False})
            print("fwd_loop ok", dt, op)
        except Exception as e:
            print("fwd_loop FAIL", dt, op, str(e)[-1500:]); raise SystemExit(1)
    for op in (0, 1):
        s = {"A": f"*{dt}", "G": f"*{dt}", "DX": f"*{dt}", "n_rows": "i32", "n_cols": "i32", "n1": "i32",
             "sa0": "i64", "sa1": "i64", "sg0": "i64", "sg1": "i64", "sd0": "i64", "sd1": "i64", "sdc": "i32",
             "OP": "constexpr", "VEC": "constexpr", "TWO_AXES": "constexpr", "DCOL": "constexpr", "BLOCK_D": "constexpr"}
        c = {"OP": op, "VEC": op == 0, "TWO_AXES": op == 1, "DCOL": 2 * op, "BLOCK_D": 4096}
        try:
            k = triton.compile(ASTSource(K._bwd_loop_kernel, s, c), target=tgt, options={"num_warps": 16, "enable_fp_fusion": False})
            print("bwd_loop ok", dt, op)
        except Exception as e:
            print("bwd_loop FAIL", dt, op, str(e)[-1500:]); raise SystemExit(1)

# merge_states (kernels/_merge_states.py): every dtype, tiles of one long and of many short rows,
# one and two batch axes, with and without 16-byte vectors; the held kernel with every weight tile
# width SB the launcher uses at those tiles (Triton 3.6 failed the float64 tiles of 32 and 64 rows
# with two batch axes at SB = 1, which the launcher no longer uses)
from softmax_properties.kernels import _merge_states as MS
for dt in ("bf16", "fp16", "fp32", "fp64"):
    for BR, BD, two, vec in ((8, 128, False, True), (1, 1024, True, True), (64, 16, True, False), (32, 32, True, True)):
        s = {"O": f"*{dt}", "LSE": f"*{_LSE[dt]}", "OUT": f"*{dt}", "LO": f"*{_LSE[dt]}",
             "n_rows": "i32", "n_states": "i32", "n_cols": "i32", "n1": "i32", "so0": "i64", "so1": "i64", "sos": "i64",
             "sl0": "i64", "sl1": "i64", "sls": "i64", "sout0": "i64", "sout1": "i64", "slo0": "i64", "slo1": "i64",
             "F64": "constexpr", "TWO_AXES": "constexpr", "VEC": "constexpr", "BLOCK_R": "constexpr", "BLOCK_D": "constexpr"}
        c = {"F64": dt == "fp64", "TWO_AXES": two, "VEC": vec, "BLOCK_R": BR, "BLOCK_D": BD}
        for sb in [0] + [2**k for k in range(1, 11) if BR * 2**k <= MS.T.STATES_HELD]:
            try:
                triton.compile(ASTSource(MS._merge_states_kernel, dict(s, SB="constexpr"), dict(c, SB=sb)), target=tgt,
                               options={"num_warps": 4})
                print("merge_states ok", dt, BR, BD, two, vec, "SB", sb or "looped")
            except Exception as e:
                print("merge_states FAIL", dt, BR, BD, two, vec, "SB", sb or "looped", str(e)[-1500:]); raise SystemExit(1)

check_attention()
