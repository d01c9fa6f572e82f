#!/usr/bin/env python3
"""FA4 (PyPI flash-attn-4: FlashAttention in the CuTe DSL; on Hopper its flash_fwd_sm90 /
flash_bwd_sm90 kernels, FlashAttention-3's design) as a peer of attnbench, in attnbench's format.

    python3 scripts/peers/fa4.py CONFIG.json [--out FILE] [--fa4-site DIR] [--no-deterministic]
    python3 scripts/peers/fa4.py CONFIG.json --dry-run                 # no torch, no GPU

Rows fa4.flash_attn (options {}) and, for bwd and fwd_bwd, fa4.flash_attn with options
{"deterministic": 1} (its deterministic backward, timed as its own row). One call is
flash_attn.cute.flash_attn_func(q, k, v, softmax_scale, causal, deterministic, return_lse=True
[, window_size=(left, right)] [, softcap=C]) on attnbench's BSHD tensors (FA4's native layout, no
copy): O and the natural-log LSE [b, hq, sq] float32, both verified, and dQ, dK, dV through
autograd. A varlen case (packed THD, cu_seqlens) calls flash_attn.cute.flash_attn_varlen_func with the
same arguments plus cu_seqlens_q/k and max_seqlen_q/k (fa4_varlen_args() below) on attnbench's
packed tensors: O [total_q, hq, d], LSE [hq, total_q], gradients through autograd as dense.
A paged KV cache (page_size > 0, forward only) calls flash_attn_varlen_func with page_table (the
harness's own block table, ab_case_metadata, [b, pages_per_seq] int32 on the GPU), seqused_k (the
context lengths) and max_seqlen_k, K and V being attnbench's pool [num_pages, page_size, hkv, d]
as is (FA4's paged layout), and q dense BSHD or, for a ragged batch with seqlens_q, packed THD with
cu_seqlens_q (fa4_paged_args() below); no cu_seqlens_k (FA4 refuses it with a page table). The
paged forward runs under torch.no_grad() (inference, as a decode step; no backward exists).
GQA: FA4 maps query head h to kv head h / (hq / hkv), as attnbench. Causal: FA4's mask
keeps key j for query i iff j <= i + seq_kv - seq_q (bottom-right, as attnbench; the verification
checks it on the odd shapes). Window and soft cap: fa4_window_args() below (FA4's local mask is
bottom-right aligned too); FA4's softcap is softcap * tanh(scale * s / softcap), attnbench's.
f32 is a SKIP (FA4 takes f16/bf16); a case FA4 refuses (its assertions: head_dim, GPU
architecture, softcap in some backward kernels) is a SKIP with its message; a missing package makes
every row a SKIP saying so.

Where FA4 comes from: `pip install flash-attn-4` (a GPU machine with network), or a site folder
unpacked from wheels (the GPU machine here: ../shared/peers/README.md), added with
site.addsitedir before `import flash_attn.cute` (its .pth files need it): --fa4-site DIR, else
$ATTNBENCH_FA4_SITE, else /tmp/fa4site when that folder exists.
Cases, inputs, verification, timing and the results file: scripts/peers/common.py (docs/peers.md).
Exit codes: 0 done (fail/skip rows included), 1 stopped early, 2 bad input or PyTorch missing.
"""
import os
import site
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.peers import common  # noqa: E402

name = "fa4"
DEFAULT_SITE = "/tmp/fa4site"
DISTRIBUTIONS = ("flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels", "apache-tvm-ffi")


def fa4_window_args(case):
    """attnbench's causal and window (a case or its problem) as flash_attn_func's arguments:
    {"causal": bool} and, when a window remains, "window_size": (left, right) with None for an
    unbounded side (FA4 4.0.0b36, flash_attn/cute/interface.py: only None is unbounded there; a
    negative side is not, unless both are). Both conventions are bottom-right aligned: FA4's local
    mask keeps key j for query i iff i + seq_k - seq_q - left <= j <= i + seq_k - seq_q + right,
    attnbench's window exactly. Causal is folded in here, not left to FA4: attnbench's causal caps
    the right side at 0, so causal with a left bound is the window (left, 0) with causal False,
    and a window (unbounded, 0) is plain causal (as FA4 itself would resolve both). Every
    combination of (window_left, window_right, causal) maps; none is a SKIP."""
    p = case.get("problem", case)
    left, right = common.window(p)
    if p.get("causal"):
        right = 0 if right < 0 else min(right, 0)
    if left < 0 and right < 0:
        return {"causal": False}
    if left < 0 and right == 0:
        return {"causal": True}
    return {"causal": False, "window_size": (left if left >= 0 else None, right if right >= 0 else None)}


