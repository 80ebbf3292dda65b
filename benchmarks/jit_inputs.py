"""The four inputs of benchmarks/jit_path.py (and tests/image/test_gpu_jit.py), made from the pinned, hash-checked wheels.

    python benchmarks/jit_inputs.py --out DIR [--stub PATH] [--pack]

Writes, under DIR:
  toolchain/      the pip CUDA 13 compiler as the image has it in nvidia/cu13: nvidia-cuda-nvcc,
                  nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-cccl, with nvidia-cuda-runtime's and
                  nvidia-curand's headers (FlashInfer's sampling includes <curand.h>)
  flashinfer-site flashinfer-python and apache-tvm-ffi, unpacked (no jit-cache, no cubin)
  sglang-site     the pinned sglang wheel, unpacked
  stub/libcuda.so NVIDIA's full link stub, copied from --stub (default: the CUDA toolkit's
                  /usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so); without one, the
                  script says how to take it out of the devel image
  env.sh          the four SGLANG_STACK_JIT_* variables tests/image/test_gpu_jit.py reads
Every wheel comes from PyPI through `pip download --require-hashes` with requirements.lock.txt's
hashes, so these are the image's bytes. --pack also writes DIR/carry/*.tar.xz for a host that
takes files through a size-limited channel: the toolchain without libnvvm.so (nvcc's cicc does
not load it), curand's shared library (its headers are what compiling needs) and static archives.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOOLCHAIN = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime",
             "nvidia-curand")
FLASHINFER = ("flashinfer-python", "apache-tvm-ffi")
DEFAULT_STUB = Path("/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so")


def pinned(names: tuple[str, ...]) -> list[str]:
    """Each name's requirement block (name==version and its hashes) from requirements.lock.txt."""
    text = (ROOT / "requirements.lock.txt").read_text()
    blocks = []
    for name in names:
        m = re.search(rf"^{re.escape(name)}==\S+(?: \\\n\s+--hash=sha256:[0-9a-f]{{64}})+", text, re.M)
        if not m:
            raise SystemExit(f"error: requirements.lock.txt pins no {name}")
        blocks.append(m.group(0))
    return blocks


def download(names: tuple[str, ...], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    req = dest / "requirements.txt"
    req.write_text("\n".join(pinned(names)) + "\n")
    # pip's --platform matches exactly: name every manylinux tag Ubuntu 24.04 (glibc 2.39) accepts.
    platforms = [f"manylinux_2_{n}_x86_64" for n in range(5, 40)] + ["manylinux2014_x86_64", "manylinux2010_x86_64"]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
            "--python-version", "3.12", *[a for p in platforms for a in ("--platform", p)], "-d", str(dest), "-r", str(req)]
    print("$ " + " ".join(argv), flush=True)
    subprocess.run(argv, check=True)
    return sorted(dest.glob("*.whl"))


def extract(wheel: Path, dest: Path) -> None:
    """Unzip a wheel keeping each file's mode, as pip does: nvcc, ptxas and cicc must stay executable."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            path = Path(z.extract(info, dest))
            mode = info.external_attr >> 16
            if mode and not info.is_dir():
                path.chmod(mode & 0o777)


def unpack(wheels: list[Path], names: tuple[str, ...], dest: Path) -> None:
    want = {n.replace("-", "_") for n in names}
    for wheel in wheels:
        if wheel.name.split("-")[0].lower() in want:
            extract(wheel, dest)


def pack(src: Path, out: Path, drop=lambda p: False) -> Path:
    with tarfile.open(out, "w:xz", preset=9 | __import__("lzma").PRESET_EXTREME) as tar:
        for path in sorted(src.rglob("*")):
            if path.is_file() and not drop(path):
                tar.add(path, arcname=str(path.relative_to(src.parent)))
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stub", type=Path, default=DEFAULT_STUB, help=f"NVIDIA's libcuda.so link stub (default: {DEFAULT_STUB})")
    parser.add_argument("--pack", action="store_true", help="also write DIR/carry/*.tar.xz")
    args = parser.parse_args()
    out = args.out.resolve()
    wheels = download(TOOLCHAIN + FLASHINFER, out / "wheels")
    from sglang_stack.download import fetch
    from sglang_stack.lock import lockfile as lockmod

    sglang = lockmod.load()["sglang"]
    shutil.copy(fetch(sglang["url"], sglang["sha256"]), out / "wheels")
    for sub in ("toolchain", "flashinfer-site", "sglang-site"):
        shutil.rmtree(out / sub, ignore_errors=True)
    unpack(wheels, TOOLCHAIN, out / "toolchain-site")
    shutil.rmtree(out / "toolchain", ignore_errors=True)
    (out / "toolchain-site" / "nvidia" / "cu13").rename(out / "toolchain")  # the tree the image's CUDA_HOME is
    shutil.rmtree(out / "toolchain-site")
    unpack(wheels, FLASHINFER, out / "flashinfer-site")
    extract(next((out / "wheels").glob("sglang-*.whl")), out / "sglang-site")
    stub = out / "stub" / "libcuda.so"
    if args.stub.is_file():
        stub.parent.mkdir(exist_ok=True)
        shutil.copy(args.stub, stub)
    else:
        print(f"note: no stub at {args.stub}; take it from the devel image: docker create --name stub "
              f"nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04 && docker cp stub:{DEFAULT_STUB} {stub} && docker rm stub")
    (out / "env.sh").write_text("".join(f"export SGLANG_STACK_JIT_{k}={v}\n" for k, v in (
        ("TOOLCHAIN", out / "toolchain"), ("FLASHINFER", out / "flashinfer-site"), ("SGLANG", out / "sglang-site"),
        ("STUB", stub))))
    print(f"wrote {out}/toolchain, flashinfer-site, sglang-site; `. {out}/env.sh` sets the test's four variables")
    if args.pack:
        carry = out / "carry"
        carry.mkdir(exist_ok=True)
        libs = re.compile(r"lib(nvvm|curand)[^/]*\.so")
        pack(out / "toolchain", carry / "toolchain.tar.xz", lambda p: bool(libs.search(p.name)) or p.suffix == ".a")
        pack(out / "flashinfer-site", carry / "flashinfer-site.tar.xz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
