#!/usr/bin/env python3
"""attnbench's outputs in other people's tools: Google Benchmark's tools/compare.py reads two
--benchmark_out files (names that match whatever flags repeated the config, nanoseconds, the
counters, attnbench's context), and pandas reads `table --format csv`. (Failed rows as
error_occurred entries: test_faults, where planted implementations fail.)

compare.py comes from Debian's libbenchmark-tools (/usr/share/benchmark/compare.py; scripts/test.sh
installs it as root) or GBENCH_COMPARE; it needs SciPy, looked for in this interpreter and in
/usr/bin/python3. Without them the compare.py tests skip, with the reason.
"""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ.get("ATTNBENCH_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build"))
EXE = os.path.join(BUILD, "attnbench")
COMPARE_CANDIDATES = [os.environ.get("GBENCH_COMPARE", ""), "/usr/share/benchmark/compare.py",
                      "/usr/share/benchmark/tools/compare.py"]


def has_module(python, module):
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def python_with(module):
    for py in (sys.executable, "/usr/bin/python3"):
        if py and os.path.exists(py) and has_module(py, module):
            return py
    return None


def find_compare():
    for c in COMPARE_CANDIDATES:
        if c and os.path.isfile(c):
            return c
    return None


def attnbench(*args, env=None):
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env)


# A small sweep from the command line (two cases, two CPU implementations), 9 repetitions: the
# number compare.py wants for its U test.
RUN = ["run", "--seq", "32,48", "--heads-q", "2", "--head-dim", "32", "--impl", "cpu.naive_3pass",
       "--impl", "cpu.flash_fwd", "--pass", "fwd", "--quiet", "--benchmark_min_time=0.002"]


class GbenchInterop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="attnbench_gbench_")
        cls.files = {}
        # base: the repetitions from a flag; new: the same number, and a different min time, also
        # from flags: Google Benchmark would name the rows differently, attnbench does not.
        for name, extra in (("base", ["--benchmark_repetitions=9"]),
                            ("new", ["--benchmark_repetitions=9", "--benchmark_min_time=0.003"])):
            gb = os.path.join(cls.dir, f"{name}.gb.json")
            res = os.path.join(cls.dir, f"{name}.json")
            p = attnbench(*RUN, *extra, f"--benchmark_out={gb}", "--out", res)
            if p.returncode != 0:
                raise AssertionError(f"attnbench run exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
            cls.files[name] = (gb, res, p.stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def load(self, name):
        with open(self.files[name][0]) as f:
            return json.load(f)

    def test_names_units_counters_context(self):
        j = self.load("base")
        runs = [b for b in j["benchmarks"] if b.get("run_type") == "iteration"]
        self.assertEqual(len(runs), 2 * 2 * 9)  # 2 cases x 2 implementations x 9 repetitions
        names = {b["name"] for b in runs}
        self.assertIn("cpu.naive_3pass:b1_hq2_hkv2_sq32_skv32_d32_f32:fwd", names)
        for b in runs:
            self.assertNotIn("/", b["name"], b["name"])  # no /repeats:9, /min_time:..., /manual_time
            self.assertEqual(b["time_unit"], "ns")
            self.assertGreater(b["real_time"], 100)  # sub-millisecond rows are not 0
            for counter in ("TFLOP/s", "bytes_per_second", "io_bytes"):
                self.assertIn(counter, b)
            self.assertGreater(b["TFLOP/s"], 0)
        ctx = j["context"]
        for key in ("attnbench_git_revision", "attnbench_config_hash", "attnbench_device"):
            self.assertIn(key, ctx)
        with open(self.files["base"][1]) as f:
            res = json.load(f)
        self.assertEqual(ctx["attnbench_config_hash"], res["context"]["config_hash"])
        self.assertEqual(ctx["attnbench_git_revision"], res["context"]["git_revision"])
        # The same names in both files, whatever the flags.
        self.assertEqual({b["name"] for b in self.load("new")["benchmarks"]},
                         {b["name"] for b in j["benchmarks"]})

    def test_stdout_is_the_table_alone(self):
        out = self.files["base"][2]
        self.assertIn("err/naive", out)
        self.assertNotIn("Benchmark ", out)  # no Google Benchmark console header on stdout
        self.assertNotIn("_median", out)

    def test_benchmark_format_json_goes_to_stdout(self):
        p = attnbench(*RUN, "--benchmark_repetitions=2", "--benchmark_format=json", "--out",
                      os.path.join(self.dir, "fmt.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        report = json.loads(p.stdout)  # stdout is Google Benchmark's report, nothing else
        self.assertTrue(any(b["name"].startswith("cpu.naive_3pass:") for b in report["benchmarks"]))
        self.assertIn("err/naive", p.stderr)  # the table went to stderr

    def test_compare_py_reads_the_files(self):
        compare = find_compare()
        if not compare:
            self.skipTest("Google Benchmark's compare.py not found (Debian: apt-get install libbenchmark-tools)")
        py = python_with("scipy")
        if not py:
            self.skipTest("compare.py needs SciPy (Debian: python3-scipy)")
        base, new = self.files["base"][0], self.files["new"][0]
        p = subprocess.run([py, compare, "--no-color", "benchmarks", base, new], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        name = "cpu.naive_3pass:b1_hq2_hkv2_sq32_skv32_d32_f32:fwd"
        # Every repetition matched by name, its times printed in nanoseconds (not 0), and the U
        # test (9 repetitions each).
        rows = [l for l in lines if l.startswith(name + " ")]
        self.assertEqual(len(rows), 9, p.stdout)
        for l in rows:
            fields = l.split()
            old_time, new_time = float(fields[3]), float(fields[4])
            self.assertGreater(old_time, 100, l)
            self.assertGreater(new_time, 100, l)
        self.assertTrue(any(l.startswith(name + "_pvalue") for l in lines), p.stdout)
        self.assertTrue(any(l.startswith(name + "_median") for l in lines), p.stdout)
        self.assertIn("OVERALL_GEOMEAN", p.stdout)

    def test_table_csv_is_tidy_for_pandas(self):
        res = self.files["base"][1]
        p = attnbench("table", res, "--format", "csv")
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = list(csv.reader(io.StringIO(p.stdout)))
        header = rows[0]
        self.assertEqual(len(rows), 1 + 2 * 2)  # one header, one line per results row
        for r in rows[1:]:
            self.assertEqual(len(r), len(header))
        for col in ("case", "impl", "pass", "median_ms", "cv", "tflops"):
            self.assertIn(col, header)
        py = python_with("pandas")
        if py:
            code = ("import sys, pandas as pd; d = pd.read_csv(sys.stdin); "
                    "assert len(d) == 4 and d['median_ms'].gt(0).all() and set(d['impl']) == "
                    "{'cpu.naive_3pass', 'cpu.flash_fwd'}, d; print('ok')")
            q = subprocess.run([py, "-c", code], input=p.stdout, capture_output=True, text=True)
            self.assertEqual(q.returncode, 0, q.stdout + q.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
