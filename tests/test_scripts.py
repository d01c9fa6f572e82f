#!/usr/bin/env python3
"""Tests of the Python tools in scripts/: ncu_hbm.py (parse ncu's CSV, merge HBM bytes),
recover_timings.py (console-log times), paper_tables.py (Figure 2 table). No GPU, no ncu:
tests/data/ncu_raw_probe.csv is ncu's raw page from an H200 run (columns trimmed to the ones read).
The peers' git revision (scripts/peers/common.py; no torch needed). option_ab.py's ratios, fa2_grid_summary.py's ratios, fa3_grid_summary.py's (grid_summary.py), decode_summary.py's and variants_summary.py's tables and targets, timing_parity.py's pairs,
ncu_kernels.py's attribution of kernels to rows, ncu_source.py's ranking of instructions, ncu_fixed_cost.py's fixed cost per block, ncu_details.py's side-by-side kernels, fa3_job.sh's dry run. compute_sanitizer.sh's choice of implementations,
pyproject.toml and the scripts as modules (python3 -m scripts.X), a closed stdout (SIGPIPE, scripts/entry.py),
the peers' sliding windows and soft caps (PeersWindowSoftcap: FA4's arguments, FlexAttention's mask and
score_mod against attnbench's rule, counts and C API reference, the SDPA SKIPs),
with a stand-in for compute-sanitizer and the build's attnbench (ATTNBENCH_BUILD_DIR, set by CTest;
skipped without it or without CUDA implementations). Run by CTest as test_scripts; also
`python3 tests/test_scripts.py`."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from scripts import ncu_hbm, recover_timings  # noqa: E402
from scripts.peers import common as peers_common  # noqa: E402  (imports torch only when a peer runs)

CASE = "b2_hq4_hkv2_sq256_skv256_d64_bf16"


def run(*args):
    return subprocess.run([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# The environment a shell script under test gets: this process's, less every variable the script
# reads as a knob (`${NAME:-...}`, `${NAME-...}`, `${NAME:?...}`), then `set`. A gate run inside a
# session chain exports the chain's own knobs (PASSES=fwd, IMPLS, ...): 2026-12-07's gate of
# 3831075 failed Fa3JobDryRun on them (48 peer rows for the 168 of the default passes).
KEEP_ENV = {"PATH", "HOME", "TMPDIR", "PYTHON", "ATTNBENCH_GIT_REVISION", "ATTNBENCH_GIT_DIRTY"}


def script_env(script, **set_vars):
    with open(script, encoding="utf-8") as f:
        knobs = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?=+])", f.read())) - KEEP_ENV
    env = {k: v for k, v in os.environ.items() if k not in knobs}
    env.update(set_vars)
    return env


def run_report(test, script, out, *args):
    """Run a report script with --out OUT; the file must hold exactly what it printed."""
    p = run(script, *args, "--out", out)
    test.assertEqual(p.returncode, 0, p.stderr)
    with open(out, encoding="utf-8") as f:
        test.assertEqual(f.read(), p.stdout)
    return p


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def results_file(rows):
    return {"schema": "attnbench.results/2", "complete": True, "context": {"config": {"timing": {}}}, "rows": rows}


def run_summary(script, grid_res, peer_res):
    """scripts/SCRIPT on the two results (written to temporary files), as run() returns it."""
    with tempfile.TemporaryDirectory() as tmp:
        g, t = os.path.join(tmp, "g.json"), os.path.join(tmp, "t.json")
        write(g, json.dumps(grid_res))
        write(t, json.dumps(peer_res))
        return run(os.path.join(ROOT, "scripts", script), g, t)


def written_before_options(res):
    """res as a file of schema version 1: each row's "options" under its former name "params"."""
    old = json.loads(json.dumps(res))
    old["schema"] = "attnbench.results/1"
    for r in old["rows"]:
        if "options" in r:
            r["params"] = r.pop("options")
    return old


class ResultsIo(unittest.TestCase):
    """scripts/results_io.py reads both schema versions; rows come back with "options"."""

    def load(self, res, name="r.json", gz=None):
        """(the file as load_results reads it, None) or (None, its error); gz: written gzipped
        (default: when name ends in .gz)."""
        from scripts import results_io
        import gzip
        errors = []

        def fail(msg):
            errors.append(msg)
            raise RuntimeError(msg)

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, name)
            if name.endswith(".gz") if gz is None else gz:
                with gzip.open(path, "wt", encoding="utf-8") as f:
                    json.dump(res, f)
            else:
                write(path, json.dumps(res))
            try:
                return results_io.load_results(path, fail), None
            except RuntimeError:
                return None, errors[0]

    def test_old_rows_read_with_options(self):
        new = results_file([dict(row("cpu.flash_fwd", "fwd"), options={"block_c": 64}), row("cpu.naive_3pass", "fwd")])
        for res in (new, written_before_options(new)):
            got, err = self.load(res)
            self.assertIsNone(err)
            self.assertEqual(got["rows"][0]["options"], {"block_c": 64})
            self.assertNotIn("params", got["rows"][0])
        both = results_file([dict(row("cpu.flash_fwd", "fwd"), options={}, params={})])
        _, err = self.load(both)
        self.assertIn('rows[0]: both "options" and "params"', err)
        _, err = self.load(dict(new, schema="attnbench.results/3"))
        self.assertIn("not an attnbench results file", err)

    def test_gzipped_archives_read(self):
        # The archived job files under results/h200/*/ are committed gzipped (a device call
        # carries the whole tree): X.json.gz reads as X.json, and a broken one is a clear error.
        from scripts import results_io
        res = results_file([dict(row("cpu.flash_fwd", "fwd"), params={"block_c": 64})])
        got, err = self.load(res, name="r.json.gz")
        self.assertIsNone(err)
        self.assertEqual(got["rows"][0]["options"], {"block_c": 64})
        _, err = self.load(res, name="bad.json.gz", gz=False)
        self.assertIn("cannot open the file", err)
        archived = os.path.join(ROOT, "results/h200/issue30/job5/window.json.gz")
        self.assertTrue(results_io.load_results(archived, self.fail)["rows"])

    def fail(self, msg):
        raise AssertionError(msg)


def row(impl, ps, status="pass", flops=1e12):
    return {"case": CASE, "impl": impl, "pass": ps, "status": status, "reason": "", "flops": flops,
            "nvtx": f"{impl}:{CASE}:{ps}", "problem": {}}


