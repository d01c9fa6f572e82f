#!/usr/bin/env python3
"""Issue 29: does the L2 flush itself cost batch-1 decode its last 15-20 us? (written 2026-12-04,
not run yet; PyTorch only, about 30 s on the H200).

attnbench (harness/src/run/execute.cpp, flush_cache) and the peers (scripts/peers/common.py)
flush L2 before each timed call by writing zeros over twice its size. That leaves L2 full of dirty
lines, and the timed call pays their write-back (about 60 MB at ~4.5 TB/s is ~13 us) while it
reads. job2 (results/h200/issue29/job2) fitted time = F + bytes / read ceiling to batch-1 decode
and found F = 16-21 us for ours and 14-19 us for cuDNN, whatever the context; the read ceiling
(harness/src/run/ceilings.cpp) is measured over 1 GiB without a flush. If the write-back is F,
a flush that only reads (L2 left full of clean lines) takes most of it away, for every
memory-bound row and for ours and the peers alike.

This probe times, with CUDA events around each call, three calls in three modes each:
  calls: PyTorch SDPA's cuDNN and flash backends on the decode case of job2 (batch 1, 32 query
         heads over 8 kv heads, one query, context 32k and 128k, d128, bf16), and a plain read of
         the same K and V (torch.sum over them: memory-bound, one pass);
  modes: write (zero_() over 2 x L2, as the harness), read (a sum over the same buffer: nothing
         dirty left), hot (no flush).
It prints one table: median us per call and GB/s of K and V (+ Q and O for SDPA), per mode.

    python3 results/h200/issue29/flush_probe.py [--iters N] [--out FILE.json]
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=200, help="timed calls per (call, mode); default 200")
    ap.add_argument("--out", help="also write the figures as JSON here")
    args = ap.parse_args()
    if args.iters < 10:
        ap.error(f"--iters {args.iters}: at least 10")
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        sys.exit(f"flush_probe.py: PyTorch is needed ({e})")
    if not torch.cuda.is_available():
        sys.exit("flush_probe.py: no CUDA device")
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = int(getattr(props, "L2_cache_size", 0)) or (60 << 20)
    fbuf = torch.zeros(2 * l2 // 4, dtype=torch.float32, device=dev)
    sink = torch.zeros((), dtype=torch.float32, device=dev)

    def flush_write():
        fbuf.zero_()

    def flush_read():
        torch.sum(fbuf, out=sink)

    modes = {"write": flush_write, "read": flush_read, "hot": None}
    rows = []
    for ctx in (32768, 131072):
        g = torch.Generator(device=dev).manual_seed(1234)
        q = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, 8, ctx, 128, device=dev, dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, 8, ctx, 128, device=dev, dtype=torch.bfloat16, generator=g)
        kv_bytes = 2 * k.numel() * k.element_size()
        io_bytes = kv_bytes + 2 * q.numel() * q.element_size()
        ksum = torch.zeros((), dtype=torch.float32, device=dev)

        def read_kv():
            torch.sum(k, dtype=torch.float32, out=ksum)
            torch.sum(v, dtype=torch.float32, out=ksum)

        calls = {"read K and V (torch.sum)": (read_kv, kv_bytes, None)}
        for name, be in (("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION), ("SDPA flash", SDPBackend.FLASH_ATTENTION)):
            calls[name] = (lambda be=be: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, enable_gqa=True), io_bytes, be)
        for cname, (fn, nbytes, be) in calls.items():
            for mname, flush in modes.items():
                try:
                    ctxm = sdpa_kernel([be]) if be is not None else None
                    if ctxm:
                        ctxm.__enter__()
                    try:
                        for _ in range(10):  # warm-up (and the backend's plan)
                            fn()
                        starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters)]
                        ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters)]
                        for i in range(args.iters):
                            if flush:
                                flush()
                            starts[i].record()
                            fn()
                            ends[i].record()
                        torch.cuda.synchronize()
                    finally:
                        if ctxm:
                            ctxm.__exit__(None, None, None)
                    us = statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
                    rows.append({"context": ctx, "call": cname, "flush": mname, "median_us": us,
                                 "bytes": nbytes, "gbps": nbytes / (us * 1e-6) / 1e9})
                except RuntimeError as e:  # a backend that refuses the case
                    rows.append({"context": ctx, "call": cname, "flush": mname, "error": str(e).splitlines()[0][:200]})
    print(f"# L2 flush probe: {props.name}, L2 {l2 / 2**20:.0f} MiB, flush buffer {2 * l2 / 2**20:.0f} MiB, "
          f"{args.iters} calls each, PyTorch {torch.__version__}\n")
    print("| context | call | write flush us (GB/s) | read flush us (GB/s) | hot us (GB/s) |")
    print("|---|---|---:|---:|---:|")
    cells = {}
    for r in rows:
        cells[(r["context"], r["call"], r["flush"])] = r
    for ctx in (32768, 131072):
        for cname in dict.fromkeys(r["call"] for r in rows):
            out = []
            for m in modes:
                r = cells.get((ctx, cname, m), {})
                out.append(f"{r['median_us']:.1f} ({r['gbps']:.0f})" if "median_us" in r else r.get("error", "-"))
            print(f"| {ctx // 1024}k | {cname} | " + " | ".join(out) + " |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"device": props.name, "l2_bytes": l2, "iters": args.iters, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
