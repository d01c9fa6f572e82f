#!/usr/bin/env python3
"""PyTorch's FlexAttention as a peer of attnbench: the sliding window and the soft cap, which
PyTorch's SDPA cannot express, run by the kernel PyTorch generates for them.

    python3 scripts/peers/flex.py CONFIG.json [--flex-dense] [--out FILE]
    python3 scripts/peers/flex.py configs/window.json --dry-run        # no torch, no GPU

Row torch.flex_attention (options {}): torch.nn.attention.flex_attention.flex_attention compiled
with torch.compile (dynamic=False: one kernel per shape, as a model compiles it), on attnbench's
BSHD tensors seen as [b, h, s, d] views. Causal and the window are a BlockMask made by
create_block_mask from mask_mod() below (bottom-right aligned, attnbench's rule), once per case and
outside the timed call; the soft cap is score_mod() below (softcap * tanh(s / softcap) on the
scaled score, before the mask); GQA/MQA through enable_gqa=True; kernel_options BACKEND=TRITON
(FlexAttention's own Triton kernels for every shape: not the decoding kernel, which torch 2.11
fails to lower for some short GQA queries, nor FA4's through FLASH). The LSE comes back through
return_aux=AuxRequest(lse=True) (or return_lse=True on an older PyTorch) and is verified with O;
where neither exists O, dQ, dK, dV are verified and the note says the LSE was not. dQ, dK, dV come
from autograd (the compiled backward).
Varlen (packed THD, cu_seqlens): the packed tensors seen as one sequence of total_q queries and
total_kv keys ([1, h, total, d] views) with a document mask (varlen_mask_mod() below: same
sequence, and causal and the window bottom-right aligned in each sequence); O comes back
[total_q, hq, d] and the LSE [hq, total_q], attnbench's packed layouts.
A paged KV cache (page_size > 0) is a SKIP (NO_PAGED below): K and V are read as contiguous
tensors here; fa4.flash_attn runs paged cases.
Rows only for the cases with a window, a soft cap or varlen (what the other peers cannot all run);
--flex-dense adds every other case too (so a dense config's row count stays that of its other
peers unless asked). A case FlexAttention refuses (a head_dim, shared memory) is a SKIP with its
message; no PyTorch FlexAttention makes every row a SKIP saying so.
Cases, inputs, verification, timing and the results file: scripts/peers/common.py (docs/peers.md).
Exit codes: 0 done (fail/skip rows included), 1 stopped early, 2 bad input or PyTorch missing.
"""
import inspect
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.peers import common  # noqa: E402

name = "flex"
IMPL = "torch.flex_attention"


# ============================================================================ the problem as FlexAttention's functions
# Pure functions of the problem: they use only arithmetic, comparisons and & on their arguments, so
# they work on Python ints and floats (the tests, without torch) and on the index and score tensors
# FlexAttention passes them.


def mask_mod(problem):
    """attnbench's visibility (causal and window) as FlexAttention's mask_mod(b, h, q_idx, kv_idx):
    true where query q_idx sees key kv_idx, i.e. lo <= kv_idx - q_idx <= hi with
    common.visible_bounds (bottom-right aligned: the diagonal is q_idx + seq_kv - seq_q). None when
    every key is visible (no BlockMask at all)."""
    lo, hi = common.visible_bounds(problem)
    if lo is None and hi is None:
        return None
    if hi is None:
        return lambda b, h, q_idx, kv_idx: kv_idx - q_idx >= lo
    if lo is None:
        return lambda b, h, q_idx, kv_idx: kv_idx - q_idx <= hi
    return lambda b, h, q_idx, kv_idx: (kv_idx - q_idx >= lo) & (kv_idx - q_idx <= hi)


