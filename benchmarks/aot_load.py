"""The FlashInfer modules the image build made on a CPU-only builder, loaded and run on a GPU with no compiler.

    python benchmarks/aot_load.py --aot DIR [--json FILE]

Needs an NVIDIA GPU, torch and apache-tvm-ffi (the pinned release: FlashInfer loads its modules through it). ``DIR``
is ``site-packages/flashinfer/data/aot`` copied out of a built image (``benchmarks/aot_modules.py``): one
``NAME/NAME.so`` per module. Each is loaded the way FlashInfer loads an ahead-of-time module (``JitSpec.load``:
``tvm_ffi.load_module``), with ``FLASHINFER_DISABLE_JIT=1`` and ``nvcc`` made unreachable (``PATH`` without it,
``CUDA_HOME`` unset): a module that needed compiling could not be. Then one call of each on this GPU:

- ``sampling``: ``top_k_renorm_probs`` on a random batch, against a torch reference (keep the k largest, renormalize);
- ``trtllm_comm``: ``trtllm_lamport_initialize``, the fused all-reduce's buffer initialisation (every element -0.0);
- ``pcie_ipc_comm``: ``pcie_ipc_workspace_size`` for 2, 4 and 8 ranks at SGLang's fallback bound, and
  ``pcie_ipc_memop_supported``; one GPU cannot run the all-reduce itself (the kernels need 2, 4 or 8 ranks).

Prints one line per module and a JSON summary (``--json`` writes it too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path


def load(path: Path):
    import tvm_ffi

    start = time.perf_counter()
    module = tvm_ffi.load_module(str(path))
    return module, time.perf_counter() - start


def sampling(module) -> tuple[bool, str]:
    import torch

    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(8, 32000, device="cuda"), dim=-1)
    out = torch.empty_like(probs)
    states = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    k = 40
    module.top_k_renorm_probs(probs, out, None, k, False, states)
    torch.cuda.synchronize()
    top = torch.topk(probs, k, dim=-1)
    ref = torch.zeros_like(probs).scatter_(-1, top.indices, top.values)
    ref = ref / ref.sum(-1, keepdim=True)
    err = (out - ref).abs().max().item()
    kept = int((out > 0).sum(-1).max().item())
    return err < 1e-5 and kept <= k, f"top-k renorm, k {k}: max error {err:.1e}, at most {kept} kept per row"


def trtllm_comm(module) -> tuple[bool, str]:
    import torch

    buf = torch.ones(1 << 22, dtype=torch.bfloat16, device="cuda")
    module.trtllm_lamport_initialize(buf.data_ptr(), buf.numel(), torch.bfloat16)
    torch.cuda.synchronize()
    neg_zero = int(((buf == 0) & torch.signbit(buf)).sum().item())
    return neg_zero == buf.numel(), f"Lamport initialisation: {neg_zero}/{buf.numel()} elements are -0.0"


def pcie_ipc_comm(module) -> tuple[bool, str]:
    sizes = {w: int(module.pcie_ipc_workspace_size(w, 64 * 7168, 2, 128)) for w in (2, 4, 8)}
    memop = bool(module.pcie_ipc_memop_supported())
    ok = all(v > 0 for v in sizes.values())
    return ok, f"workspace bytes at 64 x 7168 bf16: {sizes}; stream memops {'supported' if memop else 'not supported'}"


CHECKS = {"sampling": sampling, "trtllm_comm": trtllm_comm, "pcie_ipc_comm": pcie_ipc_comm}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aot", type=Path, required=True, help="site-packages/flashinfer/data/aot of an image")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    os.environ.pop("CUDA_HOME", None)
    os.environ["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                         if not (Path(p) / "nvcc").exists())
    import torch

    results = []
    for name, check in CHECKS.items():
        so = args.aot / name / f"{name}.so"
        if not so.is_file():
            results.append({"module": name, "ok": False, "detail": f"{so}: not in the image's AOT dir"})
            continue
        module, seconds = load(so)
        ok, detail = check(module)
        results.append({"module": name, "ok": ok, "load_s": round(seconds, 3), "mb": round(so.stat().st_size / 1e6, 1),
                        "detail": detail})
    for r in results:
        print(f"aot_load: {r['module']}: {'ok' if r['ok'] else 'FAIL'}: {r['detail']}")
    summary = {"gpu": torch.cuda.get_device_name(0), "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
               "nvcc_on_path": shutil.which("nvcc"), "torch": torch.__version__, "results": results}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
