#!/usr/bin/env python3
"""Plot an attnbench results file (docs/results_schema.md) in the FlashAttention papers' style.

    python3 scripts/plot.py RESULTS.json --out DIR [--baseline IMPL] [--impl GLOB ...] [--stem NAME]

For each pass (fwd, bwd, fwd_bwd) and dtype it writes, into DIR, each as .png and .svg:
  <stem>_<pass>_<dtype>_tflops       grouped bars of TFLOP/s per case (sequence length), one panel
                                     per head_dim x causal, one bar per implementation (not for
                                     memory-bound groups, where every row has hbm_bytes);
  <stem>_<pass>_<dtype>_speedup      speedup over the baseline (its median time / the impl's) per case;
  <stem>_<pass>_<dtype>_memory       memory reduction over the baseline: footprint (inputs + outputs
                                     + workspace, solid) and measured peak (dashed, when measured);
  <stem>_<pass>_<dtype>_bandwidth    memory-bound rows only (decode: rows with hbm_bytes): GB/s against
                                     the context length (log scale), one panel per head_dim x heads
                                     q:kv, a line per implementation, layout and batch (the
                                     implementation's colour, page sizes as line styles, batches as
                                     markers, options variants hollow), and the run's read ceiling
                                     (context.ceilings.read_tbps) dashed; with the run's read curve,
                                     a read of the batch-1 rows' own bytes dotted.
Every implementation has the same colour in every figure, whatever file it comes from (COLORS; an
unlisted name gets one from a hash of the name, variants with options a hatch or line style of
it), and the legend sits outside the panels, below them, so it never covers a bar or a line.
The baseline defaults to cuda.standard_cublas, else cpu.naive_3pass (the FA3 grid's figures use
--baseline fa4.flash_attn: speedup over FA4). --impl keeps the rows whose implementation (or its
label with options, e.g. "fa4.flash_attn [deterministic=1]") matches one of the globs; --stem
replaces the results file's name in the figure names. Skipped and failed rows get no bar and a
"skip"/"FAIL" mark. Exit codes: 0 written, 2 bad input or matplotlib missing.
"""
import argparse
import fnmatch
import math
import os
import sys
import zlib

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import load_results, read_tbps_at  # noqa: E402

DEFAULT_BASELINES = ("cuda.standard_cublas", "cpu.naive_3pass")
PASS_ORDER = {"fwd": 0, "bwd": 1, "fwd_bwd": 2}
MIB = 1024.0 * 1024.0


# One colour per implementation, the same in every figure: the families share a hue family
# (ours in blues and greens, the CUDA baselines in greys and browns, the peers in warm colours).
COLORS = {
    "cuda.flash_fwd_mma": "#1f77b4", "cuda.flash_bwd_mma": "#1f77b4",
    "cuda.flash_fwd_wgmma": "#17becf", "cuda.flash_bwd_wgmma": "#17becf",
    "cuda.flash_decode": "#0b6e4f",
    "cuda.flash_fwd": "#2ca02c", "cuda.flash_bwd": "#2ca02c",
    "cuda.online_2pass": "#bcbd22", "cuda.naive_3pass": "#7f7f7f",
    "cuda.standard_cublas": "#8c564b", "cuda.cudnn_sdpa": "#9467bd",
    "cpu.flash_fwd": "#1f77b4", "cpu.flash_bwd": "#17becf",
    "cpu.online_2pass": "#2ca02c", "cpu.naive_3pass": "#7f7f7f",
    "torch.sdpa_flash": "#d62728", "torch.sdpa_efficient": "#ff7f0e",
    "torch.sdpa_cudnn": "#e377c2", "torch.sdpa_math": "#c49c94",
    "fa4.flash_attn": "#ff9896", "flashinfer.batch_decode": "#bd9e39",
}
FALLBACK = ("#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#f7b6d2", "#dbdb8d", "#9edae5",
            "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
HATCHES = ("", "//", "..", "xx", "\\\\", "++")
LINESTYLES = ("-", "-.", ":", (0, (5, 1)))
MARKERS = ("o", "s", "^", "D", "v")


def color_of(impl):
    return COLORS.get(impl) or FALLBACK[zlib.crc32(impl.encode()) % len(FALLBACK)]


def styles_of(rows):
    """label -> (colour, variant index): the colour of the implementation, and the label's place
    among the labels (options variants) of the same implementation in these rows."""
    out, seen = {}, {}
    for r in rows:
        label = impl_label(r)
        if label not in out:
            out[label] = (color_of(r["impl"]), seen.setdefault(r["impl"], []).__len__())
            seen[r["impl"]].append(label)
    return out


def save(fig, path):
    """The figure as path (.png) and beside it as .svg; returns both paths."""
    svg = os.path.splitext(path)[0] + ".svg"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    fig.savefig(svg, bbox_inches="tight")
    return [path, svg]


def outside_legend(fig, handles, labels):
    """One legend for the figure, below the panels."""
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8,
                   ncol=min(4, len(labels)), frameon=False)