def varlen_tables(problem, pad_to=1):
    """A varlen batch (common.is_varlen) as FlexAttention sees it: one sequence of total_q queries
    and total_kv keys (batch 1), with per-token tables for varlen_mask_mod: doc_q[i] and doc_kv[j],
    the sequence of query token i and key token j, and shift_q[i] = cu_kv[s + 1] - cu_q[s + 1] for
    query i's sequence s, the offset of its bottom-right diagonal in packed indices (query i of
    sequence s is row i - cu_q[s] there, and its diagonal key is row i - cu_q[s] + len_kv[s] - len_q[s],
    i.e. packed key i + shift_q[i]). Sequences of length 0 have no tokens. pad_to: the tables are
    padded to a multiple of it with entries that match nothing (doc -1 for queries, -2 for keys),
    so an index the kernel rounds up to its block never reads past them. Lists of ints."""
    v = common.varlen_info(problem)
    cq, ckv = v["cu_seqlens_q"], v["cu_seqlens_kv"]
    doc_q, doc_kv, shift_q = [], [], []
    for s, (nq, nkv) in enumerate(zip(v["seqlens_q"], v["seqlens_kv"])):
        doc_q += [s] * nq
        doc_kv += [s] * nkv
        shift_q += [ckv[s + 1] - cq[s + 1]] * nq

    def pad(x, fill):
        return x + [fill] * (-len(x) % max(1, pad_to))

    return {"doc_q": pad(doc_q, -1), "doc_kv": pad(doc_kv, -2), "shift_q": pad(shift_q, 0),
            "total_q": v["total_q"], "total_kv": v["total_kv"]}


def varlen_mask_mod(problem, tables):
    """attnbench's visibility in a packed varlen batch as a mask_mod over the packed indices:
    query q_idx sees key kv_idx iff both are in the same sequence and, within it, the key is
    visible by the dense rule (causal and the window bottom-right aligned in that sequence:
    lo <= kv_idx - q_idx - shift_q[q_idx] <= hi with common.diagonal_bounds). tables: those of
    varlen_tables, as lists (the tests) or as device tensors (FlexAttention, which indexes them
    with its index tensors). Always a mask: the sequences' boundaries are one."""
    lo, hi = common.diagonal_bounds(problem)
    doc_q, doc_kv, shift_q = tables["doc_q"], tables["doc_kv"], tables["shift_q"]

    def same(q_idx, kv_idx):
        return doc_q[q_idx] == doc_kv[kv_idx]

    def off(q_idx, kv_idx):
        return kv_idx - q_idx - shift_q[q_idx]

    if lo is None and hi is None:
        return lambda b, h, q_idx, kv_idx: same(q_idx, kv_idx)
    if hi is None:
        return lambda b, h, q_idx, kv_idx: same(q_idx, kv_idx) & (off(q_idx, kv_idx) >= lo)
    if lo is None:
        return lambda b, h, q_idx, kv_idx: same(q_idx, kv_idx) & (off(q_idx, kv_idx) <= hi)
    return lambda b, h, q_idx, kv_idx: same(q_idx, kv_idx) & (off(q_idx, kv_idx) >= lo) & (off(q_idx, kv_idx) <= hi)


def score_mod(problem, tanh):
    """attnbench's soft cap as FlexAttention's score_mod(score, b, h, q_idx, kv_idx): FlexAttention
    hands it the scaled score (scale * q.k) and masks after it, attnbench's order. tanh: torch.tanh
    there, math.tanh in a test. None when the problem has no soft cap."""
    cap = common.softcap(problem)
    if cap <= 0:
        return None
    return lambda score, b, h, q_idx, kv_idx: cap * tanh(score / cap)


def has_feature(problem):
    """What this peer is for: a window, a soft cap or a varlen batch (causal alone is the other
    peers'; PyTorch SDPA runs none of the three)."""
    return common.has_window(problem) or common.softcap(problem) > 0 or common.is_varlen(problem)


NO_PAGED = ("FlexAttention reads K and V contiguous here: a paged KV cache (block table) is not wired (gathering "
            "the pages would time a copy of the context, or a problem that is not paged): see fa4.flash_attn "
            "(page_table)")


