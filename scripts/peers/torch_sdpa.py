#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention as a peer of attnbench, in attnbench's results format.

    python3 scripts/peers/torch_sdpa.py CONFIG.json [--out RESULTS.json] [options]
    python3 scripts/peers/torch_sdpa.py CONFIG.json --dry-run        # list the cases; no torch needed
    python3 scripts/peers/torch_sdpa.py --merge RUN.json PEER.json --out MERGED.json

It expands an attnbench config (configs/*.json) exactly as `attnbench run` does (problem
defaults, "sweep" product and zip axes, the "seq"/"heads" conveniences, "groups") and runs every
case through torch.nn.functional.scaled_dot_product_attention with one backend forced at a time
(torch.nn.attention.sdpa_kernel): torch.sdpa_flash, torch.sdpa_efficient, torch.sdpa_cudnn,
torch.sdpa_math. Groups whose "devices" exclude cuda, or whose "implementations" cannot match a
cuda.* name, are left out (they are CPU-sized). Inputs are BSHD tensors seen as [b, h, s, d]
views (the layout attnbench's kernels use); GQA/MQA go through enable_gqa=True; causal is
bottom-right aligned (is_causal when seq_q == seq_kv, else torch.nn.attention.bias.
causal_lower_right; causal with seq_q > seq_kv is a "skip": PyTorch gives NaN rows there). A
backend that refuses a case gives a "skip" row with PyTorch's reason.

Passes: fwd (forward with inputs that require grad, so the kernels save their softmax statistics
as attnbench's forward writes LSE), bwd (torch.autograd.grad of a retained forward), fwd_bwd
(both, timed together). FLOPs follow attnbench (FlashAttention convention): forward
4*b*hq*sq*skv*d, halved for causal with sq == skv, visible (query, key) pairs counted exactly when
sq != skv; bwd 2.5x, fwd_bwd 3.5x. Timing mirrors attnbench: CUDA events around each call, L2
flushed by a memset of twice its size before each call (unless the config's timing is "hot"),
each repetition the mean over enough calls to fill min_time_s, and the median, min, mean and cv
over repetitions. Verification: outputs are always checked for NaN/Inf; with --verify auto (the
default, unless the config says "off") cases small enough for a float64 reference (score matrix
<= 2^24 elements) also get max-abs and relative-L2 errors against it, and fail above a loose
sanity bound (16 units of roundoff of the dtype, relative L2; this is not attnbench's rule).

--merge writes RUN.json's rows plus PEER.json's rows into one file, so `attnbench table` shows
PyTorch beside attnbench's kernels (the peer's context goes under context.peers.torch_sdpa).

Exit codes: 0 done (even with fail/skip rows), 1 the run stopped early (sticky CUDA error,
Ctrl-C), 2 bad input, or PyTorch/CUDA missing.
"""
import argparse
import datetime
import fnmatch
import itertools
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from results_io import load_results  # noqa: E402  (scripts/results_io.py)

SCHEMA = "attnbench.results/1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXIT_BAD_INPUT = 2

# Implementation name -> SDPBackend member name.
BACKENDS = (
    ("torch.sdpa_flash", "FLASH_ATTENTION"),
    ("torch.sdpa_efficient", "EFFICIENT_ATTENTION"),
    ("torch.sdpa_cudnn", "CUDNN_ATTENTION"),
    ("torch.sdpa_math", "MATH"),
)
PASSES = ("fwd", "bwd", "fwd_bwd")
MAX_HEAD_DIM = 256
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
VERIFY_MAX_SCORES = 1 << 24  # b*hq*sq*skv at most, for the float64 reference


def die(msg, code=EXIT_BAD_INPUT):
    print(f"torch_sdpa.py: {msg}", file=sys.stderr)
    sys.exit(code)


# ============================================================================ config expansion
# A port of harness/src/config.cpp (the parts that decide which cases exist); errors name the
# JSON pointer of the offending value, as attnbench's do.


class ConfigError(Exception):
    def __init__(self, path, value, message):
        super().__init__(message)
        self.path, self.value, self.message = path, value, message

    def text(self):
        s = self.path or "config"
        if self.value is not None:
            s += " = " + compact(self.value)
        return s + ": " + self.message


def compact(v):
    s = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return s if len(s) <= 120 else s[:117] + "..."


def ptr(path, key):
    key = str(key).replace("~", "~0").replace("/", "~1")
    return f"{path}/{key}"


def strip_json_comments(text):
    """Removes // and /* */ comments outside strings (attnbench's parser ignores them)."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
        elif c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ConfigError("", None, "unterminated /* comment")
            out.append(" ")
            i = j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


FIELDS = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "scale", "dtype")
PROBLEM_KEYS = FIELDS + ("seq", "heads")
DTYPES = {"f32": "f32", "float32": "f32", "fp32": "f32", "f16": "f16", "float16": "f16",
          "fp16": "f16", "half": "f16", "bf16": "bf16", "bfloat16": "bf16"}
INT_MAX = 2 ** 31 - 1


def default_problem():
    # attnbench::Problem's defaults.
    return {"batch": 1, "heads_q": 1, "heads_kv": 1, "seq_q": 1, "seq_kv": 1, "head_dim": 64,
            "causal": False, "scale": 0.0, "dtype": "f32"}


def targets(key):
    if key == "seq":
        return ["seq_q", "seq_kv"]
    if key == "heads":
        return ["heads_q", "heads_kv"]
    return [key] if key in FIELDS else []


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def set_field(p, field, v, path):
    if field in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"):
        if not is_int(v) or v < 1 or v > INT_MAX:
            raise ConfigError(path, v, "must be a positive integer")
        if field == "head_dim" and v > MAX_HEAD_DIM:
            raise ConfigError(path, v, f"head_dim must be at most {MAX_HEAD_DIM}")
        p[field] = v
    elif field == "causal":
        if not isinstance(v, bool):
            raise ConfigError(path, v, f"must be true or false, not {type_name(v)}")
        p[field] = v
    elif field == "scale":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(path, v, f"must be a number, not {type_name(v)}")
        if not math.isfinite(v) or v < 0:
            raise ConfigError(path, v, "must be a finite number >= 0 (0 means 1/sqrt(head_dim))")
        p[field] = float(v)
    elif field == "dtype":
        if not isinstance(v, str):
            raise ConfigError(path, v, f"must be a string, not {type_name(v)}")
        if v not in DTYPES:
            raise ConfigError(path, v, "unknown dtype (f32, f16, bf16)")
        p[field] = DTYPES[v]


def type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def expect_object(v, path):
    if not isinstance(v, dict):
        raise ConfigError(path, v, f"must be an object, not {type_name(v)}")
    return v


def expect_array(v, path):
    if not isinstance(v, list):
        raise ConfigError(path, v, f"must be an array, not {type_name(v)}")
    if not v:
        raise ConfigError(path, v, "must not be empty")
    return v


def check_keys(obj, path, allowed):
    for k in obj:
        if k not in allowed:
            raise ConfigError(ptr(path, k), None, f'unknown key "{k}" (allowed here: {", ".join(allowed)})')


def effective_scale(p):
    return p["scale"] if p["scale"] != 0 else 1.0 / math.sqrt(p["head_dim"])


def label(p):
    """attnbench's Problem::label(), character for character (rows are matched by it)."""
    s = (f"b{p['batch']}_hq{p['heads_q']}_hkv{p['heads_kv']}_sq{p['seq_q']}_skv{p['seq_kv']}"
         f"_d{p['head_dim']}{'_causal' if p['causal'] else ''}_{p['dtype']}")
    if p["scale"] != 0:
        s += "_scale" + format(p["scale"], "g")  # C++ ostream's default: %g, 6 digits
    return s


def validate(p):
    if p["heads_q"] % p["heads_kv"] != 0:
        return f"heads_q = {p['heads_q']} is not a multiple of heads_kv = {p['heads_kv']}"
    return ""


def visible_pairs(p):
    """(query, key) pairs a row may see, bottom-right aligned causal, per (batch, head)."""
    sq, skv = p["seq_q"], p["seq_kv"]
    if not p["causal"]:
        return sq * skv
    # Row i sees keys [0, clamp(i + skv - sq + 1, 0, skv)): sum in closed form.
    shift = skv - sq + 1
    total = 0
    lo = max(0, -shift)                 # first row with a positive count
    hi = min(sq, skv - shift)           # rows [lo, hi) see i + shift keys; rows >= hi see skv
    if hi > lo:
        total += (hi - lo) * shift + (hi - 1 + lo) * (hi - lo) // 2
    total += max(0, sq - max(hi, lo)) * skv
    return total


def flops_fwd(p):
    bhd = 4.0 * p["batch"] * p["heads_q"] * p["head_dim"]
    if p["causal"] and p["seq_q"] == p["seq_kv"]:
        return bhd * p["seq_q"] * p["seq_kv"] / 2.0
    return bhd * visible_pairs(p)


def pass_flops(p, pass_name):
    f = flops_fwd(p)
    return {"fwd": f, "bwd": 2.5 * f, "fwd_bwd": 3.5 * f}[pass_name]


def glob_match(pattern, text):
    """attnbench's glob ('*' and '?'), as in harness/src/registry.cpp."""
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] == "*":
            star, p, mark = p, p + 1, t
        elif star >= 0:
            p, mark = star + 1, mark + 1
            t = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def may_match_cuda(pattern):
    """Whether a glob can match some name "cuda.<something>" (we cannot see attnbench's registry)."""
    head = "cuda."
    for i, c in enumerate(pattern):
        if c == "*":
            return True
        if i >= len(head):
            return True  # "cuda." matched; the rest names some cuda.* implementation
        if c != "?" and c != head[i]:
            return False
    return len(pattern) > len(head)


