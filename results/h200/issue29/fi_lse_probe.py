#!/usr/bin/env python3
"""Why FlashInfer's decode LSE fails attnbench's verification where its O passes (issue 29).

Job5's try at d705a79 (results/h200/issue29/job5-d705a79/decode_grid.flashinfer.json): 9 of
FlashInfer's 22 rows FAIL on the LSE alone, every element NaN/Inf or unwritten, while their O
passes at 0.46-0.76 of the bound: batch 1, GQA 64:8, d128, the contiguous cache from 4k keys
(1k passes), pages of 16 from 32k, pages of 64 at 128k. The pattern follows FlashInfer's split of
the keys (a long context split into chunks, merged after), so the question is whether FlashInfer's
merge leaves the LSE unwritten in the mode scripts/peers/flashinfer.py uses (use_cuda_graph=True,
tensor cores for GQA groups >= 4), or whether our wrapper reads it wrongly.

This probe runs FlashInfer's BatchDecodeWithPagedKVCacheWrapper directly on those shapes, with
each of use_cuda_graph {1, 0}, use_tensor_cores {1, 0} and plan(disable_split_kv=) {0, 1}, the
LSE buffer filled with NaN on the call's stream first, and compares O and the LSE (base 2,
converted to natural log) with a float32 reference computed with PyTorch on the GPU. One line per
setting: O's max abs error, the LSE's non-finite count and max abs error.

    python3 results/h200/issue29/fi_lse_probe.py [--out FILE.md]     (the GPU machine; FlashInfer's
    site in /tmp/fisite, its dependencies in /tmp/fa4site, as scripts/peers/flashinfer.py finds them)

Exit codes: 0 done (whatever the verdicts), 2 no PyTorch/CUDA/FlashInfer.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

CASES = [  # (label, seq_kv, page_size): page_size == seq_kv is the contiguous cache, one page
    ("contiguous 1k", 1024, 1024),
    ("contiguous 4k", 4096, 4096),
    ("contiguous 32k", 32768, 32768),
    ("pages of 16, 16k", 16384, 16),
    ("pages of 16, 32k", 32768, 16),
]
HQ, HKV, D = 64, 8, 128


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the table to this markdown file")
    args = ap.parse_args()
    try:
        import torch
        from scripts.peers import flashinfer as fiw
        fiw.add_sites()
        fi = fiw.import_flashinfer()
    except Exception as e:  # noqa: BLE001
        print(f"fi_lse_probe: cannot start: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("fi_lse_probe: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(0)
    scale = 1.0 / math.sqrt(D)
    lines = [f"# FlashInfer {getattr(fi, '__version__', '?')}: decode O and LSE against a float32 reference",
             "", f"batch 1, GQA {HQ}:{HKV}, d{D}, bf16, one query; NaN-filled LSE before each call.", "",
             "| case | use_cuda_graph | tensor_cores | disable_split_kv | O max abs | LSE non-finite | LSE max abs | note |",
             "|---|---|---|---|---|---|---|---|"]
    for label, ctx, page in CASES:
        pages = ctx // page
        q = torch.randn(1, HQ, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(pages, page, HKV, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(pages, page, HKV, D, device=dev, dtype=torch.bfloat16)
        # Reference: query head h reads kv head h // (HQ // HKV), keys in page order.
        kf = k.reshape(ctx, HKV, D).float().repeat_interleave(HQ // HKV, dim=1)  # [ctx, HQ, D]
        vf = v.reshape(ctx, HKV, D).float().repeat_interleave(HQ // HKV, dim=1)
        s = torch.einsum("hd,khd->hk", q[0].float(), kf) * scale  # [HQ, ctx]
        lse_ref = torch.logsumexp(s, dim=1)
        o_ref = torch.einsum("hk,khd->hd", torch.softmax(s, dim=1), vf)
        indptr = torch.tensor([0, pages], dtype=torch.int32, device=dev)
        indices = torch.arange(pages, dtype=torch.int32, device=dev)
        last = torch.tensor([page], dtype=torch.int32, device=dev)
        for graph in (True, False):
            for tc in (True, False):
                for nosplit in (False, True):
                    note = ""
                    try:
                        ws = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
                        kw = dict(use_cuda_graph=graph, use_tensor_cores=tc)
                        if graph:
                            kw.update(paged_kv_indptr_buffer=indptr.clone(), paged_kv_indices_buffer=indices.clone(),
                                      paged_kv_last_page_len_buffer=last.clone())
                        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", **kw)
                        w.plan(indptr, indices, last, HQ, HKV, D, page, q_data_type=torch.bfloat16,
                               kv_data_type=torch.bfloat16, sm_scale=scale, disable_split_kv=nosplit)
                        o = torch.full((1, HQ, D), float("nan"), device=dev, dtype=torch.bfloat16)
                        lse2 = torch.full((1, HQ), float("nan"), device=dev, dtype=torch.float32)
                        torch.cuda.synchronize()
                        w.run(q, (k, v), out=o, lse=lse2, return_lse=True)
                        torch.cuda.synchronize()
                        o_err = (o[0].float() - o_ref).abs().max().item()
                        lse = lse2[0] * math.log(2.0)
                        bad = int((~torch.isfinite(lse)).sum().item())
                        fin = torch.isfinite(lse)
                        lse_err = (lse[fin] - lse_ref[fin]).abs().max().item() if fin.any() else float("nan")
                        row = f"{o_err:.2e} | {bad} of {HQ} | {lse_err:.2e}"
                        if bad:
                            sample = lse2[0][~torch.isfinite(lse2[0])][:1].item()
                            note = f"first non-finite value {sample}"
                    except Exception as e:  # noqa: BLE001
                        row = "- | - | -"
                        note = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                    lines.append(f"| {label} | {int(graph)} | {int(tc)} | {int(nosplit)} | {row} | {note} |")
                    print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