# Varlen tables are padded to a multiple of this (FlexAttention's blocks are 128 or less; a
# multiple of 256 leaves room for any block size it picks).
VARLEN_PAD = 256


# ============================================================================ the peer


def add_args(ap):
    ap.add_argument("--flex-dense", action="store_true",
                    help="torch.flex_attention rows for every case, not only those with a window, a soft cap or varlen")


class Flex(common.Backend):
    impl = IMPL

    def __init__(self, dense, state):
        self.dense = dense
        self.options = {}
        self.state = state

    @property
    def absent(self):
        return self.state.get("absent", ())

    def context(self):
        return dict(self.state.get("context", {}))

    def plans(self, case):
        return self.dense or has_feature(case["problem"])

    def plan_skip(self, case, pass_name):
        if common.is_paged(case["problem"]):
            return NO_PAGED
        return None

    def skip_reason(self, case, pass_name):
        return self.state.get("error")

    def block_mask(self, dev, p):
        """The case's BlockMask, made once for all its passes (the last one is kept). A varlen
        batch: one sequence of total_q x total_kv with varlen_mask_mod, its tables on the GPU."""
        cache = self.state.setdefault("block_masks", {})
        if common.is_varlen(p):
            key = ("varlen", tuple(p["seqlens_q"]), tuple(p["seqlens_kv"]), common.diagonal_bounds(p))
            if key not in cache:
                cache.clear()
                tab = varlen_tables(p, VARLEN_PAD)
                dt = {n: dev.torch.tensor(tab[n], dtype=dev.torch.int32, device=dev.dev)
                      for n in ("doc_q", "doc_kv", "shift_q")}
                cache[key] = self.state["create_block_mask"](varlen_mask_mod(p, dt), None, None, tab["total_q"],
                                                             tab["total_kv"], device=dev.dev)
            return cache[key]
        mm = mask_mod(p)
        if mm is None:
            return None
        key = (p["seq_q"], p["seq_kv"], common.visible_bounds(p))
        if key not in cache:
            cache.clear()
            cache[key] = self.state["create_block_mask"](mm, None, None, p["seq_q"], p["seq_kv"], device=dev.dev)
        return cache[key]

    def make(self, dev, case, pass_name, t):
        torch, st, p = dev.torch, self.state, case["problem"]
        kw = {"score_mod": score_mod(p, torch.tanh), "block_mask": self.block_mask(dev, p), "scale": p["scale"]}
        if p["heads_q"] != p["heads_kv"]:
            kw["enable_gqa"] = True
        kw.update(st["lse_kwargs"])
        if st.get("kernel_options"):
            kw["kernel_options"] = dict(st["kernel_options"])
        flex, unpack = st["flex"], st["unpack"]

        def forward(q, k, v):  # BSHD leaves; FlexAttention sees the [b, h, s, d] views (no copy)
            o, lse = unpack(flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw))
            return o.transpose(1, 2), lse

        def forward_varlen(q, k, v):  # packed [total, h, d] leaves seen as [1, h, total, d] (no copy)
            o, lse = unpack(flex(*(x.unsqueeze(0).transpose(1, 2) for x in (q, k, v)), **kw))
            return o.transpose(1, 2).squeeze(0), (lse.squeeze(0) if lse is not None else None)

        # compile_first: the first call compiles (and benchmarks its choices with an L2-sized
        # buffer); the row's peak memory is that of the validation call after it.
        return common.autograd_call(dev, case, pass_name, t, forward_varlen if common.is_varlen(p) else forward,
                                    compile_first=True)