class NcuHbm(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(ROOT, "tests/data/ncu_raw_probe.csv"), encoding="utf-8") as f:
            self.text = f.read()

    def test_sums_per_innermost_range(self):
        s = ncu_hbm.parse_ncu_csv(self.text)
        # Thousands separators read, kernels grouped by the range before the first '/'.
        self.assertEqual(s[f"cuda.flash_fwd_mma:{CASE}:fwd"], {"read": 578816.0, "write": 0.0, "kernels": 1})
        self.assertEqual(s[f"cuda.flash_bwd_mma:{CASE}:bwd"]["kernels"], 3)
        self.assertEqual(s[f"cuda.flash_bwd_mma:{CASE}:bwd"]["read"], 531200.0 + 1365248.0 + 527616.0)
        self.assertEqual(s[f"cuda.standard_cublas:{CASE}:fwd"]["kernels"], 9)
        # The backward rows' forwards run outside any call range: under the case's range only.
        self.assertIn(CASE, s)

    def test_units_row_scales(self):
        t = self.text.replace('"byte","byte"', '"Kbyte","Mbyte"')
        s = ncu_hbm.parse_ncu_csv(t)
        self.assertEqual(s[f"cuda.flash_fwd_mma:{CASE}:fwd"]["read"], 578816.0 * 1e3)
        with self.assertRaises(ValueError):
            ncu_hbm.parse_ncu_csv(self.text.replace('"byte","byte"', '"furlong","byte"'))

    def test_missing_column_is_an_error(self):
        with self.assertRaises(ValueError):
            ncu_hbm.parse_ncu_csv(self.text.replace("dram__bytes_write.sum", "other"))
        with self.assertRaises(ValueError):
            ncu_hbm.parse_ncu_csv("no csv here")

    def test_merge_via_cli(self):
        with tempfile.TemporaryDirectory() as d:
            res = results_file([row("cuda.flash_fwd_mma", "fwd"), row("cuda.flash_bwd_mma", "bwd"),
                                row("cuda.flash_fwd_mma", "bwd", status="skip"), row("cuda.naive_3pass", "fwd")])
            rp, out = os.path.join(d, "run.json"), os.path.join(d, "out.json")
            write(rp, json.dumps(res))
            p = run(os.path.join(ROOT, "scripts/ncu_hbm.py"), "--parse-csv",
                    os.path.join(ROOT, "tests/data/ncu_raw_probe.csv"), "--results", rp, "--out", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("cuda.naive_3pass", p.stderr)  # no kernel profiled under it: said so
            m = read_json(out)
            self.assertEqual(m["rows"][0]["extra"]["hbm_read_bytes"], 578816.0)
            self.assertEqual(m["rows"][1]["extra"]["hbm_kernels"], 3)
            self.assertNotIn("extra", m["rows"][2])
            self.assertNotIn("extra", m["rows"][3])
            self.assertIn("hbm", m["context"])
            # Nothing matches: exit 1 and no file.
            res["rows"] = [row("cuda.naive_3pass", "fwd")]
            write(rp, json.dumps(res))
            os.remove(out)
            p = run(os.path.join(ROOT, "scripts/ncu_hbm.py"), "--parse-csv",
                    os.path.join(ROOT, "tests/data/ncu_raw_probe.csv"), "--results", rp, "--out", out)
            self.assertEqual(p.returncode, 1)
            self.assertFalse(os.path.exists(out))


LOG = f"""Benchmark   Time   CPU   Iterations
cuda.flash_fwd_mma:{CASE}:fwd/min_time:0.050/repeats:3/manual_time_median      0.468 ms        0.507 ms            3
cuda.flash_fwd_mma:{CASE}:fwd/min_time:0.050/repeats:3/manual_time_cv           0.06 %          0.07 %             3
cuda.naive_3pass:{CASE}:fwd/min_time:0.050/repeats:3/manual_time_median          112 ms          112 ms            3
cuda.naive_3pass:{CASE}:fwd/min_time:0.050/repeats:3/manual_time_cv             0.04 %          0.27 %             3
"""


class RecoverTimings(unittest.TestCase):
    def test_console_and_other_file(self):
        with tempfile.TemporaryDirectory() as d:
            run_rows = [row("cuda.flash_fwd_mma", "fwd"), row("cuda.naive_3pass", "fwd"),
                        row("cuda.flash_bwd_mma", "bwd"), row("cuda.standard_cublas", "fwd", status="fail")]
            res = results_file(run_rows)
            res["complete"] = False
            res["stop_reason"] = "run in progress"
            other = results_file([dict(row("cuda.flash_bwd_mma", "bwd"), time={"median_ms": 2.0, "min_ms": 1.9}),
                                  dict(row("cuda.standard_cublas", "fwd"), time={"median_ms": 9.0})])
            paths = {n: os.path.join(d, n) for n in ("run.json", "other.json", "log.txt", "out.json")}
            write(paths["run.json"], json.dumps(res))
            write(paths["other.json"], json.dumps(other))
            write(paths["log.txt"], LOG)
            p = run(os.path.join(ROOT, "scripts/recover_timings.py"), paths["run.json"], "--log", paths["log.txt"],
                    "--from", paths["other.json"], "--out", paths["out.json"])
            self.assertEqual(p.returncode, 0, p.stderr)
            m = read_json(paths["out.json"])
            r = {x["impl"]: x for x in m["rows"]}
            self.assertAlmostEqual(r["cuda.flash_fwd_mma"]["time"]["median_ms"], 0.468)
            self.assertAlmostEqual(r["cuda.flash_fwd_mma"]["time"]["cv"], 0.0006)
            self.assertAlmostEqual(r["cuda.flash_fwd_mma"]["tflops"], 1e12 / 0.468e-3 / 1e12)
            self.assertIn("console", r["cuda.flash_fwd_mma"]["time"]["source"])
            self.assertAlmostEqual(r["cuda.naive_3pass"]["time"]["median_ms"], 112.0)
            self.assertEqual(r["cuda.flash_bwd_mma"]["time"]["min_ms"], 1.9)
            self.assertIn("other.json", r["cuda.flash_bwd_mma"]["time"]["source"])
            self.assertNotIn("time", r["cuda.standard_cublas"])  # failed here: its verdict stays
            self.assertFalse(m["complete"])
            self.assertNotEqual(m["stop_reason"], "run in progress")
            self.assertEqual(m["context"]["timing_recovery"]["untimed_passing_rows"], 0)

    def test_parse_log_units(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write(LOG.replace("0.468 ms", "468 us"))
        got = recover_timings.parse_log(f.name)
        os.remove(f.name)
        self.assertAlmostEqual(got[f"cuda.flash_fwd_mma:{CASE}:fwd"]["median_ms"], 0.468)
        self.assertEqual(got[f"cuda.flash_fwd_mma:{CASE}:fwd"]["repetitions"], 3)


class PeerRevision(unittest.TestCase):
    """The GPU copy of the tree can carry another commit's .git: the peers, like attnbench, take
    the revision from ATTNBENCH_GIT_REVISION when it is set."""

    def setUp(self):
        self.saved = {k: os.environ.pop(k, None) for k in ("ATTNBENCH_GIT_REVISION", "ATTNBENCH_GIT_DIRTY")}

    def tearDown(self):
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    def test_named_revision_wins(self):
        os.environ["ATTNBENCH_GIT_REVISION"] = "0123abc"
        os.environ["ATTNBENCH_GIT_DIRTY"] = "0"
        self.assertEqual(peers_common.git_info(), ("0123abc", False, "ATTNBENCH_GIT_REVISION"))
        os.environ.pop("ATTNBENCH_GIT_DIRTY")
        self.assertEqual(peers_common.git_info(), ("0123abc", True, "ATTNBENCH_GIT_REVISION"))

    def test_without_it_git_or_unknown(self):
        rev, _, source = peers_common.git_info()
        self.assertIn(source, ("git", "none"))
        self.assertTrue(rev == "unknown" or len(rev) == 40, rev)


class Fa2GridSummary(unittest.TestCase):
    def test_ratios_from_rows(self):
        def r(impl, ps, seq, tflops):
            return {"impl": impl, "pass": ps, "status": "pass", "tflops": tflops, "options": {},
                    "problem": {"head_dim": 64, "causal": False, "seq_q": seq}}
        grid = results_file([r("cuda.flash_fwd_mma", "fwd", 512, 300.0), r("cuda.standard_cublas", "fwd", 512, 50.0),
                             r("cuda.cudnn_sdpa", "fwd", 512, 400.0), r("cuda.flash_bwd_mma", "fwd_bwd", 512, 200.0)])
        peer = results_file([r("torch.sdpa_flash", "fwd", 512, 250.0), r("torch.sdpa_flash", "fwd_bwd", 512, 210.0)])
        p = run_summary("fa2_grid_summary.py", grid, peer)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| `cuda.flash_fwd_mma` / PyTorch flash | 1.20× |", p.stdout)
        self.assertIn("| `cuda.flash_fwd_mma` / `cuda.standard_cublas` | 6.00× |", p.stdout)
        self.assertIn("| `cuda.flash_fwd_mma` / `cuda.cudnn_sdpa` | 0.75× |", p.stdout)
        self.assertIn("| `cuda.flash_bwd_mma` / PyTorch flash | 0.95× |", p.stdout)
        self.assertIn("| `cuda.cudnn_sdpa` | - |", p.stdout)  # fwd_bwd cuDNN: no row

    def test_not_a_results_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            g = os.path.join(tmp, "g.json")
            write(g, "[1, 2]")
            p = run(os.path.join(ROOT, "scripts", "fa2_grid_summary.py"), g, g)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not an attnbench results file", p.stderr)


class AbSummary(unittest.TestCase):
    """scripts/ab_summary.py (scripts/gpu_ab.sh's report): NEW/BASE per row, the noise beside it."""

    def test_ratios_noise_and_former_names(self):
        def r(impl, case, ms, key="options"):
            return {"impl": impl, "case": case, "pass": "fwd", "status": "pass", key: {},
                    "time": {"median_ms": ms}}
        # BASE: two runs of an old file (schema 1, a former name); NEW: 1.10x and 1.00x.
        b1 = written_before_options(results_file([r("cpu.flash_1pass", "c1", 2.0), r("cpu.x", "c2", 1.0)]))
        b2 = written_before_options(results_file([r("cpu.flash_1pass", "c1", 2.0), r("cpu.x", "c2", 1.02)]))
        n1 = results_file([r("cpu.flash_fwd", "c1", 2.2), r("cpu.x", "c2", 1.01),
                           {"impl": "cpu.x", "case": "c3", "pass": "fwd", "status": "skip"}])
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name, res in (("b1", b1), ("b2", b2), ("n1", n1)):
                paths.append(os.path.join(tmp, name + ".json"))
                write(paths[-1], json.dumps(res))
            p = run_report(self, os.path.join(ROOT, "scripts", "ab_summary.py"), os.path.join(tmp, "ab.md"),
                           "--base", paths[0], paths[1], "--new", paths[2], "--alias", "cpu.flash_1pass=cpu.flash_fwd")
        self.assertIn("# NEW against BASE: 2 rows, 2 BASE and 1 NEW runs", p.stdout)
        self.assertIn("| cpu.flash_fwd | fwd | 1 | 1.100 | 1.100 | 1.100 | 0/1 | 1.000 |", p.stdout)
        self.assertIn("| cpu.x | fwd | 1 | 1.000 | 1.000 | 1.000 | 1/1 | 1.020 |", p.stdout)  # median of 1.0, 1.02
        self.assertIn("| c1 | cpu.flash_fwd | fwd | - | 2.0000 | 2.2000 | 1.100 |", p.stdout)

    def test_bad_input_exits_two(self):
        with tempfile.TemporaryDirectory() as tmp:
            g = os.path.join(tmp, "g.json")
            write(g, "[1, 2]")
            p = run(os.path.join(ROOT, "scripts", "ab_summary.py"), "--base", g, "--new", g)
            self.assertEqual(p.returncode, 2)
            self.assertIn("not an attnbench results file", p.stderr)
            write(g, json.dumps(results_file([])))
            p = run(os.path.join(ROOT, "scripts", "ab_summary.py"), "--base", g, "--new", g, "--alias", "x")
            self.assertEqual(p.returncode, 2)
            self.assertIn("--alias 'x': expected OLD=NEW", p.stderr)


class OptionAb(unittest.TestCase):
    """scripts/option_ab.py: an option's values against its base from one run, a peer beside them."""

    def test_ratios_classes_and_peer(self):
        def r(impl, case, tf, opts=None, status="pass"):
            return {"impl": impl, "case": case, "pass": "fwd", "status": status, "options": opts or {},
                    "tflops": tf, "time": {"median_ms": 1.0}}
        rows = [r("cuda.k", "c1_causal", 100.0, {"x": 0}), r("cuda.k", "c1_causal", 110.0, {"x": 1}),
                r("cuda.k", "c2", 200.0), r("cuda.k", "c2", 180.0, {"x": 1}),  # no option: the base
                r("cuda.k", "c3", 50.0, {"x": 0}), r("cuda.k", "c3", 0, {"x": 1}, status="fail"),
                r("cuda.peer", "c1_causal", 120.0), r("cuda.peer", "c2", 190.0)]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "res.json")
            write(path, json.dumps(results_file(rows)))
            p = run_report(self, os.path.join(ROOT, "scripts", "option_ab.py"), os.path.join(tmp, "ab.md"), path,
                           "--option", "x", "--peer", "cuda.peer", "--class", "causal=causal")
        self.assertIn("# cuda.k: x against x=0 (TFLOP/s, one run)", p.stdout)
        self.assertIn("| c1_causal | 100.0 | 110.0 | 1.100 | 120.0 | 0.833 | 0.917 |", p.stdout)
        self.assertIn("| c2 | 200.0 | 180.0 | 0.900 | 190.0 | 1.053 | 0.947 |", p.stdout)
        self.assertNotIn("| c3 |", p.stdout)  # x=1 failed: no pair
        self.assertIn("All rows (causal): x=1 / x=0 median 1.100, min 1.100, max 1.100 (1 cases)", p.stdout)
        self.assertIn("All rows (other): x=1 / x=0 median 0.900, min 0.900, max 0.900 (1 cases)", p.stdout)

    def test_where_fixes_the_other_options(self):
        def r(case, tf, opts):
            return {"impl": "cuda.k", "case": case, "pass": "fwd", "status": "pass", "options": opts,
                    "tflops": tf, "time": {"median_ms": 1.0}}
        # Three explicit sets: (x 0, y 0), (x 1, y 0), (x 0, y 1); y absent counts as 0.
        rows = [r("c1", 100.0, {"x": 0, "y": 0}), r("c1", 120.0, {"x": 1}), r("c1", 90.0, {"x": 0, "y": 1})]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "res.json")
            write(path, json.dumps(results_file(rows)))
            script = os.path.join(ROOT, "scripts", "option_ab.py")
            px = run(script, path, "--option", "x", "--where", "y=0")
            py = run(script, path, "--option", "y", "--where", "x=0")
        self.assertEqual(px.returncode, 0, px.stderr)
        self.assertIn("# cuda.k: x against x=0, y=0 (TFLOP/s, one run)", px.stdout)
        self.assertIn("| c1 | 100.0 | 120.0 | 1.200 |", px.stdout)
        self.assertEqual(py.returncode, 0, py.stderr)
        self.assertIn("| c1 | 100.0 | 90.0 | 0.900 |", py.stdout)

    def test_bad_input_exits_two(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "res.json")
            write(path, json.dumps(results_file([])))
            script = os.path.join(ROOT, "scripts", "option_ab.py")
            for args, msg in (([], "--impl needed"), (["--impl", "cuda.k"], "no case of cuda.k passed"),
                              (["--class", "causal"], "expected LABEL=SUBSTRING"),
                              (["--where", "y"], "--where 'y': expected NAME=VALUE"),
                              (["--where", "x=1"], "that is --option itself"),
                              (["--base", "zero"], "--base 'zero': expected a number")):
                with self.subTest(args):
                    p = run(script, path, "--option", "x", *args)
                    self.assertEqual(p.returncode, 2)
                    self.assertIn(msg, p.stderr)


