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
