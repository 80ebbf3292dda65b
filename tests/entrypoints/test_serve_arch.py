"""The entrypoint refuses a GPU the image's FlashInfer modules were not built for, before SGLang loads anything."""

from __future__ import annotations

import pytest

from sglang_stack.entrypoints import serve


@pytest.mark.parametrize("arch, cap, ok", [
    ("9.0a", "9.0", True), ("9.0a", "9.2", False), ("12.0a", "12.0", True), ("12.0a", "12.1", False),
    ("10.0a", "10.3", False), ("10.0f", "10.3", True), ("10.0f", "12.0", False), ("9.0", "9.0", True),
    ("8.0", "8.6", True), ("8.6", "8.0", False), ("sm_90", "9.0", False),
])
def test_which_code_runs_on_which_gpu(arch, cap, ok):
    assert serve.arch_covers(arch, cap) is ok, f"{arch} on compute capability {cap}"


def fake_smi(tmp_path, monkeypatch, *lines: str, code: int = 0):
    """An nvidia-smi that prints compute capabilities, first on PATH (no GPU here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '" + "".join(f"{line_}\\n" for line_ in lines) + f"'\nexit {code}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def arch_file(tmp_path, text: str):
    path = tmp_path / "flashinfer-arch-list"
    path.write_text(text)
    return str(path)


def test_a_b200_is_refused_by_an_image_built_for_h200_and_rtx_pro(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "10.0", "10.0")
    line = serve.check_gpus(arch_file(tmp_path, "9.0a 12.0a\n"))
    assert line and "built for 9.0a 12.0a" in line and "compute capability 10.0" in line, line
    assert 'invoke build --cuda-arch-list "10.0a"' in line, f"the refusal must name the fix: {line}"


@pytest.mark.parametrize("caps", [["9.0"] * 8, ["12.0"] * 8], ids=["h200x8", "rtxpro6000x8"])
def test_the_gpus_it_was_built_for_pass(tmp_path, monkeypatch, caps):
    fake_smi(tmp_path, monkeypatch, *caps)
    assert serve.check_gpus(arch_file(tmp_path, "9.0a 12.0a")) is None, caps


def test_no_aot_modules_or_no_nvidia_smi_only_says_so(tmp_path, monkeypatch, capsys):
    assert serve.check_gpus(arch_file(tmp_path, "")) is None
    assert "compiles each one at first use" in capsys.readouterr().out
    fake_smi(tmp_path, monkeypatch, code=9)
    assert serve.check_gpus(arch_file(tmp_path, "9.0a")) is None
    assert "not checked against 9.0a" in capsys.readouterr().out
    assert serve.check_gpus(str(tmp_path / "absent")) is None, "an image without the file (not ours) is not judged"


def test_main_refuses_before_sglang_starts(tmp_path, monkeypatch, capsys):
    fake_smi(tmp_path, monkeypatch, "12.1")
    monkeypatch.setattr(serve, "ARCH_FILE", arch_file(tmp_path, "9.0a 12.0a"))
    monkeypatch.setenv("SGLANG_API_KEY_FILE", str(tmp_path / "none"))
    (tmp_path / "none").write_text("")
    monkeypatch.setenv("SGLANG_STACK_SERVER", "this_module_must_not_run")
    assert serve.main(["--port", "30000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: this image's FlashInfer kernels are built for 9.0a 12.0a") and "12.1" in err, err