class Group:
    def __init__(self):
        self.description = ""
        self.cases = []          # (global case index, problem dict)
        self.passes = ["fwd"]
        self.devices = ["cpu", "cuda"]
        self.implementations = ["*"]
        self.timing = {"hot": False, "min_time_s": 0.1, "repetitions": 3, "warmup_s": 0.02}
        self.verify_mode = "auto"

    def runs_on_cuda(self):
        return "cuda" in self.devices and any(may_match_cuda(g) for g in self.implementations)


class Config:
    def __init__(self):
        self.name = "config"
        self.seed = 1234
        self.distribution = "normal"
        self.groups = []
        self.doc = None


def parse_sweep(s, path):
    expect_object(s, path)
    check_keys(s, path, ("product", "zip"))
    dims, claimed = [], {}

    def column(key, arr, kpath):
        fs = targets(key)
        if not fs:
            raise ConfigError(kpath, None, f'unknown problem field "{key}" (fields: {", ".join(PROBLEM_KEYS)})')
        for f in fs:
            if f in claimed:
                raise ConfigError(kpath, None, f"{f} is already swept by {claimed[f]}")
            claimed[f] = kpath
        expect_array(arr, kpath)
        scratch = default_problem()
        for i, v in enumerate(arr):
            for f in fs:
                set_field(scratch, f, v, ptr(kpath, i))
        return (fs, kpath, arr)

    if "product" in s:
        pp = ptr(path, "product")
        for k, arr in expect_object(s["product"], pp).items():
            dims.append([column(k, arr, ptr(pp, k))])
    if "zip" in s:
        zp = ptr(path, "zip")
        for z, grp in enumerate(expect_array(s["zip"], zp)):
            gp = ptr(zp, z)
            expect_object(grp, gp)
            if not grp:
                raise ConfigError(gp, grp, "a zip group needs at least one field")
            cols = []
            for k, arr in grp.items():
                cols.append(column(k, arr, ptr(gp, k)))
                n0, n = len(cols[0][2]), len(arr)
                if n != n0:
                    first = next(iter(grp))
                    raise ConfigError(ptr(gp, k), arr, f'zipped arrays must have equal lengths: {n} here, {n0} for "{first}"')
            dims.append(cols)
    return dims


