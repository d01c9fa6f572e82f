#!/usr/bin/env python3
"""FlashInfer's batch decode on a paged or contiguous KV cache as a peer of attnbench (issue 29), in attnbench's format.

    python3 scripts/peers/flashinfer.py CONFIG.json [--flashinfer-backend auto] [--flashinfer-tensor-cores auto] [--out FILE]
    python3 scripts/peers/flashinfer.py configs/decode_grid.json --dry-run     # no torch, no GPU
    python3 scripts/peers/peers.py CONFIG.json --peers fa4,flashinfer

Row flashinfer.batch_decode (options {}; {"tensor_cores": 0 or 1} when forced), for paged cases and
for single-token decode over a contiguous cache (no row at all for the others): one call is flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace,
"NHD", use_cuda_graph=True, use_tensor_cores=..., backend=...).run(q, (k_pool, v_pool), out=o,
lse=...) (tensor cores by default for GQA groups of 4 or more: use_tensor_cores() below), planned
once per case outside the timed call
(wrapper.plan(indptr, indices, last_page_len, heads_q, heads_kv, head_dim, page_size,
window_left=, logits_soft_cap=, sm_scale=, q_data_type=, kv_data_type=)). The table is the
harness's own (ab_case_metadata), turned into FlashInfer's CSR form by decode_plan() below: a
sequence's pages are the first ceil(context / page_size) entries of its row, in order, and
last_page_len the keys in its last page. K and V are attnbench's pool [num_pages, page_size, hkv, d]
as is (FlashInfer's NHD paged layout). A contiguous cache, K and V [batch, seq_kv, hkv, d], is the same
layout read as a pool of batch pages of seq_kv keys, sequence b on page b (contiguous_decode): the
paged kernel over the tensors attnbench's own rows read, with no copy; q [batch, hq, d] is attnbench's q seen without its seq_q
axis of 1 (or the packed q of a ragged batch with one query per sequence). GQA: FlashInfer maps
query head h to kv head h / (hq / hkv), as attnbench. O and the LSE are verified: FlashInfer's LSE
is base 2, [tokens, hq] (its utils.py says its kernels emit base-2 LSE; this wrapper's run() takes
no lse_base), converted to attnbench's natural-log layout after the call, outside the timing.
SKIPs (plan_skip, listed by the dry run): passes other than fwd (paged is forward-only), f32
(FlashInfer's decode takes f16/bf16), more than one query per sequence (multi-token decode,
q_len_per_req > 1, is not wired), a sequence with an empty context (FlashInfer needs
1 <= last_page_len <= page_size). The window and the soft cap map (decode_kwargs). A case
FlashInfer refuses is a SKIP with its message; FlashInfer not importable makes every row a SKIP saying so.
Cases, inputs, verification, timing and the results file: scripts/peers/common.py (docs/peers.md).
Exit codes: 0 done (fail/skip rows included), 1 stopped early, 2 bad input or PyTorch missing.
"""
import importlib
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.peers import common  # noqa: E402

name = "flashinfer"
IMPL = "flashinfer.batch_decode"
BACKENDS = ("auto", "fa2", "fa3", "trtllm-gen", "cute-dsl", "cudnn")
LN2 = 0.6931471805599453
WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace (split-KV partial results)


# ============================================================================ the problem as FlashInfer's arguments
# Pure functions of the problem and the table (lists of ints): the tests run them without torch.


def queries_per_sequence(problem):
    """The number of queries of each sequence (seqlens_q when ragged, else seq_q for each)."""
    p = problem.get("problem", problem)
    if common.is_varlen(p):
        return common.varlen_info(p)["seqlens_q"]
    return [int(p["seq_q"])] * int(p["batch"])


def contiguous_decode(problem):
    """Whether a problem (or a case) is single-token decode over a contiguous, not ragged cache: the
    one non-paged kind this peer maps (one page of seq_kv keys per sequence)."""
    p = problem.get("problem", problem)
    return not common.is_paged(p) and not common.is_varlen(p) and int(p["seq_q"]) == 1


