"""Make the pip CUDA 13 compiler tree (``nvidia/cu13``) a CUDA_HOME that nvcc, tvm-ffi and FlashInfer build against.

The pip wheels (nvidia-cuda-nvcc, -nvvm, -crt, -cccl, -runtime) lay out nvcc, cicc, ptxas,
headers and libcudart in one ``nvidia/cu13`` tree, but not quite as a toolkit:

- tvm-ffi links ``-L$CUDA_HOME/lib64 -lcudart``: the tree has ``lib/`` and only
  ``libcudart.so.13``, so ``lib64 -> lib`` and ``lib/libcudart.so -> libcudart.so.13`` are added;
- FlashInfer links ``-L$CUDA_HOME/lib64/stubs -lcuda``: NVIDIA's full ``libcuda.so`` link stub
  (from the devel image, in a build-only stage) goes to ``lib/stubs/``. A one-symbol stub does
  not do: the linker's ``--as-needed`` drops it. The stub is for link paths only (``-L``,
  ``LIBRARY_PATH``); on ``LD_LIBRARY_PATH`` it would shadow the driver's ``libcuda.so.1``.

Run in the image build:  python3 -m sglang_stack.image.steps.toolchain --stub FILE
Stdlib only: it runs inside the image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
from pathlib import Path


def default_root() -> Path:
    """The pip tree of the running interpreter's environment."""
    return Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13"


def fixup(root: Path, stub: Path | None) -> list[str]:
    """Add what the tree lacks as a CUDA_HOME; returns one line per change (nothing when already done)."""
    if not (root / "bin" / "nvcc").is_file():
        raise SystemExit(f"error: {root}/bin/nvcc: not found (install nvidia-cuda-nvcc into this environment)")
    if not (root / "lib" / "libcudart.so.13").is_file():
        raise SystemExit(f"error: {root}/lib/libcudart.so.13: not found (install nvidia-cuda-runtime)")
    done = []
    lib64 = root / "lib64"
    if not lib64.exists():
        lib64.symlink_to("lib")
        done.append(f"{lib64} -> lib")
    cudart = root / "lib" / "libcudart.so"
    if not cudart.exists():
        cudart.symlink_to("libcudart.so.13")
        done.append(f"{cudart} -> libcudart.so.13")
    if stub is not None:
        target = root / "lib" / "stubs" / "libcuda.so"
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            shutil.copy2(stub, target)
            done.append(f"{target} (link stub, from {stub})")
    return done


def environment(root: Path) -> dict[str, str]:
    """The variables that point every compiler user at the tree (the image sets the same as ENV)."""
    return {
        "CUDA_HOME": str(root),
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "TRITON_PTXAS_PATH": str(root / "bin" / "ptxas"),
        "LIBRARY_PATH": f"{root / 'lib' / 'stubs'}{os.pathsep}{root / 'lib'}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="the nvidia/cu13 tree (default: this environment's)")
    parser.add_argument("--stub", type=Path, default=None, help="NVIDIA's full libcuda.so link stub to copy in")
    args = parser.parse_args(argv)
    if args.stub is not None and not args.stub.is_file():
        print(f"error: --stub {args.stub}: no such file", file=sys.stderr)
        return 2
    root = args.root or default_root()
    for line in fixup(root, args.stub):
        print(f"toolchain: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
