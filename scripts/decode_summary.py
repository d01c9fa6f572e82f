#!/usr/bin/env python3
"""Issue 29's decode tables from a decode run and its peers, generated from the committed files:

  python3 scripts/decode_summary.py results/h200/decode_grid.json results/h200/decode_grid.peers.json
  python3 scripts/decode_summary.py RUN.json PEERS.json [MORE_PEERS.json ...] --readme results/h200/issue29/README.md

One table per KV layout (contiguous, pages of N): per (heads, head_dim, batch, context) cell, the
GB/s (K and V read once, Q and O: the rows' hbm_bytes over the median) of cuda.flash_decode
(automatic splits; "1 split" beside it when the run has splits=1 rows), its fraction of the same
run's read ceiling (context.ceilings.read_tbps) and, when the run measured the read curve
(context.ceilings.read_curve), of a read of the row's own bytes after the same flush (the fixed
cost of a call included: what the size allows), cuda.cudnn_sdpa, PyTorch SDPA's cuDNN and flash
backends, FlashInfer and FA4, and ours over the best of PyTorch's cuDNN and FlashInfer (issue 29's
target: >= 1.0x per cell). A peer row without hbm_bytes (files written before peers carried them)
takes the run's for the same case. Then the targets: >= 0.85 of the read ceiling at batch x
context >= 64 x 8k, >= 0.9 of that (0.765) at batch 1 with context >= 32k, >= 1.0x the best
of PyTorch cuDNN and FlashInfer, each with the cells that miss. Rows that did not pass give "-".

Markdown on stdout; with --readme FILE the tables replace the lines between FILE's markers
`<!-- decode_summary:begin ... -->` and `<!-- decode_summary:end -->`. Exit 2 on a missing or
unreadable file, one that is not a results file, or a README without the markers.
"""
import argparse
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.readme_block import generated  # noqa: E402
from scripts.results_io import load_results, read_tbps_at  # noqa: E402

OURS = "cuda.flash_decode"
# (column, implementation) after ours; the target compares ours with the best of TARGET_PEERS.
PEERS = (("`cuda.cudnn_sdpa`", "cuda.cudnn_sdpa"), ("PyTorch cuDNN", "torch.sdpa_cudnn"),
         ("PyTorch flash", "torch.sdpa_flash"), ("FlashInfer", "flashinfer.batch_decode"),
         ("FA4", "fa4.flash_attn"))
TARGET_PEERS = ("torch.sdpa_cudnn", "flashinfer.batch_decode")
CEILING_FRACTION, BATCH1_FRACTION = 0.85, 0.85 * 0.9
BIG_TOKENS, LONG_CONTEXT = 64 * 8192, 32768


