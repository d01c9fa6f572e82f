"""What every attnbench peer shares (docs/peers.md): the cases, the inputs, the verification, the
timer, the rows and the results file. A peer (torch_sdpa.py, fa4.py, flex.py, attnbench_impls.py)
only says how to call its kernels; the rest is here, and the facts themselves live in the harness:

  cases         `attnbench expand CONFIG [--case GLOB] [--pass P]`: labels, case indices, problems,
                FLOPs, io_bytes, config hash, seed, verify and timing settings (no config parsing here)
  inputs        libattnbench_capi's ab_case_inputs: the harness's own seeded tensors, bit for bit
  verification  ab_case_verify: the project's rule (harness/src/verify/verify.cpp) on the peer's outputs,
                float64 reference (sampled as the harness samples), the same device's naive 3-pass
  timing        CUDA graph of the call replayed between two events, the L2 flushed (twice its size
                written, or read with timing.flush "read") before the start event unless hot;
                warm-up, repetitions of enough calls to
                fill min_time_s, median/min/mean/cv, as harness/src/run/runner.cpp
  results       attnbench's schema (docs/results_schema.md), written atomically after every case

No torch import at module level: --dry-run, --merge and the CPU test path work without it.
"""
import argparse
import contextlib
import ctypes
import datetime
import glob
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.results_io import (SCHEMA, OutputBusy, OutputLock, load_results, output_refusal,  # noqa: E402
                                write_atomic)

EXIT_BAD_INPUT = 2
PASSES = ("fwd", "bwd", "fwd_bwd")
TENSORS = ("q", "k", "v", "dout")
OUTPUTS = ("O", "LSE", "dQ", "dK", "dV")
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


class BadInput(Exception):
    """Bad input (a flag, a config, a file): the message names it; exit 2, nothing written."""


class Skip(Exception):
    """A case the peer cannot run: a SKIP row with this reason."""


class StopRun(Exception):
    """A sticky CUDA error: later calls cannot be trusted. Carries the row it happened in."""

    def __init__(self, message, row):
        super().__init__(message)
        self.row = row


def die(prog, msg, code=EXIT_BAD_INPUT):
    print(f"{prog}: {msg}", file=sys.stderr)
    sys.exit(code)


def first_line(s):
    s = str(s).strip()
    return s.splitlines()[0] if s else "error"


def sticky(msg):
    return "CUDA error" in msg or "illegal memory access" in msg or "device-side assert" in msg


# ============================================================================ attnbench and its cases


def find_attnbench(explicit=None):
    """The attnbench binary: --attnbench, $ATTNBENCH_BIN, else build-gpu/ or build/ of this tree."""
    for c in (explicit, os.environ.get("ATTNBENCH_BIN"), os.path.join(ROOT, "build-gpu", "attnbench"),
              os.path.join(ROOT, "build", "attnbench")):
        if c and os.access(c, os.X_OK):
            return c
    raise BadInput("attnbench binary not found: build it (scripts/test.sh), or give --attnbench PATH "
                   "or ATTNBENCH_BIN")


def find_capi(attnbench, explicit=None):
    """libattnbench_capi.so: --capi, $ATTNBENCH_CAPI, else beside the attnbench binary (a build
    tree), else in the lib folder of its install prefix (PREFIX/bin/attnbench: PREFIX/lib,
    PREFIX/lib64 or PREFIX/lib/<multiarch>, as `cmake --install` puts it)."""
    here = os.path.dirname(os.path.abspath(attnbench))
    prefix = os.path.dirname(here)
    installed = [os.path.join(prefix, d, "libattnbench_capi.so") for d in ("lib", "lib64")]
    installed += sorted(glob.glob(os.path.join(prefix, "lib", "*-linux-gnu*", "libattnbench_capi.so")))
    for c in [explicit, os.environ.get("ATTNBENCH_CAPI"), os.path.join(here, "libattnbench_capi.so")] + installed:
        if c and os.path.isfile(c):
            return c
    raise BadInput(f"libattnbench_capi.so not found beside {attnbench}: build the attnbench_capi target, "
                   "or give --capi PATH or ATTNBENCH_CAPI")


def expand(attnbench, config, cases=None, passes=None, verify=None):
    """The cases of a config as `attnbench expand` prints them (a list of dicts, in run order).
    Errors are attnbench's own messages (the JSON pointer of a bad config value, an unmatched
    --case glob), raised as BadInput."""
    cmd = [attnbench, "expand", config]
    for c in cases or []:
        cmd += ["--case", c]
    if passes:
        cmd += ["--pass", ",".join(passes)]
    if verify:
        cmd += ["--verify", verify]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise BadInput(p.stderr.strip() or f"{' '.join(cmd)} exited {p.returncode}")
    out = []
    for n, line in enumerate(p.stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            j = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"attnbench expand: line {n} is not JSON ({e}); is {attnbench} this tree's build?")
        if j.get("schema") != "attnbench.expand/2":
            raise BadInput(f"attnbench expand: line {n}: unexpected schema {j.get('schema')!r}")
        check_problem(j.get("problem", {}), f"attnbench expand: case {j.get('case')}: problem")
        check_layout(j)
        out.append(j)
    return out


# The fields of attnbench's Problem (core/include/attnbench/problem.hpp) as expand writes them; the
# window and the soft cap only when set. A field not listed here would be dropped by a peer that
# does not know it (a windowed case timed as a dense one), so expand() refuses it.
PROBLEM_KEYS = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "scale", "dtype",
                "window_left", "window_right", "softcap", "seqlens_q", "seqlens_kv",
                "page_size", "num_pages", "page_order", "block_table")
PAGE_ORDERS = ("sequential", "shuffled")


def check_problem(p, where="problem"):
    """BadInput naming the field when p has a key the peers do not know or a window / soft cap
    they cannot read (attnbench validates its own cases; this guards a newer or older binary)."""
    for k in p:
        if k not in PROBLEM_KEYS:
            raise BadInput(f"{where}.{k} = {json.dumps(p[k])}: not a problem field these peers know "
                           f"({', '.join(PROBLEM_KEYS)}); is attnbench newer than scripts/peers?")
    for k in ("window_left", "window_right"):
        v = p.get(k, -1)
        if isinstance(v, bool) or not isinstance(v, int) or v < -1:
            raise BadInput(f"{where}.{k} = {json.dumps(v)}: must be -1 (unbounded) or an integer >= 0")
    c = p.get("softcap", 0)
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
        raise BadInput(f"{where}.softcap = {json.dumps(c)}: must be a finite number >= 0 (0: off)")
    if ("seqlens_q" in p) != ("seqlens_kv" in p):
        k = "seqlens_q" if "seqlens_q" in p else "seqlens_kv"
        raise BadInput(f"{where}.{k} = {json.dumps(p[k])}: seqlens_q and seqlens_kv come together (varlen)")
    if "seqlens_q" in p:
        for k, longest in (("seqlens_q", "seq_q"), ("seqlens_kv", "seq_kv")):
            v = p[k]
            if (not isinstance(v, list) or not v
                    or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v)):
                raise BadInput(f"{where}.{k} = {json.dumps(v)}: must be a non-empty list of integers >= 0")
            if len(v) != p.get("batch") or max(v) != p.get(longest) or sum(v) <= 0 or sum(v) >= 2 ** 31:
                raise BadInput(f"{where}.{k} = {json.dumps(v)}: not a varlen batch as attnbench derives it (batch = "
                               f"{p.get('batch')} sequences, {longest} = {p.get(longest)} the longest, a total in "
                               "[1, 2^31))")
        if len(p["seqlens_q"]) != len(p["seqlens_kv"]):
            raise BadInput(f"{where}.seqlens_kv = {json.dumps(p['seqlens_kv'])}: not as many lengths as seqlens_q")
    check_paged(p, where)