def decode_page_size(problem):
    """plan()'s page_size: the problem's, or seq_kv for a contiguous cache (a page per sequence)."""
    p = problem.get("problem", problem)
    return int(p["page_size"]) if common.is_paged(p) else int(p["seq_kv"])


def decode_plan(problem, table):
    """FlashInfer's CSR paged KV from attnbench's block table (rows, as ab_case_metadata gives them):
    indptr [batch + 1] (prefix sums of each sequence's page count ceil(context / page_size)),
    indices (each row's first pages, concatenated), last_page_len [batch] (keys in a sequence's last
    page, 1..page_size). The table's padding (past a sequence's pages) is never copied. A contiguous
    cache (table None): page b is sequence b's seq_kv keys."""
    p = problem.get("problem", problem)
    if not common.is_paged(p):
        b, n = int(p["batch"]), int(p["seq_kv"])
        return {"indptr": list(range(b + 1)), "indices": list(range(b)), "last_page_len": [n] * b}
    g = common.paged_info(problem)
    ps = g["page_size"]
    indptr, indices, last = [0], [], []
    for row, n, ctx in zip(table, g["pages_used"], g["seqlens_kv"]):
        indices += [int(x) for x in row[:n]]
        indptr.append(indptr[-1] + n)
        last.append(ctx - (n - 1) * ps if n else 0)
    return {"indptr": indptr, "indices": indices, "last_page_len": last}


def decode_kwargs(problem):
    """wrapper.plan()'s keyword arguments beside the CSR arrays and the head counts: window_left (-1:
    none; FlashInfer's left window is inclusive, keys [i - left, i], attnbench's window_left), the
    soft cap (logits_soft_cap, softcap * tanh(s / softcap) on the scaled score, attnbench's), and
    sm_scale. A one-token query is the last row of its sequence: it sees every key up to the diagonal
    whether causal or not, and a right bound >= 0 takes none away."""
    p = problem.get("problem", problem)
    lo, _ = common.diagonal_bounds(p)
    kw = {"window_left": -lo if lo is not None else -1, "sm_scale": float(p["scale"])}
    if common.softcap(p) > 0:
        kw["logits_soft_cap"] = common.softcap(p)
    return kw


def plan_skip_reason(case, pass_name):
    """Why FlashInfer's batch decode cannot run this (case, pass), from the case alone; None: it runs."""
    p = case.get("problem", case)
    if pass_name != "fwd":
        return "paged KV caches are forward-only (attnbench defines no dK, dV through a block table)"
    if p["dtype"] == "f32":
        return "FlashInfer's batch decode takes f16 and bf16 only"
    if any(n != 1 for n in queries_per_sequence(p)):
        return ("more than one query per sequence: this peer maps single-token decode only (FlashInfer's "
                "multi-token decode, q_len_per_req > 1, is not wired)")
    if any(n == 0 for n in common.context_lengths(p)):
        return "a sequence with an empty context: FlashInfer's paged KV needs 1 <= last_page_len <= page_size"
    return None


def lse_natural(lse2, case):
    """FlashInfer's LSE, [tokens, hq] in base 2, as attnbench's: natural log, in the case's LSE
    layout ([b, hq, 1] dense, [hq, total_q] packed; one query per sequence either way). The dense
    layout's trailing 1 is not optional: the H200 job of 2026-12-04 failed all 42 rows on a
    [b, hq] LSE ("output not in attnbench's layout")."""
    lse = lse2 * LN2
    if common.is_varlen(case["problem"]):
        lse = lse.t()
    return lse.reshape(tuple(case["inputs"]["layout"][common.OUTPUT_LAYOUT["LSE"]])).contiguous()


# ============================================================================ the peer


# use_tensor_cores: FlashInfer's decode wrapper runs its CUDA-core decode kernel by default and its
# tensor-core (prefill) kernel with use_tensor_cores=True, which its documentation calls faster for
# large GQA groups. The CUDA-core kernel ran GQA 64:8 decode at 0.42-0.53 of the read ceiling on an
# H100 (2026-12-05, results/h200/issue29/job4): a peer must run its best setting, so "auto" takes
# the tensor cores from a group of TC_MIN_GROUP query heads per kv head on.
TENSOR_CORES = ("auto", "0", "1", "both")
TC_MIN_GROUP = 4