def load(torch):
    """Imports FlexAttention, compiles it, and says how its LSE comes back."""
    st = {}
    try:
        from torch.nn.attention import flex_attention as fa
        fn, create = fa.flex_attention, fa.create_block_mask
    except Exception as e:  # noqa: BLE001
        st["error"] = (f"torch {torch.__version__} has no FlexAttention (torch.nn.attention.flex_attention: "
                       f"{type(e).__name__}: {common.first_line(e)}; needs >= 2.5)")
        return st
    params = inspect.signature(fn).parameters
    aux = getattr(fa, "AuxRequest", None)
    if "return_aux" in params and aux is not None:
        st["lse_kwargs"] = {"return_aux": aux(lse=True)}
        st["unpack"] = lambda r: (r[0], r[1].lse)
        lse_how = "return_aux=AuxRequest(lse=True)"
    elif "return_lse" in params:
        st["lse_kwargs"] = {"return_lse": True}
        st["unpack"] = lambda r: (r[0], r[1])
        lse_how = "return_lse=True"
    else:
        st["lse_kwargs"] = {}
        st["unpack"] = lambda r: (r, None)
        st["absent"] = ("LSE",)
        lse_how = "not returned by this PyTorch: LSE not verified"
    # The one Triton kernel (FlexAttention's forward and backward templates) for every shape. AUTO
    # would take the decoding kernel for short queries, which torch 2.11 fails to lower with GQA and
    # a BlockMask at some seq_q < 128 (NoValidChoicesError), and could take FLASH (FA4's CuTe
    # kernels) where flash_attn.cute is importable, which would make this row another FA4 row.
    hints = getattr(getattr(fa, "FlexKernelOptions", None), "__annotations__", {})
    if "BACKEND" in hints:
        st["kernel_options"] = {"BACKEND": "TRITON"}
    elif "FORCE_USE_FLEX_ATTENTION" in hints:
        st["kernel_options"] = {"FORCE_USE_FLEX_ATTENTION": True}
    else:
        st["kernel_options"] = {}
    # Every case is a new shape, mask and score_mod, so a recompilation; past dynamo's limit (8 per
    # function by default) it would fall back to the unfused eager path, a different kernel.
    cfg = torch._dynamo.config
    for n, at_least in (("cache_size_limit", 4096), ("recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 65536), ("accumulated_recompile_limit", 65536)):
        try:
            if hasattr(cfg, n):
                setattr(cfg, n, max(int(getattr(cfg, n)), at_least))
        except Exception:  # noqa: BLE001  (an alias this version refuses)
            pass
    st["flex"] = torch.compile(fn, dynamic=False)
    st["create_block_mask"] = create
    st["context"] = {"torch": torch.__version__, "triton": _version("triton"),
                     "call": "torch.compile(flex_attention, dynamic=False)(q, k, v, score_mod, block_mask, scale, "
                             f"enable_gqa, {lse_how}, kernel_options={st['kernel_options'] or None}) on BSHD "
                             "tensors seen as [b, h, s, d] views",
                     "mask": "create_block_mask(mask_mod) once per case, outside the timed call; key j visible to "
                             "query i iff lo <= j - i <= hi (bottom-right: c(i) = i + skv - sq, c(i) - window_left <= "
                             "j <= c(i) + window_right, causal caps the right side at 0)",
                     "softcap": "score_mod: softcap * tanh(score / softcap) on the scaled score",
                     "varlen": "packed THD tensors seen as batch 1 of total_q x total_kv ([1, h, total, d] views); "
                               "varlen_mask_mod: same sequence (per-token sequence ids) and the rule above per "
                               "sequence (per-token diagonal shifts), tables on the GPU made once per case",
                     "rows": "cases with a window, a soft cap or varlen"}
    return st


def _version(dist):
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:  # noqa: BLE001
        return None


def backends(args, dev_kind):
    if dev_kind != "cuda":
        return []
    return [Flex(bool(getattr(args, "flex_dense", False)), {})]


def setup(args, dev, capi, mine):
    if mine:
        mine[0].state.update(load(dev.torch))
        if "context" in mine[0].state and mine[0].dense:
            mine[0].state["context"]["rows"] = "every case (--flex-dense)"


if __name__ == "__main__":
    run(common.main, "flex.py", __doc__.split("\n\n")[0], [sys.modules[__name__]])