class SassLoops(unittest.TestCase):
    """scripts/sass_loops.py: the wgmma loops of a kernel's SASS, their mix, blocks and map."""

    SASS = """
        code for sm_90a
                Function : _Z6kernelv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0030*/                   FMNMX R3, R24, R25, !PT ;
        /*0040*/              @P0  BRA 0x60 ;
        /*0050*/                   MUFU.EX2 R4, R3 ;
        /*0060*/                   FFMA R5, R4, R4, R3 ;
        /*0070*/              @!P1 BRA 0x10 ;
        /*0080*/                   EXIT ;
                Function : _Z5otherv
        /*0000*/                   EXIT ;
"""

    def test_loops_blocks_and_map(self):
        script = os.path.join(ROOT, "scripts", "sass_loops.py")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.sass")
            write(path, self.SASS)
            p = run(script, path, "--kernel", "^kernel", "--blocks", "--map")
            missing = run(script, path, "--kernel", "nothing")
            bad_loop = run(script, path, "--loop", "zz")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("9 instructions, 0 local-memory", p.stdout)
        self.assertIn("loop 0x00010-0x00070*     7  HGMMA=1 MUFU=1 FMNMX=1 FFMA=1 SYNCS=1 BRA=2", p.stdout)
        self.assertIn("0x00010     4  ", p.stdout)  # TRYWAIT HGMMA FMNMX BRA: ends at the branch
        self.assertIn("0x00050     1  MUFU=1", p.stdout)  # cut before the branch target 0x60
        self.assertIn("SHnbMfb", p.stdout)
        self.assertNotIn("other", p.stdout)
        self.assertEqual(missing.returncode, 2)
        self.assertIn("no kernel matches --kernel 'nothing'", missing.stderr)
        self.assertEqual(bad_loop.returncode, 2)
        self.assertIn("--loop 'zz': expected a hexadecimal address", bad_loop.stderr)

    def test_fa4_sass_refuses_without_its_python_or_site(self):
        script = os.path.join(ROOT, "scripts", "peers", "fa4_sass.py")
        with tempfile.TemporaryDirectory() as tmp:
            p = run(script, "--site", tmp, "--pass", "fwd", "--head-dim", "128", "--out", tmp)
        self.assertEqual(p.returncode, 2)
        if sys.version_info[:2] == (3, 12):
            self.assertIn("no flash_attn/cute/flash_fwd_sm90.py", p.stderr)
        else:
            self.assertIn("the FA4 site's wheels are for 3.12", p.stderr)


class DecodeSummary(unittest.TestCase):
    """Issue 29's decode tables and target lines from a small synthetic run and peers pair."""

    def test_tables_and_targets(self):
        def r(impl, b, ctx, ms, ps=0, options=None, hbm=True, status="pass"):
            case = f"b{b}_ctx{ctx}_p{ps}"
            row = {"impl": impl, "case": case, "pass": "fwd", "status": status, "options": options or {},
                   "time": {"median_ms": ms},
                   "problem": {"heads_q": 64, "heads_kv": 8, "head_dim": 128, "batch": b, "seq_kv": ctx,
                               "seq_q": 1, "page_size": ps}}
            if hbm:
                row["hbm_bytes"] = 4_000_000
            return row
        # hbm 4e6 bytes: GB/s = 4e6 / (ms 1e-3) / 1e9 = 4 / ms.
        run_res = results_file([r("cuda.flash_decode", 64, 8192, 0.001), r("cuda.flash_decode", 64, 8192, 0.004, 16),
                                r("cuda.flash_decode", 1, 32768, 0.002), r("cuda.flash_decode", 1, 32768, 0.008,
                                                                            options={"splits": 1}),
                                r("cuda.cudnn_sdpa", 1, 32768, 0.004)])
        run_res["context"]["ceilings"] = {"read_tbps": 4.5}
        # Peer rows without hbm_bytes take the run's for the same case.
        peers = results_file([r("torch.sdpa_cudnn", 64, 8192, 0.0009, hbm=False),
                              r("torch.sdpa_flash", 1, 32768, 0.001, status="fail")])
        flashinfer = results_file([r("flashinfer.batch_decode", 64, 8192, 0.002, 16, hbm=False)])  # a file of its own
        with tempfile.TemporaryDirectory() as tmp:
            g, t, fi = os.path.join(tmp, "g.json"), os.path.join(tmp, "t.json"), os.path.join(tmp, "fi.json")
            write(g, json.dumps(run_res))
            write(t, json.dumps(peers))
            write(fi, json.dumps(flashinfer))
            p = run(os.path.join(ROOT, "scripts", "decode_summary.py"), g, t, fi)
            self.assertEqual(p.returncode, 0, p.stderr)
            out = p.stdout
            self.assertIn("Read ceiling of the run: 4500 GB/s", out)
            self.assertIn("**contiguous**", out)
            self.assertIn("**pages of 16**", out)
            # 64 x 8k contiguous: 4000 GB/s = 0.89 of 4500; PyTorch cuDNN 4444: 0.90x.
            self.assertIn("| 64:8 | 128 | 64 | 8k | 4000 | 0.89 | - | - | 4444 | - | - | - | 0.90× |", out)
            # batch 1: 2000 (0.44), 1 split 500, our cuDNN 1000, PyTorch flash failed: "-".
            self.assertIn("| 64:8 | 128 | 1 | 32k | 2000 | 0.44 | 500 | 1000 | - | - | - | - | - |", out)
            self.assertIn("| 64:8 | 128 | 64 | 8k | 1000 | 0.22 | - | - | - | - | 2000 | - | 0.50× |", out)
            self.assertIn("at batch × context >= 64 × 8k: 1 of 2 cells; missed by 64:8 d128 64×8k page 16 (0.22)", out)
            self.assertIn("at batch 1, context >= 32k: 0 of 1 cells; missed by 64:8 d128 1×32k contiguous (0.44)", out)
            self.assertIn("FlashInfer: 0 of 2 cells", out)
            rd = os.path.join(tmp, "README.md")
            write(rd, "# x\n<!-- decode_summary:begin (generated) -->\nold\n<!-- decode_summary:end -->\ntail\n")
            p = run(os.path.join(ROOT, "scripts", "decode_summary.py"), g, t, fi, "--readme", rd)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(rd, encoding="utf-8") as f:
                doc = f.read()
            self.assertNotIn("\nold\n", doc)
            self.assertIn("| 64:8 | 128 | 64 | 8k | 4000 | 0.89 |", doc)
            self.assertTrue(doc.endswith("<!-- decode_summary:end -->\ntail\n"))
            write(rd, "no markers")
            self.assertEqual(run(os.path.join(ROOT, "scripts", "decode_summary.py"), g, t, "--readme", rd).returncode, 2)
            write(g, "[1]")
            p = run(os.path.join(ROOT, "scripts", "decode_summary.py"), g, t)
            self.assertEqual(p.returncode, 2)
            self.assertIn("not an attnbench results file", p.stderr)

    def test_same_size_read(self):
        """With the run's read curve: our rows' fraction of a read of their own bytes, and in the
        batch-1 target's misses."""
        def r(impl, b, ctx, ms, ps=0):
            return {"impl": impl, "case": f"b{b}_ctx{ctx}_p{ps}", "pass": "fwd", "status": "pass",
                    "options": {}, "time": {"median_ms": ms}, "hbm_bytes": 4_000_000,
                    "problem": {"heads_q": 64, "heads_kv": 8, "head_dim": 128, "batch": b, "seq_kv": ctx,
                                "seq_q": 1, "page_size": ps}}
        run_res = results_file([r("cuda.flash_decode", 1, 32768, 0.002), r("cuda.cudnn_sdpa", 1, 32768, 0.004)])
        # Calls of 1 us + bytes / (5 TB/s): 4e6 bytes in 1.8 us, 2222 GB/s; ours 2000 GB/s: 0.90 of it.
        curve = [{"bytes": b, "tbps": b / (1e-6 + b / 5e12) / 1e12} for b in (1e6, 1e9)]
        run_res["context"]["ceilings"] = {"read_tbps": 4.5, "read_curve": curve}
        peers = results_file([r("torch.sdpa_cudnn", 1, 32768, 0.004)])
        with tempfile.TemporaryDirectory() as tmp:
            g, t = os.path.join(tmp, "g.json"), os.path.join(tmp, "t.json")
            write(g, json.dumps(run_res))
            write(t, json.dumps(peers))
            p = run(os.path.join(ROOT, "scripts", "decode_summary.py"), g, t)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("| flash_decode | of ceiling | of same-size read | `cuda.cudnn_sdpa` |", p.stdout)
            self.assertIn("| 64:8 | 128 | 1 | 32k | 2000 | 0.44 | 0.90 | 1000 | 1000 |", p.stdout)
            self.assertIn("missed by 64:8 d128 1×32k contiguous (0.44; 0.90 of a same-size read)", p.stdout)
        sys.path.insert(0, ROOT)
        from scripts.results_io import read_tbps_at
        ceil = {"read_curve": curve}
        self.assertAlmostEqual(read_tbps_at(ceil, 4e6), 4e6 / 1.8e-6 / 1e12)
        self.assertAlmostEqual(read_tbps_at(ceil, 4e9), 4e9 / (1e-6 + 4e9 / 5e12) / 1e12)  # beyond the end
        self.assertIsNone(read_tbps_at({}, 4e6))
        self.assertIsNone(read_tbps_at(ceil, 0))
        self.assertAlmostEqual(read_tbps_at({"read_curve": [curve[1]]}, 4e6), curve[1]["tbps"])


class VariantsSummary(unittest.TestCase):
    """Issue 30's tables and targets: windows against their own dense rows, FA4 and cuDNN."""

    def test_tables_and_targets(self):
        def r(impl, ps, tflops, case="w", status="pass", options=None, **prob):
            p = {"head_dim": 128, "causal": False, "seq_q": 4096}
            p.update(prob)
            return {"impl": impl, "case": case, "pass": ps, "status": status, "tflops": tflops,
                    "options": options or {}, "problem": p}
        win = dict(window_left=0, window_right=128)  # a window_left of 0 is a window
        run_res = results_file([r("cuda.flash_fwd_wgmma", "fwd", 500.0, **win), r("cuda.flash_fwd_mma", "fwd", 300.0, **win),
                                r("cuda.cudnn_sdpa", "fwd", 450.0, **win), r("cuda.flash_bwd_mma", "bwd", 200.0, **win),
                                r("cuda.cudnn_sdpa", "bwd", 250.0, **win),
                                r("cuda.flash_fwd_wgmma", "fwd", 700.0, case="v", seq_q=3000, seqlens_q=[1000, 3000]),
                                r("cuda.flash_fwd_wgmma", "fwd", 999.0, case="f", status="fail", **win)])
        peers = results_file([r("fa4.flash_attn", "fwd", 400.0, **win),
                              r("fa4.flash_attn", "fwd", 800.0, case="v", seq_q=3000, seqlens_q=[1000, 3000]),
                              r("fa4.flash_attn", "bwd", 300.0, options={"deterministic": 1}, **win)])
        dense = results_file([r("cuda.flash_fwd_wgmma", "fwd", 600.0, case="d"),
                              r("cuda.flash_fwd_wgmma", "fwd", 650.0, case="d2", seq_q=2048),
                              r("cuda.flash_bwd_mma", "bwd", 220.0, case="d")])
        with tempfile.TemporaryDirectory() as tmp:
            g, t, d = (os.path.join(tmp, n) for n in ("window.json", "t.json", "dense.json"))
            write(g, json.dumps(run_res))
            write(t, json.dumps(peers))
            write(d, json.dumps(dense))
            script = os.path.join(ROOT, "scripts", "variants_summary.py")
            p = run(script, "--dense", d, g, t)
            self.assertEqual(p.returncode, 0, p.stderr)
            out = p.stdout
            self.assertIn("**window.json, fwd**", out)
            self.assertIn("| w | 500 (`flash_fwd_wgmma`) | 600 | 0.83× | 400 | 1.25× | 450 | - | 1.11× |", out)
            # varlen: the dense seq is the largest not above the mean length (2000): 2048 is above, none.
            self.assertIn("| v | 700 (`flash_fwd_wgmma`) | - | - | 800 | 0.88× |", out)
            self.assertIn("| f | - | - | - |", out)  # a failed row is not a result
            # bwd: the deterministic FA4 row is not FA4's plain one.
            self.assertIn("| w | 200 (`flash_bwd_mma`) | 220 | 0.91× | - | - | 250 | - | 0.80× |", out)
            self.assertIn("window forward (`flash_fwd_wgmma`, seq >= 4k) >= 0.9× its dense rows: 0 of 1 cases; "
                          "missed by w (0.83)", out)
            self.assertIn("window forward >= FA4: 1 of 1 cases", out)
            self.assertIn("varlen forward >= FA4: 0 of 1 cases; missed by v (0.88×)", out)
            self.assertIn("window backward >= cuDNN: 0 of 1 cases; missed by w (0.80×)", out)
            self.assertEqual(run(script, "--dense", d, g).returncode, 2)  # not a pair
            rd = os.path.join(tmp, "README.md")
            write(rd, "<!-- variants_summary:begin x -->\nold\n<!-- variants_summary:end -->\n")
            self.assertEqual(run(script, "--dense", d, g, t, "--readme", rd).returncode, 0)
            with open(rd, encoding="utf-8") as f:
                self.assertIn("| w | 500 (`flash_fwd_wgmma`) |", f.read())