def use_tensor_cores(problem, setting):
    """The use_tensor_cores of one case: setting "0" or "1" as given; "auto": a GQA group of at
    least TC_MIN_GROUP query heads per kv head."""
    if setting in ("0", "1"):
        return setting == "1"
    p = problem.get("problem", problem)
    return p["heads_q"] // p["heads_kv"] >= TC_MIN_GROUP


def add_args(ap):
    ap.add_argument("--flashinfer-backend", default="auto", choices=BACKENDS,
                    help="BatchDecodeWithPagedKVCacheWrapper's backend (default auto)")
    ap.add_argument("--flashinfer-tensor-cores", default="auto", choices=TENSOR_CORES,
                    help="its use_tensor_cores: auto (default: on for GQA groups of %d or more query heads "
                         "per kv head), 0, 1, or both (two rows per case, options tensor_cores=0 and 1)"
                         % TC_MIN_GROUP)


class FlashInfer(common.Backend):
    impl = IMPL

    def __init__(self, backend, state, tensor_cores="auto"):
        self.backend = backend
        self.tensor_cores = tensor_cores
        # A forced setting is the row's option (both settings in one file stay apart); auto is {}.
        self.options = {} if tensor_cores == "auto" else {"tensor_cores": int(tensor_cores)}
        self.state = state

    def context(self):
        return dict(self.state.get("context", {}))

    def plans(self, case):
        return common.is_paged(case) or contiguous_decode(case)

    def plan_skip(self, case, pass_name):
        return plan_skip_reason(case, pass_name)

    def skip_reason(self, case, pass_name):
        return self.state.get("error")

    def make(self, dev, case, pass_name, t):
        torch, fi = dev.torch, self.state["module"]
        p = case["problem"]
        b, hq, hkv, d = p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"]
        csr = decode_plan(p, t["block_table"].tolist() if common.is_paged(p) else None)
        i32 = {n: torch.tensor(v, dtype=torch.int32, device=dev.dev) for n, v in csr.items()}
        ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev.dev)
        tc = use_tensor_cores(p, self.tensor_cores)
        w = fi.BatchDecodeWithPagedKVCacheWrapper(
            ws, "NHD", use_cuda_graph=True, use_tensor_cores=tc, paged_kv_indptr_buffer=i32["indptr"],
            paged_kv_indices_buffer=i32["indices"], paged_kv_last_page_len_buffer=i32["last_page_len"],
            backend=self.backend)
        dt = dev.tdtype(case)
        w.plan(i32["indptr"], i32["indices"], i32["last_page_len"], hq, hkv, d, decode_page_size(p),
               q_data_type=dt, kv_data_type=dt, **decode_kwargs(p))
        # What ran, in the log: backend "auto" resolves per plan (fa2, fa3, cudnn, ...).
        print(f"flashinfer: {case['case']}: use_tensor_cores={int(tc)}, backend "
              f"{self.backend} -> {getattr(w, 'resolved_backend', '?')}", file=sys.stderr, flush=True)
        q = t["q"].view(b, hq, d)  # [b, 1, hq, d] or, ragged with one query each, [b, hq, d]
        kv = (t["k"], t["v"])  # the pool [num_pages, page_size, hkv, d], or [b, seq_kv, hkv, d]: NHD
        o = dev.empty(case, "o")
        o3 = o.view(b, hq, d)
        # The LSE as FlashInfer writes it: [tokens, hq] float32, base 2 (flashinfer/utils.py:
        # "FlashInfer's kernels fold log2(e) into the softmax scale and emit base-2 LSE"; the
        # decode wrapper's run() has no lse_base); lse_natural converts it after the call, outside
        # the timed region.
        lse2 = torch.empty((b, hq), dtype=torch.float32, device=dev.dev)

        def fn():
            w.run(q, kv, out=o3, lse=lse2, return_lse=True)

        def outputs():
            return {"O": o, "LSE": lse_natural(lse2, case)}

        def validate():
            # Both on the calls' stream, ordered before the call. (A plain lse2.fill_ ran on the
            # default stream, unordered with the call; on 2026-12-05, 7 of 8 rows' LSE read NaN
            # while O passed, which a fill landing after FlashInfer's write explains.)
            dev.poison(o)
            dev.poison(lse2)
            with torch.cuda.stream(dev.side):
                fn()

        return common.Call(fn, outputs, validate, keep=(w, ws, i32, o, lse2))