def parse_config_doc(doc):
    """The attnbench config document -> Config (cases numbered as attnbench numbers them)."""
    c = Config()
    c.doc = doc
    expect_object(doc, "")
    grouped = "groups" in doc
    if grouped:
        check_keys(doc, "", ("name", "description", "problem", "inputs", "verify", "timing", "groups"))
    else:
        check_keys(doc, "", ("name", "description", "problem", "sweep", "implementations", "passes",
                             "inputs", "verify", "timing", "params", "devices", "groups"))
    if "name" in doc:
        if not isinstance(doc["name"], str) or not re.fullmatch(r"[A-Za-z0-9._-]+", doc["name"]):
            raise ConfigError("/name", doc["name"], "must be non-empty and use only letters, digits, '.', '_' and '-'")
        c.name = doc["name"]
    inputs = doc.get("inputs", {})
    expect_object(inputs, "/inputs")
    check_keys(inputs, "/inputs", ("distribution", "seed"))
    if "distribution" in inputs:
        if inputs["distribution"] not in ("normal", "outlier"):
            raise ConfigError("/inputs/distribution", inputs["distribution"], 'must be "normal" or "outlier"')
        c.distribution = inputs["distribution"]
    if "seed" in inputs:
        if not is_int(inputs["seed"]) or inputs["seed"] < 0:
            raise ConfigError("/inputs/seed", inputs["seed"], "must be a non-negative integer")
        c.seed = inputs["seed"]

    group_docs = [(None, "")]
    if grouped:
        group_docs = []
        for i, g in enumerate(expect_array(doc["groups"], "/groups")):
            gp = ptr("/groups", i)
            expect_object(g, gp)
            check_keys(g, gp, ("description", "problem", "sweep", "implementations", "passes", "params",
                               "devices", "verify", "timing"))
            group_docs.append((g, gp))

    case_index = 0
    seen = {}
    for gdoc, gpath in group_docs:
        g = Group()

        def lookup(key):
            if gdoc is not None:
                return (gdoc[key], ptr(gpath, key)) if key in gdoc else (None, None)
            return (doc[key], ptr("", key)) if key in doc else (None, None)

        if gdoc is not None and "description" in gdoc:
            g.description = gdoc["description"]
        defaults = default_problem()
        for pj, ppath in ((doc.get("problem"), "/problem"),
                          (gdoc.get("problem") if gdoc else None, ptr(gpath, "problem"))):
            if pj is None:
                continue
            expect_object(pj, ppath)
            check_keys(pj, ppath, PROBLEM_KEYS)
            for k, v in pj.items():
                for f in targets(k):
                    set_field(defaults, f, v, ptr(ppath, k))
        sweep, spath = lookup("sweep")
        dims = parse_sweep(sweep, spath) if sweep is not None else []
        for idx in itertools.product(*[range(len(d[0][2])) for d in dims]):
            p = dict(defaults)
            for d, i in zip(dims, idx):
                for fs, kpath, arr in d:
                    for f in fs:
                        set_field(p, f, arr[i], ptr(kpath, i))
            why = validate(p)
            if why:
                raise ConfigError(spath or ptr(gpath, "problem"), label(p), why)
            lab = label(p)
            if lab in seen:
                raise ConfigError(gpath or "/sweep", lab, "this case appears twice (a sweep repeats a value, or two groups overlap)")
            seen[lab] = True
            g.cases.append((case_index, p))
            case_index += 1

        devices, dpath = lookup("devices")
        if devices is not None:
            for i, d in enumerate(expect_array(devices, dpath)):
                if d not in ("cpu", "cuda"):
                    raise ConfigError(ptr(dpath, i), d, 'must be "cpu" or "cuda"')
            g.devices = list(devices)
        impls, ipath = lookup("implementations")
        if impls is not None:
            globs = [impls] if isinstance(impls, str) else expect_array(impls, ipath)
            for i, x in enumerate(globs):
                if not isinstance(x, str):
                    raise ConfigError(ptr(ipath, i), x, f"must be a string, not {type_name(x)}")
            g.implementations = list(globs)
        passes, ppath = lookup("passes")
        if passes is not None:
            out = []
            for i, x in enumerate(expect_array(passes, ppath)):
                if x not in PASSES:
                    raise ConfigError(ptr(ppath, i), x, 'must be "fwd", "bwd" or "fwd_bwd"')
                if x in out:
                    raise ConfigError(ptr(ppath, i), x, "is listed twice")
                out.append(x)
            g.passes = out
        for src, spath2 in ((doc.get("timing"), "/timing"), (gdoc.get("timing") if gdoc else None, ptr(gpath, "timing"))):
            if src is None:
                continue
            expect_object(src, spath2)
            check_keys(src, spath2, ("hot", "min_time_s", "repetitions", "warmup_s"))
            g.timing.update(src)
        for src, vpath in ((doc.get("verify"), "/verify"), (gdoc.get("verify") if gdoc else None, ptr(gpath, "verify"))):
            if src is None:
                continue
            expect_object(src, vpath)
            check_keys(src, vpath, ("mode", "sample_heads", "sample_rows"))
            if "mode" in src:
                if src["mode"] not in ("auto", "full", "sampled", "off"):
                    raise ConfigError(ptr(vpath, "mode"), src["mode"], 'must be "auto", "full", "sampled" or "off"')
                g.verify_mode = src["mode"]
        c.groups.append(g)
    return c


