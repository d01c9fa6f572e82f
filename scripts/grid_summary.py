#!/usr/bin/env python3
"""The summary tables (results/h200/README.md) of a grid run and its peers, generated from the committed files:

  python3 scripts/grid_summary.py fa2 results/h200/fa2_grid.json results/h200/fa2_grid.torch_sdpa.json
  python3 scripts/grid_summary.py fa3 results/h200/fa3_grid.json results/h200/fa3_grid.peers.json

fa2 ("Results on the H200"): per pass (fwd, fwd_bwd) and (head_dim, causal) cell, TFLOP/s per seq
of our tensor-core kernel, PyTorch's flash and cuDNN backends, cuda.cudnn_sdpa,
cuda.standard_cublas and the CUDA-core flash kernel, with the ratios to PyTorch flash,
cuda.cudnn_sdpa and cuda.standard_cublas.

fa3 ("Against FlashAttention-3 and cuDNN"): per pass (fwd, bwd, fwd_bwd) and cell, the best of
attnbench's own kernels (every implementation but cuda.cudnn_sdpa, which is cuDNN; the winner is
named), FA4 (its SM90 kernels: FlashAttention-3's design) and its deterministic backward, cuDNN
through PyTorch and through cuda.cudnn_sdpa, PyTorch's FlashAttention-2, and the ratios of ours to
FA4 and to both cuDNNs. Rows that did not pass (failed verification, skipped) give "-".

Markdown on stdout; with --readme FILE the tables replace the lines between FILE's markers
`<!-- <grid>_grid_summary:begin ... -->` and `<!-- <grid>_grid_summary:end -->` instead (the
README's section is generated, never typed). Exit 2 on a missing or unreadable file, one that is
not a results file, or a README without the markers.
"""
import os
import argparse
import sys
from datetime import datetime

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.readme_block import generated  # noqa: E402
from scripts.results_io import load_results  # noqa: E402

VENDOR = {"cuda.cudnn_sdpa"}


def fail(msg):
    print(f"grid_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def index(rows):
    """(impl, options text, pass, head_dim, causal, seq) -> TFLOP/s of passing timed rows."""
    out = {}
    for r in rows:
        if r.get("status") != "pass" or not r.get("tflops"):
            continue
        p = r["problem"]
        options = ",".join(f"{k}={v}" for k, v in sorted((r.get("options") or {}).items()))
        out[(r["impl"], options, r["pass"], p["head_dim"], bool(p["causal"]), p["seq_q"])] = r["tflops"]
    return out


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}×"


def table(t, seqs, cells, ps, lines_of, title):
    print(f"**{ps}** ({title})\n")
    print("| head_dim, causal | implementation | " + " | ".join(str(s) for s in seqs) + " |")
    print("|---|---|" + "---:|" * len(seqs))
    for d, c in cells:
        for i, (name, vals) in enumerate(lines_of(d, c)):
            head = f"{d}, {'causal' if c else 'non-causal'}" if i == 0 else ""
            print(f"| {head} | {name} | " + " | ".join(vals) + " |")
    print()


def same_job(run_res, peer_res, default):
    """The tables' claim about the two files: `default` (e.g. "one GPU job"), unless their dates
    (context.date, ISO 8601) lie more than 2 hours apart (a device session holds a machine for
    at most 30 minutes): then "NOT one GPU job" with both dates. Files without dates keep the
    claim. An incomplete peers' file is said too."""
    def when(res):
        d = (res.get("context") or {}).get("date")
        try:
            return datetime.fromisoformat(d.replace("Z", "+00:00")) if d else None
        except (AttributeError, ValueError):
            return None
    a, b = when(run_res), when(peer_res)
    if a and b and abs((a - b).total_seconds()) > 7200:
        notes = [f"NOT one GPU job: ours from {a:%Y-%m-%d %H:%M}, the peers from {b:%Y-%m-%d %H:%M} UTC"]
    else:
        notes = [default]
    if peer_res.get("complete") is False:
        notes.append("the peers' file is incomplete")
    return notes