class Fa3GridSummary(unittest.TestCase):
    """The README's "Against FlashAttention-3 and cuDNN" tables from a small synthetic pair."""

    def test_best_of_ours_against_fa4_and_cudnn(self):
        def r(impl, ps, tflops, seq=512, status="pass", options=None):
            return {"impl": impl, "pass": ps, "status": status, "tflops": tflops, "options": options or {},
                    "problem": {"head_dim": 128, "causal": False, "seq_q": seq}}
        grid = results_file([r("cuda.flash_fwd_mma", "fwd", 300.0), r("cuda.flash_fwd_wgmma", "fwd", 500.0),
                             r("cuda.cudnn_sdpa", "fwd", 600.0), r("cuda.flash_fwd_wgmma", "fwd", 900.0, 1024, "fail"),
                             r("cuda.flash_fwd_mma", "fwd", 320.0, 1024), r("cuda.flash_bwd_mma", "fwd_bwd", 250.0)])
        # The peers' file as written before "params" became "options": its deterministic row is still
        # told apart by its options.
        peer = written_before_options(results_file([
            r("fa4.flash_attn", "fwd", 550.0), r("torch.sdpa_cudnn", "fwd", 580.0),
            r("fa4.flash_attn", "fwd", 560.0, 1024), r("fa4.flash_attn", "fwd_bwd", 500.0),
            r("fa4.flash_attn", "fwd_bwd", 400.0, options={"deterministic": 1})]))
        p = run_summary("fa3_grid_summary.py", grid, peer)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        # cuda.cudnn_sdpa is cuDNN, not ours; a failed row (900) is not a result.
        self.assertIn("| 128, non-causal | ours: best of attnbench's kernels | 500 | 320 |", out)
        self.assertIn("| (which) | `flash_fwd_wgmma` | `flash_fwd_mma` |", out)
        self.assertIn("| ours / FA4 | 0.91× | 0.57× |", out)
        self.assertIn("| ours / cuDNN (PyTorch) | 0.86× | - |", out)
        self.assertIn("| ours / `cuda.cudnn_sdpa` | 0.83× | - |", out)
        self.assertIn("| FA4, deterministic backward | 400 | - |", out)
        self.assertIn("| ours / FA4 | 0.50× | - |", out)  # fwd_bwd
        self.assertIn("**fwd_bwd**", out)
        self.assertNotIn("**bwd**", out)  # no bwd rows at all: no table
        with tempfile.TemporaryDirectory() as tmp:
            g, t, rd = (os.path.join(tmp, n) for n in ("g.json", "t.json", "README.md"))
            write(g, json.dumps(grid))
            write(t, json.dumps(peer))
            write(rd, "# x\n\n<!-- fa3_grid_summary:begin (generated) -->\nold\n<!-- fa3_grid_summary:end -->\ntail\n")
            p = run(os.path.join(ROOT, "scripts", "fa3_grid_summary.py"), g, t, "--readme", rd)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(rd, encoding="utf-8") as f:
                doc = f.read()
            self.assertNotIn("\nold\n", doc)
            self.assertIn("| ours / FA4 | 0.91× | 0.57× |", doc)
            self.assertTrue(doc.endswith("<!-- fa3_grid_summary:end -->\ntail\n"))
            write(rd, "no markers")
            self.assertEqual(run(os.path.join(ROOT, "scripts", "fa3_grid_summary.py"), g, t, "--readme", rd).returncode, 2)


    def test_peers_from_another_job_are_said(self):
        row = {"impl": "cuda.flash_bwd_wgmma", "pass": "bwd", "status": "pass", "tflops": 400.0, "options": {},
               "problem": {"head_dim": 128, "causal": False, "seq_q": 2048}}
        peer = dict(row, impl="fa4.flash_attn", tflops=500.0)

        def summary(run_date, peer_date, complete=True):
            g_res, p_res = results_file([row]), results_file([peer])
            g_res["context"]["date"], p_res["context"]["date"] = run_date, peer_date
            p_res["complete"] = complete
            p = run_summary("fa3_grid_summary.py", g_res, p_res)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout.splitlines()[0]
        self.assertEqual(summary("2026-12-04T02:50:36Z", "2026-12-04T02:56:12Z"), "**bwd** (TFLOP/s; one GPU job)")
        self.assertEqual(summary("2026-12-04T02:50:36Z", "2026-12-03T23:25:14Z"),
                         "**bwd** (TFLOP/s; NOT one GPU job: ours from 2026-12-04 02:50, the peers from 2026-12-03 23:25 UTC)")
        self.assertEqual(summary("2026-12-04T02:50:36Z", "2026-12-04T02:56:12Z", complete=False),
                         "**bwd** (TFLOP/s; one GPU job; the peers' file is incomplete)")


class TimingParity(unittest.TestCase):
    def test_pairs_and_cudnn_table(self):
        def r(impl, ps, ms, case=CASE, method=None):
            t = {"median_ms": ms, "cv": 0.01}
            if method:
                t["method"] = method
            return {"case": case, "impl": impl, "pass": ps, "status": "pass", "options": {}, "flops": 1e12,
                    "time": t, "problem": {}}
        run_f = results_file([r("cuda.cudnn_sdpa", "fwd", 1.00), r("cuda.flash_fwd_mma", "fwd", 2.00)])
        peer_f = results_file([r("attnbench:cuda.cudnn_sdpa", "fwd", 1.02, method="cuda_graph"),
                               r("attnbench:cuda.flash_fwd_mma", "fwd", 2.20, method="cuda_graph"),
                               r("torch.sdpa_cudnn", "fwd", 0.90, method="cuda_graph")])
        with tempfile.TemporaryDirectory() as tmp:
            a, b, j = (os.path.join(tmp, n) for n in ("run.json", "peer.json", "out.json"))
            write(a, json.dumps(run_f))
            write(b, json.dumps(peer_f))
            p = run(os.path.join(ROOT, "scripts", "peers", "timing_parity.py"), a, b, "--json", j)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("1 of 2 pairs within 3%", p.stdout)
            self.assertIn("| 1.020 | ok |", p.stdout)
            self.assertIn("| 1.100 | OUTSIDE |", p.stdout)
            self.assertIn("| 1000 | 980 | 1111 | 1.133 |", p.stdout)  # TFLOP/s: harness, capi, torch
            self.assertEqual(len(read_json(j)["pairs"]), 2)
            q = run(os.path.join(ROOT, "scripts", "peers", "timing_parity.py"), a, b, "--check")
            self.assertEqual(q.returncode, 1)


NCU_CSV = """==PROF== Disconnected
"ID","Kernel Name","gpu__time_duration.sum"
"","","nsecond"
"0","cuda.cudnn_sdpa:{c}:fwd/cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_128x128x128","1,500,000"
"1","torch.sdpa_cudnn:{c}:fwd/cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128","1,400,000"
"2","other_kernel","1,000"
"""


@unittest.skipUnless(os.environ.get("ATTNBENCH_BUILD_DIR"), "needs ATTNBENCH_BUILD_DIR (attnbench expand)")
class NcuKernels(unittest.TestCase):
    def test_parse_and_attribute(self):
        exe = os.path.join(os.environ["ATTNBENCH_BUILD_DIR"], "attnbench")
        case = "b8_hq16_hkv16_sq2048_skv2048_d128_bf16"
        with tempfile.TemporaryDirectory() as tmp:
            a, b = os.path.join(tmp, "a.csv"), os.path.join(tmp, "b.csv")
            write(a, NCU_CSV.format(c=case))
            write(b, NCU_CSV.format(c=case))
            p = run(os.path.join(ROOT, "scripts", "ncu_kernels.py"), os.path.join(ROOT, "configs", "fa3_grid.json"),
                    "--case", case, "--attnbench", exe, "--parse-csv", f"attnbench={a}", "--parse-csv", f"torch={b}")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| attnbench | `cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_128x128x128` | 1500.0 |",
                      p.stdout)
        self.assertIn("| torch | **sum: 1 kernels** | **1400.0** (196 TFLOP/s) |", p.stdout)
        self.assertIn("outside the rows' ranges", p.stdout)


