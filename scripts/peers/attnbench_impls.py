#!/usr/bin/env python3
"""attnbench's own implementations timed by the peers' timer: the timing-parity check.

    python3 scripts/peers/attnbench_impls.py CONFIG.json --impl cuda.cudnn_sdpa,cuda.flash_fwd_mma [--out FILE]

Rows "attnbench:<impl>" (e.g. attnbench:cuda.cudnn_sdpa): the implementation's forward/backward
called through libattnbench_capi (ab_call_*) on PyTorch tensors, verified and timed exactly as
the other peers' rows (CUDA graph of the call between two events, the L2 flushed before the start
event). `attnbench run` times the same kernel with the harness's timer (Google Benchmark, events
around each call); scripts/peers/timing_parity.py compares the two. As in the harness, a bwd row
reads O and LSE from the implementation's own forward (once, untimed), and a backward-only
implementation's fwd_bwd uses its fwd_partner's forward. --on cpu runs CPU implementations on
host buffers (the tests use it). A varlen case's cu_seqlens (int32, on the implementation's device,
made once per case) are handed over with ab_call_set_cu_seqlens before any call; a paged case's block
table and context lengths (the harness's own, ab_case_metadata, uploaded once per case) with
ab_call_set_paged (C API version 4), and its cu_seqlens_q alone when it is also varlen (a paged K/V
is not packed: no cu_seqlens_kv, as the harness calls it).
Exit codes as the other peers (common.py).
"""
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.peers import common  # noqa: E402

name = "attnbench"


def add_args(ap):
    ap.add_argument("--impl", dest="impls", action="append", metavar="NAME",
                    help="attnbench implementation(s) to time with the peer timer, repeatable or comma-separated")


class Impl(common.Backend):
    def __init__(self, impl, kind, options=None):
        self.name = impl
        self.impl = "attnbench:" + impl
        self.device_kind = kind
        self.options = dict(options or {})
        self.capi = None
        self.missing = None

    def context(self):
        return {"via": "libattnbench_capi ab_call_forward/ab_call_backward", "implementation": self.name}

    def skip_reason(self, case, pass_name):
        return self.missing

    def make(self, dev, case, pass_name, t):
        c = self.capi.call(self.name, case["problem"], pass_name, self.options)
        why = c.supports()
        if why:
            c.close()
            raise common.Skip(why)
        nws = c.workspace_bytes()
        ws = dev.zeros_bytes(nws)  # zeroed once: the C API's contract (ab_call_workspace_bytes)
        o, lse = dev.empty(case, "o"), dev.empty(case, "lse")
        grads = [dev.empty(case, n) for n in ("q", "k", "v")] if pass_name != "fwd" else [None] * 3
        c.prepare()
        P = dev.ptr
        q, k, v, dout = (P(t[n]) for n in common.TENSORS)
        attach(c, case, t, P)

        def fn():
            s = dev.current_stream()  # the timer's stream, or the capture stream
            if pass_name != "bwd":
                c.forward(q, k, v, P(o), P(lse), P(ws), nws, s)
            if pass_name != "fwd":
                c.backward(q, k, v, P(o), P(lse), dout, *(P(g) for g in grads), P(ws), nws, s)

        if pass_name == "bwd":  # O and LSE from its own forward, untimed
            f = self.capi.call(self.name, case["problem"], "fwd_bwd", self.options)
            fws = dev.zeros_bytes(f.workspace_bytes())
            f.prepare()
            attach(f, case, t, P)
            f.forward(q, k, v, P(o), P(lse), P(fws), f.workspace_bytes(), dev.stream())
            dev.sync()
            f.close()

        def validate():
            outs = ([o, lse] if pass_name != "bwd" else []) + (grads if pass_name != "fwd" else [])
            for x in outs:
                dev.poison(x)
            if dev.kind == "cuda":
                with dev.torch.cuda.stream(dev.side):
                    fn()
            else:
                fn()

        def outputs():
            out = {}
            if pass_name != "bwd":
                out["O"], out["LSE"] = o, lse
            if pass_name != "fwd":
                out.update(zip(("dQ", "dK", "dV"), grads))
            return out

        return common.Call(fn, outputs, validate, keep=(c, ws, o, lse, grads))


def attach(call, case, t, P):
    """The case's metadata on the implementation's device (dev.inputs made it once) handed to a call:
    cu_seqlens for varlen (cu_seqlens_q alone when paged), block table and lengths for paged."""
    paged = common.is_paged(case)
    if common.is_varlen(case):
        call.set_cu_seqlens(P(t["cu_seqlens_q"]), None if paged else P(t["cu_seqlens_kv"]))
    if paged:
        call.set_paged(P(t["block_table"]), P(t["seqlens_kv"]))


def backends(args, dev_kind):
    names = common.split_list(args.impls)
    out = []
    for n in names:
        kind = n.split(".", 1)[0]
        if kind not in ("cpu", "cuda") or "*" in n or "?" in n:
            raise common.BadInput(f"--impl = {n}: give implementation names (cuda.<name> or cpu.<name>), not globs")
        if kind == dev_kind:
            out.append(Impl(n, kind))
    return out


def setup(args, dev, capi, mine):
    have = {i["name"] for i in capi.implementations()}
    for b in mine:
        b.capi = capi
        if b.name not in have:
            b.missing = f"{b.name} is not registered in {capi.path}"


if __name__ == "__main__":
    run(common.main, "attnbench_impls.py", __doc__.split("\n\n")[0], [sys.modules[__name__]])
