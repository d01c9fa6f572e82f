#!/usr/bin/env python3
"""Issue 30's tables (sliding windows, soft caps, varlen) from runs, their peers and the same job's
dense rows, generated from the committed files:

  python3 scripts/variants_summary.py --dense DENSE.json RUN.json PEERS.json [RUN.json PEERS.json ...]
  python3 scripts/variants_summary.py --dense job/dense.json job/window.json job/window.peers.json \\
      job/softcap.json job/softcap.peers.json job/varlen.json job/varlen.peers.json --readme FILE

Per RUN file and pass, one line per case: the best of attnbench's own kernels (every cuda.*
implementation but cuda.cudnn_sdpa and the baselines cuda.naive_3pass, cuda.standard_cublas; the
winner named), the own dense TFLOP/s of the same kernel from --dense (the same pass, head_dim,
causal and seq; a varlen case: the largest dense seq not above its mean sequence length), FA4
(fa4.flash_attn without options), cuDNN (cuda.cudnn_sdpa, and PyTorch's backend) and the ratios.
TFLOP/s count the unmasked scores only (docs/results_schema.md), so a window's figures compare
with dense ones. Then issue 30's targets, with the cases that miss: the forward of
cuda.flash_fwd_wgmma under a window or varlen at seq >= 4k at least 0.9x its own dense rows and at
least FA4; under a soft cap at least 0.9x its dense rows (a cost of 10% at most); the backward of
each feature at least cuDNN where cuDNN has it. Rows that did not pass give "-".

Markdown on stdout; with --readme FILE the tables replace the lines between FILE's markers
`<!-- variants_summary:begin ... -->` and `<!-- variants_summary:end -->`. Exit 2 on a missing or
unreadable file, one that is not a results file, an odd number of RUN/PEERS files, or a README
without the markers.
"""
import argparse
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.readme_block import generated  # noqa: E402
from scripts.results_io import load_results  # noqa: E402

NOT_OURS = {"cuda.cudnn_sdpa", "cuda.naive_3pass", "cuda.standard_cublas"}
FWD = "cuda.flash_fwd_wgmma"


