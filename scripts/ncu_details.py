#!/usr/bin/env python3
"""Nsight Compute `--page details` text (ncu -i REP --page details > X.details.txt) as one table:
a column per profiled kernel (of every file given, those whose name matches --kernel), a row per
metric that says where a kernel's time goes (duration, SM and memory throughput, issue slots,
occupancy, registers, shared memory, L2 hit rate, excess shared wavefronts and global sectors).
For setting our kernels beside FA4's, or one revision's beside another's, from the same case.

    python3 scripts/ncu_details.py A.details.txt [B.details.txt ...] [--kernel REGEX] [--metric NAME ...]

A column is named FILE#K (the K-th matching kernel of FILE, from 1) and its kernel's short name;
a metric a kernel lacks is "-". ncu locks the clocks, so durations compare only within one GPU
model and ncu's settings."""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402

METRICS = [
    "Duration", "SM Frequency", "Compute (SM) Throughput", "Memory Throughput",
    "L1/TEX Cache Throughput", "L2 Cache Throughput", "DRAM Throughput", "L2 Hit Rate",
    "Issue Slots Busy", "Executed Ipc Active", "No Eligible", "Eligible Warps Per Scheduler",
    "Warp Cycles Per Issued Instruction", "Achieved Occupancy", "Registers Per Thread",
    "Dynamic Shared Memory Per Block", "Block Size", "Grid Size",
    "excess shared wavefronts", "excess global sectors",
]
HEADER = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)")
METRIC = re.compile(r"^    (\S(?:.*?\S)?)\s{2,}(?:(\S+)\s+)?(-?[\d,]+(?:\.\d+)?)\s*$")
EXCESS = re.compile(r"total of ([\d,]+) excessive (wavefronts|sectors) \(([\d.]+)%")


def short_name(full):
    """The kernel's name without return type, namespaces and template arguments."""
    base = full.split("<", 1)[0]
    return base.split("::")[-1].split(" ")[-1]


def parse(path):
    """[(full name, {metric: "value unit"})] in the file's order."""
    kernels, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = HEADER.match(line)
            if m:
                cur = {}
                kernels.append((m.group(1), cur))
                continue
            if cur is None:
                continue
            m = METRIC.match(line)
            if m and m.group(1) not in cur:
                name, unit, value = m.group(1), m.group(2) or "", m.group(3)
                cur[name] = f"{value} {unit}".strip()
                continue
            # SourceCounters' advice: "... resulting in a total of N excessive wavefronts (P% of
            # the total ..." (shared memory) or "... excessive sectors (P% ..." (global).
            m = EXCESS.search(line)
            if m:
                kind = "excess shared wavefronts" if m.group(2) == "wavefronts" else "excess global sectors"
                cur.setdefault(kind, f"{m.group(1)} ({m.group(3)}%)")
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="ncu --page details text files")
    ap.add_argument("--kernel", default=r"flash_.*_kernel|FlashAttention|flash_attn",
                    help="regular expression on the kernel's full name (default: the main attention kernels)")
    ap.add_argument("--metric", action="append", help="metric rows (default: the ones above); repeatable")
    a = ap.parse_args()
    try:
        want = re.compile(a.kernel)
    except re.error as e:
        print(f"ncu_details.py: --kernel '{a.kernel}': {e}", file=sys.stderr)
        return 2
    cols = []
    names = [os.path.basename(p) for p in a.files]
    for path in a.files:
        # FILE, or DIR/FILE where two files share a name (two profiles of one script)
        label = os.path.basename(path).replace(".details.txt", "")
        if names.count(os.path.basename(path)) > 1:
            label = os.path.basename(os.path.dirname(os.path.abspath(path))) + "/" + label
        if not os.path.isfile(path):
            print(f"ncu_details.py: no such file: {path}", file=sys.stderr)
            return 2
        k = 0
        for full, metrics in parse(path):
            if want.search(full):
                k += 1
                cols.append((f"{label}#{k}", short_name(full), metrics))
    if not cols:
        print(f"ncu_details.py: no kernel matches '{a.kernel}' in {', '.join(a.files)}", file=sys.stderr)
        return 1
    print("| metric | " + " | ".join(f"{c[0]} `{c[1]}`" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name in a.metric or METRICS:
        print(f"| {name} | " + " | ".join(c[2].get(name, "-") for c in cols) + " |")
    return 0


if __name__ == "__main__":
    run(main)
