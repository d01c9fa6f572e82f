#!/usr/bin/env python3
"""Tests of `attnbench expand` and of the peers built on it (scripts/peers/), without a GPU or
PyTorch: the build's attnbench and libattnbench_capi.so (ATTNBENCH_BUILD_DIR, set by CTest; every
test skips without them).

- expand against the harness itself: every row of a real `attnbench run` (labels, case indices,
  problems, FLOPs, io_bytes, NVTX names, config hash) is the row expand announced, in order;
- the peers read their cases from expand (--dry-run of torch_sdpa.py, fa4.py, peers.py), and a bad
  config or flag exits 2 with attnbench's message and writes no file;
- verification by the harness's rule on a peer's outputs: a planted wrong peer (attnbench's own
  cpu.flash_fwd through libattnbench_capi, with one row swapped) FAILs in full and in sampled
  mode (where the wrong row is outside the sample), an honest one PASSes with the same verdict
  as `attnbench run` gives the same implementation.
Run by CTest as test_peers; also `ATTNBENCH_BUILD_DIR=build python3 tests/test_peers.py`."""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "scripts", "peers")
sys.path.insert(0, ROOT)
from scripts.peers import attnbench_impls, common  # noqa: E402

BUILD = os.environ.get("ATTNBENCH_BUILD_DIR", "")
EXE = os.path.join(BUILD, "attnbench") if BUILD else ""
CAPI = os.path.join(BUILD, "libattnbench_capi.so") if BUILD else ""
HAVE = bool(EXE) and os.access(EXE, os.X_OK)
HAVE_CAPI = HAVE and os.path.isfile(CAPI)

# CPU-sized: MHA and GQA, causal square and bottom-right (seq_q < seq_kv), f32 and bf16; a second
# group verified on samples only (one pair, four rows), where a wrong row is outside the sample.
CONFIG = {
    "name": "peer_test",
    "groups": [
        {"description": "full", "problem": {"head_dim": 32, "heads_q": 4, "heads_kv": 2},
         "sweep": {"product": {"causal": [False, True], "dtype": ["f32", "bf16"]},
                   "zip": [{"seq_q": [24, 16], "seq_kv": [24, 40]}]},
         "implementations": ["cpu.flash_fwd", "cpu.flash_bwd", "cpu.naive_3pass"],
         "passes": ["fwd", "bwd", "fwd_bwd"], "verify": {"mode": "full"}},
        {"description": "sampled", "problem": {"head_dim": 32, "heads": 2, "seq": 96, "batch": 2, "dtype": "bf16"},
         "implementations": ["cpu.flash_fwd"], "passes": ["fwd", "bwd"],
         "verify": {"mode": "sampled", "sample_heads": 1, "sample_rows": 4}},
    ],
    "timing": {"min_time_s": 0.0005, "repetitions": 2, "warmup_s": 0},
}