def fail(msg):
    print(f"variants_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def passed(r):
    return r.get("status") == "pass" and r.get("tflops")


def label(r):
    o = r.get("options") or {}
    return r["impl"] + ("" if not o else " [" + ", ".join(f"{k}={v}" for k, v in sorted(o.items())) + "]")


def dense_index(rows):
    """(impl, pass, head_dim, causal, seq) -> TFLOP/s of the passing dense rows."""
    out = {}
    for r in rows:
        p = r["problem"]
        if passed(r) and not (r.get("options") or {}):
            out[(r["impl"], r["pass"], p["head_dim"], bool(p["causal"]), p["seq_q"])] = r["tflops"]
    return out


def dense_seq(p, seqs):
    """The dense seq a case compares with: its own, or for varlen the largest not above the mean."""
    if p.get("seqlens_q"):
        mean = sum(p["seqlens_q"]) / len(p["seqlens_q"])
        below = [s for s in seqs if s <= mean]
        return max(below) if below else None
    return p["seq_q"]


def variant(p):
    if p.get("seqlens_q"):
        return "varlen"
    if p.get("softcap"):
        return "softcap"
    if any((p.get(k) if p.get(k) is not None else -1) >= 0 for k in ("window_left", "window_right")):
        return "window"
    return "dense"


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def ratio(a, b):
    return None if a is None or b is None else a / b


def rfmt(x):
    return "-" if x is None else f"{x:.2f}×"


def summary(pairs, dense):
    seqs = sorted({k[4] for k in dense})
    misses, counts = {}, {}

    def target(key, ok, name):
        counts[key] = counts.get(key, 0) + 1
        if not ok:
            misses.setdefault(key, []).append(name)

    for run_path, run_res, peer_res in pairs:
        rows = run_res["rows"] + peer_res["rows"]
        cases = {}
        for r in rows:
            cases.setdefault((r["case"], r["pass"]), []).append(r)
        order = list(dict.fromkeys((r["case"], r["pass"]) for r in run_res["rows"]))
        for ps in ("fwd", "bwd", "fwd_bwd"):
            keys = [k for k in order if k[1] == ps]
            if not keys:
                continue
            print(f"**{os.path.basename(run_path)}, {ps}** (TFLOP/s of unmasked scores)\n")
            print("| case | ours (which) | own dense | ours / dense | FA4 | ours / FA4 | `cuda.cudnn_sdpa` | "
                  "PyTorch cuDNN | ours / best cuDNN |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
            for case, _ in keys:
                rs = [r for r in cases[(case, ps)] if passed(r)]
                p = cases[(case, ps)][0]["problem"]
                own = [r for r in rs if r["impl"].startswith("cuda.") and r["impl"] not in NOT_OURS
                       and not (r.get("options") or {})]
                best = max(own, key=lambda r: r["tflops"], default=None)
                ours = best["tflops"] if best else None
                ds = dense_seq(p, seqs)
                dn = dense.get((best["impl"], ps, p["head_dim"], bool(p["causal"]), ds)) if best else None
                by = {label(r): r["tflops"] for r in rs}
                fa4, cud, tcud = by.get("fa4.flash_attn"), by.get("cuda.cudnn_sdpa"), by.get("torch.sdpa_cudnn")
                bc = max((x for x in (cud, tcud) if x is not None), default=None)
                which = f"{fmt(ours)} (`{best['impl'][5:]}`)" if best else "-"
                dtext = fmt(dn) + (f" (seq {ds})" if dn is not None and p.get("seqlens_q") else "")
                print(f"| {case} | {which} | {dtext} | {rfmt(ratio(ours, dn))} | {fmt(fa4)} | "
                      f"{rfmt(ratio(ours, fa4))} | {fmt(cud)} | {fmt(tcud)} | {rfmt(ratio(ours, bc))} |")
                v = variant(p)
                wg = by.get(FWD)
                wg_dense = dense.get((FWD, "fwd", p["head_dim"], bool(p["causal"]), ds))
                seq_ok = (p["seq_q"] >= 4096) if not p.get("seqlens_q") else True
                if ps == "fwd" and v in ("window", "varlen") and seq_ok and wg is not None:
                    if wg_dense is not None:
                        target(f"{v}-dense", wg / wg_dense >= 0.9, f"{case} ({wg / wg_dense:.2f})")
                    if fa4 is not None:
                        target(f"{v}-fa4", wg >= fa4, f"{case} ({wg / fa4:.2f}×)")
                if ps == "fwd" and v == "softcap" and wg is not None and wg_dense is not None:
                    target("softcap-dense", wg / wg_dense >= 0.9, f"{case} ({wg / wg_dense:.2f})")
                if ps == "bwd" and v != "dense" and ours is not None and bc is not None:
                    target(f"{v}-bwd-cudnn", ours >= bc, f"{case} ({ours / bc:.2f}×)")
            print()
    print("Targets (issue 30):\n")
    what = {"window-dense": "window forward (`flash_fwd_wgmma`, seq >= 4k) >= 0.9× its dense rows",
            "window-fa4": "window forward >= FA4",
            "varlen-dense": "varlen forward >= 0.9× its dense rows (the largest dense seq not above the mean length)",
            "varlen-fa4": "varlen forward >= FA4",
            "softcap-dense": "soft-cap forward >= 0.9× its dense rows",
            "window-bwd-cudnn": "window backward >= cuDNN", "varlen-bwd-cudnn": "varlen backward >= cuDNN",
            "softcap-bwd-cudnn": "soft-cap backward >= cuDNN"}
    for key, text in what.items():
        if key not in counts:
            continue
        m = misses.get(key, [])
        print(f"- {text}: {counts[key] - len(m)} of {counts[key]} cases" + (f"; missed by {', '.join(m)}" if m else ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="RUN.json PEERS.json",
                    help="pairs: attnbench results of a variant config, then its peers' results")
    ap.add_argument("--dense", required=True, help="the same job's dense rows (the fa3 grid's cases)")
    ap.add_argument("--readme", metavar="FILE", help="write the tables between FILE's markers instead of stdout")
    a = ap.parse_args(argv)
    if len(a.files) % 2:
        fail(f"{len(a.files)} files: expected pairs of RUN.json PEERS.json")
    pairs = [(a.files[i], load_results(a.files[i], fail, "run"), load_results(a.files[i + 1], fail, "peers"))
             for i in range(0, len(a.files), 2)]
    dense = dense_index(load_results(a.dense, fail, "dense")["rows"])
    generated("variants_summary", [*a.files, a.dense], a.readme, fail, lambda: summary(pairs, dense))
    return 0


if __name__ == "__main__":
    run(main)
