#!/usr/bin/env python3
"""FlashAttention-4's SM90 kernels compiled for sm_90a on a machine without a GPU (and without
PyTorch), to read their SASS beside ours (scripts/sass_loops.py): the forward or the backward main
kernel for one head_dim, causal or not, with FA4's own tile choice for it.

    PY312 scripts/peers/fa4_sass.py --site DIR --pass fwd|bwd --head-dim D [--causal]
                                    [--dtype bf16|f16] --out DIR

Needs Python 3.12 (the FA4 site's wheels are cp312) with typing_extensions, numpy, cuda-python and
einops, and the FA4 site unpacked (../shared/peers/fa4_wheels.sh, or the parts made by
scripts/peers/device_parts.sh). On this project's CPU machine (2026-12-05):

    python3.12 -m venv /tmp/v12 && /tmp/v12/bin/pip install typing_extensions numpy cuda-python einops
    mkdir -p /tmp/fa4site && cat build-peers/fa4/fa4site.part-* | xz -d | tar -C /tmp/fa4site -x
    /tmp/v12/bin/python scripts/peers/fa4_sass.py --site /tmp/fa4site --pass fwd --head-dim 128 --out /tmp/fa4sass
    scripts/sass_loops.py /tmp/fa4sass/fa4_fwd_d128_bf16.sass --blocks

How: the CuTe DSL compiles with fake tensors (symbolic shapes, 16-byte aligned) for the arch in
CUTE_DSL_ARCH and keeps its PTX and cubin (CUTE_DSL_KEEP_PTX / KEEP_CUBIN); the GPU is needed only
to run. PyTorch and Triton, which FA4's modules import but the kernels' compilation does not use,
are replaced by stubs written to a temporary folder, and flash_attn.cute's __init__ (which imports
the PyTorch interface) is bypassed. FA4's tile choice (its interface's _tile_size_fwd_sm90 /
_tile_size_bwd_sm90 and their config classes) is read from the site's interface.py by `ast`, so the
kernel is the one FA4 would run for that shape. Writes OUT/fa4_PASS_dD[_causal]_DTYPE.{cubin,ptx}
and, with cuobjdump (CUOBJDUMP or the PATH, nvdisasm on the PATH), .sass. Exit 0; 2 on a bad
argument or a site that is not FA4's; 1 when the compilation fails.
"""
import argparse
import ast
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import types

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402

STUB_TORCH = '''
class _Any:
    """Any attribute, call, index or union: what FA4's modules touch of torch at import time."""
    def __init__(self, name="torch"):
        self._n = name
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Any(self._n + "." + k)
    def __call__(self, *a, **k):
        return _Any(self._n + "()")
    def __hash__(self):
        return hash(self._n)
    def __eq__(self, o):
        return isinstance(o, _Any) and o._n == self._n
    def __or__(self, o):
        return self
    def __ror__(self, o):
        return self
    def __getitem__(self, k):
        return self
    def __mro_entries__(self, bases):
        return (object,)
    def __iter__(self):
        return iter(())
    def __bool__(self):
        return False
class Tensor:
    pass
class device:
    pass
class dtype:
    pass
def __getattr__(name):
    return _Any("torch." + name)
'''
STUBS = {
    "torch/__init__.py": STUB_TORCH,
    "torch/_subclasses/__init__.py": "",
    "torch/_subclasses/fake_tensor.py": "class FakeTensor:\n    pass\nclass FakeTensorMode:\n    pass\n",
    "torch/_guards.py": "def active_fake_mode():\n    return None\n",
    "torch/nn/__init__.py": "from torch import _Any\ndef __getattr__(name):\n    return _Any('torch.nn.' + name)\n",
    "torch/nn/functional.py": "from torch import _Any\ndef __getattr__(name):\n    return _Any('torch.nn.functional.' + name)\n",
    "triton/__init__.py": "from torch import _Any\ndef __getattr__(name):\n    return _Any('triton.' + name)\n",
}


def fail(msg, code=2):
    print(f"fa4_sass.py: {msg}", file=sys.stderr)
    sys.exit(code)


