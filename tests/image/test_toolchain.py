"""The pip CUDA 13 compiler, with the image's fix-ups, compiles and links CUDA code on a host without a GPU.

The wheels are the ones requirements.lock.txt pins (nvidia-cuda-nvcc, -nvvm, -crt, -cccl 13.0.x and
nvidia-cuda-runtime), checked against the lock's hashes and unpacked as pip lays them
out. This is what the image build relies on: FlashInfer's kernels are built ahead of time there,
where no GPU is. The link stub (from the devel image) is not fetched here; its copy is checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need
from pypi_wheels import unpack

from sglang_stack.image.size import locked_wheel
from sglang_stack.image.steps import toolchain

WHEELS = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime")
KERNEL = r"""
#include <cuda_runtime.h>
__global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" int launch(float a, const float* x, float* y, int n) {
    axpy<<<(n + 255) / 256, 256>>>(a, x, y, n);
    return (int)cudaGetLastError();
}
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    if not (shutil.which("g++") or shutil.which("c++")):
        need("needs a host C++ compiler (build-essential), as the image has")
    site = tmp_path_factory.mktemp("toolchain") / "site-packages"
    for name in WHEELS:
        unpack(locked_wheel(name), site)
    root = site / "nvidia" / "cu13"
    for binary in (root / "bin").iterdir():  # zip extraction drops the mode pip would restore
        if binary.is_file():
            binary.chmod(0o755)
    (root / "nvvm" / "bin" / "cicc").chmod(0o755)
    return root


def test_fixup_adds_what_the_tree_lacks_once(tree, tmp_path):
    stub = tmp_path / "libcuda.so"
    stub.write_bytes(b"\x7fELF stand-in for NVIDIA's link stub")
    done = toolchain.fixup(tree, stub)
    assert any(line.endswith("lib64 -> lib") for line in done), done
    assert (tree / "lib64").resolve() == (tree / "lib").resolve()
    assert (tree / "lib" / "libcudart.so").resolve() == (tree / "lib" / "libcudart.so.13").resolve()
    assert (tree / "lib" / "stubs" / "libcuda.so").read_bytes() == stub.read_bytes()
    assert toolchain.fixup(tree, stub) == [], "a second run must change nothing"


def test_a_kernel_compiles_and_links_for_both_default_architectures(tree, tmp_path):
    toolchain.fixup(tree, None)
    env = dict(os.environ, **toolchain.environment(tree))
    source = tmp_path / "axpy.cu"
    source.write_text(KERNEL)
    out = tmp_path / "libaxpy.so"
    # What tvm-ffi and FlashInfer do: -L$CUDA_HOME/lib64 -lcudart, one fatbin for every architecture.
    argv = ["nvcc", "-shared", "-Xcompiler", "-fPIC", "-O2", "-gencode=arch=compute_90a,code=sm_90a",
            "-gencode=arch=compute_120a,code=sm_120a", "-o", str(out), str(source), f"-L{tree}/lib64", "-lcudart"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listing = subprocess.run([str(tree / "bin" / "cuobjdump"), "--list-elf", str(out)], capture_output=True, text=True) \
        if (tree / "bin" / "cuobjdump").exists() else None
    data = out.read_bytes()
    assert b"sm_90a" in data or (listing and "sm_90a" in listing.stdout), "no sm_90a code in the library"
    assert b"sm_120a" in data or (listing and "sm_120a" in listing.stdout), "no sm_120a code in the library"
    readelf = shutil.which("readelf")
    if readelf:
        needed = subprocess.run([readelf, "-d", str(out)], capture_output=True, text=True).stdout
        assert "libcudart.so.13" in needed, needed