def load_config(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        die(f"cannot read the config '{path}': {e.strerror}")
    try:
        doc = json.loads(strip_json_comments(text))
    except json.JSONDecodeError as e:
        die(f"{path}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}")
    except ConfigError as e:
        die(f"{path}: {e.text()}")
    # As `attnbench run` does: a config without a name is named after its file.
    if isinstance(doc, dict) and "name" not in doc:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.splitext(os.path.basename(path))[0])
        doc["name"] = stem or "config"
    try:
        return parse_config_doc(doc)
    except ConfigError as e:
        die(f"{path}: {e.text()}")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def config_hash(doc):
    """attnbench's Config::hash(): FNV-1a 64 of the compact, key-sorted JSON dump."""
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "%016x" % fnv1a64(canon.encode("utf-8"))


def input_bytes(p, pass_name):
    """What exists before the call: q, k, v, plus dO (and O, LSE for a standalone backward)."""
    elt = 4 if p["dtype"] == "f32" else 2
    q = p["batch"] * p["seq_q"] * p["heads_q"] * p["head_dim"] * elt
    kv = p["batch"] * p["seq_kv"] * p["heads_kv"] * p["head_dim"] * elt
    lse = p["batch"] * p["heads_q"] * p["seq_q"] * 4
    return {"fwd": q + 2 * kv, "bwd": 3 * q + 2 * kv + lse, "fwd_bwd": 2 * q + 2 * kv}[pass_name]


def io_bytes(p, pass_name):
    """attnbench's CaseBuffers::io_bytes(): inputs + outputs of the pass."""
    elt = 4 if p["dtype"] == "f32" else 2
    q = p["batch"] * p["seq_q"] * p["heads_q"] * p["head_dim"] * elt
    kv = p["batch"] * p["seq_kv"] * p["heads_kv"] * p["head_dim"] * elt
    lse = p["batch"] * p["heads_q"] * p["seq_q"] * 4
    if pass_name == "fwd":
        return q + 2 * kv + q + lse
    return q + 2 * kv + 2 * q + lse + q + 2 * kv


# ============================================================================ dry run


def dry_run(cfg, backends, passes_override):
    total = 0
    print(f"config {cfg.name} (hash {config_hash(cfg.doc)}), seed {cfg.seed}, inputs {cfg.distribution}")
    for gi, g in enumerate(cfg.groups):
        tag = f"group {gi}" + (f" ({g.description})" if g.description else "")
        if not g.runs_on_cuda():
            print(f"{tag}: left out (devices {g.devices}, implementations {g.implementations})")
            continue
        passes = passes_override or g.passes
        n = len(g.cases) * len(passes) * len(backends)
        total += n
        print(f"{tag}: {len(g.cases)} cases x passes {','.join(passes)} x {len(backends)} backends = {n} rows; "
              f"timing {g.timing}")
        for ci, p in g.cases:
            fl = " ".join(f"{ps}={pass_flops(p, ps) / 1e9:.4g}" for ps in passes)
            print(f"  #{ci:<4} {label(p):<52} GFLOP {fl}")
    print(f"{total} rows: {', '.join(name for name, _ in backends)}")


# ============================================================================ merge


def read_results(path):
    return load_results(path, die)


def summary(rows):
    s = {"pass": 0, "fail": 0, "skip": 0}
    for r in rows:
        if r.get("status") in s:
            s[r["status"]] += 1
    return s


def write_atomic(path, obj):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def merge(run_path, peer_path, out_path):
    run, peer = read_results(run_path), read_results(peer_path)
    index_of = {r.get("case"): r.get("case_index") for r in run["rows"]}
    rows = list(run["rows"])
    for r in peer["rows"]:
        r = dict(r)
        if r.get("case") in index_of:
            r["case_index"] = index_of[r["case"]]
        rows.append(r)
    ctx = dict(run.get("context", {}))
    peers = dict(ctx.get("peers", {}))
    peers["torch_sdpa"] = peer.get("context", {})
    ctx["peers"] = peers
    rc, pc = run.get("context", {}), peer.get("context", {})
    if rc.get("config_hash") != pc.get("config_hash"):
        print(f"torch_sdpa.py: note: the two files ran different configs ({rc.get('config_name')} vs "
              f"{pc.get('config_name')}); only shared cases line up", file=sys.stderr)
    dev = lambda c: ((c.get("devices") or [{}])[0] or {}).get("name")
    if dev(rc) != dev(pc):
        print(f"torch_sdpa.py: note: different devices ({dev(rc)} vs {dev(pc)})", file=sys.stderr)
    out = {"schema": SCHEMA,
           "complete": bool(run.get("complete", True)) and bool(peer.get("complete", True)),
           "stop_reason": "; ".join(x for x in (run.get("stop_reason", ""), peer.get("stop_reason", "")) if x),
           "context": ctx, "rows": rows, "summary": summary(rows)}
    write_atomic(out_path, out)
    print(f"torch_sdpa.py: wrote {out_path}: {len(run['rows'])} + {len(peer['rows'])} rows")


