#!/usr/bin/env python3
"""Compare the SASS of every kernel in two builds of the CUDA implementations, kernel by kernel.

    scripts/sass_compare.py BEFORE_DIR AFTER_DIR [--cuobjdump PATH] [--arch sm_90a]

BEFORE_DIR and AFTER_DIR hold object files (*.o, in any subfolders, e.g. copies of
build/CMakeFiles/attn_impls_cuda.dir/impls/cuda/), matched by their path below the folder;
objects without device code are skipped. Each kernel is dumped with `cuobjdump -sass`
and normalised: symbol names (the kernel's own, the callees' and relocation targets) are replaced
by a placeholder, and the /*addr*/ columns and encoding comments are dropped; the instructions,
registers, predicates, immediates and constant-bank offsets are kept. Kernels are matched by
their demangled-free key: the mangled name with the anonymous-namespace and parameter-struct
names stripped, so a renamed params struct does not hide a match. Prints one line per kernel:
identical, changed (with the count of differing lines), or only before / only after, with its
registers (`cuobjdump -res-usage`) where they differ; then a total: kernels identical, changed,
and those whose instruction count or registers grew. Exit 0.

cuobjdump and nvdisasm come with the CUDA toolkit; without one, the PyPI packages
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry them (set NVDISASM_PATH or PATH).
"""
import argparse
import difflib
import glob
import os
import re
import subprocess
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402


def has_device_code(obj, cuobjdump):
    r = subprocess.run([cuobjdump, "-lelf", obj], capture_output=True, text=True)
    return r.returncode == 0 and "does not contain device code" not in r.stderr + r.stdout


def registers(obj, cuobjdump, arch):
    out = subprocess.run([cuobjdump, "-res-usage", "-arch", arch, obj], capture_output=True,
                         text=True, check=True).stdout
    regs, name = {}, None
    for line in out.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"REG:(\d+)", line)
        if m and name:
            regs[name] = int(m.group(1))
            name = None
    return regs


def dump(obj, cuobjdump, arch):
    out = subprocess.run([cuobjdump, "-sass", "-arch", arch, obj], capture_output=True, text=True,
                         check=True).stdout
    kernels, name, body = {}, None, []
    for line in out.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                kernels[name] = body
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        s = re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)  # address column
        s = re.sub(r"/\* 0x[0-9a-f]+ \*/", "", s)  # encoding
        s = s.strip()
        if not s or s.startswith("...") or s.startswith("."):
            continue
        s = re.sub(r"_Z\w+", "SYM", s)  # callees, relocations
        body.append(s)
    if name:
        kernels[name] = body
    return kernels


def key(mangled):
    # Anonymous namespaces and parameter-struct names change with refactoring; the template
    # arguments that select the code (types, integers) stay.
    k, out, i = mangled, "", 0
    for m in re.finditer(r"(\d+)_GLOBAL__N_", k):  # <length>_GLOBAL__N_<file hash>: skip it whole
        if m.start() < i:
            continue
        out += k[i:m.start()] + "ANON"
        i = m.start() + len(m.group(1)) + int(m.group(1))
    k = out + k[i:]
    for m in list(re.finditer(r"(?<!\d)(?=(\d+)([A-Za-z_]\w*))", k))[::-1]:  # <length><name>
        n = int(m.group(1))
        name = m.group(2)[:n]
        if len(name) == n and name.endswith("Params"):
            k = k[:m.start()] + "P" + k[m.start() + len(m.group(1)) + n:]
    return re.sub(r"NS\d*_", "NS_", k)  # substitution indices shift when namespaces move


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP", "cuobjdump"))
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--show", type=int, default=0, help="print up to N differing lines per kernel")
    ap.add_argument("--ignore-param-offsets", action="store_true",
                    help="treat c[0x0][offset] (kernel parameters) as equal whatever the offset: "
                         "for a params struct whose fields moved")
    ap.add_argument("--sub", action="append", default=[], metavar="REGEX=REPL",
                    help="rewrite the AFTER kernels' keys (e.g. a template argument added since: "
                         "'Lb0EE=E' maps <..., false> back onto the old instantiation); repeatable")
    a = ap.parse_args()
    subs = [tuple(x.split("=", 1)) for x in a.sub]
    total = {"identical": 0, "changed": 0, "grew": 0}
    for obj in sorted(glob.glob(os.path.join(a.before, "**", "*.o"), recursive=True)):
        base = os.path.relpath(obj, a.before)
        other = os.path.join(a.after, base)
        if not os.path.exists(other):
            print(f"{base}: only before")
            continue
        if not has_device_code(obj, a.cuobjdump):
            continue
        kb, ka = dump(obj, a.cuobjdump, a.arch), dump(other, a.cuobjdump, a.arch)
        rb, ra = registers(obj, a.cuobjdump, a.arch), registers(other, a.cuobjdump, a.arch)
        if a.ignore_param_offsets:
            for ks in (kb, ka):
                for n in ks:
                    ks[n] = [re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[0x0][PARAM]", l) for l in ks[n]]
        mb = {key(n): n for n in kb}
        ma = {}
        for n in ka:
            k = key(n)
            for pat, rep in subs:
                k = re.sub(pat, rep, k)
            ma[k] = n
        same = changed = 0
        for k in sorted(set(mb) | set(ma)):
            if k not in ma:
                print(f"{base}: only before: {mb[k]}")
                continue
            if k not in mb:
                print(f"{base}: only after:  {ma[k]}")
                continue
            x, y = kb[mb[k]], ka[ma[k]]
            r0, r1 = rb.get(mb[k]), ra.get(ma[k])
            regs = "" if r0 == r1 else f", registers {r0} -> {r1}"
            if len(y) > len(x) or (r0 is not None and r1 is not None and r1 > r0):
                total["grew"] += 1
            if x == y and r0 == r1:
                same += 1
                print(f"{base}: identical ({len(x)} lines): {ma[k]}")
            else:
                changed += 1
                d = [l for l in difflib.unified_diff(x, y, lineterm="", n=0) if l[:1] in "+-" and l[:3] not in ("+++", "---")]
                print(f"{base}: CHANGED ({len(x)} -> {len(y)} lines, {len(d)} differing{regs}): {ma[k]}")
                for l in d[: a.show]:
                    print("    " + l)
        print(f"{base}: {same} identical, {changed} changed")
        total["identical"] += same
        total["changed"] += changed
    print(f"total: {total['identical']} identical, {total['changed']} changed, "
          f"{total['grew']} with more instructions or registers")
    return 0


if __name__ == "__main__":
    run(main)