def check_paged(p, where="problem"):
    """BadInput naming the field when the paged fields (problem_to_json writes them only for a paged
    problem: page_size > 0, num_pages, and page_order or an explicit block_table) are not what
    attnbench writes."""
    paged_keys = [k for k in ("page_size", "num_pages", "page_order", "block_table") if k in p]
    if not paged_keys:
        return
    for k in ("page_size", "num_pages"):
        v = p.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadInput(f"{where}.{k} = {json.dumps(v)}: must be an integer >= 1 (a paged problem has "
                           "page_size and num_pages)")
    if ("page_order" in p) == ("block_table" in p):
        raise BadInput(f"{where}: a paged problem has one of page_order and block_table "
                       f"(given: {', '.join(paged_keys)})")
    if "page_order" in p and p["page_order"] not in PAGE_ORDERS:
        raise BadInput(f"{where}.page_order = {json.dumps(p['page_order'])}: must be one of {', '.join(PAGE_ORDERS)}")
    if "block_table" in p:
        t = p["block_table"]
        if (not isinstance(t, list) or len(t) != p.get("batch") or not all(isinstance(r, list) for r in t)
                or any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < p["num_pages"]
                       for r in t for x in r)):
            raise BadInput(f"{where}.block_table: must be batch = {p.get('batch')} rows of page indices in "
                           f"[0, num_pages = {p['num_pages']})")


def window(p):
    """(window_left, window_right) of a problem as attnbench reads it: -1 = that side unbounded."""
    return int(p.get("window_left", -1)), int(p.get("window_right", -1))


def has_window(p):
    return any(w >= 0 for w in window(p))


def softcap(p):
    """The soft cap (0: off): the scaled score s becomes softcap * tanh(s / softcap)."""
    return float(p.get("softcap", 0) or 0)


def visible_bounds(p):
    """The keys query i sees, as bounds on the offset j - i: (lo, hi), query i seeing key j iff
    lo <= j - i <= hi, None for an unbounded side. attnbench's rule (problem.hpp), bottom-right
    aligned: with the diagonal c(i) = i + seq_kv - seq_q, c(i) - window_left <= j <=
    c(i) + window_right, -1 leaving a side unbounded; causal bounds the right side at 0
    (min(window_right, 0), or 0 when window_right is unbounded). (None, None): every key."""
    lo, hi = diagonal_bounds(p)
    d = int(p["seq_kv"]) - int(p["seq_q"])
    return (d + lo if lo is not None else None), (d + hi if hi is not None else None)


def diagonal_bounds(p):
    """visible_bounds relative to the diagonal: (lo, hi) with query i seeing key j iff
    lo <= (j - i) - (seq_kv - seq_q) <= hi, None for an unbounded side. The same for every
    sequence of a varlen batch, each with its own lengths (bottom-right aligned in each)."""
    left, right = window(p)
    if p.get("causal"):
        right = 0 if right < 0 else min(right, 0)
    return (-left if left >= 0 else None), (right if right >= 0 else None)


# ---- variable-length batches (varlen, packed THD; core/include/attnbench/problem.hpp)
# A problem with seqlens_q and seqlens_kv is a packed batch: q, o, dO, dQ [total_q, heads_q, head_dim],
# k, v, dK, dV [total_kv, heads_kv, head_dim], LSE [heads_q, total_q]; batch is the number of sequences,
# seq_q / seq_kv the longest lengths; causal and the window are aligned bottom-right in each sequence;
# a length may be 0. The functions below are pure (no torch): the tests and the dry run use them.


def is_varlen(p):
    """Whether a problem (or a case) is a packed variable-length batch."""
    return "seqlens_q" in p.get("problem", p)


# ---- paged KV caches (issue 29; core/include/attnbench/problem.hpp)
# A problem with page_size > 0 keeps its K and V in a pool of pages, k, v [num_pages, page_size, heads_kv,
# head_dim], read through an int32 block table [batch, pages_per_seq]: key j of sequence b is row j % page_size
# of page block_table[b][j // page_size], for j below its context length (seqlens_kv[b], or seq_kv for every
# sequence when the batch is not ragged). q, o, LSE keep their layout (dense BSHD, or packed THD when varlen).
# The table itself is the harness's (Problem::make_block_table from page_order, shuffled with a fixed seed):
# the peers never rebuild it, they ask libattnbench_capi for it (ab_case_metadata, CapiCase.metadata).
# Paged problems are forward-only. The functions below are pure (no torch).


def is_paged(p):
    """Whether a problem (or a case) reads its K and V through a block table."""
    return int(p.get("problem", p).get("page_size", 0) or 0) > 0


def context_lengths(p):
    """Each sequence's number of keys: seqlens_kv when ragged, else seq_kv for each of the batch."""
    p = p.get("problem", p)
    if "seqlens_kv" in p:
        return [int(x) for x in p["seqlens_kv"]]
    return [int(p["seq_kv"])] * int(p["batch"])


