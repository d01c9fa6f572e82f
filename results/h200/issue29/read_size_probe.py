#!/usr/bin/env python3
"""What a plain read of N bytes costs from a flushed L2, at decode's sizes (issue 29, session 54).

Issue 29's batch-1 target asks cuda.flash_decode for >= 0.765 of the run's read ceiling at 32k keys
and more. The ceiling (context.ceilings.read_tbps) is measured on a buffer far larger than one
decode call reads: at 1 x 32k, GQA 64:8 d64 reads 67 MB (22 us at 3.09 TB/s on an H100), and every
kernel measured so far, cuDNN's included, pays a fixed cost of about 10 us a call there. This probe
asks whether a read with no attention in it pays the same: a reduction over N bytes of bf16
(torch.sum, float32 accumulation; one pass, vectorised loads), after a read flush of twice the L2
(as the decode configs' timing.flush "read"), timed with CUDA events, median of REPS calls, for N
from 8 MB to 1 GB. It prints GB/s, the fraction of the largest size's rate, and the fixed cost F of
a line t = F + bytes / rate through the two largest sizes, then t - bytes / rate at each size.

    python3 results/h200/issue29/read_size_probe.py [REPS]     # about 10 s on an H100

If a plain read reaches only about 0.7 of its asymptote at 67 MB, then the d64 1 x 32k cell's
miss is the cost of any kernel at that size, not flash_decode's. Markdown on stdout.
"""
import statistics
import sys

import torch


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    flush = torch.zeros(2 * l2 // 4, dtype=torch.float32, device=dev)  # written once: clean lines after
    sizes_mb = [8, 17, 34, 67, 134, 268, 537, 1074]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = []
    for mb in sizes_mb:
        n = mb * (1 << 20) // 2
        x = torch.randn(n, dtype=torch.bfloat16, device=dev)
        times = []
        for r in range(reps + 3):
            flush.sum()  # the read flush
            start.record()
            x.sum(dtype=torch.float32)
            end.record()
            end.synchronize()
            if r >= 3:  # warm-up calls
                times.append(start.elapsed_time(end) * 1e3)  # us
        t = statistics.median(times)
        rows.append((mb, n * 2, t))
        del x
    (_, b1, t1), (_, b2, t2) = rows[-2], rows[-1]
    rate = (b2 - b1) / ((t2 - t1) * 1e-6)  # bytes/s, the marginal rate
    fixed = t2 - b2 / rate * 1e6
    top = rows[-1][1] / (rows[-1][2] * 1e-6)
    print(f"GPU: {props.name}; L2 {l2 >> 20} MiB; read flush {2 * l2 >> 20} MiB; median of {reps} calls")
    print(f"marginal rate (two largest sizes) {rate / 1e9:.0f} GB/s; fixed cost F = {fixed:.1f} us\n")
    print("| bytes (MB) | us | GB/s | of the largest size's GB/s | t - bytes / rate (us) |")
    print("|---:|---:|---:|---:|---:|")
    for mb, b, t in rows:
        gbps = b / (t * 1e-6)
        print(f"| {b / 1e6:.0f} | {t:.1f} | {gbps / 1e9:.0f} | {gbps / top:.2f} | {t - b / rate * 1e6:.1f} |")


if __name__ == "__main__":
    main()