# ============================================================================ the PyTorch run


def require_torch():
    # Imported here, not at the top, so that --help, --dry-run and --merge work without PyTorch.
    try:
        import torch
        import torch.nn.attention as attention
    except ImportError as e:
        die(f"PyTorch is not installed here (import torch: {e}). This peer needs PyTorch with CUDA "
            f"(>= 2.3 for torch.nn.attention.sdpa_kernel); use --dry-run to list the cases without it.")
    if not torch.cuda.is_available():
        die(f"PyTorch {torch.__version__} has no usable CUDA device (torch.version.cuda = "
            f"{torch.version.cuda}); the SDPA backends run on CUDA only.")
    if not hasattr(attention, "sdpa_kernel"):
        die(f"PyTorch {torch.__version__} has no torch.nn.attention.sdpa_kernel (needs >= 2.3)")
    return torch


class StopRun(Exception):
    """A sticky CUDA error: later calls cannot be trusted. Carries the row it happened in."""

    def __init__(self, message, row):
        super().__init__(message)
        self.row = row


def cuda_driver_info(index):
    """Driver version and clocks through libcuda (PyTorch does not expose clocks)."""
    import ctypes
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


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


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


def version_text(v):
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v and v >= 10000 else str(v)


def collect_context(torch, cfg, config_path, device_index, args):
    props = torch.cuda.get_device_properties(device_index)
    drv = cuda_driver_info(device_index)
    dev = {"name": props.name, "index": device_index, "sms": props.multi_processor_count,
           "sm_clock_mhz": drv.get("sm_clock_mhz"), "mem_clock_mhz": drv.get("mem_clock_mhz"),
           "l2_bytes": drv.get("l2_bytes", getattr(props, "L2_cache_size", None)),
           "memory_bytes": props.total_memory, "compute_capability": f"{props.major}.{props.minor}"}
    rev, dirty, rev_source = git_info()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(), "cpu": cpu_model(), "cpu_cores": os.cpu_count(),
        "peer": "torch_sdpa", "peer_script": "scripts/peers/torch_sdpa.py",
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "cuda_driver": drv.get("cuda_driver"),
        "cudnn": version_text(cudnn) if cudnn else None,
        "git_revision": rev, "git_dirty": dirty, "git_revision_source": rev_source,
        "devices": [dev],
        "config_path": config_path, "config_name": cfg.name, "config_hash": config_hash(cfg.doc),
        "config": cfg.doc, "seed": cfg.seed, "distribution": cfg.distribution,
        "command_line": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "forward_mode": "inputs require grad: the forward kernels also save their softmax statistics",
        "causal_alignment": "bottom-right (is_causal when seq_q == seq_kv, else causal_lower_right)",
        "verify": args.verify,
    }