def fa4_kwargs(case, deterministic, cu_seqlens=None):
    """The keyword arguments of FA4's call for a case (window_size and softcap only when set, so
    a dense case makes the same call as before windows existed). A varlen case (common.is_varlen)
    calls flash_attn_varlen_func and adds fa4_varlen_args(case, cu_seqlens)."""
    p = case.get("problem", case)
    kw = {"softmax_scale": p["scale"], "deterministic": deterministic, "return_lse": True}
    kw.update(fa4_window_args(p))
    if common.softcap(p) > 0:
        kw["softcap"] = common.softcap(p)
    if common.is_paged(p):
        kw.update(fa4_paged_args(p, cu_seqlens))
    elif common.is_varlen(p):
        kw.update(fa4_varlen_args(p, cu_seqlens))
    return kw


def fa4_function(case):
    """The name of the flash_attn.cute function a case calls: flash_attn_varlen_func for a packed
    varlen batch or a paged KV cache (only it takes page_table), flash_attn_func otherwise."""
    p = case.get("problem", case)
    return "flash_attn_varlen_func" if common.is_varlen(p) or common.is_paged(p) else "flash_attn_func"


def fa4_paged_args(case, tensors=None):
    """flash_attn_varlen_func's paged arguments (FA4 4.0.0b36, flash_attn/cute/interface.py
    _flash_attn_fwd): page_table int32 [batch, pages_per_seq] (the block table, row b's first
    ceil(seqused_k[b] / page_size) entries read), seqused_k int32 [batch] (the context lengths:
    FA4 aligns causal and the window bottom-right on them, as attnbench does on seq_kv_of(b)),
    max_seqlen_k (the longest context, a host int), and for a ragged batch (seqlens_q) cu_seqlens_q
    with max_seqlen_q; never cu_seqlens_k (FA4 asserts it is None with a page table). k and v are the
    pool [num_pages, page_size, hkv, d], FA4's paged shape. tensors: (page_table, seqused_k,
    cu_seqlens_q or None), the case's device copies (dev.inputs: the harness's table, padding -1
    turned to page 0 by fa4_page_table); None: the pure values (lists: the tests and the context)."""
    p = case.get("problem", case)
    g = common.paged_info(p)
    if tensors is None:
        tensors = ("block_table", g["seqlens_kv"],
                   common.varlen_info(p)["cu_seqlens_q"] if common.is_varlen(p) else None)
    table, used, cu_q = tensors
    kw = {"page_table": table, "seqused_k": used, "max_seqlen_k": g["max_seqlen_kv"]}
    if common.is_varlen(p):
        kw.update(cu_seqlens_q=cu_q, max_seqlen_q=common.varlen_info(p)["max_seqlen_q"])
    return kw


def fa4_page_table(rows):
    """The block table FA4 is given: the harness's rows with the padding of an explicit table's short
    rows (-1, never read for keys: past seqused_k) turned to page 0, so no index FA4 might compute for
    a whole tile points outside the pool. The pages a sequence reads are unchanged."""
    return [[x if x >= 0 else 0 for x in r] for r in rows]


def fa4_varlen_args(case, cu_seqlens=None):
    """flash_attn_varlen_func's varlen arguments (FA4 4.0.0b36, flash_attn/cute/interface.py):
    cu_seqlens_q and cu_seqlens_k, the prefix sums as int32 tensors of batch + 1 on the GPU
    (cu_seqlens = (cu_q, cu_kv), the case's device copies made once by dev.inputs; None: the
    lists of common.varlen_info, for the tests and the context), and max_seqlen_q / max_seqlen_k
    as host ints (the longest lengths; FA4 sizes its grid from them, and a CUDA graph replays the
    same lengths). q, k, v are attnbench's packed [total, h, d] tensors, FA4's varlen layout; O
    comes back [total_q, hq, d] and the LSE [hq, total_q] float32, natural log: attnbench's
    packed layouts, no copy. No seqused_q / seqused_k: every token of a sequence is used. Causal
    and the window (fa4_window_args) are bottom-right aligned in each sequence by FA4 (its
    per-sequence seqlen_q, seqlen_k), as attnbench's."""
    v = common.varlen_info(case)
    cq, ckv = cu_seqlens if cu_seqlens is not None else (v["cu_seqlens_q"], v["cu_seqlens_kv"])
    return {"cu_seqlens_q": cq, "cu_seqlens_k": ckv, "max_seqlen_q": v["max_seqlen_q"],
            "max_seqlen_k": v["max_seqlen_kv"]}


def add_args(ap):
    ap.add_argument("--fa4-site", metavar="DIR",
                    help=f"site folder holding flash_attn.cute (default $ATTNBENCH_FA4_SITE, else {DEFAULT_SITE} "
                         "when it exists, else the installed package)")
    ap.add_argument("--no-deterministic", action="store_true", help="no deterministic-backward rows")