def paged_info(p):
    """What a paged call needs beside the tensors and the table, from a problem or a case: page_size,
    num_pages (the pool), pages_per_seq (the table's row length: ceil(seq_kv / page_size), or an
    explicit table's longest row), the context lengths (FlashAttention's seqused_k), the pages each
    sequence reads (ceil(length / page_size)), their sum, and how the table was made."""
    p = p.get("problem", p)
    ps = int(p["page_size"])
    ctx = context_lengths(p)
    if "block_table" in p:
        per_seq = max((len(r) for r in p["block_table"]), default=0)
    else:
        per_seq = -(-int(p["seq_kv"]) // ps)
    used = [-(-n // ps) for n in ctx]
    return {"page_size": ps, "num_pages": int(p["num_pages"]), "pages_per_seq": per_seq, "seqlens_kv": ctx,
            "max_seqlen_kv": max(ctx) if ctx else 0, "pages_used": used, "pages_read": sum(used),
            "page_order": p.get("page_order", "table")}


def seqlens(p):
    """(seqlens_q, seqlens_kv) of a varlen problem or case, as lists of ints."""
    p = p.get("problem", p)
    return [int(x) for x in p["seqlens_q"]], [int(x) for x in p["seqlens_kv"]]


def cu_seqlens(lengths):
    """FlashAttention's cu_seqlens: the prefix sums, len(lengths) + 1 entries from 0 (sequence b's
    tokens are [cu[b], cu[b + 1]) of the packed tensor), as attnbench's Problem::cu_seqlens_q/kv."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return out


def varlen_info(p):
    """What a varlen call needs beside the tensors, from a problem or a case: the lengths, their
    cu_seqlens (lists: the device copies are made once per case, dev.inputs), the totals and the
    max_seqlen values (the longest lengths, attnbench's seq_q and seq_kv)."""
    sq, skv = seqlens(p)
    cq, ckv = cu_seqlens(sq), cu_seqlens(skv)
    return {"seqlens_q": sq, "seqlens_kv": skv, "cu_seqlens_q": cq, "cu_seqlens_kv": ckv,
            "total_q": cq[-1], "total_kv": ckv[-1], "max_seqlen_q": max(sq), "max_seqlen_kv": max(skv)}


def layout_shapes(p):
    """The tensors' shapes of a problem (or a case), as `attnbench expand` lays them out
    (inputs.layout): BSHD for a dense problem ([b, s, h, d]; LSE [b, hq, sq]), the packed THD
    totals for a varlen one ([total, h, d]; LSE [hq, total_q])."""
    p = p.get("problem", p)
    hq, hkv, d = int(p["heads_q"]), int(p["heads_kv"]), int(p["head_dim"])
    if is_varlen(p):
        v = varlen_info(p)
        tq, tkv = v["total_q"], v["total_kv"]
        q, kv, lse = [tq, hq, d], [tkv, hkv, d], [hq, tq]
    else:
        b, sq, skv = int(p["batch"]), int(p["seq_q"]), int(p["seq_kv"])
        q, kv, lse = [b, sq, hq, d], [b, skv, hkv, d], [b, hq, sq]
    out = {"q": q, "k": kv, "v": kv, "dout": q, "o": q, "lse": lse}
    if is_paged(p):  # the pool of pages and the table; q, o, lse as above
        g = paged_info(p)
        pool = [g["num_pages"], g["page_size"], hkv, d]
        out.update(k=pool, v=list(pool), block_table=[int(p["batch"]), g["pages_per_seq"]])
    return out


# The layout tensor each output is verified in (its shape is checked before the C API reads it).
OUTPUT_LAYOUT = {"O": "o", "LSE": "lse", "dQ": "q", "dK": "k", "dV": "v"}


def check_layout(case, where="attnbench expand"):
    """BadInput when expand's layout is not the one these peers compute (layout_shapes): the buffers
    and the outputs' checks use the layout, so both must agree on the packed totals."""
    got = case.get("inputs", {}).get("layout", {})
    want = layout_shapes(case)
    for n, shape in want.items():
        if list(got.get(n, [])) != shape:
            raise BadInput(f"{where}: case {case.get('case')}: inputs.layout.{n} = {json.dumps(got.get(n))}, "
                           f"these peers expect {json.dumps(shape)}; is attnbench newer than scripts/peers?")


def output_shape_error(case, name, shape):
    """Why an output of this shape cannot be verified (its element count is not the layout's, so the
    C API would read past it or short of it), or "" when it matches. shape: a tuple of dims, or
    ("bytes", n) for a host buffer."""
    want = case["inputs"]["layout"][OUTPUT_LAYOUT[name]]
    if shape and shape[0] == "bytes":
        need = numel(want) * (4 if name == "LSE" else DTYPE_BYTES[case["problem"]["dtype"]])
        return "" if shape[1] == need else f"{name}: {shape[1]} bytes, expected {need} ({list(want)})"
    return "" if list(shape) == list(want) else f"{name}: shape {list(shape)}, expected {list(want)}"


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def tensor_nbytes(case, name):
    """Bytes of a layout tensor ("q", "k", "v", "dout", "o"; "lse" is float32)."""
    shape = case["inputs"]["layout"][name]
    return numel(shape) * (4 if name == "lse" else DTYPE_BYTES[case["problem"]["dtype"]])


# ============================================================================ libattnbench_capi


class Capi:
    """ctypes binding of capi/attnbench_capi.h."""

    # 2: problems carry window_left, window_right and softcap; 3: ab_call_set_cu_seqlens; 4: paged KV
    # caches (ab_case_metadata, ab_call_metadata, ab_call_set_paged). 4 only adds functions to 3, so a
    # version-3 library still serves every case that is not paged (paged ones then fail saying so).
    VERSION = 4
    MIN_VERSION = 3
    METADATA = ("cu_seqlens_q", "cu_seqlens_kv", "seqlens_kv", "block_table")  # ab_*_metadata's offsets

    def __init__(self, path):
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise BadInput(f"cannot load {path}: {e}")
        self.path = path
        P, I, C, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t
        sig = {
            "ab_capi_version": (I, []), "ab_last_error": (C, []), "ab_build_info": (C, []),
            "ab_case_open": (P, [C]), "ab_case_close": (None, [P]), "ab_case_inputs": (I, [P, P, P, P, P]),
            "ab_case_verify": (C, [P, C, P, P, P, P, P, C]),
            "ab_call_open": (P, [C, C, C, C]), "ab_call_close": (None, [P]), "ab_call_supports": (C, [P]),
            "ab_call_workspace_bytes": (ctypes.c_int64, [P]), "ab_call_prepare": (I, [P]),
            "ab_call_set_cu_seqlens": (I, [P, P, P]),
            "ab_call_forward": (I, [P, P, P, P, P, P, P, S, P]),
            "ab_call_backward": (I, [P, P, P, P, P, P, P, P, P, P, P, S, P]),
        }
        self.version = -1
        if hasattr(lib, "ab_capi_version"):
            lib.ab_capi_version.restype, lib.ab_capi_version.argtypes = I, []
            self.version = lib.ab_capi_version()
        if not self.MIN_VERSION <= self.version <= self.VERSION:
            raise BadInput(f"{path}: C API version {self.version}, this script speaks {self.MIN_VERSION} to "
                           f"{self.VERSION}")
        if self.version >= 4:
            I64 = ctypes.c_int64
            sig.update({"ab_case_metadata": (I64, [P, P, P]), "ab_call_metadata": (I64, [P, P, P]),
                        "ab_call_set_paged": (I, [P, P, P])})
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        self.lib = lib
        self.info = json.loads(self._check(lib.ab_build_info()).decode())

    def error(self):
        return (self.lib.ab_last_error() or b"").decode(errors="replace")

    def _check(self, r):
        if r is None or r == -1:
            raise RuntimeError(self.error())
        return r

    def implementations(self):
        return self.info["implementations"]

    def require_paged(self):
        if self.version < 4:
            raise RuntimeError(f"{self.path}: C API version {self.version} has no paged KV caches (needs 4: "
                               "ab_case_metadata, ab_call_set_paged); rebuild the attnbench_capi target")

    def metadata(self, fn, handle):
        """ab_case_metadata / ab_call_metadata as a dict: each array's name -> a list of ints (the
        block table as rows of pages_per_seq), None where the problem has none."""
        self.require_paged()
        n = fn(handle, None, None)
        if n < 0:
            raise RuntimeError(self.error())
        buf = (ctypes.c_int32 * max(1, n))()
        off = (ctypes.c_int64 * 4)()
        if fn(handle, buf, off) != n:
            raise RuntimeError(self.error() or "metadata changed size")
        return metadata_arrays(list(buf)[:n], list(off))

    # ---- cases
    def case(self, line, device):
        spec = {"problem": line["problem"], "inputs": line["inputs"], "verify": line["verify"], "device": device,
                "passes": line["passes_run"]}
        h = self.lib.ab_case_open(json.dumps(spec).encode())
        if not h:
            raise RuntimeError(self.error())
        return CapiCase(self, h, line)

    # ---- calls
    def call(self, impl, problem, pass_name, options=None):
        h = self.lib.ab_call_open(impl.encode(), json.dumps(problem).encode(), pass_name.encode(),
                                  json.dumps(options or {}).encode())
        if not h:
            raise RuntimeError(self.error())
        return CapiCall(self, h)


def metadata_arrays(data, offsets):
    """The four arrays of ab_*_metadata's buffer (Capi.METADATA, in buffer order: each runs to the
    next one's offset or the end), the block table cut into its batch rows. Pure (the tests use it)."""
    named = [(o, n) for o, n in zip(offsets, Capi.METADATA) if o >= 0]
    out = {n: None for n in Capi.METADATA}
    for i, (o, n) in enumerate(sorted(named)):
        end = sorted(named)[i + 1][0] if i + 1 < len(named) else len(data)
        out[n] = list(data[o:end])
    if out["block_table"] is not None and out["seqlens_kv"]:
        bt, b = out["block_table"], len(out["seqlens_kv"])
        w = len(bt) // b if b else 0
        out["block_table"] = [bt[i * w:(i + 1) * w] for i in range(b)]
    return out


class CapiCase:
    def __init__(self, capi, handle, line):
        self.capi, self.h, self.line = capi, handle, line

    def metadata(self):
        """The harness's int32 arrays of this case (ab_case_metadata): cu_seqlens_q, cu_seqlens_kv,
        seqlens_kv, block_table (rows), None where the problem has none. A paged case's block table
        is exactly the one attnbench's own rows read (page_order and its fixed seed)."""
        return self.capi.metadata(self.capi.lib.ab_case_metadata, self.h)

    def close(self):
        if self.h:
            self.capi.lib.ab_case_close(self.h)
            self.h = None

    def inputs(self, q, k, v, dout):
        """Host pointers (ints) of buffers of the layout's sizes, filled with the harness's inputs."""
        self.capi._check(self.capi.lib.ab_case_inputs(self.h, q, k, v, dout))

    def verify(self, pass_name, ptrs, absent=()):
        """ptrs: {"O": host pointer, ...} (missing or None = not produced). Returns the verdict dict."""
        a = [ptrs.get(n) for n in OUTPUTS]
        r = self.capi.lib.ab_case_verify(self.h, pass_name.encode(), *a, ",".join(absent).encode())
        if r is None:
            raise RuntimeError(self.capi.error())
        return json.loads(r.decode())


class CapiCall:
    def __init__(self, capi, handle):
        self.capi, self.h = capi, handle
        self.lib = capi.lib

    def close(self):
        if self.h:
            self.lib.ab_call_close(self.h)
            self.h = None

    def supports(self):
        r = self.lib.ab_call_supports(self.h)
        if r is None:
            raise RuntimeError(self.capi.error())
        return r.decode()

    def workspace_bytes(self):
        return self.capi._check(self.lib.ab_call_workspace_bytes(self.h))

    def prepare(self):
        self.capi._check(self.lib.ab_call_prepare(self.h))

    def set_cu_seqlens(self, cu_q, cu_kv):
        """A varlen call's cu_seqlens (batch + 1 int32 each) in the implementation's device memory,
        used by every later forward/backward (ab_call_set_cu_seqlens). A paged one has no cu_kv (None)."""
        self.capi._check(self.lib.ab_call_set_cu_seqlens(self.h, cu_q, cu_kv))

    def metadata(self):
        """ab_call_metadata, as CapiCase.metadata."""
        return self.capi.metadata(self.lib.ab_call_metadata, self.h)

    def set_paged(self, block_table, seqlens_kv):
        """A paged call's block table [batch, pages_per_seq] and context lengths [batch], int32 in the
        implementation's device memory, used by every later forward (ab_call_set_paged)."""
        self.capi.require_paged()
        self.capi._check(self.lib.ab_call_set_paged(self.h, block_table, seqlens_kv))

    def forward(self, q, k, v, o, lse, ws, ws_bytes, stream):
        if self.lib.ab_call_forward(self.h, q, k, v, o, lse, ws, ws_bytes, stream) != 0:
            raise RuntimeError(self.capi.error())

    def backward(self, q, k, v, o, lse, dout, dq, dk, dv, ws, ws_bytes, stream):
        if self.lib.ab_call_backward(self.h, q, k, v, o, lse, dout, dq, dk, dv, ws, ws_bytes, stream) != 0:
            raise RuntimeError(self.capi.error())


# ============================================================================ devices


class Stats:
    """The harness's statistics over repetitions (runner.cpp time_from): median, min, mean, cv."""

    @staticmethod
    def of(per_rep, iters, hot, method):
        s = sorted(per_rep)
        n = len(s)
        median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
        mean = sum(s) / n
        cv = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1)) / mean if n > 1 and mean > 0 else 0.0
        return {"median_ms": median, "min_ms": s[0], "mean_ms": mean, "cv": cv, "repetitions": n,
                "iterations": iters, "hot": hot, "method": method}


def repetitions(one, timing, est_ms):
    """Repetitions of enough calls to fill min_time_s each (capped), as Google Benchmark's MinTime."""
    iters = int(min(max(1, math.ceil(float(timing["min_time_s"]) * 1e3 / max(est_ms, 1e-3))), 100000))
    per_rep = [sum(one() for _ in range(iters)) / iters for _ in range(int(timing["repetitions"]))]
    return per_rep, iters


class HostCpu:
    """The CPU as a peer device: host buffers (ctypes), wall-clock timing, no cache flush (as
    attnbench's CPU rows). Lets the whole peer path run without PyTorch or a GPU (the tests)."""

    kind = "cpu"
    name = "cpu"

    class Buf:
        def __init__(self, nbytes):
            self.raw = (ctypes.c_uint8 * max(1, nbytes))()
            self.nbytes = nbytes

        @property
        def ptr(self):
            return ctypes.addressof(self.raw)

    def empty(self, case, name):
        return HostCpu.Buf(tensor_nbytes(case, name))

    def empty_bytes(self, n):
        return HostCpu.Buf(n)

    def zeros_bytes(self, n):  # ctypes arrays start zeroed
        return HostCpu.Buf(n)

    def ptr(self, buf):
        return buf.ptr if buf is not None else None

    def current_stream(self):
        return None

    def poison_allocator(self, case, names):
        pass

    def inputs(self, cc, case):
        t = {n: self.empty(case, n) for n in TENSORS}
        cc.inputs(*(t[n].ptr for n in TENSORS))
        if is_varlen(case):  # host int32 prefix sums: a CPU implementation's "device" memory
            v = varlen_info(case)
            for n in ("cu_seqlens_q", "cu_seqlens_kv"):
                b = HostCpu.Buf(4 * len(v[n]))
                (ctypes.c_int32 * len(v[n])).from_address(b.ptr)[:] = v[n]
                t[n] = b
        if is_paged(case):  # the harness's table and context lengths, host int32
            m = cc.metadata()
            for n in ("block_table", "seqlens_kv"):
                flat = [x for r in m[n] for x in r] if n == "block_table" else m[n]
                b = HostCpu.Buf(4 * len(flat))
                (ctypes.c_int32 * len(flat)).from_address(b.ptr)[:] = flat
                t[n] = b
        return t

    def shape(self, buf):
        return ("bytes", buf.nbytes)

    def poison(self, buf):
        ctypes.memset(buf.ptr, 0xFF, buf.nbytes)  # all-ones: NaN in f32, f16 and bf16

    def nvtx(self, name):
        return contextlib.nullcontext()

    def host_ptr(self, buf):
        return buf, buf.ptr

    def stream(self):
        return None

    def release(self):
        pass

    def sync(self):
        pass

    def context(self):
        return {"devices": [], "cpu_device": True}

    def time(self, fn, timing, name, graph=False):
        for _ in range(2):
            fn()
        end = time.perf_counter() + float(timing["warmup_s"])
        while time.perf_counter() < end:
            fn()

        def one():
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3

        per_rep, iters = repetitions(one, timing, one())
        return Stats.of(per_rep, iters, True, "wall clock (CPU, warm caches)")


class TorchCuda:
    """One CUDA device through PyTorch: device tensors, the L2 flush buffer and the timer."""

    kind = "cuda"

    def __init__(self, torch, index):
        self.torch = torch
        self.index = index
        self.name = f"cuda:{index}"
        self.dev = torch.device("cuda", index)
        torch.cuda.set_device(self.dev)
        self.drv = cuda_driver_info(index)
        props = torch.cuda.get_device_properties(index)
        l2 = self.drv.get("l2_bytes") or getattr(props, "L2_cache_size", 0) or 64 << 20
        # Twice the L2, as the harness's CudaOps::flush_cache: writing (or reading) all of it
        # evicts everything.
        self.flush_buf = torch.zeros(2 * l2, dtype=torch.uint8, device=self.dev)
        # The read flush (timing.flush "read", as the harness's): a sum over the same bytes as
        # int32 words, into a scalar; nothing dirty is left in L2 but the scalar.
        self.flush_words = self.flush_buf.view(torch.int32)
        self.flush_sink = torch.zeros((), dtype=torch.int64, device=self.dev)
        self.side = torch.cuda.Stream(self.dev)  # every call, event and flush; also the capture stream
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def tdtype(self, case):
        return self.dtypes[case["problem"]["dtype"]]

    def empty(self, case, name, dtype=None):
        shape = case["inputs"]["layout"][name]
        dt = self.torch.float32 if name == "lse" else (dtype or self.tdtype(case))
        return self.torch.empty(shape, dtype=dt, device=self.dev)

    def inputs(self, cc, case):
        torch = self.torch
        host = {n: torch.empty(case["inputs"]["layout"][n], dtype=self.tdtype(case)) for n in TENSORS}
        cc.inputs(*(host[n].data_ptr() for n in TENSORS))
        out = {n: t.to(self.dev) for n, t in host.items()}
        if is_varlen(case):  # once per case, outside every timed call and graph capture
            v = varlen_info(case)
            for n in ("cu_seqlens_q", "cu_seqlens_kv"):
                out[n] = torch.tensor(v[n], dtype=torch.int32, device=self.dev)
        if is_paged(case):  # the harness's own table (ab_case_metadata), [batch, pages_per_seq], and lengths
            m = cc.metadata()
            for n in ("block_table", "seqlens_kv"):
                out[n] = torch.tensor(m[n], dtype=torch.int32, device=self.dev)
        self.sync()
        return out

    def shape(self, t):
        return tuple(t.shape)

    def empty_bytes(self, n):
        return self.torch.empty(max(1, n), dtype=self.torch.uint8, device=self.dev)

    def zeros_bytes(self, n):
        return self.torch.zeros(max(1, n), dtype=self.torch.uint8, device=self.dev)

    def ptr(self, t):
        return t.data_ptr() if t is not None else None

    def current_stream(self):
        return self.torch.cuda.current_stream(self.dev).cuda_stream

    def poison(self, t):
        with self.torch.cuda.stream(self.side):  # the calls' stream: ordered before the call
            t.fill_(float("nan"))

    def nvtx(self, name):
        return self.torch.cuda.nvtx.range(name)

    def poison_allocator(self, case, names):
        """Outputs an API allocates itself cannot be poisoned directly: blocks of their sizes
        ("o", "lse", "q", "k": the layouts) are filled with NaN on the calls' stream and given back
        to the caching allocator, which hands the most recently freed block of a size to the next
        request on that stream, so an element the kernel leaves unwritten reads NaN rather than a
        stale right answer (best effort: the allocator's choice is not a contract)."""
        with self.torch.cuda.stream(self.side):
            blocks = [self.empty(case, n).fill_(float("nan")) for n in names]
        del blocks

    def host_ptr(self, t):
        h = t.detach().contiguous().cpu()
        return h, h.data_ptr()

    def stream(self):
        return self.side.cuda_stream

    def sync(self):
        self.torch.cuda.synchronize(self.dev)

    def release(self):
        self.torch.cuda.empty_cache()

    def context(self):
        props = self.torch.cuda.get_device_properties(self.index)
        return {"devices": [{"name": props.name, "index": self.index, "sms": props.multi_processor_count,
                             "sm_clock_mhz": self.drv.get("sm_clock_mhz"),
                             "mem_clock_mhz": self.drv.get("mem_clock_mhz"),
                             "l2_bytes": self.drv.get("l2_bytes", getattr(props, "L2_cache_size", None)),
                             "memory_bytes": props.total_memory,
                             "compute_capability": f"{props.major}.{props.minor}"}],
                "cuda_driver": self.drv.get("cuda_driver")}

    def time(self, fn, timing, name, graph=True):
        """fn enqueues the call on the current stream. Warm-up eager (FA4 compiles its kernels
        there), then the call captured in a CUDA graph and replayed between two events, so no host
        dispatch is timed; the flush memset is enqueued before the start event, outside the
        interval, as the harness does. Falls back to eager calls (method "events") when the call
        cannot be captured."""
        torch = self.torch
        hot = bool(timing["hot"])
        flush = timing.get("flush") or "write"  # validated by attnbench's expand; older: write
        with torch.cuda.stream(self.side):  # each warm-up call waited for, as the harness does
            fn()
            torch.cuda.synchronize(self.dev)
            end = time.perf_counter() + float(timing["warmup_s"])
            while time.perf_counter() < end:
                fn()
                torch.cuda.synchronize(self.dev)
        run, method = fn, "events (eager call: host dispatch included)"
        if graph:
            try:
                g = torch.cuda.CUDAGraph()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with torch.cuda.graph(g, stream=self.side):
                        fn()
                torch.cuda.synchronize(self.dev)
                run, method = g.replay, "cuda_graph"
            except Exception as e:  # noqa: BLE001  (any capture failure: time eagerly and say so)
                torch.cuda.synchronize(self.dev)
                method = f"events (CUDA graph capture failed: {first_line(e)[:200]})"

        def one():
            with torch.cuda.stream(self.side):
                if not hot:
                    if flush == "read":
                        read_flush(torch, self.flush_words, self.flush_sink)
                    else:
                        self.flush_buf.zero_()
                torch.cuda.nvtx.range_push(name)
                self.start.record(self.side)
                run()
                self.stop.record(self.side)
                torch.cuda.nvtx.range_pop()
            self.stop.synchronize()
            return self.start.elapsed_time(self.stop)

        one()
        per_rep, iters = repetitions(one, timing, one())
        stats = Stats.of(per_rep, iters, hot, method)
        if not hot:
            stats["flush"] = flush
        return stats


def read_flush(torch, words, sink):
    """The read flush: every word of `words` (1-D int32) read and summed into `sink` (a 0-d int64
    tensor on the same device), so the L2 holds only clean lines afterwards. torch.sum takes out=
    only in its dim overload (the plain `torch.sum(words, out=sink)` raises 'invalid combination
    of arguments': every peer row of job5 failed so on 2026-12-06, PyTorch 2.11)."""
    torch.sum(words, dim=0, out=sink)


def cuda_driver_info(index):
    """Driver version, clocks and L2 size through libcuda (PyTorch does not expose the clocks)."""
    info = {}
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if cu.cuDriverGetVersion(ctypes.byref(v)) == 0:
            info["cuda_driver"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
        if cu.cuInit(0) == 0:
            dev = ctypes.c_int()
            if cu.cuDeviceGet(ctypes.byref(dev), index) == 0:
                def attr(a):
                    x = ctypes.c_int()
                    return x.value if cu.cuDeviceGetAttribute(ctypes.byref(x), a, dev) == 0 else None
                # CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13, MEMORY_CLOCK_RATE = 36 (kHz), L2_CACHE_SIZE = 38
                clk, mem, l2 = attr(13), attr(36), attr(38)
                if clk:
                    info["sm_clock_mhz"] = clk // 1000
                if mem:
                    info["mem_clock_mhz"] = mem // 1000
                if l2:
                    info["l2_bytes"] = l2
    except OSError:
        pass
    return info


# ============================================================================ backends


class Backend:
    """One row name of a peer: how to call it. Subclasses set impl (the row's "impl"), options
    (the row's "options"), device_kind, absent (outputs its API does not return), and implement
    skip_reason() and make(). passes: the passes it has rows for (None: every pass)."""

    impl = "?"
    options = {}
    device_kind = "cuda"
    absent = ()
    passes = None
    graph = True  # time through a CUDA graph (False: eager calls between events)

    def context(self):
        return {}

    def plans(self, case):
        """Whether this backend has rows for the case at all (False: no row, not even a SKIP)."""
        return True

    def plan_skip(self, case, pass_name):
        """A SKIP known from the case alone, without PyTorch or a GPU (the dry run lists it):
        a feature the peer's API cannot express. None: the row runs (and may still SKIP)."""
        return None

    def skip_reason(self, case, pass_name):
        """A SKIP known once the peer is set up (its package, its version)."""
        return None

    def make(self, dev, case, pass_name, t):
        """A Call for this (case, pass) on the device tensors t (q, k, v, dout). Raise Skip when the
        peer refuses the case."""
        raise NotImplementedError


class Call:
    """fn(): one call, enqueued (the timed thing). outputs(): the outputs of the last call, as
    device tensors in attnbench's layouts ({"O": BSHD, "LSE": [b, hq, sq], "dQ": ...}; a varlen
    case's packed ones: O [total_q, hq, d], LSE [hq, total_q], ...: the case's inputs.layout).
    validate(sync): the validation call (poisoned outputs where possible), sync(), then outputs()."""

    def __init__(self, fn, outputs, validate=None, keep=None):
        self.fn, self.outputs = fn, outputs
        self._validate = validate
        self.keep = keep  # objects that must live as long as the call (buffers, handles)

    def validate(self, sync=None):
        if self._validate:
            self._validate()
        else:
            self.fn()
        # The call ran on the calls' stream (Device.side, a non-blocking stream), and outputs() may
        # launch work of its own on the current stream (FlashInfer's LSE, base 2 to natural log),
        # which nothing orders after the call: wait for it first. Without this wait, 9 of
        # FlashInfer's 22 decode rows of job5 at d705a79 read the poisoned LSE (all NaN) while O
        # passed; its own probe (results/h200/issue29/fi_lse_probe.py, synchronised) found the LSE
        # right in every setting.
        if sync is not None:
            sync()
        return self.outputs()


def autograd_call(dev, case, pass_name, t, forward, compile_first=False):
    """The Call of an autograd peer (PyTorch SDPA, FA4, FlexAttention). forward(q, k, v) -> (O as
    BSHD, LSE as [b, hq, sq] float32 or None) on BSHD leaves that require grad (a varlen case: the
    packed THD leaves, O [total_q, hq, d] and LSE [hq, total_q]), so the forward also
    saves what its backward needs (attnbench's forward writes the LSE). fwd: the forward; bwd:
    torch.autograd.grad over one forward done beforehand (untimed, on the calls' stream, so the
    backward's kernels run and are captured there), retained; fwd_bwd: both. compile_first: the
    validation call is preceded by one call whose outputs are dropped, after which the peak memory
    counter restarts (torch.compile compiles and benchmarks its kernel choices in a first call,
    with buffers that are not the call's memory)."""
    torch = dev.torch
    q, k, v = (x.detach().requires_grad_() for x in (t["q"], t["k"], t["v"]))
    dout = t["dout"]
    st = {}

    def fwd():
        st["o"], st["lse"] = forward(q, k, v)

    def bwd():
        st["grads"] = torch.autograd.grad(st["fo"], (q, k, v), dout, retain_graph=True)

    def fwd_bwd():
        st["o"], st["lse"] = forward(q, k, v)
        st["grads"] = torch.autograd.grad(st["o"], (q, k, v), dout)

    if pass_name == "bwd":
        with torch.cuda.stream(dev.side):
            st["fo"], _ = forward(q, k, v)
        dev.sync()
    fn = {"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd_bwd}[pass_name]

    def outputs():
        out = {}
        if pass_name != "bwd":
            out["O"], out["LSE"] = st["o"], st["lse"]
        if pass_name != "fwd":
            out.update(zip(("dQ", "dK", "dV"), st["grads"]))
        return out

    def validate():
        if compile_first:
            with torch.cuda.stream(dev.side):
                fn()
            for x in ("o", "lse", "grads"):
                st.pop(x, None)
            dev.sync()
            torch.cuda.reset_peak_memory_stats(dev.dev)
        names = (["o", "lse"] if pass_name != "bwd" else []) + (["q", "k", "k"] if pass_name != "fwd" else [])
        dev.poison_allocator(case, names)
        with torch.cuda.stream(dev.side):
            fn()

    return Call(fn, outputs, validate, keep=(q, k, v, st))


# ============================================================================ rows


def nvtx_name(impl, options, label, pass_name):
    """attnbench's nvtx::call_range_name: <impl>[+k=v...]:<case>:<pass>."""
    return impl + "".join(f"+{k}={v}" for k, v in sorted(options.items())) + f":{label}:{pass_name}"


def blank_row(case, backend, pass_name, device):
    row = {"case": case["case"], "case_index": case["case_index"], "problem": case["problem"],
           "options": dict(backend.options), "impl": backend.impl, "device": device, "pass": pass_name,
           "status": "skip", "reason": "", "flops": case["flops"][pass_name],
           "nvtx": nvtx_name(backend.impl, backend.options, case["case"], pass_name)}
    # Memory-bound cases (decode, paged): the bytes a forward moves at least, as attnbench's rows
    # carry them (expand's hbm_bytes, Problem::hbm_bytes_fwd), for GB/s beside theirs.
    if pass_name == "fwd" and case.get("hbm_bytes"):
        row["hbm_bytes"] = case["hbm_bytes"]
    return row


def apply_verdict(row, verdict):
    """The capi verdict into a results row: its verify block, and FAIL with the reasons."""
    row["verify"] = {k: verdict[k] for k in ("mode", "baseline", "outputs") if k in verdict}
    if verdict.get("note"):
        row["verify"]["note"] = verdict["note"]
    row["status"] = "pass" if verdict["ok"] else "fail"
    row["reason"] = verdict.get("reason", "")
    return row


def summary(rows):
    s = {"pass": 0, "fail": 0, "skip": 0}
    for r in rows:
        if r.get("status") in s:
            s[r["status"]] += 1
    return s


def git_info():
    """(revision, dirty, source). ATTNBENCH_GIT_REVISION (and ATTNBENCH_GIT_DIRTY=0/1), when set,
    name the revision, as for attnbench itself: a copy of the tree on the GPU machine may carry
    the git metadata of another commit, or none."""
    named = os.environ.get("ATTNBENCH_GIT_REVISION", "")
    if named:
        return named, os.environ.get("ATTNBENCH_GIT_DIRTY", "1") != "0", "ATTNBENCH_GIT_REVISION"
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        st = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True, timeout=10)
        if rev.returncode == 0:
            return rev.stdout.strip(), bool(st.stdout.strip()) if st.returncode == 0 else True, "git"
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown", True, "none"


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def base_context(peer, cases, config_path, dev, capi, argv):
    rev, dirty, rev_source = git_info()
    c0 = cases[0] if cases else {}
    ctx = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(), "cpu": cpu_model(), "cpu_cores": os.cpu_count(),
        "peer": peer, "peer_script": "scripts/peers/" + os.path.basename(argv[0]),
        "python": platform.python_version(),
        "git_revision": rev, "git_dirty": dirty, "git_revision_source": rev_source,
        "config_path": config_path, "config_name": c0.get("config_name"), "config_hash": c0.get("config_hash"),
        "seed": c0.get("inputs", {}).get("seed"), "distribution": c0.get("inputs", {}).get("distribution"),
        "cases_from": "attnbench expand",
        "inputs_from": "libattnbench_capi ab_case_inputs (the harness's make_inputs)",
        "verification": "libattnbench_capi ab_case_verify: harness/src/verify/verify.cpp's rule, float64 reference, "
                        "the same device's naive 3-pass as baseline",
        "timing": "CUDA graph of the call replayed between events; L2 flushed (memset of 2x L2) before the start "
                  "event unless hot; repetitions of enough calls to fill min_time_s; median over repetitions",
        "attnbench_capi": {k: v for k, v in capi.info.items() if k != "implementations"} if capi else None,
        "command_line": " ".join([os.path.basename(sys.executable)] + argv),
    }
    ctx.update(dev.context())
    return ctx


class Results:
    """The results file: rewritten atomically after every case, complete=false until the end."""

    def __init__(self, path, context):
        self.path = path
        self.doc = {"schema": SCHEMA, "complete": False, "stop_reason": "running", "context": context,
                    "rows": [], "summary": {}}

    @property
    def rows(self):
        return self.doc["rows"]

    def save(self, complete=None, stop_reason=None):
        if complete is not None:
            self.doc["complete"] = complete
        if stop_reason is not None:
            self.doc["stop_reason"] = stop_reason
        self.doc["summary"] = summary(self.rows)
        write_atomic(self.path, self.doc)


def merge(run_path, peer_paths, out_path, prog="merge", fail=None):
    """RUN.json's rows plus each peer file's rows in one file (the peers' case indices renumbered
    to RUN's), the peers' contexts under context.peers.<peer>, so `attnbench table` shows them
    beside attnbench's kernels."""
    fail = fail or (lambda m: die(prog, m))
    run = load_results(run_path, fail, "run")
    index_of = {r.get("case"): r.get("case_index") for r in run["rows"]}
    rows = list(run["rows"])
    ctx = dict(run.get("context", {}))
    peers = dict(ctx.get("peers", {}))
    complete = bool(run.get("complete", True))
    reasons = [run.get("stop_reason", "")]
    for pp in peer_paths:
        peer = load_results(pp, fail, "peer")
        for r in peer["rows"]:
            r = dict(r)
            if r.get("case") in index_of:
                r["case_index"] = index_of[r["case"]]
            rows.append(r)
        pc = peer.get("context", {})
        peers[pc.get("peer") or os.path.basename(pp)] = pc
        complete = complete and bool(peer.get("complete", True))
        reasons.append(peer.get("stop_reason", ""))
        if ctx.get("config_hash") != pc.get("config_hash"):
            print(f"{prog}: note: {pp} ran another config or overrides ({ctx.get('config_name')} "
                  f"{ctx.get('config_hash')} vs {pc.get('config_name')} {pc.get('config_hash')}); "
                  "only shared cases line up", file=sys.stderr)
        dev = lambda c: ((c.get("devices") or [{}])[0] or {}).get("name")  # noqa: E731
        if dev(ctx) != dev(pc):
            print(f"{prog}: note: different devices ({dev(ctx)} vs {dev(pc)})", file=sys.stderr)
    ctx["peers"] = peers
    out = {"schema": SCHEMA, "complete": complete, "stop_reason": "; ".join(x for x in reasons if x),
           "context": ctx, "rows": rows, "summary": summary(rows)}
    lock = take_output(out_path, [run_path] + list(peer_paths), ["the run file"] + ["a peer file"] * len(peer_paths),
                       fail=fail)
    try:
        write_atomic(out_path, out)
    finally:
        lock.release()
    print(f"{prog}: wrote {out_path}: {len(rows)} rows")


def take_output(out_path, inputs, names, fail=None, command=""):
    """The checks and the lock of an output (results_io.output_refusal, OutputLock): refused with
    exit 2 (fail, or BadInput) before anything is written. Returns the lock; release() it at the end."""
    why = output_refusal(out_path, inputs, names)
    try:
        if why:
            raise BadInput(f"--out = {out_path}: {why}")
        try:
            return OutputLock(out_path, command)
        except OutputBusy as e:
            raise BadInput(f"--out = {out_path}: {e}") from None
    except BadInput as e:
        if fail is None:
            raise
        fail(str(e))


# ============================================================================ the run


def plan(cases, backends, passes_override):
    """[(case, [(backend, pass), ...])] for the cases whose group runs on the backends' device."""
    out = []
    for c in cases:
        passes = passes_override or c["passes"]
        pairs = [(b, ps) for b in backends if b.plans(c) for ps in passes if b.passes is None or ps in b.passes]
        pairs = [(b, ps) for b, ps in pairs if b.device_kind in c.get("runs_on", [])]
        if pairs:
            out.append((c, pairs))
    return out


def dry_run(prog, planned, backends, cases):
    c0 = cases[0]
    print(f"config {c0['config_name']} (hash {c0['config_hash']}), seed {c0['inputs']['seed']}, "
          f"inputs {c0['inputs']['distribution']}; cases from attnbench expand")
    total = skipped = 0
    shown = lambda b: b.impl + "".join(f"[{k}={v}]" for k, v in b.options.items())  # noqa: E731
    for c, pairs in planned:
        total += len(pairs)
        fl = " ".join(f"{ps}={c['flops'][ps] / 1e9:.4g}" for ps in sorted({p for _, p in pairs}, key=PASSES.index))
        print(f"  #{c['case_index']:<4} {c['case']:<52} verify {c['verify']['resolved']:<7} {len(pairs)} rows  GFLOP {fl}")
        if is_varlen(c):
            v = varlen_info(c)
            empty = sum(1 for a, b in zip(v["seqlens_q"], v["seqlens_kv"]) if a == 0 or b == 0)
            print(f"          varlen: {len(v['seqlens_q'])} sequences, total_q {v['total_q']}, total_kv "
                  f"{v['total_kv']}, max_seqlen {v['max_seqlen_q']}/{v['max_seqlen_kv']}"
                  + (f", {empty} with no query or no key" if empty else ""))
        if is_paged(c):
            g = paged_info(c)
            print(f"          paged: page_size {g['page_size']}, pool {g['num_pages']} pages, table "
                  f"[{len(g['seqlens_kv'])}, {g['pages_per_seq']}] ({g['page_order']}), {g['pages_read']} pages read, "
                  f"contexts {min(g['seqlens_kv'])}..{g['max_seqlen_kv']}")
        why = {}  # reason -> {backend: [passes]}, in plan order
        for b, ps in pairs:
            r = b.plan_skip(c, ps)
            if r:
                why.setdefault(r, {}).setdefault(shown(b), []).append(ps)
                skipped += 1
        for r, rows in why.items():
            by_passes = {}  # the backends with the same passes on one line
            for n, ps in rows.items():
                by_passes.setdefault(",".join(ps), []).append(n)
            print(f"          SKIP {sum(len(p) for p in rows.values())}: "
                  + "; ".join(f"{', '.join(ns)} ({ps})" for ps, ns in by_passes.items()) + f": {r}")
    left = len(cases) - len(planned)
    if left:
        print(f"  ({left} cases left out: their groups do not run on {backends[0].device_kind if backends else '?'}"
              ", or no selected peer has rows for them)")
    used = {id(b) for _, pairs in planned for b, _ in pairs}
    names = ", ".join(dict.fromkeys(shown(b) for b in backends if id(b) in used))
    print(f"{total} rows: {names}")
    if skipped:
        print(f"  {skipped} of them SKIP without running (reasons above)")


def run_row(dev, cc, case, backend, pass_name, t, args):
    """One (case, backend, pass) row: the validation call, the verdict, the time, the memory."""
    row = blank_row(case, backend, pass_name, dev.name)
    why = backend.plan_skip(case, pass_name) or backend.skip_reason(case, pass_name)
    if why:
        row["reason"] = why
        return row
    torch = getattr(dev, "torch", None)
    try:
        if torch is not None:
            dev.sync()
            base = torch.cuda.memory_allocated(dev.dev)
            torch.cuda.reset_peak_memory_stats(dev.dev)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # PyTorch says why a kernel was not used
            try:
                call = backend.make(dev, case, pass_name, t)
                if args.profile:
                    # One call inside the row's NVTX range, nothing else in it (no poison fill):
                    # what ncu attributes to the range is the peer's own kernels.
                    dev.sync()
                    with dev.nvtx(row["nvtx"]):
                        if torch is not None:
                            with torch.cuda.stream(dev.side):
                                call.fn()
                        else:
                            call.fn()
                    dev.sync()
                    outs = None
                else:
                    outs = call.validate(dev.sync)
                    dev.sync()
            except Skip as e:
                row["reason"] = str(e)
                return row
            except Exception as e:  # noqa: BLE001
                if torch is not None and isinstance(e, torch.cuda.OutOfMemoryError):
                    row["reason"] = "out of memory: " + first_line(e)
                    return row
                msg = first_line(e)
                if sticky(msg):
                    row["status"], row["reason"] = "fail", msg
                    raise StopRun(f"sticky CUDA error in {row['nvtx']}: {msg}", row)
                if isinstance(e, (RuntimeError, TypeError, ValueError, AssertionError, NotImplementedError)):
                    # The peer refuses the case (its own check): a SKIP with its message and warnings.
                    why = [first_line(w.message) for w in caught]
                    row["reason"] = "; ".join(dict.fromkeys([f"{type(e).__name__}: {msg}"] + [w for w in why if w]))[:1500]
                    return row
                raise
        peak = torch.cuda.max_memory_allocated(dev.dev) - base if torch is not None else None
        if args.profile:
            row["status"], row["reason"] = "pass", "profile: one call, not verified, not timed"
            return row
        # Verification by the harness's rule: outputs to the host, then ab_case_verify.
        bad = [e for e in (output_shape_error(case, n, dev.shape(x)) for n, x in outs.items() if x is not None) if e]
        if bad:  # the C API reads the layout's element count: a wrong shape is never handed to it
            row["status"], row["reason"] = "fail", "output not in attnbench's layout: " + "; ".join(bad)
            return row
        keep, ptrs = [], {}
        for name, x in outs.items():
            if x is not None:
                h, p = dev.host_ptr(x)
                keep.append(h)
                ptrs[name] = p
        del outs
        dev.release()  # the naive baseline allocates its S and P on the device
        apply_verdict(row, cc.verify(pass_name, ptrs, backend.absent))
        del keep
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # said once above; not on every timed call
                row["time"] = dev.time(call.fn, case["timing"], row["nvtx"], graph=backend.graph and not args.no_graph)
        except Exception as e:  # noqa: BLE001
            msg = first_line(e)
            row["status"], row["reason"] = "fail", "timed call: " + msg
            if sticky(msg):
                raise StopRun(f"sticky CUDA error in {row['nvtx']}: {msg}", row)
            return row
        ms = row["time"]["median_ms"]
        row["tflops"] = row["flops"] / (ms * 1e-3) / 1e12 if ms > 0 else None
        if row.get("hbm_bytes") and ms > 0:
            row["gbps"] = row["hbm_bytes"] / (ms * 1e-3) / 1e9
        io = case["io_bytes"][pass_name]
        if peak is not None:
            # As attnbench's peak (device memory of the case during the call): the pass's inputs
            # plus what the peer allocated in the validation call; a peer announces no workspace, so
            # it is measured as the peak beyond the inputs and outputs.
            inputs = input_bytes(case, pass_name)
            pk = inputs + int(peak)
            row["memory"] = {"io_bytes": io, "workspace_bytes": max(0, pk - io), "peak_bytes": pk,
                             "peak_method": "pass inputs + torch.cuda.max_memory_allocated growth during the "
                                            "validation call; workspace_bytes = peak_bytes - io_bytes (measured)"}
        else:
            row["memory"] = {"io_bytes": io, "workspace_bytes": 0, "peak_method": "not measured (CPU peer)"}
        del call
        return row
    finally:
        if torch is not None:
            dev.release()


def input_bytes(case, pass_name):
    """What exists before the call: q, k, v, plus dO (and O, LSE for a standalone backward)."""
    q, kv, lse = tensor_nbytes(case, "q"), tensor_nbytes(case, "k"), tensor_nbytes(case, "lse")
    return {"fwd": q + 2 * kv, "bwd": 3 * q + 2 * kv + lse, "fwd_bwd": 2 * q + 2 * kv}[pass_name]


def run(prog, peer, planned, backends, dev, capi, results, args):
    done, total, code = 0, sum(len(p) for _, p in planned), 0
    try:
        for case, pairs in planned:
            case["passes_run"] = sorted({ps for _, ps in pairs}, key=PASSES.index)
            cc = None
            try:
                cc = capi.case(case, dev.kind)
                t = dev.inputs(cc, case)
            except Exception as e:  # noqa: BLE001  (host or device memory for the inputs)
                for b, ps in pairs:
                    r = blank_row(case, b, ps, dev.name)
                    r["reason"] = "inputs: " + first_line(e)
                    results.rows.append(r)
                if cc:
                    cc.close()
                dev.release()
                results.save()
                continue
            for b, ps in pairs:
                row = run_row(dev, cc, case, b, ps, t, args)
                results.rows.append(row)
                done += 1
                if not args.quiet:
                    tf, ms = row.get("tflops"), row.get("time", {}).get("median_ms")
                    extra = f"{ms:.3f} ms {tf:.1f} TFLOP/s" if ms and tf else row["reason"][:120]
                    if ms and row.get("gbps"):
                        extra += f" {row['gbps']:.0f} GB/s"
                    print(f"[{done}/{total}] {row['nvtx']}: {row['status']} {extra}", flush=True)
            del t
            cc.close()
            dev.release()
            results.save()
        results.save(True, "")
    except StopRun as e:
        results.rows.append(e.row)
        results.save(False, str(e))
        code = 1
    except KeyboardInterrupt:
        results.save(False, "interrupted (SIGINT)")
        code = 1
    s = results.doc["summary"]
    print(f"{prog}: wrote {results.path}: {s['pass']} pass, {s['fail']} fail, {s['skip']} skip"
          + ("" if results.doc["complete"] else f" (incomplete: {results.doc['stop_reason']})"), file=sys.stderr)
    return code


def split_list(values, allowed=None, flag=""):
    out = []
    for a in values or []:
        for x in a.split(","):
            x = x.strip()
            if not x:
                continue
            if allowed is not None and x not in allowed:
                raise BadInput(f"{flag} = {x}: must be one of {', '.join(allowed)}")
            if x not in out:
                out.append(x)
    return out


def parser(prog, description, peers):
    ap = argparse.ArgumentParser(prog=prog, description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="?", help="attnbench config (JSON); its cases come from `attnbench expand`")
    ap.add_argument("--out", help="results file (default results/local/<config>-<peer>-<UTC date>.json)")
    ap.add_argument("--case", dest="cases", action="append", metavar="GLOB",
                    help="only the cases whose label matches this glob, repeatable (as attnbench run --case)")
    ap.add_argument("--pass", dest="passes", action="append", help="fwd, bwd, fwd_bwd; repeatable or comma-separated")
    ap.add_argument("--verify", choices=("auto", "full", "sampled", "off"),
                    help="replaces the config's verify mode, as attnbench run --verify (off: NaN/Inf only)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    ap.add_argument("--on", choices=("cuda", "cpu"), default="cuda",
                    help="device the peer runs on (default cuda; cpu: host buffers, for the peers that have "
                         "CPU backends: attnbench_impls.py and the tests' planted peer)")
    ap.add_argument("--attnbench", help="the attnbench binary (default $ATTNBENCH_BIN, build-gpu/, build/)")
    ap.add_argument("--capi", help="libattnbench_capi.so (default $ATTNBENCH_CAPI, beside the binary)")
    ap.add_argument("--dry-run", action="store_true", help="list the cases and rows; no torch, no GPU")
    ap.add_argument("--profile", action="store_true",
                    help="one call per row inside its NVTX range, no verification, no timing (for ncu)")
    ap.add_argument("--no-graph", action="store_true", help="time eager calls between events (host dispatch included)")
    ap.add_argument("--merge", nargs="+", metavar="FILE",
                    help="RUN.json PEER.json [PEER.json ...]: write RUN's rows plus the peers' into --out")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    for p in peers:
        p.add_args(ap)
    return ap


def main(prog, description, peers, argv=None, peer_name=None):
    """The command line of a peer script: peers is a list of modules (or objects) with
    add_args(ap), name, and backends(args, dev_kind) -> [Backend] (raising BadInput on a bad flag)."""
    argv = sys.argv[1:] if argv is None else argv
    ap = parser(prog, description, peers)
    args = ap.parse_args(argv)
    try:
        if args.merge:
            if args.config or not args.out or len(args.merge) < 2:
                raise BadInput("--merge takes RUN.json PEER.json [...] and --out, and no config")
            merge(args.merge[0], args.merge[1:], args.out, prog)
            return 0
        if not args.config:
            ap.print_usage(sys.stderr)
            raise BadInput("a config is required (or --merge)")
        args.passes = split_list(args.passes, PASSES, "--pass") or None
        exe = find_attnbench(args.attnbench)
        cases = expand(exe, args.config, args.cases, args.passes, args.verify)
        dev_kind = args.on
        per_peer = [(p, p.backends(args, dev_kind)) for p in peers]
        backends = [b for _, bs in per_peer for b in bs]
        if not backends:
            raise BadInput("no peer backend selected")
        planned = plan(cases, backends, args.passes)
        if not planned:
            raise BadInput(f"{args.config}: no case runs on {dev_kind} (the groups' devices / implementations exclude "
                           "it, or the selected peers have rows for none of its cases)")
        if args.dry_run:
            dry_run(prog, planned, backends, cases)
            return 0
        # PyTorch first: the library then binds to the CUDA runtime, cuBLAS and cuDNN that PyTorch
        # loaded (one copy of each in the process, one primary context).
        if dev_kind == "cuda":
            torch = require_torch(prog)
            dev = TorchCuda(torch, args.device)
        else:
            dev = HostCpu()
        capi = Capi(find_capi(exe, args.capi))
        peer = peer_name or "+".join(p.name for p in peers)
        for p, bs in per_peer:
            if hasattr(p, "setup"):
                p.setup(args, dev, capi, bs)
        out = args.out or os.path.join(ROOT, "results", "local", f"{cases[0]['config_name']}-{peer}-"
                                       f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%d-%H%M%S')}.json")
        ctx = base_context(peer, cases, args.config, dev, capi, [os.path.join("scripts/peers", prog)] + argv)
        ctx["profile"] = bool(args.profile)
        ctx["backends"] = {}
        for b in backends:
            ctx["backends"].setdefault(b.impl, b.context())
        lock = take_output(out, [args.config], ["the config file"], command=ctx["command_line"])
        results = Results(out, ctx)
        try:
            results.save()  # fails early if the file cannot be written
        except OSError as e:
            lock.release()
            raise BadInput(f"--out = {out}: {e}") from None
    except BadInput as e:
        die(prog, str(e))
    try:
        return run(prog, peer, planned, backends, dev, capi, results, args)
    finally:
        lock.release()


def require_torch(prog):
    # Imported here, not at the top, so that --help, --dry-run and --merge work without PyTorch.
    try:
        import torch
    except ImportError as e:
        raise BadInput(f"PyTorch is not installed here (import torch: {e}); use --dry-run to list the cases")
    if not torch.cuda.is_available():
        raise BadInput(f"PyTorch {torch.__version__} has no usable CUDA device (torch.version.cuda = "
                       f"{torch.version.cuda})")
    return torch


def torch_version_at_least(torch, major, minor):
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


