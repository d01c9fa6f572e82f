#!/usr/bin/env python3
"""The loops of a kernel's SASS and what each runs: the static instruction mix of every loop
that issues wgmma (HGMMA), innermost last, and the basic blocks of the innermost one. For
comparing a tile loop with another kernel's (ours against FlashAttention-4's: see
scripts/peers/fa4_sass.py) without a GPU.

    scripts/sass_loops.py FILE.sass [--kernel REGEX] [--loop ADDR] [--blocks] [--map]

FILE.sass: `cuobjdump -sass` output (nvdisasm on the PATH). --kernel: a regular expression on the
demangled kernel names (default: every kernel). A loop is the range from a backward branch's
target to the branch; '*' marks the innermost ones (no other loop inside). --blocks: the basic
blocks (split at branches and branch targets) of one loop: --loop's (its first address, e.g.
0x5190), else the innermost wgmma loop with the most MUFU (a tile loop's softmax), each block
with its size and commonest opcodes. --map: that loop as one letter
per instruction (M MUFU, f FFMA, a FADD, x FMUL, n FMNMX, P F2FP, H HGMMA, W WARPGROUP, S SYNCS,
B BAR, b BRA, . other), to see what ptxas interleaves. Static counts: a branch's two sides are
both counted. Exit 0; 2 on a bad file or when no kernel matches.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402

KEYS = ("HGMMA", "MUFU", "FMNMX", "FFMA", "FMUL", "FADD", "F2FP", "SHFL", "BAR", "SYNCS", "FSEL",
        "ISETP", "IADD3", "IMAD", "LOP3", "MOV", "UIADD3", "UMOV", "VOTE", "BRA", "LDS", "STS",
        "LDL", "STL")
LETTERS = {"MUFU": "M", "FFMA": "f", "FADD": "a", "FMUL": "x", "FMNMX": "n", "F2FP": "P",
           "HGMMA": "H", "WARPGROUP": "W", "SYNCS": "S", "BAR": "B", "BRA": "b"}


def fail(msg):
    print(f"sass_loops.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_sass(path):
    """{mangled name: [(address, instruction text)]}."""
    funcs, name = {}, None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.search(r"Function : (\S+)", line)
                if m:
                    name = m.group(1)
                    funcs[name] = []
                    continue
                m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
                if name and m:
                    funcs[name].append((int(m.group(1), 16), m.group(2).strip()))
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    return funcs


def opcode(text):
    parts = text.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def family(text):
    return opcode(text).split(".")[0]


def demangle(names):
    if not shutil.which("c++filt"):
        return list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.split("\n")[:len(names)]


def loops(ins):
    """(first, last) address of every backward branch's range."""
    found = set()
    for a, t in ins:
        if "BRA" in opcode(t):
            m = re.search(r"0x([0-9a-f]+)", t)
            if m and int(m.group(1), 16) < a:
                found.add((int(m.group(1), 16), a))
    return sorted(found, key=lambda r: r[0] - r[1])  # outermost (longest) first


def mix(body):
    c = collections.Counter(family(t) for t in body)
    return " ".join(f"{k}={c[k]}" for k in KEYS if c.get(k))


def blocks(body_ins):
    """[(first address, [texts])]: split after branches and before branch targets."""
    targets = set()
    for _, t in body_ins:
        if "BRA" in opcode(t):
            m = re.search(r"0x([0-9a-f]+)", t)
            if m:
                targets.add(int(m.group(1), 16))
    out, cur, start = [], [], body_ins[0][0] if body_ins else 0
    for a, t in body_ins:
        if a in targets and cur:
            out.append((start, cur))
            cur, start = [], a
        cur.append(t)
        if "BRA" in opcode(t) or opcode(t) in ("EXIT", "RET"):
            out.append((start, cur))
            cur, start = [], a + 16
    if cur:
        out.append((start, cur))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sass")
    ap.add_argument("--kernel", default=".")
    ap.add_argument("--loop")
    ap.add_argument("--blocks", action="store_true")
    ap.add_argument("--map", action="store_true")
    a = ap.parse_args()
    try:
        pat = re.compile(a.kernel)
    except re.error as e:
        fail(f"--kernel '{a.kernel}': {e}")
    want = None
    if a.loop is not None:
        try:
            want = int(a.loop, 16)
        except ValueError:
            fail(f"--loop '{a.loop}': expected a hexadecimal address such as 0x5190")
    funcs = read_sass(a.sass)
    if not funcs:
        fail(f"{a.sass}: no 'Function :' in it (is it cuobjdump -sass output?)")
    matched = 0
    for mangled, name in zip(funcs, demangle(list(funcs))):
        if not pat.search(name):
            continue
        matched += 1
        ins = funcs[mangled]
        local = sum(1 for _, t in ins if family(t) in ("LDL", "STL"))
        print(f"== {name}\n   {len(ins)} instructions, {local} local-memory")
        inner, best = None, -1
        all_loops = loops(ins)
        for lo, hi in sorted(all_loops):
            body = [t for addr, t in ins if lo <= addr <= hi]
            if not any(family(t) == "HGMMA" for t in body):
                continue
            innermost = not any((l2, h2) != (lo, hi) and lo <= l2 and h2 <= hi for l2, h2 in all_loops)
            print(f"   loop {lo:#07x}-{hi:#07x}{'*' if innermost else ' '} {len(body):5d}  {mix(body)}")
            mufu = sum(1 for t in body if family(t) == "MUFU")
            if (want is None and innermost and mufu > best) or want == lo:
                inner, best = (lo, hi), mufu
        if want is not None and inner is None:
            print(f"   (no wgmma loop starts at {a.loop})")
        if inner and (a.blocks or a.map):
            body_ins = [(addr, t) for addr, t in ins if inner[0] <= addr <= inner[1]]
            if a.blocks:
                print(f"   blocks of {inner[0]:#07x}-{inner[1]:#07x}:")
                for start, texts in blocks(body_ins):
                    top = " ".join(f"{k}={v}" for k, v in
                                   collections.Counter(family(t) for t in texts).most_common(6))
                    end = texts[-1] if "BRA" in opcode(texts[-1]) else ""
                    print(f"     {start:#07x} {len(texts):5d}  {top}{'  | ' + end if end else ''}")
            if a.map:
                line = "".join(LETTERS.get(family(t), ".") for _, t in body_ins)
                for k in range(0, len(line), 100):
                    print(f"     {line[k:k + 100]}")
    if matched == 0:
        fail(f"no kernel matches --kernel '{a.kernel}'")
    return 0


if __name__ == "__main__":
    run(main)