class Fa4(common.Backend):
    impl = "fa4.flash_attn"

    def __init__(self, deterministic, state):
        self.deterministic = deterministic
        self.options = {"deterministic": 1} if deterministic else {}
        self.passes = ("bwd", "fwd_bwd") if deterministic else None  # the forward has no such mode
        self.state = state

    def context(self):
        return dict(self.state.get("context", {}))

    def plan_skip(self, case, pass_name):
        if case["problem"]["dtype"] == "f32":
            return "FA4 takes f16 and bf16 only"
        if common.is_paged(case) and pass_name != "fwd":
            return "paged KV caches are forward-only (attnbench defines no dK, dV through a block table)"
        return None

    def skip_reason(self, case, pass_name):
        if self.state.get("error"):
            return self.state["error"]
        if common.is_varlen(case) or common.is_paged(case):
            return self.state.get("varlen_error")
        return None

    def make(self, dev, case, pass_name, t):
        func = self.state[fa4_function(case)]
        paged = common.is_paged(case)
        if paged:  # made once per case, outside the timed call
            torch = dev.torch
            table = torch.tensor(fa4_page_table(t["block_table"].tolist()), dtype=torch.int32, device=dev.dev)
            cu = (table, t["seqlens_kv"], t["cu_seqlens_q"] if common.is_varlen(case) else None)
        else:
            cu = (t["cu_seqlens_q"], t["cu_seqlens_kv"]) if common.is_varlen(case) else None
        kw = fa4_kwargs(case, self.deterministic, cu)

        def forward(q, k, v):  # BSHD in, BSHD out, LSE [b, hq, sq]; varlen: THD, LSE [hq, total_q]
            if paged:  # inference: no autograd graph (paged problems have no backward)
                with dev.torch.no_grad():
                    return func(q, k, v, **kw)
            o, lse = func(q, k, v, **kw)
            return o, lse

        return common.autograd_call(dev, case, pass_name, t, forward)


def load(args):
    """Imports flash_attn.cute (from the site folder when one is given or present)."""
    st = {}
    where = args.fa4_site or os.environ.get("ATTNBENCH_FA4_SITE") or (DEFAULT_SITE if os.path.isdir(DEFAULT_SITE) else "")
    if where:
        if not os.path.isdir(where):
            raise common.BadInput(f"--fa4-site = {where}: not a folder")
        site.addsitedir(where)
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # noqa: BLE001  (ImportError, or the CuTe DSL failing to load)
        st["error"] = (f"FA4 not importable (import flash_attn.cute: {type(e).__name__}: {common.first_line(e)}); "
                       f"install flash-attn-4 or unpack its site folder (--fa4-site, now '{where or 'none'}')")
        return st
    st["flash_attn_func"] = flash_attn_func
    try:
        from flash_attn.cute import flash_attn_varlen_func
        st["flash_attn_varlen_func"] = flash_attn_varlen_func
    except ImportError as e:  # an FA4 without the varlen entry point: its varlen rows SKIP saying so
        st["varlen_error"] = (f"this FA4 has no flash_attn.cute.flash_attn_varlen_func ({common.first_line(e)}); "
                              "varlen needs it")
    versions = {}
    try:
        from importlib import metadata
        for d in DISTRIBUTIONS:
            try:
                versions[d] = metadata.version(d)
            except metadata.PackageNotFoundError:
                pass
    except ImportError:
        pass
    mod = sys.modules.get("flash_attn.cute")
    st["context"] = {"package": "flash-attn-4", "versions": versions, "site": where or "(installed)",
                     "module": getattr(mod, "__file__", None), "call": "flash_attn.cute.flash_attn_func(q, k, v, "
                     "softmax_scale, causal, deterministic, return_lse=True[, window_size=(left, right)][, softcap]), "
                     "BSHD",
                     "causal_alignment": "bottom-right (FA4's mask: key j visible to query i iff j <= i + skv - sq)",
                     "window": "window_size=(left, right), None unbounded, bottom-right aligned as attnbench's; "
                               "causal with a left bound passed as the window (left, 0) (fa4_window_args)",
                     "varlen": "flash_attn.cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, "
                               "max_seqlen_q, max_seqlen_k, ...same arguments) on the packed THD tensors; cu_seqlens "
                               "int32 on the GPU, made once per case outside the timed call; LSE [hq, total_q] "
                               "(fa4_varlen_args)",
                     "paged": "flash_attn.cute.flash_attn_varlen_func(q, k_pool, v_pool, page_table, seqused_k, "
                              "max_seqlen_k[, cu_seqlens_q, max_seqlen_q], ...same arguments) under torch.no_grad(); "
                              "page_table the harness's block table (ab_case_metadata), -1 padding as page 0; "
                              "K/V the pool [num_pages, page_size, hkv, d] (fa4_paged_args)"}
    return st


def backends(args, dev_kind):
    if dev_kind != "cuda":
        return []
    state = {}
    out = [Fa4(False, state)]
    if not args.no_deterministic:
        out.append(Fa4(True, state))
    return out


def setup(args, dev, capi, mine):
    if mine:
        mine[0].state.update(load(args))


if __name__ == "__main__":
    run(common.main, "fa4.py", __doc__.split("\n\n")[0], [sys.modules[__name__]])
