#!/usr/bin/env python3
"""Test of scripts/plot.py with matplotlib's Agg backend (no display): the committed H200 results
file in, one valid PNG per (pass, dtype, figure kind) out, and a bad input refused with exit code 2.
Exits 77 (CTest: skipped, SKIP_RETURN_CODE) when matplotlib is not installed; scripts/test.sh
installs it (python3-matplotlib) when run as root. Also `python3 tests/test_plot.py`."""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "h200", "fa2_grid.json")
PNG = b"\x89PNG\r\n\x1a\n"


def plot(*args):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "scripts.plot", *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Plot(unittest.TestCase):
    def test_every_figure_of_a_results_file(self):
        with tempfile.TemporaryDirectory() as out:
            p = plot(RESULTS, "--out", out, "--stem", "grid")
            self.assertEqual(p.returncode, 0, p.stderr)
            pngs = sorted(glob.glob(os.path.join(out, "*.png")))
            for pass_ in ("fwd", "bwd", "fwd_bwd"):
                for kind in ("tflops", "speedup", "memory"):
                    name = os.path.join(out, f"grid_{pass_}_bf16_{kind}.png")
                    self.assertIn(name, pngs, "\n".join(pngs))
            for name in pngs:
                with open(name, "rb") as f:
                    head = f.read(8)
                self.assertEqual(head, PNG, name)
                self.assertGreater(os.path.getsize(name), 10000, f"{name}: too small for a figure")

    def test_bandwidth_of_memory_bound_rows(self):
        """Decode rows (hbm_bytes, gbps) get the bandwidth figure with the run's read ceiling; the
        grid's compute-bound rows do not."""
        import json
        with open(RESULTS) as f:
            res = json.load(f)
        res["context"].setdefault("ceilings", {})["read_tbps"] = 4.5
        # The read curve: calls of 10 us + bytes / 4.5 TB/s (a dotted line of the batch-1 rows' sizes).
        res["context"]["ceilings"]["read_curve"] = [
            {"bytes": nb, "tbps": nb / (1e-5 + nb / 4.5e12) / 1e12} for nb in (8 << 20, 1 << 30)]
        rows = []
        for impl, frac in (("cuda.flash_decode", 0.9), ("cuda.naive_3pass", 0.1)):
            for ps in (16, 64):
                for ctx in (1024, 8192, 65536):
                    for b in (1, 8):
                        hbm = 2 * b * ctx * 8 * 128 * 2
                        ms = hbm / (frac * 4.5e12) * 1e3
                        rows.append({"case": f"b{b}_hq64_hkv8_sq1_skv{ctx}_d128_causal_bf16_page{ps}",
                                     "impl": impl, "options": {}, "pass": "fwd", "status": "pass",
                                     "device": "cuda:0", "problem": {"batch": b, "heads_q": 64,
                                     "heads_kv": 8, "seq_q": 1, "seq_kv": ctx, "head_dim": 128,
                                     "causal": True, "dtype": "bf16", "page_size": ps},
                                     "time": {"median_ms": ms}, "hbm_bytes": hbm,
                                     "gbps": hbm / (ms * 1e-3) / 1e9})
        res["rows"] = rows
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "decode.json")
            with open(path, "w") as f:
                json.dump(res, f)
            p = plot(path, "--out", out, "--stem", "dec")
            self.assertEqual(p.returncode, 0, p.stderr)
            name = os.path.join(out, "dec_fwd_bf16_bandwidth.png")
            self.assertTrue(os.path.exists(name), p.stdout)
            with open(name, "rb") as f:
                self.assertEqual(f.read(8), PNG)
            with open(os.path.splitext(name)[0] + ".svg") as f:
                svg = f.read()
            self.assertIn("read ceiling (4500 GB/s", svg)
            self.assertIn("a read of the batch-1 rows", svg)
            p = plot(RESULTS, "--out", out, "--stem", "grid")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(glob.glob(os.path.join(out, "grid_*_bandwidth.png")), [])

    def test_bad_input_exits_2(self):
        with tempfile.TemporaryDirectory() as out:
            bad = os.path.join(out, "bad.json")
            with open(bad, "w") as f:
                f.write('{"rows": 3}')
            p = plot(bad, "--out", out)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("plot.py:", p.stderr)
            self.assertEqual(glob.glob(os.path.join(out, "*.png")), [])


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("test_plot: SKIP: matplotlib is not installed (python3-matplotlib, or pip install '.[plot]')")
        sys.exit(77)
    unittest.main(verbosity=2)
