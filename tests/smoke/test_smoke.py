"""Container smoke test: build the real Dockerfile's sglang stage with buildah, check it from inside.

Slow (a minute or two with a cached base image), so it carries the `container` marker:
`pytest -m "not container"` skips it, CI runs it.
"""

from __future__ import annotations

import pytest

from sglang_stack.engine import BUILDAH
from sglang_stack import ROOT
from sglang_stack.smoke import container as smoke
from sglang_stack.image import store

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def built(smoke_base, run_id, keep_images, tmp_path_factory):
    """The sglang stage, built once with a marked CA bundle and a dummy token as build secrets."""
    workdir = tmp_path_factory.mktemp("smoke")
    ca, marker, token, token_value = smoke.smoke_secrets(workdir)
    tag = f"localhost/sglang-stack-test-{run_id}:sglang"
    smoke.build_sglang_stage(smoke_base, tag, ca=ca, token=token)
    result = smoke.SmokeResult()
    smoke.check_image(tag, result, ca_marker=marker, token=token_value)
    yield {name: (ok, detail) for name, ok, detail in result.checks}
    if not keep_images:
        store.remove(BUILDAH, tag)


@pytest.mark.parametrize(
    "check",
    [
        "installed sglang is the pinned version",
        "patched files match what the series produces",
        "KimiK25ForConditionalGeneration has the EAGLE-3 methods",
        "the EAGLE-3 audit passes inside the container",
        "labels record the stage's pins and the series",
        "labels name the applied series in order",
        "no build secret in any layer",
    ],
)
def test_built_image(built, check):
    assert check in built, f"the smoke run did not make the check {check!r}: {sorted(built)}"
    ok, detail = built[check]
    assert ok, f"{check}: {detail}"


def test_secret_scan_finds_a_planted_secret(tmp_path):
    """The layer scan can fail: a layer that contains the marker is reported."""
    import io
    import tarfile

    def layer(name: str, payload: bytes) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        return buf.getvalue()

    clean = layer("etc/hostname", b"box\n")
    dirty = layer("root/.cache/pip/token", b"prefix hf_smoke_secret suffix")
    assert smoke.find_in_layers([clean], {"HF token": b"hf_smoke_secret"}) == []
    assert smoke.find_in_layers([clean, dirty], {"HF token": b"hf_smoke_secret"}) == ["HF token"]


def test_a_broken_patch_fails_the_build_and_is_named(smoke_base, run_id, tmp_path):
    context, name = smoke.broken_patch_copy(tmp_path)
    ca, _, _, _ = smoke.smoke_secrets(tmp_path)
    tag = f"localhost/sglang-stack-test-{run_id}:broken"
    proc = smoke.build_sglang_stage(smoke_base, tag, ca=ca, token=None, context=context, capture=True)
    store.remove(BUILDAH, tag)
    assert proc.returncode != 0, "a patch that does not apply must fail the build"
    output = proc.stdout + proc.stderr
    assert name in output, f"the failing patch {name} is not named in the build output:\n{output[-2000:]}"
    assert (ROOT / "patches" / name).read_text() != (context / "patches" / name).read_text(), "the real patch is untouched"


def test_a_planted_variable_sglang_reads_fails_the_build_and_names_its_reader(smoke_base, run_id, tmp_path):
    """The environment audit in the real build: SGLANG_PORT set by compose but undeclared (SGLang reads it)."""
    context = smoke.planted_variable_copy(tmp_path)
    ca, _, _, _ = smoke.smoke_secrets(tmp_path)
    tag = f"localhost/sglang-stack-test-{run_id}:planted"
    proc = smoke.build_sglang_stage(smoke_base, tag, ca=ca, token=None, context=context, capture=True)
    store.remove(BUILDAH, tag)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"an undeclared variable SGLang reads must fail the build:\n{output[-2000:]}"
    line = next((line_ for line_ in output.splitlines() if "SGLANG_PORT" in line_ and "not declared" in line_), "")
    assert "sglang/srt/utils/common.py:" in line, f"the build must name SGLang's reader:\n{output[-2000:]}"
    assert "patch 0006-" in output, "the audit runs after the whole series has applied"
