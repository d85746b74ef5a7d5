"""The loops of a compiled kernel's SASS: the body of each backward branch, its instruction count
and its most frequent opcodes. For comparing what a kernel issues per step with another kernel's
without a GPU (e.g. FlexAttention's, whose cubins inductor leaves in TRITON_CACHE_DIR on the
machine that ran it), and for counting what a change to a loop saves before timing it.

    python benchmarks/sass_loops.py KERNEL.cubin [KERNEL.cubin ...] [--top 12]

`compile_check.py --attention --loops` prints the same counts for the attention kernels it
compiles. nvdisasm is the one beside triton's ptxas. Nested loops are listed each on its own (an
outer loop's count includes its inner loops'); a predicated opcode counts as the opcode.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile
from typing import NamedTuple

_INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\s+`\((\.L_x_\d+)\)")


class Loop(NamedTuple):
    start: int  # byte offsets of its first and last (the backward branch) instruction
    end: int
    opcodes: collections.Counter

    @property
    def size(self) -> int:
        return sum(self.opcodes.values())


def triton_tool(name: str) -> str:
    """The path of the CUDA tool `name` (ptxas, nvdisasm, ...) that triton ships beside its compiler
    (it may not exist)."""
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def nvdisasm() -> str:
    path = triton_tool("nvdisasm")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no nvdisasm beside triton's ptxas ({path})")
    return path


def _opcode(instr: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", instr).split()[0]


class Sass(NamedTuple):
    instrs: list  # (byte offset, instruction text), in address order
    labels: dict  # branch label -> byte offset of the instruction it names


def disassemble(cubin) -> Sass:
    """The SASS of a cubin (bytes, or a path to one)."""
    if isinstance(cubin, (bytes, bytearray)):
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(cubin)
        try:
            return disassemble(f.name)
        finally:
            os.unlink(f.name)
    text = subprocess.run([nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    instrs, labels, pending = [], {}, []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if m:
            addr = int(m.group(1), 16)
            labels.update((name, addr) for name in pending)
            pending = []
            instrs.append((addr, m.group(2)))
    return Sass(instrs, labels)


def loops(sass: Sass) -> list:
    """The Loops of a kernel's SASS, in address order."""
    found = []
    for addr, instr in sass.instrs:
        m = _BRANCH.search(instr)
        if m and sass.labels.get(m.group(1), addr) < addr:
            start = sass.labels[m.group(1)]
            body = (_opcode(i) for a, i in sass.instrs if start <= a <= addr)
            found.append(Loop(start, addr, collections.Counter(body)))
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cubins", nargs="+", help="cubin files")
    ap.add_argument("--top", type=int, default=12, help="opcodes listed per loop")
    args = ap.parse_args()
    if args.top < 0:
        raise SystemExit(f"--top: expected a count >= 0, got {args.top}")
    for path in args.cubins:
        if not os.path.isfile(path):
            raise SystemExit(f"cubins: no file {path!r}")
        sass = disassemble(path)
        found = loops(sass)
        outer = [lp for lp in found if not any(o.start <= lp.start and lp.end <= o.end and o != lp for o in found)]
        # outside every loop: what a program runs once (both sides of its branches counted)
        total = len(sass.instrs)
        print(f"{path}: {total} instructions, {total - sum(lp.size for lp in outer)} outside its loops")
        for lp in found:
            top = ", ".join(f"{op} {n}" for op, n in lp.opcodes.most_common(args.top))
            print(f"  loop {lp.start:#x}-{lp.end:#x}: {lp.size} instructions; {top}")


if __name__ == "__main__":
    main()
