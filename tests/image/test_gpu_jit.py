"""On a GPU: the slim runtime's JIT path (benchmarks/jit_path.py) builds and runs every first-start kernel.

The pieces of the image come in through environment variables, since a GPU host that runs this
has them unpacked somewhere of its own choosing (docs/image.md, "The JIT path, proven";
`python benchmarks/jit_inputs.py --out DIR` makes all four from the pinned wheels and writes
DIR/env.sh that sets them). The JSON results stay in build/measurements/jit-path.json:
  SGLANG_STACK_JIT_TOOLCHAIN  the pip nvidia/cu13 tree (nvcc, nvvm, crt, cccl, runtime, curand headers)
  SGLANG_STACK_JIT_FLASHINFER the pinned flashinfer-python and apache-tvm-ffi, unpacked
  SGLANG_STACK_JIT_SGLANG     the sglang wheel, unpacked
  SGLANG_STACK_JIT_STUB       NVIDIA's full libcuda.so link stub
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sglang_stack import ROOT

torch = pytest.importorskip("torch")
VARS = ["SGLANG_STACK_JIT_TOOLCHAIN", "SGLANG_STACK_JIT_FLASHINFER", "SGLANG_STACK_JIT_SGLANG", "SGLANG_STACK_JIT_STUB"]

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(any(v not in os.environ for v in VARS), reason=f"needs {', '.join(VARS)}"),
]


def test_every_first_start_kernel_builds_and_matches_its_reference():
    out = ROOT / "build" / "measurements" / "jit-path.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(ROOT / "benchmarks" / "jit_path.py"),
            "--toolchain", os.environ["SGLANG_STACK_JIT_TOOLCHAIN"], "--flashinfer-site", os.environ["SGLANG_STACK_JIT_FLASHINFER"],
            "--sglang-site", os.environ["SGLANG_STACK_JIT_SGLANG"], "--stub", os.environ["SGLANG_STACK_JIT_STUB"], "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    assert out.exists(), f"no summary written:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    results = json.loads(out.read_text())["results"]
    failed = [f"{r.get('phase')} {r.get('kernel')}: {r.get('error')}" for r in results if not r["ok"]]
    assert not failed, "kernels failed:\n" + "\n".join(failed)
    phases = {(r["phase"], r["kernel"]) for r in results}
    assert ("aot", "flashinfer_sampling") in phases, "the ahead-of-time FlashInfer build was not exercised"
    assert ("aot", "flashinfer_trtllm_comm") in phases, "the fused all-reduce module, built ahead of time, was not run"
    print(f"results: {out}")
    assert proc.returncode == 0, proc.stdout[-3000:]
