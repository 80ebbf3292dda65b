"""The slim runtime's JIT path, proven on a GPU: every kernel that serving Kimi-K2.5 compiles at first start.

    python benchmarks/jit_path.py --toolchain DIR --flashinfer-site DIR --sglang-site DIR [--json FILE]

Needs an NVIDIA GPU, torch, and the pieces of the image given as directories:
  --toolchain        the pip CUDA 13 compiler tree (nvidia/cu13: nvcc, nvvm, crt, cccl, runtime)
  --flashinfer-site  the pinned flashinfer-python and apache-tvm-ffi, unpacked (no jit-cache, no cubin)
  --sglang-site      the sglang wheel, unpacked (its jit_kernel sources)
  --stub             NVIDIA's full libcuda.so link stub (the image copies it from the devel image)
The tree must hold what the image's venv has in nvidia/cu13, headers included: FlashInfer's
sampling includes <curand.h>, which comes from the nvidia-curand wheel (a torch requirement).

The tree gets the image's fix-ups (sglang_stack.image.steps.toolchain), every compiler variable points
at it, and any system CUDA toolkit should be moved out of the way first (the proof is only as
good as that: the script refuses to run while `nvcc` resolves outside the tree).

For each kernel, a fresh process with empty caches compiles and runs it against a torch
reference (cold), then a second fresh process over the filled cache does the same (warm):
  sglang jit_kernel  gptq_marlin_repack (the INT4 MoE weight repack at load), store_cache
                     (KV-cache store of the EAGLE-3 drafter's MHA pool), rope
                     (apply_rope_with_cos_sin_cache_inplace)
  flashinfer         sampling (top-k/top-p sampling and renorm), first as JIT, then built
                     ahead of time by sglang_stack.image.steps.aot for "9.0a 12.0a" into FlashInfer's
                     AOT dir and loaded with FLASHINFER_DISABLE_JIT=1 (what the image ships);
                     the fused all-reduce module trtllm_comm, built ahead of time the same way
                     (SGLang fuses the all-reduce by default on SM90 at TP > 1: docs/settings.md),
                     loaded with JIT disabled and run: its Lamport-buffer initialisation kernel
                     on this one GPU (the all-reduce itself needs TP > 1: tests/patching/test_patch_fused_capture.py)
  triton             a kernel compiled through TRITON_PTXAS_PATH (the tree's ptxas)
Prints one line per kernel and phase, and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ["marlin_repack", "store_cache", "rope", "flashinfer_sampling", "triton"]
AOT_KERNELS = {"sampling": "flashinfer_sampling", "trtllm_comm": "flashinfer_trtllm_comm"}


# --- the kernels, each run in a child process --------------------------------------------------------


def import_jit_kernel(name: str):
    """Import ``sglang.jit_kernel.NAME`` without running sglang/__init__.py (the frontend and its dependencies)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        raise SystemExit("error: sglang is not importable: check --sglang-site")
    site = next(Path(p) for p in sys.path if (Path(p) / "sglang" / "jit_kernel").is_dir())
    for pkg, path in (("sglang", site / "sglang"), ("sglang.srt", site / "sglang/srt"),
                      ("sglang.srt.utils", site / "sglang/srt/utils")):
        if pkg not in sys.modules:
            mod = types.ModuleType(pkg)
            mod.__path__ = [str(path)]
            sys.modules[pkg] = mod
    # register_custom_op only wraps the function for torch.compile; the kernel is the same.
    custom = types.ModuleType("sglang.srt.utils.custom_op")
    custom.register_custom_op = lambda fn=None, **_: fn if fn is not None else (lambda f: f)
    sys.modules.setdefault("sglang.srt.utils.custom_op", custom)
    return importlib.import_module(f"sglang.jit_kernel.{name}")


