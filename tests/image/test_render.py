"""Rendering is deterministic, strict about missing values, and catches drift."""

from __future__ import annotations

import difflib
import re
import shutil

import pytest

from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image import render
from sglang_stack.errors import UserError


@pytest.fixture(scope="module")
def lock():
    return lockmod.check()


def test_render_is_deterministic(lock):
    first = render.render_text(lock)
    second = render.render_text(lockmod.check())
    assert first == second, "two renders of the same inputs differ"


def test_committed_dockerfile_is_in_sync(lock):
    diff = render.drift(lock)
    assert not diff, "docker/Dockerfile drifted from its template and lock; run `invoke render`:\n" + "\n".join(diff[:40])


def test_generated_header_comes_first_and_no_frontend_is_pulled(lock):
    lines = render.render_text(lock).splitlines()
    assert "GENERATED FILE: do not edit" in "\n".join(lines[:3]), "missing generated-file header"
    # A `# syntax=` parser directive pulls an unpinned frontend image from Docker Hub.
    directives = [line for line in lines if re.match(r"#\s*syntax\s*=", line, re.I)]
    assert not directives, f"docker/Dockerfile must use the engine's built-in frontend: {directives}"


def test_drift_is_detected_and_render_repairs_it(lock, tmp_path):
    out = tmp_path / "Dockerfile"
    shutil.copy(ROOT / "docker" / "Dockerfile", out)
    out.write_text(out.read_text().replace("--start-period=20m", "--start-period=1m"))
    diff = render.drift(lock, out)
    assert any(line.startswith("-") and "--start-period=1m" in line for line in diff), diff
    assert render.render(lock, out) is True, "render should report that it rewrote the file"
    assert render.drift(lock, out) == [], "after render the file must be in sync"
    assert render.render(lock, out) is False, "a second render must be a no-op"


def test_a_changed_pin_changes_the_output(lock, tmp_path):
    text = (ROOT / "versions.lock").read_text().replace("04220efdcee5ba4b", "14220efdcee5ba4b")
    (tmp_path / "versions.lock").write_text(text)
    shutil.copy(ROOT / "requirements.lock.txt", tmp_path)
    shutil.copy(ROOT / "requirements.router.lock.txt", tmp_path)
    changed = lockmod.check(tmp_path / "versions.lock")
    assert "14220efdcee5ba4b" in render.render_text(changed)
    assert render.drift(changed), "a changed hash must show up as drift of the committed Dockerfile"


def test_a_patch_edit_changes_nothing_and_a_new_patch_only_the_series_label(lock, tmp_path):
    """The Dockerfile reads patches/series, never a patch: each patch's sha256 is the SBOM's, recorded in the build."""
    patches = tmp_path / "patches"
    shutil.copytree(ROOT / "patches", patches)
    first = sorted(patches.glob("0*.patch"))[0]
    first.write_text(first.read_text() + "\n")
    before = render.render_text(lock).splitlines()
    assert render.render_text(lock, patches_dir=patches).splitlines() == before, "a patch edit changed the Dockerfile"
    (patches / "0999-extra.patch").write_text("--- a/x\n+++ b/x\n")
    with open(patches / "series", "a") as series:
        series.write("0999-extra.patch\n")
    after = render.render_text(lock, patches_dir=patches).splitlines()
    changed = [
        line[1:]
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed and all("io.sglang-stack.patches=" in line for line in changed), changed
    assert any("0999" in line for line in after), "the new patch must be in the series label"


def test_missing_value_fails_the_render(lock, tmp_path):
    shutil.copy(ROOT / "docker" / "macros.j2", tmp_path)
    (tmp_path / "Dockerfile.j2").write_text("FROM x\nENV A={{ lock.cuda.no_such_key }}\n")
    with pytest.raises(UserError) as info:
        render.render_text(lock, template_dir=tmp_path)
    assert "no_such_key" in str(info.value), str(info.value)


def test_template_syntax_error_names_the_file_and_line(lock, tmp_path):
    (tmp_path / "Dockerfile.j2").write_text("FROM x\n{% if %}\n")
    with pytest.raises(UserError) as info:
        render.render_text(lock, template_dir=tmp_path)
    assert "Dockerfile.j2:2" in str(info.value), str(info.value)


def test_secrets_in_the_environment_never_reach_the_dockerfile(lock, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy_token_do_not_leak")
    monkeypatch.setenv("PIP_CERT", "/tmp/dummy-ca-do-not-leak.pem")
    text = render.render_text(lockmod.check())
    assert "hf_dummy_token_do_not_leak" not in text and "dummy-ca-do-not-leak" not in text
    for line in text.splitlines():
        assert not line.lstrip().startswith(("ENV HF_TOKEN", "ARG HF_TOKEN")), f"a token must be a secret, not {line!r}"


def test_the_requirement_files_are_rendered_with_the_dockerfile(lock, tmp_path):
    """docker/build/requirements is part of the render: an edited file is drift, a stale one goes, render repairs both."""
    out = tmp_path / "docker" / "Dockerfile"
    out.parent.mkdir()
    assert render.render(lock, out) is True
    folder = tmp_path / "docker" / "build" / "requirements"
    assert sorted(p.name for p in folder.glob("*.txt")) == sorted(render.requirement_files(lock))
    edited = folder / "sglang.txt"
    edited.write_text(edited.read_text().replace("--hash=sha256:", "--hash=sha256:0"))
    (folder / "gone.txt").write_text("old @ https://example.invalid/old-1-py3-none-any.whl\n")
    diff = render.drift(lock, out)
    assert any("sglang.txt (committed)" in line for line in diff) and any("gone.txt" in line for line in diff), diff
    assert render.render(lock, out) is True and render.drift(lock, out) == []
    assert not (folder / "gone.txt").exists()


def test_what_compose_k8s_and_the_settings_table_say_is_no_input_of_the_dockerfile(tmp_path):
    """The render reads versions.lock, the requirement locks and patches/series only: an edit to compose.yaml's
    environment, the k8s values or docker/settings.json leaves docker/Dockerfile as it is (the build reads
    docker/environment.toml and docker/settings.json itself)."""
    import subprocess
    import sys

    import checkout

    tree = checkout.copy(tmp_path / "checkout")
    compose = tree / "compose.yaml"
    compose.write_text(compose.read_text().replace("    NCCL_DEBUG: ${NCCL_DEBUG:-WARN}\n",
                                                   "    NCCL_DEBUG: ${NCCL_DEBUG:-INFO}\n    NCCL_NEW_KNOB: \"1\"\n", 1))
    values = tree / "deploy" / "k8s" / "values.yaml"
    values.write_text(values.read_text().replace("tp_size: 8", "tp_size: 4", 1))
    table = tree / "docker" / "settings.json"
    table.write_text(table.read_text().replace('"sampling_backend": "flashinfer"', '"sampling_backend": "pytorch"'))
    assert compose.read_text() != (ROOT / "compose.yaml").read_text() and table.read_text() != (ROOT / "docker" / "settings.json").read_text()
    proc = subprocess.run([sys.executable, "-m", "invoke", "render", "--check"], cwd=tree, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"the Dockerfile follows a file it should not read:\n{proc.stdout}{proc.stderr}"
    assert (tree / "docker" / "Dockerfile").read_bytes() == (ROOT / "docker" / "Dockerfile").read_bytes()
