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
