#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention as a peer of attnbench, in attnbench's results format.

    python3 scripts/peers/torch_sdpa.py CONFIG.json [--backend flash,efficient,cudnn,math] [--out FILE]
    python3 scripts/peers/torch_sdpa.py CONFIG.json --dry-run          # no torch, no GPU
    python3 scripts/peers/torch_sdpa.py --merge RUN.json PEER.json --out MERGED.json

Rows torch.sdpa_flash, torch.sdpa_efficient, torch.sdpa_cudnn, torch.sdpa_math: one backend forced
at a time (torch.nn.attention.sdpa_kernel). Inputs are attnbench's BSHD tensors seen as [b, h, s, d]
views; GQA/MQA through enable_gqa=True; causal bottom-right (is_causal when seq_q == seq_kv, else
torch.nn.attention.bias.causal_lower_right); causal with seq_q > seq_kv is a SKIP (PyTorch gives
NaN rows where attnbench defines O = 0). A sliding window or a soft cap is a SKIP for every
backend: SDPA has neither (a window would be a dense boolean attn_mask, which computes and times
every score, and the flash backend takes no mask at all; torch.flex_attention, flex.py, runs them).
A variable-length (packed THD, cu_seqlens) case is a SKIP for every backend: SDPA has no packed
varlen argument (a block-diagonal mask would time the whole total_q x total_kv problem; nested
jagged tensors are not wired here); FA4's flash_attn_varlen_func and flex.py run them.
A paged KV cache (page_size > 0) is a SKIP for every backend: SDPA reads K and V contiguous and has no
block table (gathering the pages into contiguous K/V would add a copy of the whole context to the
timed call, or time a problem that is not paged when done outside it); fa4.flash_attn (page_table)
runs them.
A backend that refuses a case is a SKIP with PyTorch's reason. The public API returns no LSE: O,
dQ, dK, dV are verified (the note says so).
Cases, inputs, verification, timing and the results file: scripts/peers/common.py (docs/peers.md).
Exit codes: 0 done (fail/skip rows included), 1 stopped early, 2 bad input or PyTorch missing.
"""
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.peers import common  # noqa: E402

name = "torch_sdpa"
NO_WINDOW = ("PyTorch SDPA has no sliding window (a boolean attn_mask would compute every score of the dense "
             "problem, and the flash backend takes none): see torch.flex_attention (flex.py)")
NO_SOFTCAP = "PyTorch SDPA has no logit soft-capping: see torch.flex_attention (flex.py)"
NO_VARLEN = ("PyTorch SDPA takes no cu_seqlens (packed variable-length batches): a block-diagonal attn_mask would "
             "compute and time every score of the total_q x total_kv problem, and nested jagged tensors are not wired "
             "here: see fa4.flash_attn (flash_attn_varlen_func) and torch.flex_attention (flex.py)")
NO_PAGED = ("PyTorch SDPA has no paged KV cache (no block table: K and V must be contiguous; gathering the pages "
            "would time a copy of the context, or a problem that is not paged): see fa4.flash_attn (page_table)")
BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
            "math": "MATH"}


def add_args(ap):
    ap.add_argument("--backend", action="append",
                    help="flash, efficient, cudnn or math; repeatable or comma-separated (default: all four)")


class Sdpa(common.Backend):
    absent = ("LSE",)

    def __init__(self, short):
        self.impl = f"torch.sdpa_{short}"
        self.member = BACKENDS[short]
        self.torch = None

    def context(self):
        t = self.torch
        if t is None:
            return {}
        cudnn = t.backends.cudnn.version() if t.backends.cudnn.is_available() else None
        return {"torch": t.__version__, "cuda_runtime": t.version.cuda,
                "cudnn": f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn and cudnn >= 10000 else cudnn,
                "sdpa_backend": self.member,
                "forward_mode": "inputs require grad: the forward kernels also save their softmax statistics",
                "causal_alignment": "bottom-right (is_causal when seq_q == seq_kv, else causal_lower_right)"}

    def setup(self, torch):
        self.torch = torch
        import torch.nn.attention as attention
        self.sdpa_kernel = getattr(attention, "sdpa_kernel", None)
        self.backend = getattr(getattr(attention, "SDPBackend", None), self.member, None)
        try:
            from torch.nn.attention.bias import causal_lower_right
            self.causal_lower_right = causal_lower_right
        except ImportError:
            self.causal_lower_right = None
        self.has_gqa = common.torch_version_at_least(torch, 2, 5)

    def plan_skip(self, case, pass_name):
        p = case["problem"]
        if common.is_paged(p):
            return NO_PAGED
        if common.is_varlen(p):
            return NO_VARLEN
        if common.has_window(p):
            return NO_WINDOW
        if common.softcap(p) > 0:
            return NO_SOFTCAP
        if p["causal"] and p["seq_q"] > p["seq_kv"]:
            return "PyTorch's lower-right causal bias gives NaN rows for seq_q > seq_kv"
        return None

    def skip_reason(self, case, pass_name):
        p, v = case["problem"], self.torch.__version__
        if self.sdpa_kernel is None or self.backend is None:
            return f"torch {v} has no sdpa_kernel / SDPBackend.{self.member} (needs >= 2.3)"
        if p["heads_q"] != p["heads_kv"] and not self.has_gqa:
            return f"torch {v} has no enable_gqa (needs >= 2.5)"
        if p["causal"] and p["seq_q"] != p["seq_kv"] and self.causal_lower_right is None:
            return f"torch {v} has no torch.nn.attention.bias.causal_lower_right"
        return None

    def make(self, dev, case, pass_name, t):
        p = case["problem"]
        kw = {"scale": p["scale"]}  # built once: a CausalBias per call would be host work in the timing
        if p["causal"]:
            if p["seq_q"] == p["seq_kv"]:
                kw["is_causal"] = True
            else:
                kw["attn_mask"] = self.causal_lower_right(p["seq_q"], p["seq_kv"])
        if p["heads_q"] != p["heads_kv"]:
            kw["enable_gqa"] = True
        F = self.torch.nn.functional

        def forward(q, k, v):  # BSHD leaves; SDPA sees the [b, h, s, d] views (no copy)
            with self.sdpa_kernel([self.backend]):
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw)
            return o.transpose(1, 2), None

        return common.autograd_call(dev, case, pass_name, t, forward)


def backends(args, dev_kind):
    if dev_kind != "cuda":
        return []
    picked = common.split_list(args.backend, BACKENDS, "--backend") or list(BACKENDS)
    return [Sdpa(b) for b in picked]


def setup(args, dev, capi, mine):
    for b in mine:
        b.setup(dev.torch)


if __name__ == "__main__":
    run(common.main, "torch_sdpa.py", __doc__.split("\n\n")[0], [sys.modules[__name__]])