class Runner:
    def __init__(self, torch, cfg, args, backends):
        self.torch = torch
        self.cfg = cfg
        self.args = args
        self.backends = backends
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.sdpa_kernel = sdpa_kernel
        self.sdpb = SDPBackend
        try:
            from torch.nn.attention.bias import causal_lower_right
            self.causal_lower_right = causal_lower_right
        except ImportError:
            self.causal_lower_right = None
        self.has_gqa = _torch_at_least(torch, 2, 5)  # enable_gqa arrived in PyTorch 2.5
        self.device = torch.device("cuda", args.device)
        torch.cuda.set_device(self.device)
        drv = cuda_driver_info(args.device)
        l2 = drv.get("l2_bytes") or getattr(torch.cuda.get_device_properties(args.device), "L2_cache_size", 0) \
            or 64 << 20
        # Twice the L2: a memset of it evicts everything the previous call left there.
        self.flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device=self.device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)

    # ---- inputs -------------------------------------------------------------------------------

    def make_inputs(self, p, case_index):
        torch = self.torch
        dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[p["dtype"]]
        gen = torch.Generator(device=self.device)
        gen.manual_seed((self.cfg.seed * 1000003 + case_index) & 0x7FFFFFFFFFFFFFFF)

        def tensor(s, h):
            x = torch.randn(p["batch"], s, h, p["head_dim"], generator=gen, device=self.device, dtype=torch.float32)
            if self.cfg.distribution == "outlier":  # FlashAttention-3's mix: N(0,1) + N(0,100)*Bernoulli(0.001)
                spikes = torch.randn(x.shape, generator=gen, device=self.device) * 10.0
                keep = torch.rand(x.shape, generator=gen, device=self.device) < 0.001
                x = x + spikes * keep
            return x.to(dt)

        q = tensor(p["seq_q"], p["heads_q"])
        k = tensor(p["seq_kv"], p["heads_kv"])
        v = tensor(p["seq_kv"], p["heads_kv"])
        dout = tensor(p["seq_q"], p["heads_q"])
        return q, k, v, dout

    # ---- one call -----------------------------------------------------------------------------

    def sdpa_args(self, p):
        """Keyword arguments for F.scaled_dot_product_attention implementing attnbench's problem."""
        kw = {"scale": effective_scale(p)}
        if p["causal"]:
            if p["seq_q"] == p["seq_kv"]:
                kw["is_causal"] = True
            else:
                kw["attn_mask"] = self.causal_lower_right(p["seq_q"], p["seq_kv"])
        if p["heads_q"] != p["heads_kv"]:
            kw["enable_gqa"] = True
        return kw

    def forward(self, kw, q, k, v):
        # q: [B, Sq, Hq, D] leaf; SDPA sees the [B, Hq, Sq, D] view (no copy). kw: sdpa_args(p).
        F = self.torch.nn.functional
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw)

    # ---- timing -------------------------------------------------------------------------------

    def time_calls(self, fn, timing, name):
        torch = self.torch
        hot = bool(timing.get("hot", False))
        warm_end = time.perf_counter() + float(timing.get("warmup_s", 0.02))
        fn()
        while time.perf_counter() < warm_end:
            fn()
        torch.cuda.synchronize()

        def one():
            if not hot:
                self.flush_buf.zero_()
            torch.cuda.nvtx.range_push(name)
            self.start.record()
            fn()
            self.stop.record()
            torch.cuda.nvtx.range_pop()
            self.stop.synchronize()
            return self.start.elapsed_time(self.stop)

        est = max(one(), 1e-3)
        iters = int(min(max(1, math.ceil(float(timing.get("min_time_s", 0.1)) * 1e3 / est)), 100000))
        per_rep = []
        for _ in range(int(timing.get("repetitions", 3))):
            per_rep.append(sum(one() for _ in range(iters)) / iters)
        s = sorted(per_rep)
        n = len(s)
        median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
        mean = sum(s) / n
        cv = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1)) / mean if n > 1 and mean > 0 else 0.0
        return {"median_ms": median, "min_ms": s[0], "mean_ms": mean, "cv": cv, "repetitions": n,
                "iterations": iters, "hot": hot}

    # ---- verification -------------------------------------------------------------------------

    def reference(self, p, q, k, v, dout, grads):
        """float64 reference in BSHD: O and (grads) dQ, dK, dV; a row that sees no key has O = 0."""
        torch = self.torch
        g = p["heads_q"] // p["heads_kv"]
        qd, kd, vd = (x.double().requires_grad_(grads) for x in (q, k, v))  # [B, S, H, D] leaves
        qh, kh, vh = (x.transpose(1, 2) for x in (qd, kd, vd))               # [B, H, S, D] views
        kr, vr = kh.repeat_interleave(g, dim=1), vh.repeat_interleave(g, dim=1)
        s = (qh @ kr.transpose(-1, -2)) * effective_scale(p)
        if p["causal"]:
            i = torch.arange(p["seq_q"], device=self.device)[:, None]
            j = torch.arange(p["seq_kv"], device=self.device)[None, :]
            s = s.masked_fill(j > i + (p["seq_kv"] - p["seq_q"]), float("-inf"))
        prob = torch.softmax(s, dim=-1).nan_to_num(0.0)
        o = prob @ vr
        ref = {"O": o.detach().transpose(1, 2)}
        if grads:
            dq, dk, dv = torch.autograd.grad(o, (qd, kd, vd), dout.double().transpose(1, 2))
            ref.update(dQ=dq, dK=dk, dV=dv)
        return ref

    def output_report(self, name, x, ref, p):
        torch = self.torch
        nonfinite = int((~torch.isfinite(x)).sum().item())
        e = {"name": name, "checked": int(x.numel()), "nonfinite": nonfinite, "max_abs": None,
             "rel_l2": None, "naive_max_abs": None, "atol": None, "bound": None, "ratio": None,
             "ok": nonfinite == 0}
        if ref is not None:
            xd = x.double()
            diff = (xd - ref).nan_to_num(nan=float("inf"))
            e["max_abs"] = float(diff.abs().max().item()) if nonfinite == 0 else None
            den = float(torch.linalg.vector_norm(ref).item())
            e["rel_l2"] = float(torch.linalg.vector_norm(xd - ref).item()) / den if den > 0 and nonfinite == 0 else None
            e["bound"] = max(16 * UNIT_ROUNDOFF[p["dtype"]], 1e-5)
            e["ok"] = nonfinite == 0 and e["rel_l2"] is not None and e["rel_l2"] <= e["bound"]
            if not e["ok"] and nonfinite == 0:
                e["why"] = f"relative L2 error {e['rel_l2']:.3g} above the sanity bound {e['bound']:.3g}"
        if nonfinite:
            e["why"] = f"{nonfinite} non-finite elements"
        return e

    # ---- one row ------------------------------------------------------------------------------

    def run_row(self, p, case_index, impl, backend_name, pass_name, inputs, timing, ref):
        """One (case, backend, pass) row; ref: the float64 outputs of this pass, or None."""
        torch = self.torch
        lab = label(p)
        row = {"case": lab, "case_index": case_index, "problem": dict(p, scale=effective_scale(p)),
               "params": {}, "impl": impl, "device": f"cuda:{self.args.device}", "pass": pass_name,
               "status": "skip", "reason": "", "flops": pass_flops(p, pass_name),
               "nvtx": f"{impl}:{lab}:{pass_name}"}
        if p["heads_q"] != p["heads_kv"] and not self.has_gqa:
            row["reason"] = f"torch {torch.__version__} has no enable_gqa (needs >= 2.5)"
            return row
        if p["causal"] and p["seq_q"] > p["seq_kv"]:
            # PyTorch documents NaN for the rows that see no key (attnbench defines O = 0 there).
            row["reason"] = "PyTorch's lower-right causal bias gives NaN rows for seq_q > seq_kv"
            return row
        if p["causal"] and p["seq_q"] != p["seq_kv"] and self.causal_lower_right is None:
            row["reason"] = f"torch {torch.__version__} has no torch.nn.attention.bias.causal_lower_right"
            return row
        backend = getattr(self.sdpb, backend_name, None)
        if backend is None:
            row["reason"] = f"torch {torch.__version__} has no SDPBackend.{backend_name}"
            return row

        q0, k0, v0, dout0 = inputs
        q, k, v = (x.detach().requires_grad_() for x in (q0, k0, v0))
        grad_out = dout0.transpose(1, 2)
        leaves = (q, k, v)
        state = {}
        kw = self.sdpa_args(p)  # once: a CausalBias per call would be host work inside the timing

        def fwd():
            return self.forward(kw, q, k, v)

        def bwd():
            return torch.autograd.grad(state["out"], leaves, grad_out, retain_graph=True)

        def fwd_bwd():
            return torch.autograd.grad(self.forward(kw, q, k, v), leaves, grad_out)

        call = {"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd_bwd}[pass_name]
        with self.sdpa_kernel([backend]):
            caught = []
            try:
                # The validation call: a backend that refuses the case raises here.
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")  # PyTorch says why a kernel was not used
                    torch.cuda.synchronize()
                    if pass_name == "bwd":
                        state["out"] = fwd()
                        torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    result = call()
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base
            except torch.cuda.OutOfMemoryError as e:
                row["reason"] = "out of memory: " + first_line(str(e))
                state.clear()
                torch.cuda.empty_cache()
                return row
            except (RuntimeError, TypeError, ValueError) as e:
                # The backend (or this PyTorch's SDPA front end) refuses the case: a SKIP with its
                # message and the warnings that say why, unless the CUDA context is now broken.
                msg = first_line(str(e))
                if sticky(msg):
                    row["status"], row["reason"] = "fail", msg
                    raise StopRun(f"sticky CUDA error in {row['nvtx']}: {msg}", row)
                why = [first_line(str(w.message)) for w in caught]
                row["reason"] = "; ".join(dict.fromkeys([msg] + [w for w in why if w]))[:1500]
                return row
            # Outputs in attnbench's BSHD layout: O back from the [b, h, s, d] view, grads as the leaves.
            outs = {"O": result.transpose(1, 2)} if pass_name == "fwd" else dict(zip(("dQ", "dK", "dV"), result))
            reports = [self.output_report(n, x, ref[n] if ref is not None else None, p) for n, x in outs.items()]
            row["verify"] = {"mode": "full" if ref is not None else "off", "baseline": "", "outputs": reports}
            bad = [f"{r['name']}: {r['why']}" for r in reports if not r["ok"]]
            del result, outs
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # said once above; not on every timed call
                    row["time"] = self.time_calls(call, timing, row["nvtx"])
            except RuntimeError as e:
                msg = first_line(str(e))
                row["status"], row["reason"] = "fail", "timed call: " + msg
                if sticky(msg):
                    raise StopRun(f"sticky CUDA error in {row['nvtx']}: {msg}", row)
                return row
        state.clear()
        row["status"] = "fail" if bad else "pass"
        row["reason"] = "; ".join(bad)
        t = row["time"]["median_ms"]
        row["tflops"] = row["flops"] / (t * 1e-3) / 1e12 if t > 0 else None
        # As attnbench's peak (device memory of the case during the call): the pass's inputs plus
        # what PyTorch allocated in the call. PyTorch announces no workspace: it is measured as
        # the peak beyond the inputs and outputs (the N^2 scores of the math backend, for example).
        peak_bytes = input_bytes(p, pass_name) + int(peak)
        io = io_bytes(p, pass_name)
        row["memory"] = {"io_bytes": io, "workspace_bytes": max(0, peak_bytes - io), "peak_bytes": peak_bytes,
                         "peak_method": "pass inputs + torch.cuda.max_memory_allocated growth during one call; "
                                        "workspace_bytes = peak_bytes - io_bytes (measured)"}
        return row


def sticky(msg):
    return "CUDA error" in msg or "illegal memory access" in msg or "device-side assert" in msg


def first_line(s):
    s = s.strip()
    return s.splitlines()[0] if s else "error"


def _torch_at_least(torch, major, minor):
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def run(cfg, args, backends, config_path):
    torch = require_torch()
    runner = Runner(torch, cfg, args, backends)
    out_path = args.out or os.path.join(
        ROOT, "results", "local",
        f"{cfg.name}-torch_sdpa-{datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%d-%H%M%S')}.json")
    results = {"schema": SCHEMA, "complete": False, "stop_reason": "running",
               "context": collect_context(torch, cfg, config_path, args.device, args), "rows": [],
               "summary": {}}

    def save():
        results["summary"] = summary(results["rows"])
        write_atomic(out_path, results)

    save()  # fails early if the file cannot be written
    planned = sum(len(g.cases) * len(args.passes or g.passes) * len(backends)
                  for g in cfg.groups if g.runs_on_cuda())
    done = 0
    code = 0
    try:
        for g in cfg.groups:
            if not g.runs_on_cuda():
                continue
            passes = args.passes or g.passes
            for case_index, p in g.cases:
                want_check = args.verify == "check" or (
                    args.verify == "auto" and g.verify_mode != "off" and
                    p["batch"] * p["heads_q"] * p["seq_q"] * p["seq_kv"] <= VERIFY_MAX_SCORES)
                try:
                    inputs = runner.make_inputs(p, case_index)
                    ref_all = runner.reference(p, *inputs, grads=passes != ["fwd"]) if want_check else None
                except torch.cuda.OutOfMemoryError as e:
                    for ps in passes:
                        for impl, _ in backends:
                            results["rows"].append({
                                "case": label(p), "case_index": case_index,
                                "problem": dict(p, scale=effective_scale(p)), "params": {}, "impl": impl,
                                "device": f"cuda:{args.device}", "pass": ps, "status": "skip",
                                "reason": "out of memory for the inputs: " + first_line(str(e)),
                                "flops": pass_flops(p, ps), "nvtx": f"{impl}:{label(p)}:{ps}"})
                    torch.cuda.empty_cache()
                    save()
                    continue
                for ps in passes:
                    ref = None
                    if ref_all is not None:
                        ref = {"O": ref_all["O"]} if ps == "fwd" else {n: ref_all[n] for n in ("dQ", "dK", "dV")}
                    for impl, backend_name in backends:
                        row = runner.run_row(p, case_index, impl, backend_name, ps, inputs, g.timing, ref)
                        results["rows"].append(row)
                        done += 1
                        if not args.quiet:
                            tf = row.get("tflops")
                            ms = row.get("time", {}).get("median_ms")
                            extra = (f"{ms:.3f} ms {tf:.1f} TFLOP/s" if ms and tf else row["reason"][:100])
                            print(f"[{done}/{planned}] {impl} {label(p)} {ps}: {row['status']} {extra}", flush=True)
                del inputs, ref_all
                torch.cuda.empty_cache()
                save()
        results["complete"], results["stop_reason"] = True, ""
    except StopRun as e:
        results["rows"].append(e.row)
        results["stop_reason"] = str(e)
        code = 1
    except KeyboardInterrupt:
        results["stop_reason"] = "interrupted (SIGINT)"
        code = 1
    save()
    s = results["summary"]
    print(f"torch_sdpa.py: wrote {out_path}: {s['pass']} pass, {s['fail']} fail, {s['skip']} skip"
          + ("" if results["complete"] else f" (incomplete: {results['stop_reason']})"), file=sys.stderr)
    return code


def main():
    ap = argparse.ArgumentParser(
        description="Run an attnbench config through PyTorch's scaled_dot_product_attention with each "
                    "backend forced, writing an attnbench results file (docs/peers.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  torch_sdpa.py configs/fa2_grid.json --out results/h200/fa2_grid.torch_sdpa.json\n"
               "  torch_sdpa.py configs/smoke.json --dry-run\n"
               "  torch_sdpa.py --merge results/h200/fa2_grid.json results/h200/fa2_grid.torch_sdpa.json "
               "--out results/h200/fa2_grid.with_torch.json")
    ap.add_argument("config", nargs="?", help="attnbench config (JSON, comments allowed)")
    ap.add_argument("--out", help="results file to write (default results/local/<name>-torch_sdpa-<date>.json)")
    ap.add_argument("--backend", action="append", default=None,
                    help="flash, efficient, cudnn or math; repeatable or comma-separated (default: all four)")
    ap.add_argument("--pass", dest="passes", action="append", default=None,
                    help="fwd, bwd, fwd_bwd; repeatable or comma-separated (replaces the config's)")
    ap.add_argument("--verify", choices=("auto", "check", "off"), default="auto",
                    help="auto: float64 check of small cases unless the config's verify mode is off; "
                         "check: every case; off: NaN/Inf only (default: auto)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    ap.add_argument("--dry-run", action="store_true", help="list the cases and rows, do not run (no torch needed)")
    ap.add_argument("--merge", nargs=2, metavar=("RUN.json", "PEER.json"),
                    help="write RUN.json's rows plus PEER.json's into --out, for `attnbench table`")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    ap.add_argument("--case", dest="cases", action="append", default=None, metavar="GLOB",
                    help="only the cases whose label matches this glob, repeatable (as attnbench run --case)")
    args = ap.parse_args()

    if args.merge:
        if args.config or not args.out:
            die("--merge takes RUN.json PEER.json and --out, and no config")
        merge(args.merge[0], args.merge[1], args.out)
        return 0
    if not args.config:
        ap.print_usage(sys.stderr)
        die("a config is required (or --merge)")

    names = {n.split(".sdpa_")[1]: (n, b) for n, b in BACKENDS}
    backends = list(BACKENDS)
    if args.backend:
        picked = [x.strip() for a in args.backend for x in a.split(",") if x.strip()]
        for x in picked:
            if x not in names:
                die(f"--backend = {x}: must be one of {', '.join(names)}")
        backends = [names[x] for x in dict.fromkeys(picked)]
    if args.passes:
        picked = [x.strip() for a in args.passes for x in a.split(",") if x.strip()]
        for x in picked:
            if x not in PASSES:
                die(f"--pass = {x}: must be fwd, bwd or fwd_bwd")
        args.passes = list(dict.fromkeys(picked))

    cfg = load_config(args.config)
    if not any(g.runs_on_cuda() for g in cfg.groups):
        die(f"{args.config}: no group runs on cuda (devices / implementations exclude it)")
    if args.cases:
        total = sum(len(g.cases) for g in cfg.groups)
        for g in cfg.groups:
            g.cases = [(ci, p) for ci, p in g.cases if any(fnmatch.fnmatchcase(label(p), c) for c in args.cases)]
        if not any(g.cases for g in cfg.groups):
            die(f"--case = {', '.join(args.cases)}: matches none of the {total} cases of {args.config}")
    if args.dry_run:
        dry_run(cfg, backends, args.passes)
        return 0
    return run(cfg, args, backends, args.config)


if __name__ == "__main__":
    sys.exit(main())