class NcuSource(unittest.TestCase):
    """scripts/ncu_source.py: per kernel, the instructions with the most stall samples and excess
    shared wavefronts, from ncu's source page (CSV, gzipped or not); a missing column is named."""

    PAGE = ('"Kernel Name: main"\n'
            '"# Address","Source","Warp Stall Sampling (All Samples)","L1 Wavefronts Shared Excessive"\n'
            '"0x0010","STS.64 [R1], R2","100","384"\n'
            '"0x0020","HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24","500","0"\n'
            '"0x0030","BAR.SYNC 0x1","1,400","0"\n'
            '"Kernel Name: post"\n'
            '"# Address","Source","Warp Stall Sampling (All Samples)"\n'
            '"0x0040","LDG.E R2, [R4]","7","x"\n')

    def test_ranks_per_kernel(self):
        import gzip
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.csv.gz")
            with gzip.open(path, "wt") as f:
                f.write(self.PAGE)
            p = run(os.path.join(ROOT, "scripts", "ncu_source.py"), path, "--top", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("== Kernel Name: main: 3 instructions", out)
        main = out[out.index("Kernel Name: main"):out.index("Kernel Name: post")]
        stalls = main[main.index("warp stall samples"):main.index("excess shared")]
        self.assertIn("total 2,000", stalls)
        self.assertLess(stalls.index("BAR.SYNC"), stalls.index("HGMMA"))  # 1,400 ranks first
        self.assertNotIn("STS.64", stalls)  # --top 2
        self.assertRegex(main, r"100\.0% +384 +0x0010  STS\.64")
        post = out[out.index("Kernel Name: post"):]
        self.assertIn("excess shared wavefronts: no such column; the header is: # Address | Source", post)

    def test_no_table(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "e.csv")
            write(path, "==PROF== nothing\n")
            p = run(os.path.join(ROOT, "scripts", "ncu_source.py"), path)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no instruction table", p.stderr)


class NcuFixedCost(unittest.TestCase):
    """scripts/ncu_fixed_cost.py: each instruction's stall samples split into a fixed cost per
    block and a cost per tile from two profiles of one kernel; a table printed twice counts once;
    bad pairs exit 2."""

    @staticmethod
    def table(title, samples):
        rows = "".join(f'"0x{16 * k:04x}","{op}","{v}","0","{v}","1"\n' for k, (op, v) in enumerate(samples))
        return (f'"Kernel Name","{title}"\n"Address","Source","Warp Stall Sampling (All Samples)",'
                '"Warp Stall Sampling (Not-issued Samples)","# Samples","Instructions Executed"\n' + rows)

    def page(self):
        # A: fixed only (100 at 10 and at 50 tiles a block); B: per tile only (2 a tile); C: both
        # (30 + 1 a tile). Fixed 130, per tile 3: 43.33 tiles.
        short = self.table("k", [("BAR.SYNC 0x1", 100), ("HGMMA.64x80x16", 20), ("EXIT", 40)])
        long_ = self.table("k", [("BAR.SYNC 0x1", 100), ("HGMMA.64x80x16", 100), ("EXIT", 80)])
        other = self.table("j", [("NOP", 1)])
        return short + short + long_ + other  # the short table twice, as ncu prints some

    def test_split(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.csv")
            write(path, self.page())
            p = run(os.path.join(ROOT, "scripts", "ncu_fixed_cost.py"), path, "--pair", "0:1:10:50")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fixed samples 130, per tile 3: the fixed cost is 43.33 tiles", p.stdout)
        ranked = [l for l in p.stdout.splitlines() if "per tile" in l and "+0x" in l]
        self.assertEqual(len(ranked), 3, p.stdout)
        self.assertRegex(ranked[0], r"76\.9% +100 +per tile +0\.0 +\+0x00000  BAR\.SYNC")
        self.assertRegex(ranked[1], r"23\.1% +30 +per tile +1\.0 +\+0x00020  EXIT")
        self.assertRegex(ranked[2], r"0\.0% +0 +per tile +2\.0 +\+0x00010  HGMMA")

    def test_bad_pairs_exit_two(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.csv")
            write(path, self.page())
            script = os.path.join(ROOT, "scripts", "ncu_fixed_cost.py")
            for pair, message in (("0:5:10:50", "table 5 does not exist (3 tables"),
                                  ("0:1:50:10", "0 < N_SHORT < N_LONG"),
                                  ("0:1:ten:50", "expected SHORT:LONG:N_SHORT:N_LONG"),
                                  ("0:2:10:50", "not the same kernel (3 and 1 instructions)")):
                p = run(script, path, "--pair", pair)
                self.assertEqual(p.returncode, 2, pair)
                self.assertIn(message, p.stderr, pair)
            p = run(script, os.path.join(tmp, "missing.csv"), "--pair", "0:1:1:2")
            self.assertEqual(p.returncode, 2)
            self.assertIn("missing.csv", p.stderr)


class NcuDetails(unittest.TestCase):
    """scripts/ncu_details.py: the main kernels of ncu's details pages side by side, with the
    excess wavefronts and sectors from SourceCounters' advice; files of one name told apart."""

    PAGE = """[1665] attnbench@127.0.0.1
  void unnamed>::bwd_preprocess_wgmma_kernel<__nv_bfloat16>(const T1 *, long) (32768, 1, 1)x(256, 1, 1), Context 1
    Section: GPU Speed Of Light Throughput
    Duration                         us        90.85
  void unnamed>::flash_bwd_wgmma_kernel<__nv_bfloat16, bwd_wgmma::BwdCfg<128, 64, 128, 2>, 0>(CUtensorMap_st) (128, 16, 1)x(384, 1, 1), Context 1
    Section: GPU Speed Of Light Throughput
    Duration                         ms        {dur}
    L1/TEX Cache Throughput           %        78.21
    Registers Per Thread             register/thread             168
    Grid Size                                                  2,048
    OPT   This kernel has uncoalesced shared accesses resulting in a total of 402653184 excessive wavefronts (21% of
          the total 1881145344 wavefronts).
"""

    def test_side_by_side(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for sub, dur in (("a", "14.13"), ("b", "12.50")):
                os.makedirs(os.path.join(tmp, sub))
                paths.append(os.path.join(tmp, sub, "k.details.txt"))
                write(paths[-1], self.PAGE.replace("{dur}", dur))
            p = run(os.path.join(ROOT, "scripts", "ncu_details.py"), *paths)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("| metric | a/k#1 `flash_bwd_wgmma_kernel` | b/k#1 `flash_bwd_wgmma_kernel` |", p.stdout)
            self.assertIn("| Duration | 14.13 ms | 12.50 ms |", p.stdout)
            self.assertIn("| Registers Per Thread | 168 register/thread | 168 register/thread |", p.stdout)
            self.assertIn("| Grid Size | 2,048 | 2,048 |", p.stdout)
            self.assertIn("| excess shared wavefronts | 402653184 (21%) | 402653184 (21%) |", p.stdout)
            self.assertIn("| DRAM Throughput | - | - |", p.stdout)
            p = run(os.path.join(ROOT, "scripts", "ncu_details.py"), paths[0], "--kernel", "process",
                    "--metric", "Duration")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("| Duration | 90.85 us |", p.stdout)
            p = run(os.path.join(ROOT, "scripts", "ncu_details.py"), paths[0], "--kernel", "nothing")
            self.assertEqual(p.returncode, 1)
            self.assertIn("no kernel matches", p.stderr)
            p = run(os.path.join(ROOT, "scripts", "ncu_details.py"), os.path.join(tmp, "missing.txt"))
            self.assertEqual(p.returncode, 2)


BUILD = os.environ.get("ATTNBENCH_BUILD_DIR", "")
EXE = os.path.join(BUILD, "attnbench") if BUILD else ""


def has_cuda_impls():
    if not EXE or not os.access(EXE, os.X_OK):
        return False
    out = subprocess.run([EXE, "list"], stdout=subprocess.PIPE, text=True).stdout
    return any(line.startswith("cuda.flash_bwd_mma") for line in out.splitlines())


@unittest.skipUnless(has_cuda_impls(), "needs ATTNBENCH_BUILD_DIR with a CUDA build of attnbench")
class ComputeSanitizerScript(unittest.TestCase):
    """The tool is a stand-in that runs the program it is given (without a GPU every row is SKIP,
    so the script exits 1 with "no row ran"); the test reads which implementations each run had."""

    def sanitize(self, tmp, impls):
        fake = os.path.join(tmp, "fake-cs")
        write(fake, "#!/usr/bin/env bash\n"
                    "[ \"$1\" = --version ] && { echo 'fake compute-sanitizer'; exit 0; }\n"
                    "while [ \"${1#--}\" != \"$1\" ]; do shift 2; done\n"
                    "exec \"$@\"\n")
        os.chmod(fake, 0o755)
        cfg = os.path.join(tmp, "tiny.json")
        write(cfg, json.dumps({"name": "tiny", "implementations": ["cuda.*"], "passes": ["fwd", "bwd"],
                               "problem": {"seq": 17, "head_dim": 64, "dtype": "bf16"}}))
        out = os.path.join(tmp, "out")
        script = os.path.join(ROOT, "scripts", "compute_sanitizer.sh")
        env = script_env(script, COMPUTE_SANITIZER=fake, CONFIG=cfg, TOOLS="memcheck",
                         ATTNBENCH_GIT_REVISION="abc1234")
        if impls is not None:
            env["IMPLS"] = impls
        p = subprocess.run(["bash", script, BUILD, out],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return p, out

    def impls_of(self, path):
        return sorted({r["impl"] for r in read_json(path)["rows"]})

    def test_impls_narrows_the_own_run_and_drops_cudnn(self):
        with tempfile.TemporaryDirectory() as tmp:
            p, out = self.sanitize(tmp, "cuda.flash_*_mma")
            results = os.path.join(out, "memcheck.results.json")
            self.assertEqual(self.impls_of(results), ["cuda.flash_bwd_mma", "cuda.flash_fwd_mma"])
            self.assertFalse(os.path.exists(os.path.join(out, "cudnn-memcheck.results.json")))
            with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
                summary = f.read()
            self.assertIn("(abc1234)", summary)
            ran = any(r["status"] != "skip" for r in read_json(results)["rows"])
            if ran:  # a GPU: the stand-in tool finds nothing, and the rows pass
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertNotIn("no row ran", summary)
            else:  # no GPU: every row is SKIP, and a run that checked nothing is a failure
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                self.assertIn("no row ran", summary)

    def test_default_is_every_own_implementation(self):
        with tempfile.TemporaryDirectory() as tmp:
            p, out = self.sanitize(tmp, None)
            own = self.impls_of(os.path.join(out, "memcheck.results.json"))
            self.assertIn("cuda.flash_bwd_mma", own)
            self.assertIn("cuda.naive_3pass", own)
            self.assertNotIn("cuda.cudnn_sdpa", own)

    def test_impls_matching_nothing_is_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            p, _ = self.sanitize(tmp, "cuda.nope*")
            self.assertEqual(p.returncode, 2)
            self.assertIn("matches no CUDA implementation", p.stderr)


@unittest.skipUnless(BUILD and os.access(os.path.join(BUILD, "attnbench"), os.X_OK), "needs ATTNBENCH_BUILD_DIR")
class Fa3JobDryRun(unittest.TestCase):
    def test_every_part_prints_its_commands(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = script_env(os.path.join(ROOT, "scripts", "fa3_job.sh"), BUILD_DRY=BUILD,
                             CASES="*_sq2048_* *_sq4096_*", IMPLS="cuda.flash_fwd_mma cuda.nothing*")
            p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fa3_job.sh"), tmp, "--dry-run"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            for part in ("build", "smoke", "peers", "grid", "parity", "ncu", "report"):
                self.assertIn(f"== {part}", p.stdout)
            self.assertIn("--target attnbench attnbench_capi", p.stdout)
            self.assertIn("peers.py " + os.path.join(ROOT, "configs", "fa3_grid.json"), p.stdout)
            self.assertIn("--case *_sq2048_* --case *_sq4096_*", p.stdout)
            self.assertIn("168 rows: fa4.flash_attn", p.stdout)  # the peers' dry run: 12 cases x (5 FA4 + 9 PyTorch)
            self.assertIn("timing_parity.py", p.stdout)
            self.assertIn("ncu_kernels.py", p.stdout)
            q = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fa3_job.sh"), tmp, "--dry-run", "nonsense"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(q.returncode, 2)
            self.assertIn("unknown part", q.stderr)
            # CASES="*" reaches attnbench as a glob, not as the names of the files in the current folder.
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fa3_job.sh"), tmp, "--dry-run", "grid"],
                               env=dict(env, CASES="*"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("--case *", r.stdout)
            self.assertNotIn("--case README.md", r.stdout)


class PaperTables(unittest.TestCase):
    def test_fig2_from_the_committed_h200_file(self):
        p = run(os.path.join(ROOT, "scripts/paper_tables.py"), "fig2", os.path.join(ROOT, "results/h200/fa1_fig2.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        line = [x for x in p.stdout.splitlines() if "| fwd_bwd | cuda.flash_bwd_mma |" in x]
        self.assertEqual(len(line), 1, p.stdout)
        self.assertIn("1/10.2", line[0])
        self.assertIn("16Nd + 16N^2, 9.13 GB", p.stdout)

    def test_file_without_hbm_is_refused(self):
        p = run(os.path.join(ROOT, "scripts/paper_tables.py"), "fig2", os.path.join(ROOT, "results/h200/fa1_seq_sweep.json"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("ncu_hbm.py", p.stderr)


def entry_scripts():
    """Every script of scripts/ with an entry point, as (path relative to ROOT, module name)."""
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, "scripts")):
        for f in sorted(files):
            if f.endswith(".py") and f != "__init__.py":
                path = os.path.relpath(os.path.join(d, f), ROOT)
                with open(os.path.join(ROOT, path)) as fh:
                    if 'if __name__ == "__main__":' in fh.read():
                        out.append((path, path[:-3].replace(os.sep, ".")))
    return sorted(out)


class Packaging(unittest.TestCase):
    """pyproject.toml, the scripts as modules (python3 -m scripts.plot), run() in every entry point."""

    def test_pyproject_extras_and_packages(self):
        import tomllib
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            proj = tomllib.load(f)
        extras = proj["project"]["optional-dependencies"]
        self.assertTrue(any(r.startswith("matplotlib") for r in extras["plot"]), extras)
        self.assertTrue(any(r.startswith("torch") for r in extras["torch"]), extras)
        packages = proj["tool"]["setuptools"]["packages"]
        for d, _, files in os.walk(os.path.join(ROOT, "scripts")):
            if "__pycache__" in d or not any(f.endswith(".py") for f in files):
                continue
            pkg = os.path.relpath(d, ROOT).replace(os.sep, ".")
            self.assertIn(pkg, packages, f"{pkg}: a folder of scripts missing from pyproject.toml")
            self.assertTrue(os.path.exists(os.path.join(d, "__init__.py")), f"{pkg} has no __init__.py")

    def test_every_entry_point_imports_as_a_module_and_uses_run(self):
        import importlib
        scripts = entry_scripts()
        self.assertGreater(len(scripts), 10)
        for path, module in scripts:
            with self.subTest(module):
                importlib.import_module(module)
                with open(os.path.join(ROOT, path)) as f:
                    text = f.read()
                main = text[text.index('if __name__ == "__main__":'):]
                self.assertIn("run(", main, f"{path}: its entry point does not go through scripts.entry.run")
                self.assertNotIn("sys.exit(", main, path)

    def test_python_m_from_the_root(self):
        for module in ("scripts.plot", "scripts.peers.peers", "scripts.ncu_hbm"):
            with self.subTest(module):
                p = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("usage:", p.stdout)


class ClosedStdout(unittest.TestCase):
    """A reader that goes away (`... | head`) ends a script quietly with 141 (128 + SIGPIPE), as a
    C tool: no BrokenPipeError traceback (scripts/entry.py). The read end is closed before the
    script writes, so its first write fails."""

    def closed(self, *args):
        env = dict(os.environ)
        if os.environ.get("ATTNBENCH_BUILD_DIR"):
            env["ATTNBENCH_BUILD_DIR"] = os.environ["ATTNBENCH_BUILD_DIR"]
            # The peers find build-gpu/ or build/ of the tree first: the build under test instead.
            env["ATTNBENCH_BIN"] = os.path.join(os.environ["ATTNBENCH_BUILD_DIR"], "attnbench")
        p = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        p.stdout.close()
        err = p.stderr.read().decode()
        p.stderr.close()
        return p.wait(), err

    def test_as_a_file_and_as_a_module(self):
        for args in (["scripts/paper_tables.py", "fig2", "results/h200/fa1_fig2.json"],
                     ["-m", "scripts.paper_tables", "fig2", "results/h200/fa1_fig2.json"]):
            with self.subTest(args=args):
                rc, err = self.closed(*args)
                self.assertEqual(rc, 141, err)
                self.assertNotIn("Traceback", err)
                self.assertNotIn("BrokenPipeError", err)

    @unittest.skipUnless(os.environ.get("ATTNBENCH_BUILD_DIR"), "needs the build's attnbench (ATTNBENCH_BUILD_DIR)")
    def test_peers_dry_run(self):
        for args in (["scripts/peers/peers.py", "configs/fa3_grid.json", "--dry-run"],
                     ["-m", "scripts.peers.torch_sdpa", "configs/smoke.json", "--dry-run"]):
            with self.subTest(args=args):
                rc, err = self.closed(*args)
                self.assertEqual(rc, 141, err)
                self.assertNotIn("Traceback", err)


class ReadmeCommands(unittest.TestCase):
    """The README's attnbench commands name files that exist (issue 17: its compare example named
    results/h200/base.json, which never did). Outputs (new.json, --out) are not inputs."""

    def test_input_files_of_the_readme_commands_exist(self):
        import re
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        named = []
        for line in lines:
            m = re.match(r"\s*build/attnbench (run|compare|table|expand) (.*)", line)
            if not m:
                continue
            words = m.group(2).split("#")[0].split()
            for i, w in enumerate(words):
                if (w.startswith("results/") or w.startswith("configs/")) and w.endswith(".json") \
                        and (i == 0 or words[i - 1] not in ("--out", "-o")):
                    named.append(w)
        self.assertIn("results/h200/fa2_grid.json", named)
        for w in named:
            self.assertTrue(os.path.isfile(os.path.join(ROOT, w)), f"README names {w}, which does not exist")



def has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


class Plot(unittest.TestCase):
    """scripts/plot.py: SVG beside every PNG, one colour per implementation in every figure,
    whichever implementations a file holds, and the legend outside the panels."""

    def results(self, impls):
        rows = []
        for seq in (256, 512):
            case = f"b1_hq8_hkv8_sq{seq}_skv{seq}_d64_f32"
            problem = {"batch": 1, "heads_q": 8, "heads_kv": 8, "seq_q": seq, "seq_kv": seq,
                       "head_dim": 64, "causal": False, "dtype": "f32"}
            for k, impl in enumerate(impls):
                rows.append({"case": case, "impl": impl, "pass": "fwd", "status": "pass", "reason": "",
                             "device": "cpu", "problem": problem, "flops": 1e9 * seq,
                             "time": {"median_ms": 1.0 + k + seq / 256.0},
                             "memory": {"io_bytes": 1 << 20, "workspace_bytes": (k + 1) << 20}})
        return results_file(rows)

    def test_svg_beside_png_and_fixed_colours(self):
        if not has_matplotlib():
            self.skipTest("matplotlib not installed")
        plot = os.path.join(ROOT, "scripts", "plot.py")
        fills = {}
        with tempfile.TemporaryDirectory() as d:
            # The same implementation first in one file and second in the other.
            for name, impls in (("a", ["cpu.flash_fwd", "cpu.naive_3pass"]),
                                ("b", ["cpu.online_2pass", "cpu.flash_fwd", "cpu.naive_3pass"])):
                path = os.path.join(d, name + ".json")
                write(path, json.dumps(self.results(impls)))
                out = os.path.join(d, "out_" + name)
                p = run(plot, path, "--out", out)
                self.assertEqual(p.returncode, 0, p.stderr)
                files = sorted(os.listdir(out))
                pngs = [f for f in files if f.endswith(".png")]
                self.assertTrue(pngs, files)
                for f in pngs:
                    self.assertIn(f[:-4] + ".svg", files)
                with open(os.path.join(out, f"{name}_fwd_f32_tflops.svg"), encoding="utf-8") as f:
                    fills[name] = f.read().lower()
        # cpu.flash_fwd keeps its colour (COLORS) in both files; cpu.online_2pass's is only in b.
        self.assertIn("#1f77b4", fills["a"])
        self.assertIn("#1f77b4", fills["b"])
        self.assertNotIn("#2ca02c", fills["a"])
        self.assertIn("#2ca02c", fills["b"])

    def test_decode_bandwidth_one_panel_per_heads(self):
        # Decode rows (hbm_bytes): GB/s against the context, one panel per (head_dim, heads), the
        # batches as markers and the layouts as line styles in it; no TFLOP/s bars for them.
        if not has_matplotlib():
            self.skipTest("matplotlib not installed")
        rows = []
        for b, ctxs in ((1, (1024, 4096, 16384)), (8, (1024, 4096))):
            for ctx in ctxs:
                for ps in (0, 16):
                    for impl in ("cuda.flash_decode", "cuda.cudnn_sdpa"):
                        if impl == "cuda.cudnn_sdpa" and ps:
                            continue
                        problem = {"batch": b, "heads_q": 64, "heads_kv": 8, "seq_q": 1, "seq_kv": ctx,
                                   "head_dim": 128, "causal": True, "dtype": "bf16", "page_size": ps}
                        hbm = b * ctx * 8 * 128 * 2 * 2
                        rows.append({"case": f"b{b}_skv{ctx}_p{ps}", "impl": impl, "pass": "fwd",
                                     "status": "pass", "reason": "", "device": "cuda:0", "problem": problem,
                                     "flops": 4.0 * b * 64 * ctx * 128, "hbm_bytes": hbm,
                                     "time": {"median_ms": hbm / 2.5e9 * (1.1 if ps else 1.0)}})
        res = results_file(rows)
        res["context"] = {"ceilings": {"read_tbps": 3.0}, "devices": [{"name": "Test GPU"}]}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "dec.json.gz")
            import gzip
            with gzip.open(path, "wt", encoding="utf-8") as f:
                json.dump(res, f)
            out = os.path.join(d, "out")
            p = run(os.path.join(ROOT, "scripts", "plot.py"), path, "--out", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            files = sorted(os.listdir(out))
            self.assertIn("dec_fwd_bf16_bandwidth.svg", files)
            self.assertNotIn("dec_fwd_bf16_tflops.svg", files)
            with open(os.path.join(out, "dec_fwd_bf16_bandwidth.svg"), encoding="utf-8") as f:
                svg = f.read()
        self.assertEqual(svg.count("head_dim 128, 64:8 heads"), 1)  # one panel for both batches
        for text in ("batch 1", "batch 8", "cuda.flash_decode (page 16)", "cuda.flash_decode (contiguous)",
                     "read ceiling (3000 GB/s, same run)"):
            self.assertIn(text, svg)
        self.assertIn("#0b6e4f", svg.lower())  # cuda.flash_decode's colour (COLORS)


def kernel_names(root):
    """{kernel name: [files]} of every __global__ function defined under root (the emulators,
    which define __global__ away, excluded): the name after __global__, void and
    __launch_bounds__(...), as ncu and nsys show it without namespaces and template arguments."""
    names = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [x for x in dirnames if x != "emulation"]
        for fn in filenames:
            if not fn.endswith((".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, fn)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            at = 0
            while True:
                at = text.find("__global__", at)
                if at < 0:
                    break
                i = at + len("__global__")
                at = i
                rest = text[i:].lstrip()
                if rest.startswith("void"):
                    rest = rest[4:].lstrip()
                if rest.startswith("__launch_bounds__"):
                    depth, j = 0, len("__launch_bounds__")
                    while j < len(rest):
                        depth += {"(": 1, ")": -1}.get(rest[j], 0)
                        j += 1
                        if depth == 0:
                            break
                    rest = rest[j:].lstrip()
                name = ""
                for c in rest:
                    if not (c.isalnum() or c == "_"):
                        break
                    name += c
                if name:
                    names.setdefault(name, []).append(os.path.relpath(path, root))
    return names


class KernelNames(unittest.TestCase):
    """Every CUDA kernel has a name of its own (issue 18): a profile tells the implementations
    apart by kernel name alone (cuda.flash_fwd and cuda.flash_fwd_mma once both launched
    flash_fwd_kernel)."""

    def test_unique(self):
        names = kernel_names(os.path.join(ROOT, "impls", "cuda"))
        self.assertIn("flash_fwd_mma_kernel", names)
        self.assertIn("flash_fwd_cc_kernel", names)
        self.assertIn("bwd_preprocess_wgmma_kernel", names)
        dups = {n: f for n, f in names.items() if len(f) > 1}
        self.assertEqual(dups, {})


def attnbench_visible(p, i, j):
    """attnbench's visibility rule written out from its statement (problem.hpp), independently of
    scripts/peers: with c = i + seq_kv - seq_q, query i sees key j iff c - window_left <= j <=
    c + window_right, -1 leaving a side unbounded; causal caps the right side at 0."""
    c = i + p["seq_kv"] - p["seq_q"]
    wl, wr = p.get("window_left", -1), p.get("window_right", -1)
    if p.get("causal"):
        wr = 0 if wr == -1 else min(wr, 0)
    return (wl == -1 or j >= c - wl) and (wr == -1 or j <= c + wr)


def fa4_visible(kw, sq, skv, i, j):
    """FA4 4.0.0b36's mask as its interface.py resolves flash_attn_func's causal and window_size and
    its mask.py applies them (read there, written here): both sides None is dense; causal sets the
    right side to 0; a window keeps i + skv - sq - left <= j <= i + skv - sq + right, None being
    unbounded."""
    left, right = kw.get("window_size", (None, None))
    if kw["causal"]:
        right = 0
    c = i + skv - sq
    return (left is None or j >= c - left) and (right is None or j <= c + right)


SHAPES = [(sq, skv) for sq in range(1, 8) for skv in range(1, 8)] + [(3, 11), (11, 3), (16, 5), (5, 16)]
WINDOWS = [(wl, wr) for wl in (-1, 0, 1, 2, 5, 12) for wr in (-1, 0, 1, 3, 12)]


class PeerFlush(unittest.TestCase):
    """The peers' L2 flushes (scripts/peers/common.py), with PyTorch where it is installed (the GPU
    machine; skipped here without it): the read flush's sum on the CPU, and on a GPU both flushes
    through TorchCuda.time. The read flush once called torch.sum without a dim, which PyTorch
    refuses with out=: every peer row of a job failed (2026-12-06) and no test had run it."""

    def setUp(self):
        try:
            import torch  # noqa: F401
        except Exception as e:  # noqa: BLE001  (no PyTorch, or one that cannot load)
            self.skipTest(f"no PyTorch: {e}")
        self.torch = torch

    def test_read_flush_sums_every_word(self):
        torch = self.torch
        words = torch.arange(1, 4097, dtype=torch.int32)
        sink = torch.zeros((), dtype=torch.int64)
        peers_common.read_flush(torch, words, sink)
        self.assertEqual(int(sink), 4096 * 4097 // 2)

    def test_cuda_timer_both_flushes(self):
        torch = self.torch
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device")
        dev = peers_common.TorchCuda(torch, 0)
        x = torch.zeros(1 << 20, device=dev.dev)
        for flush in ("read", "write"):
            timing = {"hot": False, "flush": flush, "warmup_s": 0.0, "min_time_s": 0.0, "repetitions": 2}
            stats = dev.time(lambda: x.add_(1.0), timing, f"flush_{flush}")
            self.assertEqual(stats["flush"], flush)
        dev.sync()
        self.assertGreater(float(x[0]), 0.0)
        # A known pattern in the flush buffer and a stale sink, so a flush that reads nothing fails.
        dev.flush_words.fill_(3)
        dev.flush_sink.fill_(-1)
        peers_common.read_flush(torch, dev.flush_words, dev.flush_sink)
        dev.sync()
        self.assertEqual(int(dev.flush_sink), 3 * dev.flush_words.numel())


class PeersWindowSoftcap(unittest.TestCase):
    """Issue 30, the peers' side: sliding windows and soft-capping. FA4 gets them as its own
    arguments (fa4.fa4_window_args), PyTorch SDPA SKIPs them with the reason, FlexAttention (flex.py)
    runs them through a mask_mod and a score_mod that are pure functions checked here against
    attnbench's rule, against attnbench's own visible-pair counts (expand's FLOPs), and through the
    C API's float64 reference. The C-API tests need ATTNBENCH_BUILD_DIR with attnbench and
    libattnbench_capi.so (e.g. ATTNBENCH_BUILD_DIR=build-harness); without them they skip."""

    @staticmethod
    def problem(sq, skv, wl=-1, wr=-1, causal=False, softcap=0.0, dtype="bf16", hq=4, hkv=2, d=8, b=1):
        p = {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv, "head_dim": d,
             "causal": causal, "scale": 1.0 / d ** 0.5, "dtype": dtype}
        if wl >= 0:
            p["window_left"] = wl
        if wr >= 0:
            p["window_right"] = wr
        if softcap:
            p["softcap"] = softcap
        return p

    # ---------------------------------------------------------------- pure functions, no build needed

    def test_fa4_window_args(self):
        from scripts.peers import fa4
        P = self.problem
        cases = [
            (P(8, 8), {"causal": False}),
            (P(8, 8, causal=True), {"causal": True}),
            (P(8, 8, -1, 0), {"causal": True}),                                   # (unbounded, 0) is causal
            (P(8, 8, 128, 128), {"causal": False, "window_size": (128, 128)}),
            (P(8, 8, 128, 0, causal=True), {"causal": False, "window_size": (128, 0)}),
            (P(8, 8, 128, 7, causal=True), {"causal": False, "window_size": (128, 0)}),  # causal caps right at 0
            (P(8, 8, -1, 5, causal=True), {"causal": True}),
            (P(8, 8, 128, -1, causal=True), {"causal": False, "window_size": (128, 0)}),
            (P(8, 8, 0, 0), {"causal": False, "window_size": (0, 0)}),            # window 0: the diagonal only
            (P(8, 8, 0, -1), {"causal": False, "window_size": (0, None)}),        # -1: None, never a negative
            (P(8, 8, -1, 3), {"causal": False, "window_size": (None, 3)}),
            (P(8, 8, 0, 0, causal=True), {"causal": False, "window_size": (0, 0)}),
        ]
        for p, want in cases:
            with self.subTest(p=p):
                self.assertEqual(fa4.fa4_window_args(p), want)
                self.assertEqual(fa4.fa4_window_args({"problem": p}), want)  # a case or its problem
        # The call: window_size and softcap only when set, so a dense case's call is unchanged.
        self.assertEqual(fa4.fa4_kwargs(P(8, 8, causal=True), False),
                         {"softmax_scale": P(8, 8)["scale"], "deterministic": False, "return_lse": True,
                          "causal": True})
        kw = fa4.fa4_kwargs(P(8, 8, 4, 0, causal=True, softcap=30.0), True)
        self.assertEqual((kw["window_size"], kw["causal"], kw["softcap"], kw["deterministic"]), ((4, 0), False, 30.0, True))
        # FA4's mask under the mapped arguments is attnbench's, every key of every small shape.
        for sq, skv in SHAPES:
            for wl, wr in WINDOWS:
                for causal in (False, True):
                    p = P(sq, skv, wl, wr, causal)
                    kw = fa4.fa4_window_args(p)
                    for i in range(sq):
                        for j in range(skv):
                            self.assertEqual(fa4_visible(kw, sq, skv, i, j), attnbench_visible(p, i, j),
                                             f"{p} {kw} query {i} key {j}")
        # FA4 plans every window and soft cap (nothing SKIPs for them); f32 SKIPs as before.
        b = fa4.Fa4(False, {})
        self.assertIsNone(b.plan_skip({"problem": P(8, 8, 3, 0, True, softcap=50.0)}, "bwd"))
        self.assertIn("f16 and bf16", b.plan_skip({"problem": P(8, 8, 3, 0, dtype="f32")}, "fwd"))

    def test_flex_mask_is_attnbench_rule(self):
        """flex.mask_mod on Python ints, every (query, key) of small shapes, seq_q above and below
        seq_kv, against the rule written out from its statement."""
        from scripts.peers import flex
        n = 0
        for sq, skv in SHAPES:
            for wl, wr in WINDOWS:
                for causal in (False, True):
                    p = self.problem(sq, skv, wl, wr, causal)
                    m = flex.mask_mod(p)
                    self.assertEqual(m is None, not causal and wl < 0 and wr < 0, p)
                    for i in range(sq):
                        for j in range(skv):
                            got = True if m is None else m(0, 1, i, j)
                            self.assertIsInstance(got, bool)
                            self.assertEqual(got, attnbench_visible(p, i, j), f"{p} query {i} key {j}")
                            n += 1
        self.assertGreater(n, 50000)
        self.assertTrue(flex.has_feature(self.problem(4, 4, softcap=1.0)))
        self.assertTrue(flex.has_feature(self.problem(4, 4, 0, -1)))
        self.assertFalse(flex.has_feature(self.problem(4, 4, causal=True)))

    def test_flex_score_mod_is_the_soft_cap(self):
        import math
        from scripts.peers import flex
        self.assertIsNone(flex.score_mod(self.problem(4, 4), math.tanh))
        f = flex.score_mod(self.problem(4, 4, softcap=30.0), math.tanh)
        for s in (-100.0, -3.0, 0.0, 0.5, 29.0, 1e4):
            self.assertAlmostEqual(f(s, 0, 0, 1, 2), 30.0 * math.tanh(s / 30.0), places=12)
        self.assertLess(f(1e4, 0, 0, 0, 0), 30.0 + 1e-12)

    def test_problem_fields_checked(self):
        ok = self.problem(4, 6, 2, 0, True, softcap=5.0)
        peers_common.check_problem(ok)
        for bad, field in (({"window": 3}, "problem.window"), ({"window_left": -2}, "problem.window_left"),
                           ({"window_right": 1.5}, "problem.window_right"), ({"softcap": -1}, "problem.softcap"),
                           ({"softcap": "30"}, "problem.softcap")):
            with self.subTest(bad=bad), self.assertRaises(peers_common.BadInput) as e:
                peers_common.check_problem(dict(ok, **bad))
            self.assertIn(field, str(e.exception))
        self.assertEqual(peers_common.visible_bounds(self.problem(4, 6)), (None, None))
        self.assertEqual(peers_common.visible_bounds(self.problem(4, 6, causal=True)), (None, 2))
        self.assertEqual(peers_common.visible_bounds(self.problem(6, 4, 3, 1)), (-5, -1))

    def test_sdpa_skips_windows_and_softcap(self):
        from scripts.peers import torch_sdpa
        b = torch_sdpa.Sdpa("flash")
        for p, why in ((self.problem(8, 8, 4, 4), "no sliding window"), (self.problem(8, 8, 4, 0, True), "no sliding window"),
                       (self.problem(8, 8, softcap=30.0), "no logit soft-capping")):
            for ps in peers_common.PASSES:
                r = b.plan_skip({"problem": p}, ps)
                self.assertIn(why, r)
                self.assertIn("torch.flex_attention", r)
        self.assertIsNone(b.plan_skip({"problem": self.problem(8, 8, causal=True)}, "fwd"))

    # ---------------------------------------------------------------- dry runs (attnbench expand)

    @unittest.skipUnless(BUILD and os.access(os.path.join(BUILD, "attnbench"), os.X_OK),
                         "needs ATTNBENCH_BUILD_DIR with the attnbench binary (e.g. build-harness)")
    def test_dry_runs_plan_flex_and_fa4_and_skip_sdpa(self):
        peers = os.path.join(ROOT, "scripts", "peers", "peers.py")
        for cfg, n_cases, why in (("window.json", 18, "PyTorch SDPA has no sliding window"),
                                  ("softcap.json", 24, "PyTorch SDPA has no logit soft-capping")):
            with self.subTest(cfg=cfg):
                path = os.path.join(ROOT, "configs", cfg)
                cases = peers_common.expand(EXE, path)
                self.assertEqual(len(cases), n_cases)
                self.assertTrue(all(c["problem"].get("window_left", -1) >= 0 or c["problem"].get("softcap", 0) > 0
                                    for c in cases))
                p = run(peers, path, "--dry-run", "--attnbench", EXE)
                self.assertEqual(p.returncode, 0, p.stderr)
                # Per case: 5 FA4 rows, 3 FlexAttention rows, 12 PyTorch SDPA rows that SKIP with the reason.
                for c in cases:
                    self.assertIn(f"#{c['case_index']:<4} {c['case']}", p.stdout)
                self.assertEqual(p.stdout.count(" 20 rows "), n_cases)
                self.assertIn(f"{20 * n_cases} rows: fa4.flash_attn, fa4.flash_attn[deterministic=1], torch.sdpa_flash, "
                              "torch.sdpa_efficient, torch.sdpa_cudnn, torch.sdpa_math, torch.flex_attention", p.stdout)
                skip = [x for x in p.stdout.splitlines() if x.strip().startswith("SKIP")]
                self.assertEqual(len(skip), n_cases)
                for x in skip:
                    self.assertIn("SKIP 12: torch.sdpa_flash, torch.sdpa_efficient, torch.sdpa_cudnn, torch.sdpa_math "
                                  "(fwd,bwd,fwd_bwd): " + why, x)
                    rows = x.split("): ", 1)[0]  # the rows that SKIP, before the reason
                    self.assertNotIn("fa4", rows)
                    self.assertNotIn("flex_attention", rows)
                self.assertIn(f"{12 * n_cases} of them SKIP without running", p.stdout)
                q = run(os.path.join(ROOT, "scripts", "peers", "flex.py"), path, "--dry-run", "--attnbench", EXE)
                self.assertEqual(q.returncode, 0, q.stderr)
                self.assertIn(f"{3 * n_cases} rows: torch.flex_attention", q.stdout)
        # A dense config: no FlexAttention rows unless asked, so its row count is unchanged.
        grid = os.path.join(ROOT, "configs", "fa3_grid.json")
        p = run(peers, grid, "--dry-run", "--attnbench", EXE)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("612 rows: fa4.flash_attn", p.stdout)  # 36 cases x (5 FA4 + 12 PyTorch)
        self.assertNotIn("flex", p.stdout)
        q = run(os.path.join(ROOT, "scripts", "peers", "flex.py"), grid, "--dry-run", "--attnbench", EXE)
        self.assertEqual(q.returncode, 2)
        self.assertIn("rows for none of its cases", q.stderr)
        q = run(os.path.join(ROOT, "scripts", "peers", "flex.py"), grid, "--dry-run", "--flex-dense", "--attnbench", EXE)
        self.assertEqual(q.returncode, 0, q.stderr)
        self.assertIn("108 rows: torch.flex_attention", q.stdout)

    @unittest.skipUnless(BUILD and os.access(os.path.join(BUILD, "attnbench"), os.X_OK),
                         "needs ATTNBENCH_BUILD_DIR with the attnbench binary (e.g. build-harness)")
    def test_flex_mask_counts_attnbench_visible_pairs(self):
        """attnbench itself counts a window's visible pairs (its FLOPs count only those): the mask
        FlexAttention is given sees exactly as many, in every case of a sweep of small shapes."""
        from scripts.peers import flex
        shapes = [(sq, skv) for sq in (1, 5, 13) for skv in (1, 6, 13)]
        zipped = {"seq_q": [], "seq_kv": [], "window_left": [], "window_right": [], "causal": []}
        for sq, skv in shapes:
            for wl, wr in ((0, 0), (2, -1), (-1, 1), (3, 5), (20, 0)):
                for causal in (False, True):
                    for k, v in zip(zipped, (sq, skv, wl, wr, causal)):
                        zipped[k].append(v)
        cfg = {"name": "flex_mask", "groups": [{"problem": {"head_dim": 8, "heads": 1, "batch": 1, "dtype": "f32"},
                                                "sweep": {"zip": [zipped]}, "implementations": ["cpu.naive_3pass"],
                                                "passes": ["fwd"]}]}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "flex_mask.json")
            write(path, json.dumps(cfg))
            cases = peers_common.expand(EXE, path)
        self.assertEqual(len(cases), len(zipped["seq_q"]))
        for c in cases:
            p = c["problem"]
            m = flex.mask_mod(p)
            pairs = sum(1 for i in range(p["seq_q"]) for j in range(p["seq_kv"]) if m(0, 0, i, j))
            self.assertEqual(4 * p["head_dim"] * pairs, c["flops"]["fwd"], c["case"])

    # ---------------------------------------------------------------- the C API (version 2)

    def capi(self):
        lib = os.path.join(BUILD, "libattnbench_capi.so") if BUILD else ""
        if not (BUILD and os.path.isfile(lib) and os.access(os.path.join(BUILD, "attnbench"), os.X_OK)):
            self.skipTest("needs ATTNBENCH_BUILD_DIR with attnbench and libattnbench_capi.so (e.g. build-harness): "
                          "the C API is not built")
        return peers_common.Capi(lib)

    def test_capi_declares_and_refuses(self):
        capi = self.capi()
        self.assertEqual(capi.lib.ab_capi_version(), 4)
        p = self.problem(7, 11, 2, 1, dtype="f32")
        for ps in ("fwd", "bwd"):
            c = capi.call("cpu.online_2pass", p, ps)
            try:
                self.assertEqual(c.supports(), "sliding window not supported")
            finally:
                c.close()
        c = capi.call("cpu.naive_3pass", dict(p, softcap=5.0), "fwd")
        try:
            self.assertEqual(c.supports(), "")
        finally:
            c.close()
        # An unknown problem key is refused by name (it would otherwise be verified as dense).
        with self.assertRaises(RuntimeError) as e:
            capi.call("cpu.naive_3pass", dict(p, window=3), "fwd")
        self.assertIn("problem.window", str(e.exception))
        with self.assertRaises(RuntimeError) as e:
            capi.case({"problem": dict(p, sliding=3), "inputs": {}, "verify": {}, "passes_run": ["fwd"]}, "cpu")
        self.assertIn("problem.sliding", str(e.exception))
        with self.assertRaises(RuntimeError) as e:
            capi.call("cpu.naive_3pass", dict(p, window_left=-2), "fwd")
        self.assertIn("window_left", str(e.exception))

    def test_capi_reference_applies_window_and_softcap(self):
        """A pure-Python peer that uses flex.py's mask_mod and score_mod on the harness's inputs
        PASSes attnbench's verification (float64 reference, cpu.naive_3pass baseline) on windowed and
        soft-capped cases with seq_q above and below seq_kv and GQA; the same computation with the
        window or the cap left out FAILs on O and LSE: the reference is not the dense one."""
        import ctypes
        import math
        from scripts.peers import flex
        capi = self.capi()
        cfg = {"name": "flex_ref", "groups": [{
            "problem": {"head_dim": 8, "heads_q": 4, "heads_kv": 2, "batch": 2, "dtype": "f32"},
            "sweep": {"zip": [{"seq_q": [7, 12, 9, 10, 11, 6], "seq_kv": [12, 7, 9, 10, 11, 9],
                               "causal": [False, True, False, True, False, True],
                               "window_left": [2, 3, 0, -1, -1, 1], "window_right": [1, -1, 0, 2, -1, 0],
                               "softcap": [0, 0, 2.5, 1.5, 0.75, 0.5]}]},
            "implementations": ["cpu.naive_3pass"], "passes": ["fwd"], "verify": {"mode": "full"}}]}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "flex_ref.json")
            write(path, json.dumps(cfg))
            cases = peers_common.expand(EXE, path)
        self.assertEqual(len(cases), 6)
        dev = peers_common.HostCpu()

        def attention(case, t, use_mask=True, use_cap=True):
            p = case["problem"]
            b, hq, hkv, sq, skv, d = (p[k] for k in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"))
            arr = {n: (ctypes.c_float * (t[n].nbytes // 4)).from_address(t[n].ptr) for n in ("q", "k", "v")}
            mask = flex.mask_mod(p) if use_mask else None
            cap = flex.score_mod(p, math.tanh) if use_cap else None
            o, lse = dev.empty(case, "o"), dev.empty(case, "lse")
            O = (ctypes.c_float * (o.nbytes // 4)).from_address(o.ptr)
            L = (ctypes.c_float * (lse.nbytes // 4)).from_address(lse.ptr)
            for bi in range(b):
                for h in range(hq):
                    g = h // (hq // hkv)
                    for i in range(sq):
                        qo = ((bi * sq + i) * hq + h) * d
                        s = {}
                        for j in range(skv):
                            if mask is None or mask(bi, h, i, j):
                                ko = ((bi * skv + j) * hkv + g) * d
                                x = p["scale"] * sum(arr["q"][qo + e] * arr["k"][ko + e] for e in range(d))
                                s[j] = cap(x, bi, h, i, j) if cap else x
                        if not s:
                            L[(bi * hq + h) * sq + i] = -math.inf
                            for e in range(d):
                                O[qo + e] = 0.0
                            continue
                        m = max(s.values())
                        z = sum(math.exp(x - m) for x in s.values())
                        L[(bi * hq + h) * sq + i] = m + math.log(z)
                        for e in range(d):
                            O[qo + e] = sum(math.exp(x - m) / z * arr["v"][((bi * skv + j) * hkv + g) * d + e]
                                            for j, x in s.items())
            return {"O": o, "LSE": lse}

        for case in cases:
            p = case["problem"]
            with self.subTest(case=case["case"]):
                case["passes_run"] = ["fwd"]
                cc = capi.case(case, "cpu")
                try:
                    t = dev.inputs(cc, case)
                    out = attention(case, t)
                    v = cc.verify("fwd", {n: x.ptr for n, x in out.items()})
                    self.assertTrue(v["ok"], v.get("reason"))
                    self.assertEqual(v["baseline"], "cpu.naive_3pass")
                    wrong = []
                    if flex.mask_mod(p) is not None and peers_common.has_window(p):
                        wrong.append(("window left out", attention(case, t, use_mask=False)))
                    if peers_common.softcap(p) > 0:
                        wrong.append(("soft cap left out", attention(case, t, use_cap=False)))
                    self.assertTrue(wrong)
                    for what, out in wrong:
                        v = cc.verify("fwd", {n: x.ptr for n, x in out.items()})
                        self.assertFalse(v["ok"], what)
                        bad = {o["name"] for o in v["outputs"] if not o["ok"]}
                        # A window of one key (wl0_wr0) leaves O alone whatever the cap: the LSE shows it.
                        self.assertTrue(bad & {"O", "LSE"}, f"{what}: {v['reason']}")
                        if what == "window left out":
                            self.assertIn("O", bad, v["reason"])
                finally:
                    cc.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