def tile_choosers(interface_py):
    """FwdConfig, BwdConfig, _tile_size_fwd_sm90 and _tile_size_bwd_sm90 from FA4's interface.py."""
    with open(interface_py, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    wanted = {"FwdConfig", "BwdConfig", "_tile_size_fwd_sm90", "_tile_size_bwd_sm90"}
    nodes = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in wanted]
    missing = wanted - {n.name for n in nodes}
    if missing:
        fail(f"{interface_py}: no {', '.join(sorted(missing))} (another FA4 version?)")
    ns = {}
    exec("from dataclasses import dataclass\nfrom typing import Optional\n", ns)
    exec(compile(ast.Module(body=nodes, type_ignores=[]), interface_py, "exec"), ns)
    return ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", required=True)
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), required=True)
    ap.add_argument("--head-dim", type=int, required=True)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if sys.version_info[:2] != (3, 12):
        fail(f"Python {sys.version_info[0]}.{sys.version_info[1]}: the FA4 site's wheels are for 3.12")
    if a.head_dim % 8 or not 8 <= a.head_dim <= 256:
        fail(f"--head-dim {a.head_dim}: FA4's SM90 kernels take a multiple of 8 up to 256")
    cute_dir = os.path.join(a.site, "flash_attn", "cute")
    if not os.path.isfile(os.path.join(cute_dir, "flash_fwd_sm90.py")):
        fail(f"--site {a.site}: no flash_attn/cute/flash_fwd_sm90.py in it (unpack FA4's site there)")
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    stub = tempfile.mkdtemp(prefix="fa4stub-")
    for rel, text in STUBS.items():
        os.makedirs(os.path.dirname(os.path.join(stub, rel)), exist_ok=True)
        with open(os.path.join(stub, rel), "w", encoding="utf-8") as f:
            f.write(text)
    work = tempfile.mkdtemp(prefix="fa4dump-")
    os.environ.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP_PTX="1", CUTE_DSL_KEEP_CUBIN="1",
                      CUTE_DSL_DUMP_DIR=work)
    sys.path.insert(0, stub)
    import site
    site.addsitedir(os.path.abspath(a.site))
    import flash_attn  # noqa: F401
    pkg = types.ModuleType("flash_attn.cute")
    pkg.__path__ = [cute_dir]
    sys.modules["flash_attn.cute"] = pkg
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32
    from quack.compile_utils import make_fake_tensor
    from flash_attn.cute.utils import AuxData

    cfgs = tile_choosers(os.path.join(cute_dir, "interface.py"))
    dt = cutlass.BFloat16 if a.dtype == "bf16" else cutlass.Float16
    d = a.head_dim
    sym = cute.sym_int
    b, sq, sk, h = sym(), sym(), sym(), sym()
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    if a.pass_ == "fwd":
        from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
        cfg = cfgs["_tile_size_fwd_sm90"](d, d, a.causal, False)
        kernel = FlashAttentionForwardSm90(
            dt, d, d, 1, is_causal=a.causal, is_local=False, pack_gqa=False,
            tile_m=cfg.m_block_size, tile_n=cfg.n_block_size, num_stages=2, num_threads=384,
            Q_in_regs=False, intra_wg_overlap=cfg.intra_wg_overlap, mma_pv_is_rs=cfg.mma_pv_is_rs)
        q, o = (make_fake_tensor(dt, (b, sq, h, d), divisibility=8) for _ in range(2))
        k, v = (make_fake_tensor(dt, (b, sk, h, d), divisibility=8) for _ in range(2))
        lse = make_fake_tensor(Float32, (b, h, sq), divisibility=1)
        args = [kernel, q, k, v, o, lse, Float32(0.125), None, None, None, None, None, None, None,
                None, None, AuxData(None, None), None, None, stream]
        shape = f"tile {cfg.m_block_size} x {cfg.n_block_size}"
    else:
        from flash_attn.cute.flash_bwd_sm90 import FlashAttentionBackwardSm90
        cfg = cfgs["_tile_size_bwd_sm90"](d, d, a.causal, False)
        kernel = FlashAttentionBackwardSm90(
            dt, d, d, 1, a.causal, is_local=False, deterministic=False,
            tile_m=cfg.m_block_size, tile_n=cfg.n_block_size, Q_stage=cfg.num_stages_Q,
            dO_stage=cfg.num_stages_dO, PdS_stage=cfg.num_stages_PdS, SdP_swapAB=cfg.SdP_swapAB,
            dKV_swapAB=cfg.dKV_swapAB, dQ_swapAB=cfg.dQ_swapAB, AtomLayoutMSdP=cfg.AtomLayoutMSdP,
            AtomLayoutNdKV=cfg.AtomLayoutNdKV, AtomLayoutMdQ=cfg.AtomLayoutMdQ,
            num_threads=(cfg.num_wg + 1) * 128, dQ_single_wg=cfg.dQ_single_wg)
        q, do, dq = (make_fake_tensor(dt, (b, sq, h, d), divisibility=8) for _ in range(3))
        k, v, dk, dv = (make_fake_tensor(dt, (b, sk, h, d), divisibility=8) for _ in range(4))
        sq_r, sq_dr = sym(), sym()
        lse2, dpsum = (make_fake_tensor(Float32, (b, h, sq_r), divisibility=4) for _ in range(2))
        dq_accum = make_fake_tensor(Float32, (b, h, sq_dr), divisibility=4)
        args = [kernel, q, k, v, do, lse2, dpsum, dq_accum, dk, dv, Float32(0.125), None, None,
                None, None, None, None, None, None, None, AuxData(None, None), None, None, stream]
        shape = (f"tile {cfg.m_block_size} x {cfg.n_block_size}, stages Q {cfg.num_stages_Q} "
                 f"dO {cfg.num_stages_dO} PdS {cfg.num_stages_PdS}, swapAB SdP {cfg.SdP_swapAB} "
                 f"dKV {cfg.dKV_swapAB} dQ {cfg.dQ_swapAB}")
    print(f"fa4_sass.py: {a.pass_} d{d}{' causal' if a.causal else ''} {a.dtype}: {shape}")
    try:
        cute.compile(*args, options="--enable-tvm-ffi")
    except Exception as e:  # the DSL's errors are of many types; report and fail
        fail(f"compilation failed: {type(e).__name__}: {e}", 1)
    base = os.path.join(out, f"fa4_{a.pass_}_d{d}{'_causal' if a.causal else ''}_{a.dtype}")
    for ext in ("cubin", "ptx"):
        found = sorted(glob.glob(os.path.join(work, f"*.{ext}")), key=os.path.getmtime)
        if not found:
            fail(f"no .{ext} was kept in {work}", 1)
        shutil.move(found[-1], f"{base}.{ext}")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(stub, ignore_errors=True)
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if cuobjdump:
        with open(f"{base}.sass", "w", encoding="utf-8") as f:
            r = subprocess.run([cuobjdump, "-sass", f"{base}.cubin"], stdout=f, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(f"fa4_sass.py: cuobjdump failed: {r.stderr.strip()}", file=sys.stderr)
        print(f"{base}.sass")
    else:
        print(f"{base}.cubin (no cuobjdump: set CUOBJDUMP for the SASS)")
    return 0


if __name__ == "__main__":
    run(main)