def fail(msg):
    print(f"decode_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def cell_of(p):
    return (p["heads_q"], p["heads_kv"], p["head_dim"], p["batch"], p["seq_kv"])


def gbps_table(rows, hbm_of, nbytes=None):
    """(impl or "ours" / "ours1", page_size, cell) -> GB/s of the passing forward rows with a time;
    nbytes (a dict): and (page_size, cell) -> the hbm_bytes of our rows."""
    out = {}
    for r in rows:
        p, t = r["problem"], (r.get("time") or {}).get("median_ms")
        if r.get("status") != "pass" or r.get("pass", "fwd") != "fwd" or not t or p.get("seq_q") != 1:
            continue
        hbm = r.get("hbm_bytes") or hbm_of.get(r["case"])
        if not hbm:
            continue
        impl = r["impl"]
        if impl == OURS:
            splits = (r.get("options") or {}).get("splits", 0)
            impl = "ours" if splits == 0 else "ours1" if splits == 1 else None
            if impl is None:
                continue
        out[(impl, p.get("page_size") or 0, cell_of(p))] = hbm / (t * 1e-3) / 1e9
        if impl == "ours" and nbytes is not None:
            nbytes[(p.get("page_size") or 0, cell_of(p))] = hbm
    return out


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def summary(run_res, peer_results):
    ceilings = (run_res.get("context") or {}).get("ceilings") or {}
    ceiling = ceilings.get("read_tbps")
    ceiling = ceiling * 1000 if ceiling else None
    curve = bool(ceilings.get("read_curve"))
    hbm_of = {r["case"]: r.get("hbm_bytes") for r in run_res["rows"] if r.get("hbm_bytes")}
    nbytes = {}
    t = gbps_table(run_res["rows"], hbm_of, nbytes)
    for peer_res in peer_results:
        t.update(gbps_table(peer_res["rows"], hbm_of))
    one_split = any(k[0] == "ours1" for k in t)
    print(f"Read ceiling of the run: {fmt(ceiling)} GB/s (`context.ceilings.read_tbps`). GB/s: K and V "
          "read once, Q and O, over the median time; seq_q 1."
          + (" \"of same-size read\": of the run's read curve (`context.ceilings.read_curve`) at the row's "
             "bytes, a read of that size after the same flush." if curve else "") + "\n")
    misses = {"big": [], "b1": [], "peers": []}
    counts = {"big": 0, "b1": 0, "peers": 0}
    for ps in sorted({k[1] for k in t}):
        cells = sorted({k[2] for k in t if k[1] == ps})
        print(f"**{'contiguous' if ps == 0 else f'pages of {ps}'}**\n")
        head = ["heads q:kv", "head_dim", "batch", "context", "flash_decode", "of ceiling"]
        head += ["of same-size read"] if curve else []
        head += ["1 split"] if one_split else []
        head += [c for c, _ in PEERS] + ["ours / best of PyTorch cuDNN, FlashInfer"]
        print("| " + " | ".join(head) + " |")
        print("|---|---|---|---|" + "---:|" * (len(head) - 4))
        for cell in cells:
            hq, hkv, d, b, ctx = cell
            ours = t.get(("ours", ps, cell))
            frac = ours / ceiling if ours and ceiling else None
            best = max((t[(i, ps, cell)] for i in TARGET_PEERS if (i, ps, cell) in t), default=None)
            vals = [f"{hq}:{hkv}", str(d), str(b), f"{ctx // 1024}k" if ctx % 1024 == 0 else str(ctx),
                    fmt(ours), "-" if frac is None else f"{frac:.2f}"]
            at_size = read_tbps_at(ceilings, nbytes.get((ps, cell))) if curve and ours else None
            size_frac = ours / (at_size * 1000) if at_size else None
            vals += (["-" if size_frac is None else f"{size_frac:.2f}"] if curve else [])
            vals += [fmt(t.get(("ours1", ps, cell)))] if one_split else []
            vals += [fmt(t.get((i, ps, cell))) for _, i in PEERS]
            vals.append("-" if ours is None or best is None else f"{ours / best:.2f}×")
            print("| " + " | ".join(vals) + " |")
            name = f"{hq}:{hkv} d{d} {b}×{vals[3]} {'contiguous' if ps == 0 else f'page {ps}'}"
            if frac is not None and b * ctx >= BIG_TOKENS:
                counts["big"] += 1
                if frac < CEILING_FRACTION:
                    misses["big"].append(f"{name} ({frac:.2f})")
            if frac is not None and b == 1 and ctx >= LONG_CONTEXT:
                counts["b1"] += 1
                if frac < BATCH1_FRACTION:
                    misses["b1"].append(f"{name} ({frac:.2f}" + (f"; {size_frac:.2f} of a same-size read)"
                                                                 if size_frac is not None else ")"))
            if ours is not None and best is not None:
                counts["peers"] += 1
                if ours < best:
                    misses["peers"].append(f"{name} ({ours / best:.2f}×)")
        print()
    print("Targets (issue 29):\n")
    for key, what in (("big", f">= {CEILING_FRACTION} of the read ceiling at batch × context >= 64 × 8k"),
                      ("b1", f">= {BATCH1_FRACTION:.3f} of it at batch 1, context >= 32k"),
                      ("peers", ">= 1.0× the best of PyTorch cuDNN and FlashInfer")):
        m = misses[key]
        print(f"- {what}: {counts[key] - len(m)} of {counts[key]} cells"
              + (f"; missed by {', '.join(m)}" if m else ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="attnbench results of a decode config (cuda.flash_decode rows)")
    ap.add_argument("peers", nargs="+", help="the peers' results of the same config (scripts/peers/peers.py; "
                                             "several files: e.g. FlashInfer's in a file of its own)")
    ap.add_argument("--readme", metavar="FILE", help="write the tables between FILE's markers instead of stdout")
    a = ap.parse_args(argv)
    run_res = load_results(a.run, fail, "run")
    peer_results = [load_results(p, fail, "peers") for p in a.peers]
    generated("decode_summary", [a.run, *a.peers], a.readme, fail, lambda: summary(run_res, peer_results))
    return 0


if __name__ == "__main__":
    run(main)