def finish(fig, axes, title, handles=None):
    """The title, the layout, and one legend outside the panels: the given handles, else every
    panel's legend entries once."""
    if handles is None:
        handles, labels = [], []
        for ax in axes:
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in labels:
                    handles.append(h)
                    labels.append(l)
    else:
        labels = [h.get_label() for h in handles]
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, title_top(fig)))
    outside_legend(fig, handles, labels)


def title_top(fig):
    """The panels' top as a fraction of the figure: about half an inch left for the suptitle,
    which tight_layout alone lets overlap the first row's panel titles in tall figures."""
    return 1.0 - 0.45 / fig.get_figheight()


def fail(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    res = load_results(path, fail)
    rows = res.get("rows")
    if not isinstance(rows, list):
        fail(f"{path}: $.rows: expected an array")
    needed = ("case", "impl", "pass", "status", "problem")
    for i, r in enumerate(rows):
        missing = [k for k in needed if not isinstance(r, dict) or k not in r]
        if missing:
            fail(f"{path}: $.rows[{i}]: missing {', '.join(missing)}")
    return res


def impl_label(r):
    options = r.get("options") or {}  # results_io reads an older file's "params" as "options"
    if not options:
        return r["impl"]
    return r["impl"] + " [" + ", ".join(f"{k}={v}" for k, v in sorted(options.items())) + "]"


def device_title(res):
    ctx = res.get("context", {})
    rows = res["rows"]
    on_cpu = rows and all(not str(r.get("device", "")).startswith("cuda") for r in rows)
    devs = ctx.get("devices") or []
    if not on_cpu and devs and isinstance(devs[0], dict) and devs[0].get("name"):
        return devs[0]["name"]
    return ctx.get("cpu") or "unknown device"


def median_ms(r):
    t = r.get("time")
    if r["status"] != "pass" or not isinstance(t, dict) or not t.get("median_ms"):
        return None
    return t["median_ms"]


def tflops(r):
    if r["status"] != "pass":
        return None
    if isinstance(r.get("tflops"), (int, float)):
        return r["tflops"]
    ms, fl = median_ms(r), r.get("flops")
    return fl / (ms * 1e-3) / 1e12 if ms and fl else None


def footprint(r):
    m = r.get("memory")
    if r["status"] == "skip" or not isinstance(m, dict):
        return None
    return (m.get("io_bytes") or 0) + (m.get("workspace_bytes") or 0) or None


def peak(r):
    m = r.get("memory")
    if r["status"] == "skip" or not isinstance(m, dict):
        return None
    return m.get("peak_bytes") or None


def seq_text(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


# Fields that may vary between the cases of one panel, in sort priority.
AXES = (("seq_kv", "skv"), ("seq_q", "sq"), ("batch", "b"), ("heads_q", "hq"), ("heads_kv", "hkv"))
FULL = {"b": "batch", "hq": "query heads", "hkv": "kv heads"}


def case_axis(cases):
    """Sort the cases (label -> problem) and label each tick by the fields that vary."""
    probs = list(cases.values())
    varies = {f for f, _ in AXES if len({p.get(f) for p in probs}) > 1}
    square = all(p.get("seq_q") == p.get("seq_kv") for p in probs)
    order = sorted(cases, key=lambda c: tuple(cases[c].get(f, 0) for f, _ in AXES))
    ticks = []
    for c in order:
        p = cases[c]
        parts = []
        if square:
            parts.append(seq_text(p["seq_kv"]))
        else:
            parts.append(f"{seq_text(p['seq_q'])}/{seq_text(p['seq_kv'])}")
        parts += [f"{short}{p[f]}" for f, short in AXES[2:] if f in varies]
        ticks.append("\n".join(parts))
    xlabel = "sequence length" if square else "seq_q / seq_kv"
    extra = [FULL[short] for f, short in AXES[2:] if f in varies]
    if extra:
        xlabel += " (" + ", ".join(extra) + " below)"
    return order, ticks, xlabel


def panels_of(rows):
    """(head_dim, causal) -> rows, in order."""
    panels = {}
    for r in rows:
        p = r["problem"]
        panels.setdefault((p.get("head_dim"), bool(p.get("causal"))), []).append(r)
    return dict(sorted(panels.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])))