def fa2(t, notes):
    ours_of = {"fwd": "cuda.flash_fwd_mma", "fwd_bwd": "cuda.flash_bwd_mma"}
    cores_of = {"fwd": "cuda.flash_fwd", "fwd_bwd": "cuda.flash_bwd"}
    seqs = sorted({k[5] for k in t})
    cells = sorted({(k[3], k[4]) for k in t})
    for ps in ("fwd", "fwd_bwd"):
        ours, cores = ours_of[ps], cores_of[ps]

        def lines(d, c):
            get = lambda impl, s: t.get((impl, "", ps, d, c, s))  # noqa: E731
            return [
                (f"`{ours}`", [fmt(get(ours, s)) for s in seqs]),
                ("PyTorch flash (FA2)", [fmt(get("torch.sdpa_flash", s)) for s in seqs]),
                (f"`{ours}` / PyTorch flash", [ratio(get(ours, s), get("torch.sdpa_flash", s)) for s in seqs]),
                ("`cuda.cudnn_sdpa`", [fmt(get("cuda.cudnn_sdpa", s)) for s in seqs]),
                ("PyTorch cuDNN", [fmt(get("torch.sdpa_cudnn", s)) for s in seqs]),
                (f"`{ours}` / `cuda.cudnn_sdpa`", [ratio(get(ours, s), get("cuda.cudnn_sdpa", s)) for s in seqs]),
                ("`cuda.standard_cublas`", [fmt(get("cuda.standard_cublas", s)) for s in seqs]),
                (f"`{cores}` (CUDA cores)", [fmt(get(cores, s)) for s in seqs]),
                (f"`{ours}` / `cuda.standard_cublas`",
                 [ratio(get(ours, s), get("cuda.standard_cublas", s)) for s in seqs]),
            ]
        table(t, seqs, cells, ps, lines, "; ".join(["TFLOP/s", *notes]))


def short(impl):
    return impl.replace("cuda.", "")


def fa3(t, own, notes):
    seqs = sorted({k[5] for k in t})
    cells = sorted({(k[3], k[4]) for k in t})
    for ps in ("fwd", "bwd", "fwd_bwd"):
        if not any(k[2] == ps for k in t):
            continue

        def lines(d, c):
            get = lambda impl, s, options="": t.get((impl, options, ps, d, c, s))  # noqa: E731

            def best(s):
                cand = [(v, k[0]) for k, v in t.items() if k[0] in own and not k[1] and k[2:] == (ps, d, c, s)]
                return max(cand) if cand else (None, None)

            b = [best(s) for s in seqs]
            fa4, cudnn, ours_cudnn = ([get(i, s) for s in seqs] for i in ("fa4.flash_attn", "torch.sdpa_cudnn",
                                                                          "cuda.cudnn_sdpa"))
            out = [
                ("ours: best of attnbench's kernels", [fmt(v) for v, _ in b]),
                ("(which)", ["-" if n is None else f"`{short(n)}`" for _, n in b]),
                ("FA4 (FlashAttention-3 design)", [fmt(x) for x in fa4]),
            ]
            if ps != "fwd":
                out.append(("FA4, deterministic backward", [fmt(get("fa4.flash_attn", s, "deterministic=1")) for s in seqs]))
            out += [
                ("cuDNN (PyTorch)", [fmt(x) for x in cudnn]),
                ("cuDNN (`cuda.cudnn_sdpa`)", [fmt(x) for x in ours_cudnn]),
                ("PyTorch flash (FA2)", [fmt(get("torch.sdpa_flash", s)) for s in seqs]),
                ("ours / FA4", [ratio(v, f) for (v, _), f in zip(b, fa4)]),
                ("ours / cuDNN (PyTorch)", [ratio(v, f) for (v, _), f in zip(b, cudnn)]),
                ("ours / `cuda.cudnn_sdpa`", [ratio(v, f) for (v, _), f in zip(b, ours_cudnn)]),
                ("FA4 / cuDNN (PyTorch)", [ratio(f, g) for f, g in zip(fa4, cudnn)]),
            ]
            return out
        table(t, seqs, cells, ps, lines, "; ".join(["TFLOP/s", *notes]))


def main(argv=None, grid=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if grid is None:
        ap.add_argument("grid", choices=("fa2", "fa3"), help="which README section")
    ap.add_argument("run", help="attnbench results of the grid config")
    ap.add_argument("peers", help="the peers' results of the same config (torch_sdpa.py, peers.py)")
    ap.add_argument("--readme", metavar="FILE", help="write the tables between FILE's markers instead of stdout")
    a = ap.parse_args(argv)
    which = grid or a.grid
    run_res = load_results(a.run, fail, "grid")
    peer_res = load_results(a.peers, fail, "peer")
    run_rows = run_res["rows"]
    t = index(run_rows)
    own = {r["impl"] for r in run_rows if r["impl"].startswith("cuda.") and r["impl"] not in VENDOR}
    t.update(index(peer_res["rows"]))
    notes = same_job(run_res, peer_res, "PyTorch from the same GPU job" if which == "fa2" else "one GPU job")
    generated(f"{which}_grid_summary", [a.run, a.peers], a.readme, fail,
              lambda: fa2(t, notes) if which == "fa2" else fa3(t, own, notes))
    return 0


if __name__ == "__main__":
    run(main)