# Where the GPU machine gets FlashInfer (no package access there): the site folder that
# scripts/peers/flashinfer_wheels.sh packs, unpacked to /tmp/fisite; its dependencies
# apache-tvm-ffi and nvidia-cutlass-dsl come from the FA4 site (/tmp/fa4site). Each is added with
# site.addsitedir (their .pth files need it) when $ATTNBENCH_FLASHINFER_SITE / $ATTNBENCH_FA4_SITE
# name it or the default folder exists.
DEFAULT_SITES = (("ATTNBENCH_FA4_SITE", "/tmp/fa4site"), ("ATTNBENCH_FLASHINFER_SITE", "/tmp/fisite"))


def add_sites():
    import site
    for env, default in DEFAULT_SITES:
        where = os.environ.get(env) or (default if os.path.isdir(default) else "")
        if where:
            if not os.path.isdir(where):
                raise common.BadInput(f"${env} = {where}: not a folder")
            site.addsitedir(where)


def import_flashinfer():
    """The FlashInfer package, never this file: run as scripts/peers/*.py, this folder is
    sys.path[0] and `import flashinfer` alone found flashinfer.py itself (the first GPU job,
    2026-12-03: every row SKIP with "flashinfer ? has no BatchDecodeWithPagedKVCacheWrapper")."""
    here = os.path.dirname(os.path.abspath(__file__))
    mod = sys.modules.get("flashinfer")
    if mod is not None and os.path.dirname(os.path.abspath(getattr(mod, "__file__", None) or "")) == here:
        del sys.modules["flashinfer"]  # this file, imported under the package's name
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        return importlib.import_module("flashinfer")
    finally:
        sys.path[:] = saved


def load(args):
    st = {}
    add_sites()
    try:
        flashinfer = import_flashinfer()
    except Exception as e:  # noqa: BLE001  (ImportError, or its JIT / CUDA checks failing at import)
        st["error"] = (f"FlashInfer not importable (import flashinfer: {type(e).__name__}: {common.first_line(e)}); "
                       "install flashinfer-python (0.7.2 was the version mapped here)")
        return st
    if not hasattr(flashinfer, "BatchDecodeWithPagedKVCacheWrapper"):
        st["error"] = f"flashinfer {getattr(flashinfer, '__version__', '?')} has no BatchDecodeWithPagedKVCacheWrapper"
        return st
    st["module"] = flashinfer
    st["context"] = {"package": "flashinfer-python", "version": getattr(flashinfer, "__version__", None),
                     "module": getattr(flashinfer, "__file__", None), "backend": args.flashinfer_backend,
                     "tensor_cores": getattr(args, "flashinfer_tensor_cores", "auto"),
                     "call": "BatchDecodeWithPagedKVCacheWrapper(workspace 128 MiB, 'NHD', use_cuda_graph=True, "
                             f"use_tensor_cores=(auto: heads_q / heads_kv >= {TC_MIN_GROUP}))"
                             ".run(q [b, hq, d], (k_pool, v_pool), out=o); plan() once per case, untimed, from the "
                             "harness's block table (decode_plan: indptr, indices, last_page_len); a contiguous "
                             "cache as a pool of one seq_kv-key page per sequence",
                     "lse": "returned base 2 [tokens, hq] (return_lse=True, in the timed call), verified after conversion to natural log"}
    return st


def backends(args, dev_kind):
    if dev_kind != "cuda":
        return []
    settings = ("0", "1") if args.flashinfer_tensor_cores == "both" else (args.flashinfer_tensor_cores,)
    state = {}  # one import, shared by the rows of every setting
    return [FlashInfer(args.flashinfer_backend, state, tc) for tc in settings]


def setup(args, dev, capi, mine):
    if mine:
        mine[0].state.update(load(args))  # the state every backend of this peer shares


if __name__ == "__main__":
    run(common.main, "flashinfer.py", __doc__.split("\n\n")[0], [sys.modules[__name__]])