def marlin_reference(q_w, size_k: int, size_n: int, num_bits: int):
    """The Marlin weight layout, written from its definition: 16x16 tiles, the mma fragment order, then packing."""
    import numpy as np
    import torch

    frag = []
    for i in range(32):  # one 16x64 tile is four 16x16 blocks; lane i holds these elements
        col, rows = i // 4, [2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1]
        lane = [16 * r + col + 8 * b for b in (0, 1) for r in rows]
        frag += [p + 256 * j for j in range(4) for p in lane]
    inter = [0, 2, 4, 6, 1, 3, 5, 7] if num_bits == 4 else [0, 2, 1, 3]
    perm = np.array(frag).reshape(-1, len(inter))[:, inter].ravel()
    tiles = q_w.reshape(size_k // 16, 16, size_n // 16, 16).permute(0, 2, 1, 3).reshape(size_k // 16, size_n * 16)
    tiles = tiles.reshape(-1, perm.size)[:, torch.from_numpy(perm).to(tiles.device)].reshape(tiles.shape)
    w = tiles.cpu().numpy().astype(np.uint32)
    factor = 32 // num_bits
    packed = np.zeros((w.shape[0], w.shape[1] // factor), dtype=np.uint32)
    for i in range(factor):
        packed |= w[:, i::factor] << (num_bits * i)
    return torch.from_numpy(packed.astype(np.int32))


def run_marlin_repack():
    import numpy as np
    import torch

    mod = import_jit_kernel("gptq_marlin_repack")
    size_k, size_n, bits = 7168, 512, 4  # Kimi-K2.5's hidden size by one expert slice
    q = torch.randint(0, 16, (size_k, size_n), dtype=torch.int32)
    w = q.numpy().astype(np.uint32)
    gptq = np.zeros((size_k // 8, size_n), dtype=np.uint32)
    for i in range(8):
        gptq |= w[i::8, :] << (4 * i)
    gptq_t = torch.from_numpy(gptq.astype(np.int32)).cuda()
    start = time.monotonic()
    out = mod.gptq_marlin_repack(gptq_t, torch.empty(0, dtype=torch.int32, device="cuda"), size_k, size_n, bits)
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    ref = marlin_reference(q, size_k, size_n, bits)
    return seconds, bool(torch.equal(out.cpu(), ref)), "bitwise equal to the Marlin layout"


def run_store_cache():
    import torch

    mod = import_jit_kernel("kvcache")
    rows, width, slots = 257, 8 * 128, 4096  # the drafter's 8 KV heads of 128, bf16
    k, v = (torch.randn(rows, width, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    kc, vc = (torch.zeros(slots, width, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    idx = torch.randperm(slots, device="cuda")[:rows].to(torch.int64)
    start = time.monotonic()
    mod.store_cache(k, v, kc, vc, idx)
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    ok = torch.equal(kc[idx], k) and torch.equal(vc[idx], v) and int((kc.abs().sum(1) > 0).sum()) <= rows
    return seconds, bool(ok), "exact"


def run_rope():
    import torch

    mod = import_jit_kernel("rope")
    tokens, heads, kv_heads, dim, max_pos = 96, 32, 8, 128, 4096
    inv = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).cuda()
    pos = torch.randint(0, max_pos, (tokens,), device="cuda")
    q = torch.randn(tokens, heads * dim, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(tokens, kv_heads * dim, dtype=torch.bfloat16, device="cuda")

    def neox(x, n):
        x = x.float().view(tokens, n, dim)
        cos, sin = cache[pos, : dim // 2].unsqueeze(1), cache[pos, dim // 2:].unsqueeze(1)
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).view(tokens, n * dim)

    rq, rk = neox(q, heads), neox(k, kv_heads)
    start = time.monotonic()
    mod.apply_rope_with_cos_sin_cache_inplace(pos, q, k, dim, cache, is_neox=True)
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    err = max((q.float() - rq).abs().max().item(), (k.float() - rk).abs().max().item())
    return seconds, err < 0.05, f"max abs error {err:.4f} against fp32 (bf16 rounding)"


def run_flashinfer_sampling():
    import torch
    import flashinfer.sampling as fs

    torch.manual_seed(0)
    batch, vocab, top_k, top_p = 16, 163840, 40, 0.9  # Kimi-K2.5's vocabulary
    probs = torch.softmax(torch.randn(batch, vocab, device="cuda") * 3, dim=-1)
    start = time.monotonic()
    renorm_k = fs.top_k_renorm_probs(probs, top_k)
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    kth = torch.topk(probs, top_k, dim=-1).values[:, -1:]
    ref_k = torch.where(probs >= kth, probs, 0)
    ref_k = ref_k / ref_k.sum(-1, keepdim=True)
    renorm_p = fs.top_p_renorm_probs(probs, top_p)
    srt, order = torch.sort(probs, descending=True, dim=-1)
    keep = (srt.cumsum(-1) - srt) < top_p
    ref_p = torch.zeros_like(probs).scatter(-1, order, torch.where(keep, srt, 0))
    ref_p = ref_p / ref_p.sum(-1, keepdim=True)
    samples = fs.top_k_top_p_sampling_from_probs(probs, top_k, top_p)
    allowed = torch.gather((ref_k > 0) & (ref_p > 0), 1, samples.long().view(-1, 1)).all().item()
    err = max((renorm_k - ref_k).abs().max().item(), (renorm_p - ref_p).abs().max().item())
    return seconds, bool(err < 1e-4 and allowed), f"renorm max abs error {err:.2e}; every sample inside top-k and top-p"


def run_flashinfer_trtllm_comm():
    """The fused all-reduce module: its Lamport initialisation writes -0.0 into every element of a buffer."""
    import torch
    from flashinfer.comm import trtllm_ar

    buf = torch.ones(1 << 22, dtype=torch.bfloat16, device="cuda")
    start = time.monotonic()
    trtllm_ar.trtllm_lamport_initialize(buf.data_ptr(), buf.numel(), torch.bfloat16)
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    neg_zero = int(((buf == 0) & torch.signbit(buf)).sum().item())
    return seconds, neg_zero == buf.numel(), f"Lamport initialisation: {neg_zero}/{buf.numel()} elements are -0.0"


def run_triton():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x, y, out, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, a * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    start = time.monotonic()
    axpy[(triton.cdiv(n, 1024),)](x, y, out, 2.5, n, BLOCK=1024)
    torch.cuda.synchronize()
    seconds = time.monotonic() - start
    err = (out - (2.5 * x + y)).abs().max().item()
    return seconds, err < 1e-5, f"max abs error {err:.1e}; ptxas {os.environ.get('TRITON_PTXAS_PATH')}"


def child(kernel: str) -> None:
    start = time.monotonic()
    seconds, ok, detail = globals()[f"run_{kernel}"]()
    print(json.dumps({"kernel": kernel, "first_call_s": round(seconds, 3), "process_s": round(time.monotonic() - start, 3),
                      "ok": ok, "detail": detail}), flush=True)


# --- the driver ---------------------------------------------------------------------------------


def spawn(kernel: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kernel], env=env, capture_output=True, text=True, timeout=1800)
    last = (proc.stdout.strip().splitlines() or ["{}"])[-1]
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        result = {"kernel": kernel, "ok": False}
    if proc.returncode != 0 or not result.get("ok"):
        result.update(ok=False, error=(proc.stderr.strip().splitlines() or ["(no stderr)"])[-12:])
    return result


def directory_stats(path: Path) -> dict:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return {"files": len(files), "mb": round(sum(p.stat().st_size for p in files) / 1e6, 1),
            "so_mb": round(sum(p.stat().st_size for p in files if p.suffix == ".so") / 1e6, 1),
            "objects_mb": round(sum(p.stat().st_size for p in files if p.suffix == ".o") / 1e6, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=KERNELS + list(AOT_KERNELS.values()))
    parser.add_argument("--toolchain", type=Path)
    parser.add_argument("--flashinfer-site", type=Path)
    parser.add_argument("--sglang-site", type=Path)
    parser.add_argument("--stub", type=Path)
    parser.add_argument("--arch-list", default="9.0a 12.0a", help="the image's AOT architectures")
    parser.add_argument("--aot-modules", nargs="+", default=list(AOT_KERNELS), choices=list(AOT_KERNELS),
                        help="the FlashInfer modules the image builds ahead of time (default: all of them)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--aot-only", action="store_true", help="only the ahead-of-time build and its load")
    parser.add_argument("--aot-without-gpu", action="store_true",
                        help="hide every GPU from the ahead-of-time build (CUDA_VISIBLE_DEVICES=''), as on an image builder")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    sys.path.insert(0, str(ROOT))
    from sglang_stack.image.steps import toolchain

    root = args.toolchain.resolve()
    for line in toolchain.fixup(root, args.stub):
        print(f"toolchain: {line}")
    work = Path(tempfile.mkdtemp(prefix="jit-path-"))
    env = dict(os.environ, **toolchain.environment(root))
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "/usr/local/cuda" not in p)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (args.flashinfer_site.resolve(), args.sglang_site.resolve(), ROOT))
    env.pop("CUDA_PATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    nvcc = shutil.which("nvcc", path=env["PATH"])
    if not nvcc or not Path(nvcc).resolve().is_relative_to(root):
        print(f"error: nvcc resolves to {nvcc}, outside the tree {root}: hide the system toolkit first", file=sys.stderr)
        return 2
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    print(f"nvcc: {nvcc} ({version}); /usr/local/cuda present: {Path('/usr/local/cuda').exists()}")
    results = []
    caches = {}
    for phase in () if args.aot_only else ("cold", "warm"):
        for kernel in KERNELS:
            cache = work / kernel
            env_k = dict(env, FLASHINFER_WORKSPACE_BASE=str(cache), TVM_FFI_CACHE_DIR=str(cache / "tvm-ffi"),
                         TRITON_CACHE_DIR=str(cache / "triton"), HOME=str(cache))
            if phase == "cold":
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir(parents=True)
            r = spawn(kernel, env_k)
            r["phase"] = phase
            results.append(r)
            print(f"{phase:5} {kernel:20} {'ok' if r['ok'] else 'FAIL'}  first call {r.get('first_call_s', '-')} s, "
                  f"process {r.get('process_s', '-')} s  {r.get('detail', '')} {r.get('error', '')}", flush=True)
            if phase == "cold":
                caches[kernel] = directory_stats(cache)
    # What the image ships: FlashInfer's modules built ahead of time for every target architecture.
    aot_site = work / "aot-site"
    shutil.copytree(args.flashinfer_site.resolve(), aot_site, symlinks=True)
    env_aot = dict(env, PYTHONPATH=os.pathsep.join([str(aot_site), str(args.sglang_site.resolve()), str(ROOT)]))
    env_build = dict(env_aot, CUDA_VISIBLE_DEVICES="") if args.aot_without_gpu else env_aot
    builds = []
    for module in args.aot_modules:
        start = time.monotonic()
        build = subprocess.run([sys.executable, "-m", "sglang_stack.image.steps.aot", "--arch-list", args.arch_list, module],
                               env=env_build, capture_output=True, text=True, timeout=3600)
        aot_seconds = time.monotonic() - start
        builds.append(build.returncode)
        print(build.stdout.strip() or build.stderr.strip()[-2000:], flush=True)
        aot_so = list((aot_site / "flashinfer" / "data" / "aot" / module).rglob("*.so"))
        empty = work / f"aot-empty-{module}"
        empty.mkdir()
        kernel = AOT_KERNELS[module]
        r = spawn(kernel, dict(env_aot, FLASHINFER_WORKSPACE_BASE=str(empty), HOME=str(empty), FLASHINFER_DISABLE_JIT="1"))
        r.update(phase="aot", module=module, build_s=round(aot_seconds, 1), arch_list=args.arch_list,
                 build_rc=build.returncode, build_saw_gpu=not args.aot_without_gpu,
                 aot_mb=round(sum(p.stat().st_size for p in aot_so) / 1e6, 1), jit_dir_after=directory_stats(empty))
        results.append(r)
        print(f"aot   {kernel:22} {'ok' if r['ok'] else 'FAIL'}  built for {args.arch_list} in {aot_seconds:.1f} s "
              f"({r['aot_mb']} MB); loaded with FLASHINFER_DISABLE_JIT=1: first call {r.get('first_call_s')} s "
              f"{r.get('detail', '')} {r.get('error', '')}", flush=True)
    summary = {"nvcc": version, "caches_after_cold": caches, "results": results}
    text = json.dumps(summary, indent=2)
    if args.json:
        args.json.write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in results) and not any(builds) else 1


if __name__ == "__main__":
    sys.exit(main())