def py(*args, env=None):
    return subprocess.run([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Tmp(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cfg = os.path.join(self.tmp.name, "peer_test.json")
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(CONFIG, f)

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)


@unittest.skipUnless(HAVE, "needs ATTNBENCH_BUILD_DIR with the attnbench binary")
class Expand(Tmp):
    def test_matches_the_rows_of_a_run(self):
        """What expand says is exactly what `attnbench run` then does, row by row."""
        out = self.path("run.json")
        for extra in ([], ["--case", "*causal*", "--pass", "fwd,bwd"]):
            p = subprocess.run([EXE, "run", self.cfg, "--out", out, "--quiet", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
            self.assertEqual(p.returncode, 0, p.stderr)
            run = read_json(out)
            cases = common.expand(EXE, self.cfg, extra[1:2] if extra else None, ["fwd", "bwd"] if extra else None)
            planned = [(c, r) for c in cases for r in c["rows"]]
            self.assertEqual(len(planned), len(run["rows"]))
            for (c, r), row in zip(planned, run["rows"]):
                self.assertEqual(row["case"], c["case"])
                self.assertEqual(row["case_index"], c["case_index"])
                self.assertEqual(row["problem"], c["problem"])
                self.assertEqual((row["impl"], row["options"], row["pass"], row["nvtx"]),
                                 (r["impl"], r["options"], r["pass"], r["nvtx"]))
                self.assertEqual(row["flops"], c["flops"][row["pass"]])
                if "memory" in row:
                    self.assertEqual(row["memory"]["io_bytes"], c["io_bytes"][row["pass"]])
                self.assertEqual(c["config_hash"], run["context"]["config_hash"])
                self.assertEqual(c["inputs"]["seed"], run["context"]["seed"])
                if "verify" in row:
                    self.assertEqual(c["verify"]["resolved"], row["verify"]["mode"])
            if extra:
                self.assertTrue(all("causal" in c["case"] for c in cases))

    def test_cuda_configs_expand_without_cuda(self):
        p = subprocess.run([EXE, "expand", os.path.join(ROOT, "configs", "fa3_grid.json")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [json.loads(x) for x in p.stdout.splitlines()]
        self.assertEqual(len(lines), 36)
        self.assertTrue(all("cuda" in x["runs_on"] for x in lines))
        self.assertEqual({x["problem"]["head_dim"] for x in lines}, {64, 128, 256})
        self.assertTrue(all(x["problem"]["batch"] * x["problem"]["seq_q"] == 16384 for x in lines))
        self.assertTrue(all(x["problem"]["heads_q"] * x["problem"]["head_dim"] == 2048 for x in lines))

    def test_errors_name_the_value(self):
        bad = dict(CONFIG, groups=[dict(CONFIG["groups"][0], passes=["fwd", "sideways"])])
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(bad, f)
        p = subprocess.run([EXE, "expand", self.cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertIn("attnbench expand: ", p.stderr)
        self.assertIn("/groups/0/passes/1", p.stderr)
        p = subprocess.run([EXE, "expand", self.cfg.replace(".json", "-none.json")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("cannot read the config", p.stderr)


@unittest.skipUnless(HAVE, "needs ATTNBENCH_BUILD_DIR with the attnbench binary")
class PeersDryRun(Tmp):
    def test_dry_runs_list_expand_cases(self):
        grid = os.path.join(ROOT, "configs", "fa3_grid.json")
        cases = common.expand(EXE, grid, ["*_sq2048_*"])
        for script, args, rows_per_case in (("torch_sdpa.py", ["--backend", "flash,cudnn"], 6),
                                            ("fa4.py", [], 5),
                                            ("peers.py", ["--peers", "fa4,torch_sdpa,attnbench", "--backend", "cudnn",
                                                          "--impl", "cuda.cudnn_sdpa"], 11)):
            p = py(os.path.join(PEERS, script), grid, "--case", "*_sq2048_*", "--dry-run", "--attnbench", EXE, *args)
            self.assertEqual(p.returncode, 0, script + p.stderr)
            self.assertIn(f"hash {cases[0]['config_hash']}", p.stdout)
            for c in cases:
                self.assertIn(f"#{c['case_index']:<4} {c['case']}", p.stdout)
            self.assertIn(f"{rows_per_case * len(cases)} rows", p.stdout, script)

    def test_bad_input_exits_2_without_a_file(self):
        out = self.path("peer.json")
        for args, msg in (([self.cfg, "--case", "nothing*"], "matches none of the"),
                          ([self.cfg, "--pass", "sideways"], "--pass = sideways"),
                          ([self.cfg, "--backend", "fast"], "--backend = fast"),
                          ([self.path("missing.json")], "cannot read the config")):
            p = py(os.path.join(PEERS, "torch_sdpa.py"), *args, "--out", out, "--attnbench", EXE)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(msg, p.stderr)
            self.assertFalse(os.path.exists(out))
        # A CPU-only config has no case for a CUDA peer.
        p = py(os.path.join(PEERS, "fa4.py"), self.cfg, "--out", out, "--attnbench", EXE)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no case runs on cuda", p.stderr)
        self.assertFalse(os.path.exists(out))


class Planted(common.Backend):
    """A fast wrong peer: attnbench's cpu.flash_fwd (forward) and cpu.flash_bwd, called
    through libattnbench_capi on host buffers, then one row of O (fwd) or dQ (bwd) replaced by its
    neighbour: the classic off-by-one row index. wrong=False: the honest peer."""

    device_kind = "cpu"

    def __init__(self, wrong, capi_holder):
        self.impl = "planted.row_swap" if wrong else "planted.honest"
        self.wrong = wrong
        self.capi = capi_holder

    def make(self, dev, case, pass_name, t):
        name = "cpu.flash_fwd" if pass_name == "fwd" else "cpu.flash_bwd"
        inner = attnbench_impls.Impl(name, "cpu")
        inner.capi = self.capi["capi"]
        call = inner.make(dev, case, pass_name, t)
        p = case["problem"]
        elt = common.DTYPE_BYTES[p["dtype"]]
        row = p["heads_q"] * p["head_dim"] * elt  # bytes from query i to query i + 1, same head
        i = p["seq_q"] // 2 + 1  # not the first or last row (always sampled), an odd one

        def validate():
            call.validate()
            if self.wrong:
                x = call.outputs()["O" if pass_name == "fwd" else "dQ"]
                ctypes.memmove(x.ptr + i * row, x.ptr + (i + 1) * row, p["head_dim"] * elt)

        return common.Call(call.fn, call.outputs, validate, keep=call)


class PlantedPeer:
    name = "planted"

    def __init__(self):
        self.holder = {}

    def add_args(self, ap):
        pass

    def backends(self, args, kind):
        return [Planted(True, self.holder), Planted(False, self.holder)] if kind == "cpu" else []

    def setup(self, args, dev, capi, mine):
        self.holder["capi"] = capi


@unittest.skipUnless(HAVE_CAPI, "needs ATTNBENCH_BUILD_DIR with attnbench and libattnbench_capi.so")
class Verification(Tmp):
    def run_planted(self, passes):
        out = self.path("planted.json")
        argv = [self.cfg, "--on", "cpu", "--attnbench", EXE, "--out", out, "--quiet", "--pass", passes]
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            code = common.main("planted", "test", [PlantedPeer()], argv)
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS")
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        self.assertEqual(code, 0)
        return read_json(out)

    def test_wrong_row_fails_honest_passes(self):
        res = self.run_planted("fwd,bwd")
        self.assertTrue(res["complete"])
        wrong = [r for r in res["rows"] if r["impl"] == "planted.row_swap"]
        honest = [r for r in res["rows"] if r["impl"] == "planted.honest"]
        self.assertEqual(len(wrong), 2 * 9)  # 8 full cases + 1 sampled, fwd and bwd
        for r in wrong:
            self.assertEqual(r["status"], "fail", r["nvtx"])
            self.assertIn("O" if r["pass"] == "fwd" else "dQ", r["reason"])
        for r in honest:
            self.assertEqual(r["status"], "pass", r["nvtx"] + r["reason"])
            self.assertIn("time", r)
        sampled = [r for r in wrong if r["verify"]["mode"] == "sampled"]
        self.assertEqual(len(sampled), 2)
        for r in sampled:  # outside the sample: caught by the every-element check against naive
            bad = [o["name"] for o in r["verify"]["outputs"] if not o["ok"]]
            self.assertEqual(bad, ["O~naive" if r["pass"] == "fwd" else "dQ~naive"], r["reason"])

    def test_same_verdict_as_attnbench_run(self):
        """The peer's verdict on cpu.flash_fwd's outputs is the harness's verdict on them."""
        out = self.path("run.json")
        p = subprocess.run([EXE, "run", self.cfg, "--impl", "cpu.flash_fwd", "--pass", "fwd", "--out", out,
                            "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(p.returncode, 0, p.stderr)
        run = {r["case"]: r for r in read_json(out)["rows"]}
        peer = self.path("peer.json")
        q = py(os.path.join(PEERS, "attnbench_impls.py"), self.cfg, "--on", "cpu", "--impl", "cpu.flash_fwd",
               "--pass", "fwd", "--attnbench", EXE, "--out", peer, "--quiet")
        self.assertEqual(q.returncode, 0, q.stderr)
        rows = read_json(peer)["rows"]
        self.assertEqual(len(rows), len(run))
        for r in rows:
            h = run[r["case"]]
            self.assertEqual(r["status"], "pass")
            self.assertEqual(r["verify"]["mode"], h["verify"]["mode"])
            self.assertEqual(r["verify"]["baseline"], "cpu.naive_3pass")
            for a, b in zip(r["verify"]["outputs"], h["verify"]["outputs"]):
                self.assertEqual(a["name"], b["name"])
                self.assertEqual(a["checked"], b["checked"])
                # Same inputs, same kernel, same reference, same baseline: the same numbers.
                for k in ("max_abs", "naive_max_abs", "atol", "bound"):
                    self.assertAlmostEqual(a[k], b[k], delta=1e-12 + 1e-9 * abs(b[k]), msg=f"{r['case']} {a['name']} {k}")

    def test_capi_refuses_bad_specs(self):
        capi = common.Capi(CAPI)
        with self.assertRaises(RuntimeError) as e:
            capi.case({"problem": {"batch": 1, "heads_q": 3, "heads_kv": 2, "seq_q": 4, "seq_kv": 4, "head_dim": 8,
                                   "dtype": "f32"}, "inputs": {}, "verify": {}, "passes_run": ["fwd"]}, "cpu")
        self.assertIn("not a multiple of heads_kv", str(e.exception))
        with self.assertRaises(RuntimeError) as e:
            capi.call("cuda.nonexistent", {"batch": 1, "heads_q": 1, "heads_kv": 1, "seq_q": 4, "seq_kv": 4,
                                           "head_dim": 8, "dtype": "f32"}, "fwd")
        self.assertIn("not registered", str(e.exception))


# ============================================================================ varlen (packed THD, cu_seqlens)

# CPU-sized varlen batches: a sequence without keys (queries only: O = 0, LSE = -inf), one without
# queries (keys only: dK = dV = 0), seq_q above and below seq_kv in one batch, GQA, causal and a window.
VARLEN_CONFIG = {
    "name": "peer_varlen",
    "groups": [
        {"problem": {"head_dim": 16, "heads_q": 4, "heads_kv": 2},
         "sweep": {"product": {"causal": [False, True], "dtype": ["f32", "bf16"]},
                   "zip": [{"seqlens_q": [[5, 0, 17, 3], [9, 4, 1]], "seqlens_kv": [[9, 3, 17, 0], [4, 9, 6]]}]},
         "implementations": ["cpu.flash_fwd", "cpu.flash_bwd", "cpu.naive_3pass"],
         "passes": ["fwd", "bwd", "fwd_bwd"], "verify": {"mode": "full"}},
        {"description": "window", "problem": {"head_dim": 8, "heads_q": 2, "heads_kv": 1, "dtype": "f32",
                                              "seqlens_q": [6, 2, 11], "seqlens_kv": [10, 7, 4]},
         "sweep": {"zip": [{"causal": [True, False], "window_left": [2, 3], "window_right": [-1, 1]}]},
         "implementations": ["cpu.naive_3pass"], "passes": ["fwd"], "verify": {"mode": "full"}},
    ],
    "timing": {"min_time_s": 0.0005, "repetitions": 2, "warmup_s": 0},
}


def varlen_problem(sq, skv, causal=False, wl=-1, wr=-1, softcap=0.0, hq=4, hkv=2, d=8, dtype="bf16"):
    p = {"batch": len(sq), "heads_q": hq, "heads_kv": hkv, "seq_q": max(sq), "seq_kv": max(skv), "head_dim": d,
         "causal": causal, "scale": 1.0 / d ** 0.5, "dtype": dtype, "seqlens_q": list(sq), "seqlens_kv": list(skv)}
    if wl >= 0:
        p["window_left"] = wl
    if wr >= 0:
        p["window_right"] = wr
    if softcap:
        p["softcap"] = softcap
    return p


def varlen_visible(p, i, j):
    """attnbench's varlen rule written out from problem.hpp, independently of scripts/peers: packed
    query i and key j must lie in the same sequence b; there, with its own lengths and the rows
    i' = i - start_q(b), j' = j - start_kv(b), the dense rule (bottom-right: c = i' + len_kv - len_q,
    c - window_left <= j' <= c + window_right, causal capping the right side at 0)."""
    def where(lengths, t):
        start = 0
        for b, n in enumerate(lengths):
            if t < start + n:
                return b, t - start
            start += n
        raise IndexError(t)
    (bq, iq), (bk, jk) = where(p["seqlens_q"], i), where(p["seqlens_kv"], j)
    if bq != bk:
        return False
    c = iq + p["seqlens_kv"][bq] - p["seqlens_q"][bq]
    wl, wr = p.get("window_left", -1), p.get("window_right", -1)
    if p.get("causal"):
        wr = 0 if wr == -1 else min(wr, 0)
    return (wl == -1 or jk >= c - wl) and (wr == -1 or jk <= c + wr)


VARLEN_LENGTHS = [([5, 0, 17, 3], [9, 3, 17, 0]), ([9, 4, 1], [4, 9, 6]), ([1], [1]), ([0, 3, 0], [2, 0, 5]),
                  ([7, 7], [7, 7]), ([2, 12], [12, 2])]
VARLEN_WINDOWS = [(-1, -1), (0, 0), (2, -1), (-1, 1), (3, 5), (1, 0)]


class VarlenPure(unittest.TestCase):
    """The peers' varlen arithmetic as pure functions: no build, no torch."""

    def test_cu_seqlens_totals_and_layout(self):
        self.assertEqual(common.cu_seqlens([5, 0, 17, 3]), [0, 5, 5, 22, 25])
        self.assertEqual(common.cu_seqlens([]), [0])
        p = varlen_problem([5, 0, 17, 3], [9, 3, 17, 0], hq=4, hkv=2, d=16)
        v = common.varlen_info(p)
        self.assertEqual((v["total_q"], v["total_kv"], v["max_seqlen_q"], v["max_seqlen_kv"]), (25, 29, 17, 17))
        self.assertEqual((v["cu_seqlens_q"], v["cu_seqlens_kv"]), ([0, 5, 5, 22, 25], [0, 9, 12, 29, 29]))
        self.assertTrue(common.is_varlen(p) and common.is_varlen({"problem": p}))
        self.assertEqual(common.layout_shapes(p), {"q": [25, 4, 16], "k": [29, 2, 16], "v": [29, 2, 16],
                                                   "dout": [25, 4, 16], "o": [25, 4, 16], "lse": [4, 25]})
        dense = {"batch": 3, "heads_q": 4, "heads_kv": 2, "seq_q": 7, "seq_kv": 9, "head_dim": 8}
        self.assertFalse(common.is_varlen(dense))
        self.assertEqual(common.layout_shapes(dense)["q"], [3, 7, 4, 8])
        self.assertEqual(common.layout_shapes(dense)["k"], [3, 9, 2, 8])
        self.assertEqual(common.layout_shapes(dense)["lse"], [3, 4, 7])

    def test_check_problem_varlen(self):
        ok = varlen_problem([5, 0, 17], [9, 3, 17])
        common.check_problem(ok)
        for bad, field in (({"seqlens_q": [5, 0]}, "problem.seqlens_q"),         # not batch lengths
                           ({"seqlens_q": [5, -1, 17]}, "problem.seqlens_q"),
                           ({"seqlens_kv": [9, 3, 16]}, "problem.seqlens_kv"),      # seq_kv is not the longest
                           ({"seqlens_q": [0, 0, 0], "seq_q": 0}, "problem.seqlens_q"),  # no query at all
                           ({"seqlens_kv": "9,3,17"}, "problem.seqlens_kv")):
            with self.subTest(bad=bad), self.assertRaises(common.BadInput) as e:
                common.check_problem(dict(ok, **bad))
            self.assertIn(field, str(e.exception))
        half = dict(ok)
        del half["seqlens_kv"]
        with self.assertRaises(common.BadInput) as e:
            common.check_problem(half)
        self.assertIn("come together", str(e.exception))

    def test_output_shapes(self):
        case = {"problem": varlen_problem([5, 0, 17], [9, 3, 17], hq=4, hkv=2, d=8, dtype="bf16")}
        case["inputs"] = {"layout": common.layout_shapes(case)}
        self.assertEqual(common.output_shape_error(case, "LSE", (4, 22)), "")
        self.assertEqual(common.output_shape_error(case, "O", (22, 4, 8)), "")
        self.assertEqual(common.output_shape_error(case, "dK", (29, 2, 8)), "")
        self.assertIn("expected [4, 22]", common.output_shape_error(case, "LSE", (3, 4, 17)))  # a dense LSE
        self.assertIn("expected [22, 4, 8]", common.output_shape_error(case, "O", (1, 22, 4, 8)))
        self.assertEqual(common.output_shape_error(case, "dV", ("bytes", 29 * 2 * 8 * 2)), "")
        self.assertEqual(common.output_shape_error(case, "LSE", ("bytes", 4 * 22 * 4)), "")
        self.assertIn("bytes", common.output_shape_error(case, "O", ("bytes", 3 * 17 * 4 * 8 * 2)))

    def test_fa4_varlen_call(self):
        from scripts.peers import fa4
        p = varlen_problem([5, 0, 17], [9, 3, 17], causal=True)
        self.assertEqual(fa4.fa4_function(p), "flash_attn_varlen_func")
        self.assertEqual(fa4.fa4_function({"problem": p}), "flash_attn_varlen_func")
        dense = dict(p, batch=3)
        del dense["seqlens_q"], dense["seqlens_kv"]
        self.assertEqual(fa4.fa4_function(dense), "flash_attn_func")
        self.assertEqual(fa4.fa4_varlen_args(p), {"cu_seqlens_q": [0, 5, 5, 22], "cu_seqlens_k": [0, 9, 12, 29],
                                                  "max_seqlen_q": 17, "max_seqlen_k": 17})
        # The device tensors are passed through as given (made once per case by dev.inputs).
        cq, ckv = object(), object()
        kw = fa4.fa4_kwargs({"problem": p}, True, (cq, ckv))
        self.assertIs(kw["cu_seqlens_q"], cq)
        self.assertIs(kw["cu_seqlens_k"], ckv)
        self.assertEqual({k: v for k, v in kw.items() if k not in ("cu_seqlens_q", "cu_seqlens_k")},
                         {"softmax_scale": p["scale"], "deterministic": True, "return_lse": True, "causal": True,
                          "max_seqlen_q": 17, "max_seqlen_k": 17})
        self.assertNotIn("seqused_q", kw)
        # Window and soft cap as for a dense case (fa4_window_args: FA4 aligns them per sequence).
        kw = fa4.fa4_kwargs(varlen_problem([4, 6], [6, 4], causal=True, wl=3, wr=2, softcap=30.0), False)
        self.assertEqual((kw["causal"], kw["window_size"], kw["softcap"], kw["max_seqlen_q"], kw["max_seqlen_k"]),
                         (False, (3, 0), 30.0, 6, 6))
        self.assertEqual(kw["cu_seqlens_q"], [0, 4, 10])
        # A dense case's call is unchanged: no varlen argument at all.
        self.assertEqual(set(fa4.fa4_kwargs(dense, False)), {"softmax_scale", "deterministic", "return_lse", "causal"})
        # FA4 plans varlen (f16/bf16), f32 SKIPs as dense; a missing varlen entry point is a SKIP saying so.
        b = fa4.Fa4(False, {})
        self.assertIsNone(b.plan_skip({"problem": p}, "fwd_bwd"))
        self.assertIn("f16 and bf16", b.plan_skip({"problem": dict(p, dtype="f32")}, "fwd"))
        b = fa4.Fa4(True, {"varlen_error": "this FA4 has no flash_attn.cute.flash_attn_varlen_func"})
        self.assertIn("flash_attn_varlen_func", b.skip_reason({"problem": p}, "bwd"))
        self.assertIsNone(b.skip_reason({"problem": dense}, "bwd"))

    def test_sdpa_skips_varlen_flex_plans_it(self):
        from scripts.peers import flex, torch_sdpa
        p = varlen_problem([5, 3], [5, 3], causal=True)
        for name in torch_sdpa.BACKENDS:
            for ps in common.PASSES:
                r = torch_sdpa.Sdpa(name).plan_skip({"problem": p}, ps)
                self.assertIn("takes no cu_seqlens", r)
                self.assertIn("flash_attn_varlen_func", r)
        self.assertTrue(flex.has_feature(p))
        self.assertTrue(flex.Flex(False, {}).plans({"problem": p}))
        self.assertIsNone(flex.Flex(False, {}).plan_skip({"problem": p}, "bwd"))

    def test_flex_varlen_mask_is_attnbench_rule(self):
        """flex.varlen_mask_mod on Python ints, every packed (query, key) pair, against the rule as
        problem.hpp states it, sequence by sequence (zero lengths, seq_q above and below seq_kv)."""
        from scripts.peers import flex
        n = 0
        for sq, skv in VARLEN_LENGTHS:
            for wl, wr in VARLEN_WINDOWS:
                for causal in (False, True):
                    p = varlen_problem(sq, skv, causal, wl, wr)
                    for pad in ((1, 8, flex.VARLEN_PAD) if n == 0 else (1, 8)):  # the full pad once
                        tab = flex.varlen_tables(p, pad)
                        self.assertEqual(len(tab["doc_q"]) % pad, 0)
                        self.assertEqual((tab["total_q"], tab["total_kv"]), (sum(sq), sum(skv)))
                        m = flex.varlen_mask_mod(p, tab)
                        for i in range(len(tab["doc_q"])):
                            for j in range(len(tab["doc_kv"])):
                                got = m(0, 1, i, j)
                                self.assertIsInstance(got, bool)
                                want = i < sum(sq) and j < sum(skv) and varlen_visible(p, i, j)  # padding: nothing
                                self.assertEqual(got, want, f"{p} query {i} key {j} pad {pad}")
                                n += 1
        self.assertGreater(n, 100000)


@unittest.skipUnless(HAVE, "needs ATTNBENCH_BUILD_DIR with the attnbench binary")
class VarlenDryRun(Tmp):
    def test_varlen_config_dry_runs(self):
        """configs/varlen.json: per case 5 FA4 rows, 3 FlexAttention rows and 12 PyTorch SDPA rows
        that SKIP with the reason, without torch; the varlen line says the packed totals."""
        path = os.path.join(ROOT, "configs", "varlen.json")
        cases = common.expand(EXE, path)
        self.assertEqual(len(cases), 2)
        for c in cases:
            self.assertTrue(common.is_varlen(c))
            self.assertEqual(c["inputs"]["layout"], common.layout_shapes(c))  # expand's packed totals, ours
        v = common.varlen_info(cases[0])
        self.assertEqual(v["seqlens_q"], [3299, 3475, 1734, 1974, 3088, 2814])
        p = py(os.path.join(PEERS, "peers.py"), path, "--dry-run", "--attnbench", EXE)
        self.assertEqual(p.returncode, 0, p.stderr)
        for c in cases:
            self.assertIn(f"#{c['case_index']:<4} {c['case']}", p.stdout)
        self.assertEqual(p.stdout.count(" 20 rows "), 2)
        self.assertEqual(p.stdout.count("varlen: 6 sequences, total_q 16384, total_kv 16384, max_seqlen 3475/3475"), 2)
        self.assertIn("40 rows: fa4.flash_attn, fa4.flash_attn[deterministic=1], torch.sdpa_flash, "
                      "torch.sdpa_efficient, torch.sdpa_cudnn, torch.sdpa_math, torch.flex_attention", p.stdout)
        skip = [x for x in p.stdout.splitlines() if x.strip().startswith("SKIP")]
        self.assertEqual(len(skip), 2)
        for x in skip:
            self.assertIn("SKIP 12: torch.sdpa_flash, torch.sdpa_efficient, torch.sdpa_cudnn, torch.sdpa_math "
                          "(fwd,bwd,fwd_bwd): PyTorch SDPA takes no cu_seqlens", x)
        self.assertIn("24 of them SKIP without running", p.stdout)
        for script, rows in (("fa4.py", "10 rows: fa4.flash_attn, fa4.flash_attn[deterministic=1]"),
                             ("flex.py", "6 rows: torch.flex_attention")):
            q = py(os.path.join(PEERS, script), path, "--dry-run", "--attnbench", EXE)
            self.assertEqual(q.returncode, 0, script + q.stderr)
            self.assertIn(rows, q.stdout, script)
            self.assertNotIn("SKIP", q.stdout, script)
        # Zero-length sequences are planned, not skipped: the verification judges them.
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(VARLEN_CONFIG, f)
        p = py(os.path.join(PEERS, "peers.py"), self.cfg, "--dry-run", "--attnbench", EXE)
        self.assertEqual(p.returncode, 2)  # a CPU-only config has no case for the CUDA peers
        self.assertIn("no case runs on cuda", p.stderr)

    def test_flex_varlen_mask_counts_attnbench_flops(self):
        """attnbench counts a varlen batch's FLOPs as the sum of its sequences' own counts (each by
        the dense convention: 4 * head_dim per visible pair, a causal square without a window
        halved as FlashAttention counts it): the mask FlexAttention is given sees exactly those
        pairs, sequence by sequence."""
        from scripts.peers import flex
        zipped = {"seqlens_q": [], "seqlens_kv": [], "window_left": [], "window_right": [], "causal": []}
        for sq, skv in VARLEN_LENGTHS:
            for wl, wr in VARLEN_WINDOWS:
                for causal in (False, True):
                    for k, v in zip(zipped, (sq, skv, wl, wr, causal)):
                        zipped[k].append(v)
        cfg = {"name": "flex_varlen", "groups": [{"problem": {"head_dim": 8, "heads": 1, "dtype": "f32"},
                                                  "sweep": {"zip": [zipped]}, "implementations": ["cpu.naive_3pass"],
                                                  "passes": ["fwd"]}]}
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        cases = common.expand(EXE, self.cfg)
        self.assertEqual(len(cases), len(zipped["causal"]))
        for c in cases:
            p = c["problem"]
            tab = flex.varlen_tables(p)
            m = flex.varlen_mask_mod(p, tab)
            want = 0.0
            for b, (nq, nkv) in enumerate(zip(p["seqlens_q"], p["seqlens_kv"])):
                pairs = sum(1 for i in range(tab["total_q"]) for j in range(tab["total_kv"])
                            if tab["doc_q"][i] == b and m(0, 0, i, j))
                halved = p["causal"] and nq == nkv and not common.has_window(p)
                want += 4 * p["head_dim"] * (nq * nkv / 2 if halved else pairs)
            self.assertEqual(want, c["flops"]["fwd"], c["case"])


class WrongShape(common.Backend):
    """A peer whose forward hands back a dense-shaped O and LSE for a varlen case (as if it had
    allocated [b, seq_q, hq, d]): the row FAILs before the C API reads a byte of them."""

    device_kind = "cpu"
    impl = "planted.dense_shaped"
    passes = ("fwd",)

    def make(self, dev, case, pass_name, t):
        p = case["problem"]
        o = dev.empty_bytes(p["batch"] * p["seq_q"] * p["heads_q"] * p["head_dim"] * common.DTYPE_BYTES[p["dtype"]])
        lse = dev.empty_bytes(4 * p["batch"] * p["heads_q"] * p["seq_q"])
        return common.Call(lambda: None, lambda: {"O": o, "LSE": lse}, keep=(o, lse))


class VarlenPeer(PlantedPeer):
    def backends(self, args, kind):
        return super().backends(args, kind) + ([WrongShape()] if kind == "cpu" else [])


@unittest.skipUnless(HAVE_CAPI, "needs ATTNBENCH_BUILD_DIR with attnbench and libattnbench_capi.so")
class VarlenVerification(Tmp):
    """The peer path on packed varlen cases, on the CPU: inputs of the packed totals, cu_seqlens
    handed to the implementation (ab_call_set_cu_seqlens), outputs verified in the packed layouts
    (LSE [heads_q, total_q]) by the harness's rule."""

    def setUp(self):
        super().setUp()
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(VARLEN_CONFIG, f)

    def test_same_verdict_as_attnbench_run(self):
        out, peer = self.path("run.json"), self.path("peer.json")
        p = subprocess.run([EXE, "run", self.cfg, "--impl", "cpu.flash_fwd", "--impl", "cpu.flash_bwd", "--out", out,
                            "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(p.returncode, 0, p.stderr)
        run = {(r["impl"], r["case"], r["pass"]): r for r in read_json(out)["rows"]}
        q = py(os.path.join(PEERS, "attnbench_impls.py"), self.cfg, "--on", "cpu", "--impl",
               "cpu.flash_fwd,cpu.flash_bwd", "--attnbench", EXE, "--out", peer, "--quiet")
        self.assertEqual(q.returncode, 0, q.stderr)
        rows = [r for r in read_json(peer)["rows"] if (r["impl"].split(":", 1)[1], r["case"], r["pass"]) in run
                and r["status"] != "skip"]
        self.assertEqual(len(rows), 8 * 3 + 2)  # 8 cases x (flash_fwd fwd, flash_bwd bwd, fwd_bwd), 2 windows x fwd
        for r in rows:
            h = run[(r["impl"].split(":", 1)[1], r["case"], r["pass"])]
            self.assertEqual(r["status"], "pass", r["nvtx"] + r["reason"])
            self.assertEqual(h["status"], "pass")
            self.assertEqual(r["problem"], h["problem"])
            self.assertEqual(r["flops"], h["flops"])
            self.assertEqual(r["verify"]["mode"], "full")
            names = [o["name"] for o in r["verify"]["outputs"]]
            self.assertEqual(names, [o["name"] for o in h["verify"]["outputs"]])
            self.assertIn("LSE" if r["pass"] != "bwd" else "dK", names)
            for a, b in zip(r["verify"]["outputs"], h["verify"]["outputs"]):
                self.assertEqual(a["checked"], b["checked"])
                # The forward: the same inputs, kernel, reference and baseline give the same numbers. (A
                # backward's max_abs differs in the last bits in f32, as for dense cases: not compared.)
                for k in ("max_abs", "naive_max_abs", "atol", "bound") if r["pass"] == "fwd" else ("atol",):
                    self.assertAlmostEqual(a[k], b[k], delta=1e-12 + 1e-9 * abs(b[k]),
                                           msg=f"{r['nvtx']} {a['name']} {k}")

    def test_wrong_row_and_wrong_shape_fail(self):
        out = self.path("planted.json")
        argv = [self.cfg, "--on", "cpu", "--attnbench", EXE, "--out", out, "--quiet", "--pass", "fwd,bwd",
                "--case", "*varlen*"]
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            self.assertEqual(common.main("planted", "test", [VarlenPeer()], argv), 0)
        finally:
            if saved is None:
                os.environ.pop("OMP_NUM_THREADS")
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        rows = read_json(out)["rows"]
        cases = {r["case"] for r in rows}
        self.assertEqual(len(cases), 10)  # 8 + the window group's 2
        by = lambda impl: [r for r in rows if r["impl"] == impl]  # noqa: E731
        self.assertEqual(len(by("planted.row_swap")), 2 * 10)
        for r in by("planted.row_swap"):
            self.assertEqual(r["status"], "fail", r["nvtx"])
            self.assertIn("O" if r["pass"] == "fwd" else "dQ", r["reason"])
        for r in by("planted.honest"):  # cpu.flash_fwd / cpu.flash_bwd, packed, zero lengths included
            self.assertEqual(r["status"], "pass", r["nvtx"] + r["reason"])
        self.assertEqual(len(by("planted.dense_shaped")), 10)
        for r in by("planted.dense_shaped"):
            self.assertEqual(r["status"], "fail")
            self.assertIn("output not in attnbench's layout", r["reason"])
            self.assertNotIn("verify", r)

    def test_python_peer_on_the_varlen_mask_passes(self):
        """A pure-Python peer on flex.varlen_mask_mod (packed indices, per-token tables), with the
        harness's inputs, PASSes attnbench's verification (float64 reference, cpu.naive_3pass
        baseline) on the varlen cases, O [total_q, hq, d] and LSE [hq, total_q] included; the same
        computation with the sequences aligned top-left, or with one sequence's keys visible to
        another's queries, FAILs."""
        import math
        from scripts.peers import flex
        capi = common.Capi(CAPI)
        cases = [c for c in common.expand(EXE, self.cfg, passes=["fwd"]) if c["problem"]["dtype"] == "f32"]
        self.assertEqual(len(cases), 6)  # group 0's f32 cases (4) and the window group's 2
        dev = common.HostCpu()

        def attention(case, t, visible):
            p = case["problem"]
            hq, hkv, d = p["heads_q"], p["heads_kv"], p["head_dim"]
            tq, tkv = common.varlen_info(p)["total_q"], common.varlen_info(p)["total_kv"]
            arr = {n: (ctypes.c_float * (t[n].nbytes // 4)).from_address(t[n].ptr) for n in ("q", "k", "v")}
            o, lse = dev.empty(case, "o"), dev.empty(case, "lse")
            O = (ctypes.c_float * (o.nbytes // 4)).from_address(o.ptr)
            L = (ctypes.c_float * (lse.nbytes // 4)).from_address(lse.ptr)
            for h in range(hq):
                g = h // (hq // hkv)
                for i in range(tq):
                    qo = (i * hq + h) * d
                    s = {j: p["scale"] * sum(arr["q"][qo + e] * arr["k"][(j * hkv + g) * d + e] for e in range(d))
                         for j in range(tkv) if visible(i, j)}
                    if not s:  # a query whose sequence has no key it sees: O = 0, LSE = -inf
                        L[h * tq + i] = -math.inf
                        for e in range(d):
                            O[qo + e] = 0.0
                        continue
                    m = max(s.values())
                    z = sum(math.exp(x - m) for x in s.values())
                    L[h * tq + i] = m + math.log(z)  # LSE [hq, total_q]
                    for e in range(d):
                        O[qo + e] = sum(math.exp(x - m) / z * arr["v"][(j * hkv + g) * d + e] for j, x in s.items())
            return {"O": o, "LSE": lse}

        for case in cases:
            p = case["problem"]
            with self.subTest(case=case["case"]):
                case["passes_run"] = ["fwd"]
                cc = capi.case(case, "cpu")
                try:
                    t = dev.inputs(cc, case)
                    tab = flex.varlen_tables(p)
                    m = flex.varlen_mask_mod(p, tab)
                    out = attention(case, t, lambda i, j: m(0, 0, i, j))  # held: verify reads its buffers
                    v = cc.verify("fwd", {n: x.ptr for n, x in out.items()})
                    self.assertTrue(v["ok"], v.get("reason"))
                    self.assertEqual(v["baseline"], "cpu.naive_3pass")
                    self.assertEqual([o["name"] for o in v["outputs"]][:2], ["O", "LSE"])
                    # No sequence boundaries: queries see other sequences' keys (within their window).
                    wrong = [("leak", flex.varlen_mask_mod(p, dict(tab, doc_q=[0] * len(tab["doc_q"]),
                                                                     doc_kv=[0] * len(tab["doc_kv"]))))]
                    if common.diagonal_bounds(p) != (None, None):  # causal or a window: aligned top-left
                        top_left = dict(tab, shift_q=[0] * len(tab["shift_q"]))
                        wrong.append(("top-left", flex.varlen_mask_mod(p, top_left)))
                    for what, mm in wrong:
                        out = attention(case, t, lambda i, j: mm(0, 0, i, j))
                        w = cc.verify("fwd", {n: x.ptr for n, x in out.items()})
                        self.assertFalse(w["ok"], what)
                        self.assertTrue({o["name"] for o in w["outputs"] if not o["ok"]} & {"O", "LSE"}, what)
                finally:
                    cc.close()


# ============================================================================ paged KV caches (issue 29)
# CPU-sized paged problems: a decode batch on a pool of pages (sequential and shuffled tables; GQA;
# causal), a ragged batch (seqlens_q / seqlens_kv, a context of 0) and an explicit table whose short
# row is padded with -1. f32, so that a pure-Python peer can compute them exactly.
PAGED_CONFIG = {
    "name": "paged_peer_test",
    "groups": [
        {"description": "paged decode", "problem": {"head_dim": 8, "heads_q": 4, "heads_kv": 2, "seq_q": 2,
                                                    "seq_kv": 37, "batch": 3, "dtype": "f32", "page_size": 8},
         "sweep": {"product": {"page_order": ["sequential", "shuffled"], "causal": [False, True]}},
         "implementations": ["cpu.naive_3pass", "cpu.flash_fwd"], "passes": ["fwd"], "verify": {"mode": "full"}},
        {"description": "ragged paged", "problem": {"head_dim": 8, "heads_q": 4, "heads_kv": 1, "dtype": "f32",
                                                    "page_size": 4, "page_order": "shuffled", "causal": True,
                                                    "seqlens_q": [1, 2, 1], "seqlens_kv": [13, 0, 9]},
         "implementations": ["cpu.naive_3pass", "cpu.flash_fwd"], "passes": ["fwd"], "verify": {"mode": "full"}},
        {"description": "explicit table", "problem": {"head_dim": 8, "heads_q": 2, "heads_kv": 1, "dtype": "f32",
                                                      "page_size": 4, "num_pages": 6, "seqlens_q": [1, 1],
                                                      "seqlens_kv": [10, 3], "block_table": [[2, 0, 5], [3]]},
         "implementations": ["cpu.naive_3pass"], "passes": ["fwd"], "verify": {"mode": "full"}},
    ],
    "timing": {"min_time_s": 0.0005, "repetitions": 2, "warmup_s": 0},
}


def paged_problem(**kw):
    p = {"batch": 2, "heads_q": 8, "heads_kv": 2, "seq_q": 1, "seq_kv": 300, "head_dim": 128, "causal": True,
         "scale": 0.088, "dtype": "bf16", "page_size": 16, "num_pages": 38, "page_order": "shuffled"}
    p.update(kw)
    return p


class PagedPure(unittest.TestCase):
    """The paged mapping without attnbench: the problem's fields, the layout, FA4's arguments, the SKIPs."""

    def test_check_problem_paged(self):
        common.check_problem(paged_problem())
        common.check_problem({k: v for k, v in paged_problem().items() if k != "page_order"}
                             | {"block_table": [[0, 1], [2]]})
        bad = [({"page_order": "random"}, "page_order"), ({"page_size": 0}, "page_size"),
               ({"num_pages": True}, "num_pages"), ({"block_table": [[0]]}, "one of page_order and block_table")]
        for extra, what in bad:
            with self.subTest(extra=extra), self.assertRaises(common.BadInput) as e:
                common.check_problem(paged_problem(**extra))
            self.assertIn(what, str(e.exception))
        table_only = {k: v for k, v in paged_problem().items() if k != "page_order"}
        for t in ([[0, 38]], [[0], [1], [2]], "rows"):  # a page outside the pool, batch rows, not a list
            with self.subTest(table=t), self.assertRaises(common.BadInput):
                common.check_problem(dict(table_only, block_table=t))
        self.assertFalse(common.is_paged({"page_size": 0}))
        self.assertTrue(common.is_paged({"problem": paged_problem()}))

    def test_layout_and_info(self):
        p = paged_problem()
        shapes = common.layout_shapes(p)
        self.assertEqual(shapes["k"], [38, 16, 2, 128])
        self.assertEqual(shapes["v"], [38, 16, 2, 128])
        self.assertEqual(shapes["q"], [2, 1, 8, 128])
        self.assertEqual(shapes["lse"], [2, 8, 1])
        self.assertEqual(shapes["block_table"], [2, 19])  # ceil(300 / 16)
        g = common.paged_info(p)
        self.assertEqual((g["pages_per_seq"], g["pages_read"], g["max_seqlen_kv"]), (19, 38, 300))
        r = paged_problem(batch=3, seq_q=2, seqlens_q=[1, 2, 1], seqlens_kv=[17, 0, 300])
        shapes = common.layout_shapes(r)
        self.assertEqual((shapes["q"], shapes["lse"], shapes["k"]), ([4, 8, 128], [8, 4], [38, 16, 2, 128]))
        g = common.paged_info(r)
        self.assertEqual((g["seqlens_kv"], g["pages_used"], g["pages_read"]), ([17, 0, 300], [2, 0, 19], 21))
        t = {k: v for k, v in r.items() if k != "page_order"} | {"block_table": [[4, 5], [], [0, 1, 2]]}
        self.assertEqual((common.paged_info(t)["pages_per_seq"], common.paged_info(t)["page_order"]), (3, "table"))

    def test_metadata_arrays(self):
        """ab_*_metadata's buffer cut into its arrays by the offsets, the table into rows."""
        data = [0, 1, 3, 4] + [1, 2, 1] + [4, 2, 3, 0, 5, -1]  # cu_seqlens_q, seqlens_kv, table [3, 2]
        m = common.metadata_arrays(data, [0, -1, 4, 7])
        self.assertEqual(m["cu_seqlens_q"], [0, 1, 3, 4])
        self.assertIsNone(m["cu_seqlens_kv"])
        self.assertEqual(m["seqlens_kv"], [1, 2, 1])
        self.assertEqual(m["block_table"], [[4, 2], [3, 0], [5, -1]])
        self.assertEqual(common.metadata_arrays([], [-1, -1, -1, -1]),
                         {n: None for n in common.Capi.METADATA})

    def test_fa4_paged_call(self):
        """FA4's varlen entry point with page_table, seqused_k and max_seqlen_k; cu_seqlens_q only
        for a ragged batch; never cu_seqlens_k."""
        from scripts.peers import fa4
        p = paged_problem()
        self.assertEqual(fa4.fa4_function(p), "flash_attn_varlen_func")
        kw = fa4.fa4_kwargs(p, False)
        self.assertEqual(kw["page_table"], "block_table")
        self.assertEqual(kw["seqused_k"], [300, 300])
        self.assertEqual(kw["max_seqlen_k"], 300)
        self.assertNotIn("cu_seqlens_k", kw)
        self.assertNotIn("cu_seqlens_q", kw)
        self.assertEqual((kw["causal"], kw["softmax_scale"], kw["return_lse"]), (True, 0.088, True))
        r = paged_problem(batch=3, seq_q=2, seqlens_q=[1, 2, 1], seqlens_kv=[17, 0, 300], window_left=64)
        kw = fa4.fa4_kwargs(r, False, ("T", "U", "CU"))
        self.assertEqual((kw["page_table"], kw["seqused_k"], kw["cu_seqlens_q"]), ("T", "U", "CU"))
        self.assertEqual((kw["max_seqlen_q"], kw["max_seqlen_k"]), (2, 300))
        self.assertEqual(kw["window_size"], (64, 0))
        self.assertNotIn("cu_seqlens_k", kw)
        self.assertEqual(fa4.fa4_kwargs(r, False)["cu_seqlens_q"], [0, 1, 3, 4])
        self.assertEqual(fa4.fa4_page_table([[3, 1, -1], [2, -1, -1]]), [[3, 1, 0], [2, 0, 0]])
        b = fa4.Fa4(False, {})
        case = {"problem": p}
        self.assertIsNone(b.plan_skip(case, "fwd"))
        self.assertIn("forward-only", b.plan_skip(case, "bwd"))
        self.assertIn("f16 and bf16", b.plan_skip({"problem": dict(p, dtype="f32")}, "fwd"))
        self.assertEqual(b.skip_reason(case, "fwd"), None)
        self.assertIn("varlen_func", fa4.Fa4(False, {"varlen_error": "no flash_attn_varlen_func"}).skip_reason(case, "fwd"))

    def test_sdpa_and_flex_skip_paged(self):
        from scripts.peers import flex, torch_sdpa
        for p in (paged_problem(), paged_problem(batch=3, seq_q=2, seqlens_q=[1, 2, 1], seqlens_kv=[17, 0, 300])):
            case = {"problem": p}
            self.assertEqual(torch_sdpa.Sdpa("flash").plan_skip(case, "fwd"), torch_sdpa.NO_PAGED)
            self.assertEqual(flex.Flex(True, {}).plan_skip(case, "fwd"), flex.NO_PAGED)
            self.assertIn("fa4.flash_attn", torch_sdpa.NO_PAGED)
        self.assertIsNone(flex.Flex(True, {}).plan_skip({"problem": varlen_problem([1], [3])}, "fwd"))


class FlashInferPure(unittest.TestCase):
    """flashinfer.py's mapping without FlashInfer: the CSR form of the table, plan()'s arguments, the SKIPs."""

    def test_decode_plan(self):
        from scripts.peers import flashinfer
        p = paged_problem(batch=3, seqlens_q=[1, 1, 1], seqlens_kv=[17, 16, 300], seq_q=1)
        table = [[7, 3, 9] + [0] * 16, [4] + [0] * 18, list(range(19, 0, -1))]
        c = flashinfer.decode_plan(p, table)
        self.assertEqual(c["indptr"], [0, 2, 3, 22])  # ceil(17 / 16), ceil(16 / 16), ceil(300 / 16)
        self.assertEqual(c["indices"], [7, 3, 4] + list(range(19, 0, -1)))  # padding never copied
        self.assertEqual(c["last_page_len"], [1, 16, 12])
        self.assertEqual(flashinfer.decode_plan(paged_problem(), [[5] * 19, [6] * 19])["last_page_len"], [12, 12])
        # A contiguous cache: page b is sequence b's 300 keys, plan()'s page_size seq_kv.
        dense = {k: v for k, v in paged_problem(batch=3).items() if k not in ("page_size", "num_pages", "page_order")}
        self.assertEqual(flashinfer.decode_plan(dense, None),
                         {"indptr": [0, 1, 2, 3], "indices": [0, 1, 2], "last_page_len": [300] * 3})
        self.assertEqual(flashinfer.decode_page_size(dense), 300)
        self.assertEqual(flashinfer.decode_page_size(paged_problem()), 16)

    def test_decode_kwargs(self):
        from scripts.peers import flashinfer
        self.assertEqual(flashinfer.decode_kwargs(paged_problem()), {"window_left": -1, "sm_scale": 0.088})
        kw = flashinfer.decode_kwargs(paged_problem(window_left=64, window_right=3, softcap=30.0, causal=False))
        self.assertEqual(kw, {"window_left": 64, "sm_scale": 0.088, "logits_soft_cap": 30.0})

    def test_plan_skip(self):
        from scripts.peers import flashinfer
        b = flashinfer.FlashInfer("auto", {})
        ok = {"problem": paged_problem()}
        self.assertTrue(b.plans(ok))
        self.assertFalse(b.plans({"problem": varlen_problem([1, 2], [3, 4])}))
        dense = {k: v for k, v in paged_problem().items() if k not in ("page_size", "num_pages", "page_order")}
        self.assertTrue(b.plans({"problem": dense}))  # single-token decode over a contiguous cache
        self.assertFalse(b.plans({"problem": dict(dense, seq_q=4)}))  # prefill-like: no row
        self.assertIsNone(b.plan_skip({"problem": dense}, "fwd"))
        self.assertIn("empty context", b.plan_skip({"problem": dict(dense, seq_kv=0)}, "fwd"))
        self.assertIsNone(b.plan_skip(ok, "fwd"))
        self.assertIn("forward-only", b.plan_skip(ok, "bwd"))
        self.assertIn("f16 and bf16", b.plan_skip({"problem": paged_problem(dtype="f32")}, "fwd"))
        self.assertIn("single-token", b.plan_skip({"problem": paged_problem(seq_q=4)}, "fwd"))
        ragged = paged_problem(batch=2, seqlens_q=[1, 1], seqlens_kv=[0, 300])
        self.assertIn("empty context", b.plan_skip({"problem": ragged}, "fwd"))
        self.assertEqual(b.absent, ())  # O and LSE (base 2, converted) are both verified
        self.assertIn("not importable", flashinfer.FlashInfer("auto", {"error": "FlashInfer not importable (x)"})
                      .skip_reason(ok, "fwd"))

    def test_tensor_cores(self):
        """use_tensor_cores per case: forced 0 or 1 as given, auto from a GQA group of 4 on (its
        CUDA-core kernel ran GQA 64:8 at half the read ceiling on an H100, 2026-12-05); a forced
        setting is the row's option, auto none; 'both' gives one backend per setting."""
        import types
        from scripts.peers import flashinfer
        gqa8, gqa2, mha = (paged_problem(heads_q=64, heads_kv=8), paged_problem(heads_q=4, heads_kv=2),
                           paged_problem(heads_q=4, heads_kv=4))
        self.assertTrue(flashinfer.use_tensor_cores(gqa8, "auto"))
        self.assertTrue(flashinfer.use_tensor_cores({"problem": paged_problem(heads_q=4, heads_kv=1)}, "auto"))
        self.assertFalse(flashinfer.use_tensor_cores(gqa2, "auto"))
        self.assertFalse(flashinfer.use_tensor_cores(mha, "auto"))
        self.assertFalse(flashinfer.use_tensor_cores(gqa8, "0"))
        self.assertTrue(flashinfer.use_tensor_cores(mha, "1"))
        args = types.SimpleNamespace(flashinfer_backend="auto", flashinfer_tensor_cores="both")
        both = flashinfer.backends(args, "cuda")
        self.assertEqual([b.options for b in both], [{"tensor_cores": 0}, {"tensor_cores": 1}])
        self.assertIs(both[0].state, both[1].state)  # one import for both
        one = flashinfer.backends(types.SimpleNamespace(flashinfer_backend="auto", flashinfer_tensor_cores="auto"), "cuda")
        self.assertEqual([b.options for b in one], [{}])
        self.assertEqual(flashinfer.backends(args, "cpu"), [])

    def test_lse_in_attnbench_layout(self):
        """FlashInfer writes the LSE [tokens, hq] in base 2: the peer hands over attnbench's layout
        ([b, hq, 1] dense, [hq, total_q] packed) in natural log; the H200 job of 2026-12-04 failed
        every row on a [b, hq] LSE."""
        from scripts.peers import flashinfer

        class T:  # the tensor operations lse_natural uses, on (shape, values in row-major order)
            def __init__(self, shape, vals):
                self.shape, self.vals = tuple(shape), list(vals)

            def __mul__(self, x):
                return T(self.shape, [v * x for v in self.vals])

            def t(self):
                r, c = self.shape
                return T((c, r), [self.vals[i * c + j] for j in range(c) for i in range(r)])

            def reshape(self, shape):
                if common.numel(shape) != len(self.vals):
                    raise ValueError(f"reshape {self.shape} -> {shape}")
                return T(shape, self.vals)

            def contiguous(self):
                return self

        for p in (paged_problem(batch=3, heads_q=4),
                  paged_problem(batch=3, heads_q=4, seqlens_q=[1, 1, 1], seqlens_kv=[17, 16, 300])):
            case = {"problem": p}
            case["inputs"] = {"layout": common.layout_shapes(case)}
            lse2 = T((3, 4), [float(i) for i in range(12)])  # token b, head h: 4 b + h
            out = flashinfer.lse_natural(lse2, case)
            self.assertEqual(common.output_shape_error(case, "LSE", out.shape), "")
            want = [(4 * b + h) * flashinfer.LN2 for b in range(3) for h in range(4)]  # [b, hq, 1]
            if common.is_varlen(p):  # [hq, total_q]
                want = [(4 * b + h) * flashinfer.LN2 for h in range(4) for b in range(3)]
            self.assertEqual(out.vals, want)

    def test_rows_carry_hbm_bytes(self):
        """A memory-bound case's forward rows carry expand's hbm_bytes (GB/s beside attnbench's)."""
        import types
        b = types.SimpleNamespace(impl="x.peer", options={})
        case = {"case": "c", "case_index": 0, "problem": {}, "flops": {"fwd": 1.0, "bwd": 2.0}, "hbm_bytes": 4096}
        self.assertEqual(common.blank_row(case, b, "fwd", "cuda:0")["hbm_bytes"], 4096)
        self.assertNotIn("hbm_bytes", common.blank_row(case, b, "bwd", "cuda:0"))
        self.assertNotIn("hbm_bytes", common.blank_row(dict(case, hbm_bytes=None), b, "fwd", "cuda:0"))

    def test_outputs_wait_for_the_call(self):
        """run_row waits for the validation call (dev.sync) before outputs(): FlashInfer's outputs()
        converts its LSE on the current stream, which nothing orders after the call on the calls'
        stream; job5 at d705a79 read the poisoned LSE of 9 of its 22 rows that way."""
        import types
        events = []

        class Backend(common.Backend):
            impl, options, device_kind = "x.peer", {}, "cuda"

            def make(self, dev, case, pass_name, t):
                def outputs():
                    events.append("outputs")
                    raise RuntimeError("stop here")
                return common.Call(lambda: events.append("call"), outputs)

        dev = types.SimpleNamespace(name="cuda:0", sync=lambda: events.append("sync"))
        case = {"case": "c", "case_index": 0, "problem": {}, "flops": {"fwd": 1.0}, "hbm_bytes": None}
        row = common.run_row(dev, None, case, Backend(), "fwd", {}, types.SimpleNamespace(profile=False))
        self.assertEqual(events, ["call", "sync", "outputs"])
        self.assertIn("stop here", row["reason"])

    def test_imports_the_package_not_itself(self):
        """Run as scripts/peers/peers.py, scripts/peers is sys.path[0], where flashinfer.py is a
        module of the package's name: load() must import FlashInfer (here a stand-in site)."""
        with tempfile.TemporaryDirectory() as site:
            os.makedirs(os.path.join(site, "flashinfer"))
            with open(os.path.join(site, "flashinfer", "__init__.py"), "w", encoding="utf-8") as f:
                f.write('__version__ = "0.0-standin"\nclass BatchDecodeWithPagedKVCacheWrapper: pass\n')
            code = ("import sys, types; sys.path[:0] = [%r, %r]; import flashinfer as mine; "
                    "st = mine.load(types.SimpleNamespace(flashinfer_backend='auto')); "
                    "print(st.get('error'), st.get('context', {}).get('version'))" % (PEERS, ROOT))
            env = dict(os.environ, ATTNBENCH_FLASHINFER_SITE=site, ATTNBENCH_FA4_SITE=site)
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.strip(), "None 0.0-standin")


@unittest.skipUnless(HAVE, "needs ATTNBENCH_BUILD_DIR with the attnbench binary")
class PagedDryRun(Tmp):
    def setUp(self):
        super().setUp()
        cfg = json.loads(json.dumps(PAGED_CONFIG))
        for g in cfg["groups"]:
            g["implementations"] = ["cuda.naive_3pass"]
            g["problem"]["dtype"] = "bf16"
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        dense = dict(cfg, groups=[dict(cfg["groups"][0], problem={"head_dim": 8, "seq": 16, "dtype": "bf16"},
                                       sweep={})])
        with open(self.path("dense.json"), "w", encoding="utf-8") as f:
            json.dump(dense, f)

    def test_expand_paged_cases(self):
        cases = common.expand(EXE, self.cfg)
        self.assertEqual(len(cases), 6)
        for c in cases:
            self.assertTrue(common.is_paged(c))
            self.assertEqual(c["inputs"]["layout"]["block_table"][1], common.paged_info(c)["pages_per_seq"])
        self.assertEqual(sum("_shuffled" in c["case"] for c in cases), 3)
        self.assertEqual(sum("_table" in c["case"] for c in cases), 1)

    def test_peers_dry_run(self):
        p = py(os.path.join(PEERS, "peers.py"), self.cfg, "--attnbench", EXE, "--dry-run", "--flex-dense")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("36 rows", out)  # 6 cases x (fa4 fwd, 4 SDPA backends, flex)
        self.assertIn("30 of them SKIP", out)  # all but FA4's
        self.assertIn("paged: page_size 8, pool 15 pages, table [3, 5] (shuffled)", out)
        self.assertIn("paged: page_size 4, pool 6 pages, table [2, 3] (table)", out)
        self.assertEqual(out.count("PyTorch SDPA has no paged KV cache"), 6)
        self.assertEqual(out.count("FlexAttention reads K and V contiguous here"), 6)
        self.assertNotIn("fa4.flash_attn (fwd)", out)  # FA4's rows run
        p = py(os.path.join(PEERS, "fa4.py"), self.cfg, "--attnbench", EXE, "--dry-run")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("6 rows: fa4.flash_attn", p.stdout)  # fwd only: no deterministic (backward) rows
        self.assertNotIn("SKIP", p.stdout)
        # FlashInfer: single-token decode with a context each, i.e. the explicit-table case only.
        p = py(os.path.join(PEERS, "peers.py"), self.cfg, "--attnbench", EXE, "--dry-run", "--peers", "flashinfer")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("6 rows: flashinfer.batch_decode", p.stdout)
        self.assertIn("5 of them SKIP", p.stdout)
        self.assertEqual(p.stdout.count("single-token decode only"), 5)  # seq_q 2, and the ragged [1, 2, 1]
        # No paged case and no single-token decode, no FlashInfer row (not even a SKIP).
        p = py(os.path.join(PEERS, "flashinfer.py"), self.path("dense.json"), "--attnbench", EXE, "--dry-run")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no case runs on cuda", p.stderr)


@unittest.skipUnless(HAVE_CAPI, "needs ATTNBENCH_BUILD_DIR with attnbench and libattnbench_capi.so")
class PagedCapi(Tmp):
    def setUp(self):
        super().setUp()
        with open(self.cfg, "w", encoding="utf-8") as f:
            json.dump(PAGED_CONFIG, f)
        self.capi = common.Capi(CAPI)
        self.cases = common.expand(EXE, self.cfg)

    def test_version(self):
        self.assertEqual(self.capi.version, 4)
        self.assertEqual(self.capi.info["capi_version"], 4)

    def test_metadata_is_the_harness_table(self):
        """The case's and the call's metadata agree; sequential tables are the pool in order,
        shuffled ones a permutation of it that is not; the lengths and cu_seqlens as the problem."""
        for case in self.cases:
            p = case["problem"]
            with self.subTest(case=case["case"]):
                case["passes_run"] = ["fwd"]
                cc = self.capi.case(case, "cpu")
                call = self.capi.call("cpu.naive_3pass", p, "fwd")
                try:
                    m = cc.metadata()
                    self.assertEqual(call.metadata(), m)
                    g = common.paged_info(p)
                    self.assertEqual(m["seqlens_kv"], g["seqlens_kv"])
                    self.assertIsNone(m["cu_seqlens_kv"])  # paged K/V is not packed
                    if common.is_varlen(p):
                        self.assertEqual(m["cu_seqlens_q"], common.varlen_info(p)["cu_seqlens_q"])
                    else:
                        self.assertIsNone(m["cu_seqlens_q"])
                    self.assertEqual([len(r) for r in m["block_table"]], [g["pages_per_seq"]] * p["batch"])
                    used = [x for r, n in zip(m["block_table"], g["pages_used"]) for x in r[:n]]
                    order = p.get("page_order", "table")
                    if order == "sequential":
                        self.assertEqual(used, list(range(g["pages_read"])))
                    elif order == "shuffled":
                        self.assertEqual(sorted(used), list(range(g["pages_read"])))
                        self.assertNotEqual(used, sorted(used))
                    else:
                        self.assertEqual(m["block_table"], [[2, 0, 5], [3, -1, -1]])
                    self.assertEqual(common.layout_shapes(p)["block_table"], [p["batch"], g["pages_per_seq"]])
                finally:
                    call.close()
                    cc.close()

    def test_set_paged_refusals(self):
        dense = {"batch": 1, "heads_q": 1, "heads_kv": 1, "seq_q": 4, "seq_kv": 4, "head_dim": 8, "dtype": "f32"}
        call = self.capi.call("cpu.naive_3pass", dense, "fwd")
        try:
            buf = (ctypes.c_int32 * 4)()
            with self.assertRaises(RuntimeError) as e:
                call.set_paged(ctypes.addressof(buf), ctypes.addressof(buf))
            self.assertIn("not paged", str(e.exception))
            self.assertEqual(call.metadata(), {n: None for n in common.Capi.METADATA})
        finally:
            call.close()
        call = self.capi.call("cpu.naive_3pass", self.cases[0]["problem"], "fwd")
        try:
            with self.assertRaises(RuntimeError) as e:
                call.set_paged(None, None)
            self.assertIn("both required", str(e.exception))
        finally:
            call.close()

    def test_attnbench_impls_through_the_table_pass(self):
        """attnbench's CPU kernels called through ab_call with ab_call_set_paged pass the harness's
        verification on every paged case (what attnbench_impls.py does on the GPU)."""
        out = self.path("impls.json")
        p = py(os.path.join(PEERS, "attnbench_impls.py"), self.cfg, "--on", "cpu", "--attnbench", EXE,
               "--impl", "cpu.naive_3pass,cpu.flash_fwd", "--out", out, "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = read_json(out)["rows"]
        self.assertEqual(len(rows), 12)
        self.assertTrue(all(r["status"] == "pass" for r in rows), [(r["nvtx"], r["reason"]) for r in rows])

    def test_python_peer_through_the_table_passes(self):
        """A pure-Python peer that reads K and V from the pool through ab_case_metadata's block table
        PASSes attnbench's verification (float64 reference); the same peer reading the pool as if
        the table were sequential (ignoring the shuffle or the explicit rows) FAILs."""
        import math
        dev = common.HostCpu()

        def attention(case, t, table):
            p = case["problem"]
            hq, hkv, d, ps = p["heads_q"], p["heads_kv"], p["head_dim"], p["page_size"]
            varlen = common.is_varlen(p)
            sq = common.varlen_info(p)["seqlens_q"] if varlen else [p["seq_q"]] * p["batch"]
            q0 = common.cu_seqlens(sq)
            ctx = common.context_lengths(p)
            arr = {n: (ctypes.c_float * (t[n].nbytes // 4)).from_address(t[n].ptr) for n in ("q", "k", "v")}
            o, lse = dev.empty(case, "o"), dev.empty(case, "lse")
            O = (ctypes.c_float * (o.nbytes // 4)).from_address(o.ptr)
            L = (ctypes.c_float * (lse.nbytes // 4)).from_address(lse.ptr)
            lo, hi = common.diagonal_bounds(p)
            for b in range(p["batch"]):
                rows = [table[b][j // ps] * ps + j % ps for j in range(ctx[b])]
                for h in range(hq):
                    g = h // (hq // hkv)
                    for i in range(sq[b]):
                        qo = ((q0[b] + i) * hq + h) * d
                        li = h * q0[-1] + q0[b] + i if varlen else (b * hq + h) * sq[b] + i
                        c = i + ctx[b] - sq[b]
                        s = {j: p["scale"] * sum(arr["q"][qo + e] * arr["k"][(r * hkv + g) * d + e] for e in range(d))
                             for j, r in enumerate(rows)
                             if (lo is None or j - c >= lo) and (hi is None or j - c <= hi)}
                        if not s:
                            L[li] = -math.inf
                            for e in range(d):
                                O[qo + e] = 0.0
                            continue
                        m = max(s.values())
                        z = sum(math.exp(x - m) for x in s.values())
                        L[li] = m + math.log(z)
                        for e in range(d):
                            O[qo + e] = sum(math.exp(x - m) / z * arr["v"][(rows[j] * hkv + g) * d + e]
                                            for j, x in s.items())
            return {"O": o, "LSE": lse}

        for case in self.cases:
            p = case["problem"]
            with self.subTest(case=case["case"]):
                case["passes_run"] = ["fwd"]
                cc = self.capi.case(case, "cpu")
                try:
                    t = dev.inputs(cc, case)
                    self.assertEqual(t["k"].nbytes, common.tensor_nbytes(case, "k"))  # the whole pool
                    table = cc.metadata()["block_table"]
                    out = attention(case, t, table)
                    v = cc.verify("fwd", {n: x.ptr for n, x in out.items()})
                    self.assertTrue(v["ok"], v.get("reason"))
                    self.assertEqual([o["name"] for o in v["outputs"]][:2], ["O", "LSE"])
                    if p.get("page_order") == "sequential":
                        continue  # the identity table is the right one
                    n = common.paged_info(p)["pages_per_seq"]
                    identity = [[b * n + i for i in range(n)] for b in range(p["batch"])]
                    identity = [[x % p["num_pages"] for x in r] for r in identity]
                    out = attention(case, t, identity)
                    w = cc.verify("fwd", {n: x.ptr for n, x in out.items()})
                    self.assertFalse(w["ok"])
                finally:
                    cc.close()


class Merge(Tmp):
    def test_merge_renumbers_and_keeps_contexts(self):
        def res(rows, ctx):
            return {"schema": "attnbench.results/2", "complete": True, "context": ctx, "rows": rows}
        run = res([{"case": "a", "case_index": 4, "impl": "cuda.x", "pass": "fwd", "status": "pass"}],
                  {"config_hash": "h", "devices": [{"name": "H200"}]})
        peer = res([{"case": "a", "case_index": 0, "impl": "fa4.flash_attn", "pass": "fwd", "status": "pass"}],
                   {"config_hash": "h", "peer": "fa4+torch_sdpa", "devices": [{"name": "H200"}]})
        for n, d in (("run.json", run), ("peer.json", peer)):
            with open(self.path(n), "w", encoding="utf-8") as f:
                json.dump(d, f)
        p = py(os.path.join(PEERS, "torch_sdpa.py"), "--merge", self.path("run.json"), self.path("peer.json"),
               "--out", self.path("m.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        m = read_json(self.path("m.json"))
        self.assertEqual([r["case_index"] for r in m["rows"]], [4, 4])
        self.assertIn("fa4+torch_sdpa", m["context"]["peers"])
        self.assertEqual(m["summary"], {"pass": 2, "fail": 0, "skip": 0})


class OutputSafety(Tmp):
    """The peers' --out never destroys anything (as attnbench run's): refused with exit 2 and
    nothing written when it is a device, FIFO, directory, read-only file, the config itself (also
    through a symlink, ./x or a hard link) or a merge input; and locked for the whole run."""

    def bad_outs(self):
        os.mkfifo(self.path("fifo"))
        os.mkdir(self.path("dir"))
        os.symlink("/dev/null", self.path("null.json"))
        with open(self.path("ro.json"), "w", encoding="utf-8") as f:
            f.write("{}")
        os.chmod(self.path("ro.json"), 0o444)
        os.link(self.cfg, self.path("hard.json"))
        os.symlink(self.cfg, self.path("cfglink.json"))
        return [(self.path("fifo"), "is a FIFO"), (self.path("dir"), "is a directory"),
                (self.path("null.json"), "is a character device"), (self.path("ro.json"), "is read-only"),
                (self.cfg, "is the config file"), (self.path("hard.json"), "is the config file"),
                (self.path("cfglink.json"), "is the config file"),
                (os.path.join(self.tmp.name, ".", "peer_test.json"), "is the config file")]

    def test_refusals(self):
        from scripts import results_io
        for out, msg in self.bad_outs():
            self.assertIn(msg, results_io.output_refusal(out, [self.cfg], ["the config file"]), out)
        self.assertEqual(results_io.output_refusal(self.path("new.json"), [self.cfg]), "")
        with self.assertRaises(OSError):
            results_io.write_atomic(self.path("dir"), {})
        self.assertTrue(os.path.isdir(self.path("dir")))

    @unittest.skipUnless(HAVE_CAPI, "needs ATTNBENCH_BUILD_DIR with attnbench and libattnbench_capi.so")
    def test_peer_refuses_bad_out_and_a_held_lock(self):
        from scripts import results_io
        def text(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
        before = text(self.cfg)
        argv = [self.cfg, "--on", "cpu", "--attnbench", EXE, "--quiet", "--pass", "fwd", "--case", "*f32*"]
        for out, msg in self.bad_outs():
            with self.assertRaises(SystemExit) as e:
                common.main("planted", "test", [PlantedPeer()], argv + ["--out", out])
            self.assertEqual(e.exception.code, 2, out)
        self.assertEqual(text(self.cfg), before)
        self.assertEqual(text(self.path("ro.json")), "{}")
        self.assertTrue(os.path.islink(self.path("null.json")))
        out = self.path("busy.json")
        held = results_io.OutputLock(out, "a test holding the lock")
        try:
            p = py(os.path.join(PEERS, "attnbench_impls.py"), *argv, "--impl", "cpu.flash_fwd", "--out", out)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("is being written by another run", p.stderr)
            self.assertIn("a test holding the lock", p.stderr)
            self.assertIn(f"pid {os.getpid()}", p.stderr)
            self.assertFalse(os.path.exists(out))
            # attnbench run takes the same lock.
            r = subprocess.run([EXE, "run", "--seq", "4", "--impl", "cpu.naive_3pass", "--quiet", "--profile",
                                "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("a test holding the lock", r.stderr)
        finally:
            held.release()
        self.assertFalse(os.path.exists(out + ".lock"))

    def test_merge_refuses_its_inputs(self):
        run = {"schema": "attnbench.results/2", "complete": True, "context": {}, "rows": []}
        for n in ("run.json", "peer.json"):
            with open(self.path(n), "w", encoding="utf-8") as f:
                json.dump(run, f)
        for out in ("run.json", "peer.json"):
            p = py(os.path.join(PEERS, "torch_sdpa.py"), "--merge", self.path("run.json"), self.path("peer.json"),
                   "--out", self.path(out))
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("refused", p.stderr)
            self.assertEqual(read_json(self.path(out)), run)


if __name__ == "__main__":
    unittest.main(verbosity=2)
