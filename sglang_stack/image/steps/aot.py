"""Build, at image build time, the FlashInfer modules that SGLang compiles for Kimi-K2.5, into FlashInfer's own AOT dir.

Without flashinfer-jit-cache (5-8 GB, mostly for other GPUs) the pinned FlashInfer compiles each
kernel on first use, silently. For Kimi-K2.5 (an MLA model) SGLang takes attention from
sgl-kernel's FA3 on SM90 and from Triton on SM120, RMSNorm from sgl-kernel and RoPE and the
KV-cache store from its own ``jit_kernel``; what it takes from FlashInfer is sampling
(``top_k_top_p_sampling_from_probs``, ``top_k_renorm_prob``, ``top_p_renorm_prob``, the default
``--sampling-backend flashinfer`` for any non-greedy request, and EAGLE-3's non-greedy verify):
the ``sampling`` module, 102 s of nvcc on 16 cores. On SM90/SM100 at TP > 1 it fuses the all-reduce with RMSNorm
(``trtllm_comm``), and from 0.5.23 on it may hand the decode all-reduces to FlashInfer's PCIe-IPC kernels
(``pcie_ipc_comm``, ``PCIE_ALLREDUCE``).

FlashInfer loads ``flashinfer/data/aot/NAME/NAME.so`` before it looks at its JIT cache
(``JitSpec.build_and_load``), and that path depends neither on the GPU nor on a cache volume.
So each module is built once, for every architecture in ``FLASHINFER_CUDA_ARCH_LIST`` (nvcc
needs no GPU), and copied there: the first request finds it, in compose, in Kubernetes with an
emptyDir, and on a read-only root file system alike.

Run in the image build:  python3 -m sglang_stack.image.steps.aot --arch-list "9.0a 12.0a" --settings settings.json
Which modules: those SGLang itself takes on those GPUs, by docker/settings.json (``invoke settings``),
which the build copies; or the modules named. Needs flashinfer and the CUDA compiler (toolchain.py); no
GPU. The list it was built for is written to ``--record`` (the entrypoint's ``ARCH_FILE``), and the
build argument becomes a label of the image: an AOT module holds SASS for exactly those
architectures and no PTX, and FlashInfer loads it whatever the GPU, so on any other GPU its first
call would fail with "no kernel image". The entrypoint (``services/serve.py``) and ``invoke doctor``
refuse such a GPU instead. No PTX on purpose: ``sm_90a``/``sm_120a`` code uses architecture-specific
features that no PTX carries forward, and a driver JIT of these modules at first start is the
minutes-long, unannounced compile the ahead-of-time build exists to avoid; an image for another GPU
is built for it (``invoke build --cuda-arch-list "10.0a"``, docs/image.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Module name -> (FlashInfer module, generator): what SGLang builds for Kimi-K2.5. Which of
# them an image gets follows from what SGLang decides on each GPU (docker/settings.json).
MODULES = {
    "sampling": ("flashinfer.jit.sampling", "gen_sampling_module"),
    # The fused all-reduce + RMSNorm that SGLang turns on by default on SM90/SM100 at TP > 1.
    # Its generator builds only majors 9 and 10 of the arch list: from "9.0a 12.0a", 9.0a.
    "trtllm_comm": ("flashinfer.jit.comm", "gen_trtllm_comm_module"),
    # SGLang 0.5.23's PCIe-IPC all-reduce (pcie_ipc_ar.py), for every GPU of the list: which box is PCIe-only is
    # known at start, not at build (8x RTX PRO 6000, and 8x H100 PCIe without NVLink bridges). No architecture
    # restriction in its generator: plain loads, stores and CUDA IPC.
    "pcie_ipc_comm": ("flashinfer.jit.comm", "gen_pcie_ipc_comm_module"),
}


# Which module SGLang uses where: the setting of docker/settings.json's resolved runs that makes it take each.
RULES = (
    ("sampling", "sampling", "sampling_backend", "flashinfer"),  # top-k/top-p sampling of any non-greedy request
    ("trtllm_comm", "all-reduce", "fusion_runs", True),  # the fused all-reduce + RMSNorm, where a layer takes it
    ("pcie_ipc_comm", "all-reduce", "pcie_ipc", True),  # where the release has the PCIe-IPC all-reduce
)


def _arch_key(arch: str) -> tuple[int, ...]:
    return tuple(int(x) for x in arch.rstrip("af").split("."))


def modules_of(table: dict) -> list[tuple[str, tuple[str, ...]]]:
    """Each module SGLang takes in the settings table, with the architectures whose runs take it."""
    out = []
    for module, concern, name, wanted in RULES:
        archs = sorted({r["resolved"]["arch"] for r in table["runs"]
                        if r["resolved"]["settings"].get(concern, {}).get(name) == wanted}, key=_arch_key)
        if archs:
            out.append((module, tuple(archs)))
    return out


def modules_for(table: dict, arch_list: str) -> list[str]:
    """The modules some GPU of ``arch_list`` takes: what the image is built for, nothing for the others."""
    wanted = {_arch_key(a) for a in arch_list.split()}
    return [module for module, archs in modules_of(table) if wanted & {_arch_key(a) for a in archs}]


def build(names: list[str], arch_list: str) -> list[tuple[str, Path, float, int]]:
    """Build each module for ``arch_list`` into FlashInfer's AOT dir: (name, path, seconds, bytes)."""
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        raise SystemExit(f"error: unknown FlashInfer module {', '.join(unknown)} (known: {', '.join(MODULES)})")
    # The JIT workspace is scratch: only the linked .so is kept.
    scratch = tempfile.mkdtemp(prefix="flashinfer-aot-")
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = arch_list
    os.environ["FLASHINFER_WORKSPACE_BASE"] = scratch
    os.environ.pop("FLASHINFER_DISABLE_JIT", None)
    done = []
    try:
        for name in names:
            module, generator = MODULES[name]
            spec = getattr(importlib.import_module(module), generator)()
            if spec.is_aot:
                print(f"aot: {name}: already at {spec.aot_path}, skipping", flush=True)
                continue
            print(f"aot: {name}: nvcc for {arch_list} ...", flush=True)
            start = time.monotonic()
            spec.build(verbose=False)
            seconds = time.monotonic() - start
            spec.aot_path.parent.mkdir(parents=True, exist_ok=True)
            partial = spec.aot_path.with_suffix(".so.partial")
            shutil.copyfile(spec.jit_library_path, partial)
            os.replace(partial, spec.aot_path)
            size = spec.aot_path.stat().st_size
            print(f"aot: {name}: {seconds:.1f} s, {size / 1e6:.1f} MB -> {spec.aot_path}", flush=True)
            done.append((name, spec.aot_path, seconds, size))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch-list", default="", help='FLASHINFER_CUDA_ARCH_LIST, e.g. "9.0a 12.0a"; empty: build nothing')
    parser.add_argument("--settings", type=Path, help="docker/settings.json: the modules SGLang takes on those GPUs")
    parser.add_argument("--record", type=Path, required=True,
                        help="write the arch list here once built: the entrypoint's ARCH_FILE, where it checks the GPU")
    parser.add_argument("modules", nargs="*", help=f"modules to build instead (known: {' '.join(MODULES)})")
    args = parser.parse_args(argv)
    args.record.parent.mkdir(parents=True, exist_ok=True)
    if not args.arch_list.split():
        print("aot: FLASHINFER_CUDA_ARCH_LIST is empty: skipping the ahead-of-time FlashInfer build "
              "(FlashInfer compiles at first use)", flush=True)
        args.record.write_text("")
        return 0
    names = args.modules
    if not names:
        if args.settings is None:
            parser.error("give --settings (docker/settings.json) or the modules to build")
        names = modules_for(json.loads(args.settings.read_text(encoding="utf-8")), args.arch_list)
        print(f"aot: SGLang takes {' '.join(names) or 'no module'} on {args.arch_list} (docker/settings.json)", flush=True)
    build(names, args.arch_list)
    # The architectures the modules were built for, where the entrypoint checks the GPU.
    args.record.write_text(" ".join(args.arch_list.split()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