def pick_baseline(rows, wanted):
    labels = []
    for r in rows:
        if impl_label(r) not in labels:
            labels.append(impl_label(r))
    for w in ([wanted] if wanted else DEFAULT_BASELINES):
        if w in labels:
            return w
        for r in rows:
            if r["impl"] == w:
                return impl_label(r)
    return None


def panel_title(key):
    d, causal = key
    return f"head_dim {d}, {'causal' if causal else 'non-causal'}"


def grid(plt, n):
    cols = min(n, 2)
    nrows = math.ceil(n / cols)
    # One panel: wider than half a grid, so the title (with the device name) fits.
    fig, axes = plt.subplots(nrows, cols, figsize=(max(6.4 * cols, 8.5), 3.9 * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def bars(plt, rows, colors, title, path):
    panels = panels_of(rows)
    fig, axes = grid(plt, len(panels))
    shown = []
    for ax, (key, prs) in zip(axes, panels.items()):
        cases = {}
        for r in prs:
            cases.setdefault(r["case"], r["problem"])
        order, ticks, xlabel = case_axis(cases)
        # An implementation skipped in every case of the panel (e.g. forward-only in a bwd
        # figure) gets no bar slot.
        labels = [l for l in colors if any(impl_label(r) == l and r["status"] != "skip" for r in prs)]
        width = min(0.8 / max(1, len(labels)), 0.3)
        top = max([tflops(r) or 0 for r in prs] + [1e-9])
        # CPU rates read better in GFLOP/s.
        scale, unit = (1e3, "GFLOP/s") if top < 1 else (1.0, "TFLOP/s")
        top *= scale
        for i, label in enumerate(labels):
            cell = {r["case"]: r for r in prs if impl_label(r) == label}
            for x, c in enumerate(order):
                r = cell.get(c)
                xpos = x + width * (i + 0.5 - len(labels) / 2)
                v = tflops(r) if r else None
                if v is not None:
                    v *= scale
                    ax.bar(xpos, v, width, color=colors[label][0], hatch=HATCHES[colors[label][1] % len(HATCHES)],
                           edgecolor="white" if colors[label][1] else None)
                    ax.text(xpos, v, f"{v:.0f}" if v >= 10 else f"{v:.3g}", ha="center", va="bottom",
                            fontsize=6, rotation=90 if len(labels) > 3 else 0)
                elif r is not None:
                    mark = "skip" if r["status"] == "skip" else "FAIL" if r["status"] == "fail" else "-"
                    ax.text(xpos, top * 0.02, mark, ha="center", va="bottom", fontsize=6, rotation=90,
                            color="firebrick" if mark == "FAIL" else "gray")
        shown += [l for l in labels if l not in shown]
        ax.set_xticks(range(len(order)), ticks, fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        ax.set_ylim(0, top * 1.15)
        ax.set_title(panel_title(key), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    # One entry per implementation of any panel, even when its first case was skipped: outside
    # the panels, so never over a bar.
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=colors[l][0], hatch=HATCHES[colors[l][1] % len(HATCHES)],
                             edgecolor="white" if colors[l][1] else colors[l][0]) for l in shown]
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    outside_legend(fig, handles, shown)
    written = save(fig, path)
    plt.close(fig)
    return written


def lines(plt, rows, colors, baseline, title, ylabel, value, path):
    """value(base_row, row) -> list of ((linestyle, legend suffix, marker), number or None)."""
    panels = panels_of(rows)
    fig, axes = grid(plt, len(panels))
    drawn = False
    for ax, (key, prs) in zip(axes, panels.items()):
        cases = {}
        for r in prs:
            cases.setdefault(r["case"], r["problem"])
        order, ticks, xlabel = case_axis(cases)
        base = {r["case"]: r for r in prs if impl_label(r) == baseline}
        labels = [l for l in colors if l != baseline and any(impl_label(r) == l for r in prs)]
        for label in labels:
            cell = {r["case"]: r for r in prs if impl_label(r) == label}
            series = {}  # style -> y per case; NaN breaks the line where a row has no value
            for x, c in enumerate(order):
                vals = value(base[c], cell[c]) if c in cell and c in base else []
                for style, v in vals:
                    ys = series.setdefault(style, [math.nan] * len(order))
                    ys[x] = v if v is not None and math.isfinite(v) else math.nan
            for style, ys in series.items():
                if any(math.isfinite(y) for y in ys):
                    variant = colors[label][1]
                    ls = style[0] if not variant else LINESTYLES[variant % len(LINESTYLES)]
                    ax.plot(range(len(order)), ys, linestyle=ls, color=colors[label][0], marker=style[2],
                            markersize=5, label=label + style[1])
                    drawn = True
        # Say why a case has no point when the baseline itself has no value there.
        for x, c in enumerate(order):
            b = base.get(c)
            if b is None or not any(v is not None for _, v in value(b, b)):
                why = b["status"] if b is not None and b["status"] != "pass" else "none"
                ax.text(x, 0.02, f"baseline:\n{why}", transform=ax.get_xaxis_transform(),
                        ha="center", va="bottom", fontsize=6, color="gray")
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xlim(-0.5, len(order) - 0.5)
        ax.set_ylim(bottom=0)
        ax.set_xticks(range(len(order)), ticks, fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title(key), fontsize=10)
        ax.grid(alpha=0.3)
    finish(fig, axes, title)
    written = save(fig, path) if drawn else []
    plt.close(fig)
    return written


def gbps(r):
    """GB/s of a timed memory-bound row: its gbps, else hbm_bytes over the median."""
    if r["status"] != "pass":
        return None
    if isinstance(r.get("gbps"), (int, float)):
        return r["gbps"]
    ms, hb = median_ms(r), r.get("hbm_bytes")
    return hb / (ms * 1e-3) / 1e9 if ms and hb else None


def bandwidth(plt, rows, colors, title, path, ceiling_gbps, ceilings=None):
    """GB/s against seq_kv, one panel per (head_dim, heads q:kv); a line per implementation label,
    layout and batch: the label's colour, the layout's line style, the batch's marker. With the
    run's read curve (ceilings["read_curve"]), a dotted line of what a read of the batch-1 rows'
    own bytes reaches (read_tbps_at: the fixed cost of a call included). None when no row has a
    figure."""
    from matplotlib.lines import Line2D
    rows = [r for r in rows if r.get("hbm_bytes")]
    if not any(gbps(r) for r in rows):
        return []
    panels = {}
    for r in rows:
        p = r["problem"]
        panels.setdefault((p.get("head_dim") or 0, p.get("heads_q") or 0, p.get("heads_kv") or 0), []).append(r)
    panels = dict(sorted(panels.items(), key=lambda kv: (kv[0][0], -(kv[0][1] // max(kv[0][2], 1)), kv[0][1])))
    pages = sorted({r["problem"].get("page_size") or 0 for r in rows})
    batches = sorted({r["problem"].get("batch") or 0 for r in rows})
    fig, axes = grid(plt, len(panels))
    used = {}  # (label, page) -> legend handle, in the order drawn
    drew_size = False
    for ax, ((d, hq, hkv), prs) in zip(axes, panels.items()):
        for label in colors:
            color, variant = colors[label]
            for pi, ps in enumerate(pages):
                for bi, b in enumerate(batches):
                    pts = sorted((r["problem"].get("seq_kv") or 0, gbps(r)) for r in prs
                                 if impl_label(r) == label and (r["problem"].get("page_size") or 0) == ps
                                 and (r["problem"].get("batch") or 0) == b and gbps(r))
                    if not pts:
                        continue
                    style = LINESTYLES[pi % len(LINESTYLES)]
                    # options variants of one implementation: hollow markers
                    ax.plot([x for x, _ in pts], [y for _, y in pts], color=color, linestyle=style,
                            marker=MARKERS[bi % len(MARKERS)], markersize=5,
                            markerfacecolor="white" if variant else color)
                    if (label, ps) not in used:
                        suffix = f" (page {ps})" if ps else (" (contiguous)" if len(pages) > 1 else "")
                        used[(label, ps)] = Line2D([], [], color=color, linestyle=style, label=label + suffix)
        if ceiling_gbps:
            ax.axhline(ceiling_gbps, color="black", linestyle="--", linewidth=0.9)
        size_of = {}  # batch-1 context -> its rows' bytes (one line whatever the layouts)
        for r in prs:
            if (r["problem"].get("batch") or 0) == 1:
                x = r["problem"].get("seq_kv") or 0
                size_of[x] = max(size_of.get(x, 0), r["hbm_bytes"])
        size_pts = [(x, read_tbps_at(ceilings, nb)) for x, nb in sorted(size_of.items())]
        size_pts = [(x, t * 1e3) for x, t in size_pts if t]
        if size_pts:
            ax.plot([x for x, _ in size_pts], [y for _, y in size_pts], color="black", linestyle=":",
                    linewidth=1.1)
            drew_size = True
        ax.set_xscale("log", base=2)
        ctxs = sorted({r["problem"].get("seq_kv") or 1 for r in prs})
        ax.set_xticks(ctxs, [seq_text(c) for c in ctxs], fontsize=8)
        ax.minorticks_off()
        ax.set_ylim(bottom=0, top=max(ceiling_gbps or 0, max((gbps(r) or 0) for r in prs)) * 1.08)
        ax.set_xlabel("context (keys per sequence)")
        ax.set_ylabel("GB/s (K, V read once; Q, O)")
        ax.set_title(f"head_dim {d}, {hq}:{hkv} heads", fontsize=10)
        ax.grid(alpha=0.3)
    handles = list(used.values())
    handles += [Line2D([], [], color="grey", linestyle="none", marker=MARKERS[bi % len(MARKERS)],
                       label=f"batch {b}") for bi, b in enumerate(batches)]
    if ceiling_gbps:
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=0.9,
                              label=f"read ceiling ({ceiling_gbps:.0f} GB/s, same run)"))
    if drew_size:
        handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1.1,
                              label="a read of the batch-1 rows' bytes (same run)"))
    finish(fig, axes, title, handles)
    written = save(fig, path)
    plt.close(fig)
    return written


def speedup_value(b, r):
    bm, rm = median_ms(b), median_ms(r)
    return [(("-", "", "o"), bm / rm if bm and rm else None)]


def memory_value(b, r):
    out = []
    bf, rf = footprint(b), footprint(r)
    out.append((("-", " (footprint)", "o"), bf / rf if bf and rf else None))
    bp, rp = peak(b), peak(r)
    out.append((("--", " (peak)", "x"), bp / rp if bp and rp else None))
    return out


def main():
    ap = argparse.ArgumentParser(description="Plot an attnbench results file as PNG and SVG figures.")
    ap.add_argument("results", help="results JSON written by `attnbench run`")
    ap.add_argument("--out", required=True, help="folder for the PNG and SVG files (created if needed)")
    ap.add_argument("--baseline", default="",
                    help="implementation the speedup and memory figures divide by "
                         "(default: cuda.standard_cublas, else cpu.naive_3pass)")
    ap.add_argument("--impl", action="append", metavar="GLOB",
                    help="only these implementations (globs on the name or the label with options), repeatable")
    ap.add_argument("--stem", help="file-name stem of the figures (default: the results file's name)")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed: run `pip install -r scripts/requirements.txt`")

    res = load(args.results)
    rows = res["rows"]
    if args.impl:
        rows = [r for r in rows if any(fnmatch.fnmatchcase(r["impl"], g) or fnmatch.fnmatchcase(impl_label(r), g)
                                       for g in args.impl)]
        if not rows:
            fail(f"--impl {' '.join(args.impl)}: matches no row of {args.results}")
        res["rows"] = rows
    if not rows:
        print(f"plot.py: {args.results} has no rows; nothing to plot")
        return 0
    os.makedirs(args.out, exist_ok=True)
    name = os.path.basename(args.results)
    stem = args.stem or os.path.splitext(name[:-3] if name.endswith(".gz") else name)[0]
    device = device_title(res)

    # One colour per implementation across every figure (COLORS).
    colors = styles_of(rows)

    groups = {}
    for r in rows:
        groups.setdefault((r["pass"], r["problem"].get("dtype", "?")), []).append(r)
    written = []
    for (pas, dtype), grs in sorted(groups.items(), key=lambda kv: (PASS_ORDER.get(kv[0][0], 9), kv[0][1])):
        base = f"{stem}_{pas}_{dtype}"
        what = f"{pas} {dtype}"
        # Memory-bound groups (decode: every row has hbm_bytes) get the bandwidth figure instead:
        # TFLOP/s bars of a few TFLOP/s per case say nothing there.
        if not all(r.get("hbm_bytes") for r in grs):
            path = os.path.join(args.out, base + "_tflops.png")
            written += bars(plt, grs, colors, f"Attention {what}: throughput on {device}", path)
        ceilings = res.get("context", {}).get("ceilings") or {}
        ceiling = ceilings.get("read_tbps")
        path = os.path.join(args.out, base + "_bandwidth.png")
        written += bandwidth(plt, grs, colors, f"Attention {what}: bandwidth on {device}", path,
                             ceiling * 1e3 if isinstance(ceiling, (int, float)) else None, ceilings)
        baseline = pick_baseline(grs, args.baseline)
        if baseline is None:
            continue
        path = os.path.join(args.out, base + "_speedup.png")
        written += lines(plt, grs, colors, baseline, f"Attention {what}: speedup over {baseline} on {device}",
                         f"speedup over {baseline} (×)", speedup_value, path)
        path = os.path.join(args.out, base + "_memory.png")
        written += lines(plt, grs, colors, baseline, f"Attention {what}: memory reduction vs {baseline} on {device}",
                         f"memory of {baseline} / impl (×)", memory_value, path)
    if args.baseline and not any(r["impl"] == args.baseline or impl_label(r) == args.baseline for r in rows):
        print(f"plot.py: warning: baseline {args.baseline} has no rows; no speedup or memory figures",
              file=sys.stderr)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    run(main)
