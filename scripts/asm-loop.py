#!/usr/bin/env python3
"""Two views of a compiled kernel, for work on the SIMD kernels without hardware counters.

`stack-refs`: per function whose demangled name contains SUBSTR, the number of instructions
that touch a ymm or zmm register and the stack (`rsp`): spilled accumulators and vectors kept
in memory show up here (sessions 42 and 43 of docs/performance-history.md).

`loop`: the instructions of one function between two addresses (a loop body, as found in
`objdump -d`), jumps and padding left out, in AT&T syntax for `llvm-mca`, e.g.
  scripts/asm-loop.py loop build/release/bench/kv_codec_bench 'TilePass<3ul>' 1c0b90 1c0cfd \\
      > loop.s && llvm-mca -mcpu=znver3 loop.s
(llvm-mca is not a dependency of the project: `apt-get install llvm`.)

Usage:
  scripts/asm-loop.py stack-refs BINARY_OR_OBJECT SUBSTR
  scripts/asm-loop.py loop BINARY_OR_OBJECT SUBSTR START_HEX END_HEX
"""
import re
import subprocess
import sys

FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")


def disassembly(path):
    result = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", path],
                            capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def functions(lines, substr):
    """Yields (name, address, instruction) for the instructions of matching functions."""
    name = None
    for line in lines:
        match = FUNCTION.match(line)
        if match:
            name = match.group(1) if substr in match.group(1) else None
            continue
        match = INSTRUCTION.match(line)
        if name is not None and match:
            yield name, int(match.group(1), 16), match.group(2).split("#")[0].strip()


def stack_refs(path, substr):
    counts = {}
    for name, _, ins in functions(disassembly(path), substr):
        counts.setdefault(name, 0)
        if re.search(r"%[yz]mm", ins) and "%rsp" in ins:
            counts[name] += 1
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{n:6d}  {name[:150]}")


def loop(path, substr, start, end):
    for _, address, ins in functions(disassembly(path), substr):
        if start <= address < end and not re.match(r"(j[a-z]+|nop|xchg\s+%ax,%ax)\b", ins):
            print(re.sub(r"\s*<[^>]*>", "", ins))


def main(argv):
    if len(argv) == 4 and argv[1] == "stack-refs":
        stack_refs(argv[2], argv[3])
    elif len(argv) == 6 and argv[1] == "loop":
        loop(argv[2], argv[3], int(argv[4], 16), int(argv[5], 16))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
