"""On the real engine: the image build's binary audit fails on a planted CUDA 12 library, naming the package.

The build step is the rendered docker/Dockerfile's own audit instruction, run verbatim (with its
download mounts: its ELF reader is installed for the step) in an image that has what ``deps`` would
have at that point for this purpose: a venv holding the locked torchao wheel (a CUDA 12 build: libcudart.so.12),
torch's libraries as stand-ins with torch's sonames, versions.lock and the in-image modules.
With versions.lock's declaration the step passes; with it removed, the build fails and says
which package and file.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_stack.engine import DOCKER
from sglang_stack.image.size import locked_wheel
from sglang_stack import ROOT
from pins import PIN
from sglang_stack.image import store
from test_binaries import NO_EXCEPTIONS, TORCH_SONAMES

pytestmark = pytest.mark.engine
MODULES = ("sglang_stack/__init__.py", "sglang_stack/image/__init__.py", "sglang_stack/image/steps/__init__.py",
           "sglang_stack/image/steps/install.py", "sglang_stack/image/steps/binaries.py",
           "sglang_stack/image/steps/verdict.py")


def audit_instruction() -> str:
    from dockerfile import parse_file

    runs = [c.original for c in parse_file(str(ROOT / "docker" / "Dockerfile"))
            if c.cmd == "RUN" and "build-tools --run binaries" in c.original]
    assert len(runs) == 1, f"expected one binary-audit step in docker/Dockerfile, found {len(runs)}"
    return runs[0]


def context(tmp: Path, base: str, lock_text: str) -> Path:
    ctx = tmp / "context"
    (ctx / "stand-ins").mkdir(parents=True)
    shutil.copy(locked_wheel("torchao"), ctx / locked_wheel("torchao").name)
    source = tmp / "empty.c"
    source.write_text("int sglang_stack_stand_in;\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    for soname in TORCH_SONAMES:
        subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(ctx / "stand-ins" / soname), str(source)], check=True)
    for rel in MODULES:
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, ctx / rel)
    (ctx / "versions.lock").write_text(lock_text)
    (ctx / "mirror").mkdir()  # every download step mounts the build context's mirror/ (empty: the network is used)
    shutil.copytree(ROOT / "docker" / "build", ctx / "docker" / "build")  # and docker/build: the hashed requirement files
    (ctx / "Dockerfile").write_text(f"""FROM {base}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY {locked_wheel('torchao').name} /tmp/
RUN pip install --no-deps --no-index /tmp/{locked_wheel('torchao').name}
COPY stand-ins/ /tmp/stand-ins/
# As the base stage does: a .pth file puts the in-image tools on the venv's path.
RUN site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" && mkdir -p "$site/torch/lib" \\
    && cp /tmp/stand-ins/* "$site/torch/lib/" && printf '%s\\n' /opt/sglang-stack > "$site/sglang-stack.pth"
COPY versions.lock /opt/sglang-stack/versions.lock
COPY sglang_stack/ /opt/sglang-stack/sglang_stack/
{audit_instruction()}
""")
    return ctx


def build(ctx: Path, tag: str) -> subprocess.CompletedProcess:
    from sglang_stack.download import ca_bundle

    # --no-cache: the step's own output is what is judged, and a run before this one may have cached it.
    argv = ["docker", "buildx", "build", "--load", "--no-cache", "--progress", "plain", "--tag", tag]
    if ca := ca_bundle():
        argv += ["--secret", f"id=ca,src={ca}"]
    return subprocess.run([*argv, str(ctx)], capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "planted"])
def test_the_build_step_judges_a_cuda12_library(declared, docker_base, run_id, tmp_path):
    text = (ROOT / "versions.lock").read_text()
    tag = f"sglang-stack-test-{run_id}:binaries-{'declared' if declared else 'planted'}"
    proc = build(context(tmp_path, docker_base, text if declared else NO_EXCEPTIONS.sub("", text)), tag)
    try:
        log = proc.stdout + proc.stderr
        if declared:
            assert proc.returncode == 0, log[-4000:]
            assert f"declared: torchao {PIN['torchao']}: torchao/_C.abi3.so needs libcudart.so.12" in log, log[-3000:]
        else:
            assert proc.returncode != 0, "a CUDA 12 library the lock does not declare must fail the build"
            assert f"error: torchao {PIN['torchao']}: torchao/_C.abi3.so needs libcudart.so.12 (CUDA 12; this stack is CUDA 13)" in log, log[-4000:]
    finally:
        store.remove(DOCKER, tag)
