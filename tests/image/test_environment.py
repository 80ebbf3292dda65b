"""The environment audit: what we set where SGLang runs is declared, and SGLang's own tree says who reads it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import image_layout
from sglang_stack import ROOT
import envset
from sglang_stack.image.steps import envaudit
from sglang_stack.lock import lockfile as lockmod

DOCKERFILE = ROOT / "docker" / "Dockerfile"


@pytest.fixture(scope="module")
def shipped() -> dict[str, tuple[str, ...]]:
    lock, _ = lockmod.check_all(download=False)
    return envset.variables_set(DOCKERFILE.read_text(), lock)


def run_audit(root: Path, *variables: str, declarations: Path = envset.DECLARATIONS):
    return subprocess.run([sys.executable, "-m", "sglang_stack.image.steps.envaudit", "--declarations", str(declarations),
                           "--root", str(root), *variables], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_every_variable_we_set_is_declared_and_every_declaration_is_set(shipped):
    assert envset.undeclared(shipped) == [], "declare these in docker/environment.toml"
    declared = tomllib.loads(envset.DECLARATIONS.read_text())
    stale = sorted(set(declared) - set(shipped))
    assert stale == [], f"docker/environment.toml declares names nothing sets any more: {stale}"


def test_sglang_port_is_set_nowhere(shipped):
    assert "SGLANG_PORT" not in shipped, \
        f"SGLANG_PORT is SGLang's own (get_open_port): set by {shipped.get('SGLANG_PORT')}"
    assert not [n for n in shipped if n.startswith("SGL_")], "SGLang copies every SGL_* to SGLANG_* with a warning"


def audit_steps(text: str):
    """The whole command of each environment audit step of a rendered Dockerfile."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "-m sglang_stack.image.steps.envaudit" in line:
            command, j = [line.rstrip().rstrip("\\")], i
            while lines[j].rstrip().endswith("\\"):
                j += 1
                command.append(lines[j].rstrip().rstrip("\\"))
            yield " ".join(command)


def test_the_audit_steps_check_every_declared_name_and_fail_on_a_stale_reader():
    """The steps read the names from docker/environment.toml, which the build copies (the test above keeps it
    equal to what is set): the Dockerfile lists none, so an edit to compose.yaml leaves it as it was."""
    steps = list(audit_steps(DOCKERFILE.read_text()))
    assert len(steps) == 2, f"one audit in the deps stage (site-packages) and one in the sglang stage: {steps}"
    for line in steps:
        words = shlex.split(line)
        args = words[words.index("sglang_stack.image.steps.envaudit") + 1:]
        assert "--strict" in args, f"{line[:120]}: a declared reader that holds no name must fail the build, not warn"
        assert not [a for a in args if "=" in a and not a.startswith("-")], f"{line[:120]}: names listed in the Dockerfile"
    assert "COPY docker/environment.toml /opt/sglang-stack/environment.toml" in DOCKERFILE.read_text()


def test_image_env_agrees_with_a_real_dockerfile_parser():
    dockerfile = pytest.importorskip("dockerfile")
    stage, expected = None, []
    for cmd in dockerfile.parse_string(DOCKERFILE.read_text()):
        if cmd.cmd == "FROM":
            stage = cmd.value[-1] if len(cmd.value) >= 3 and cmd.value[-2].upper() == "AS" else None
        elif cmd.cmd == "ENV" and stage in envset.RUNTIME_STAGES:
            expected += list(cmd.value[0::2])
    assert envset.image_env(DOCKERFILE.read_text()) == expected, "the ENV reader disagrees with the Dockerfile parser"
    assert "SGL_KERNEL_VERSION" not in expected and "TORCH_VERSION" not in expected, \
        "the URL wheels' pins are build arguments, not ENV"


def test_the_sglang_stage_step_passes_in_the_image_layout(sglang_patched, tmp_path):
    """The sglang stage's audit step as written in docker/Dockerfile, standard library only (python -S)."""
    opt = image_layout.install(tmp_path / "opt" / "sglang-stack")
    shutil.copy(envset.DECLARATIONS, opt / "environment.toml")
    assert any(step.endswith("--root /opt/sglang") for step in audit_steps(DOCKERFILE.read_text()))
    result = subprocess.run([sys.executable, "-S", "-m", "sglang_stack.image.steps.envaudit", "--strict", "--declarations",
                             str(opt / "environment.toml"), "--root", str(sglang_patched)],
                            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(opt)}, cwd=tmp_path)
    assert result.returncode == 0, f"the audit fails the shipped settings:\n{result.stdout}{result.stderr}"
    assert "warning" not in result.stdout, f"a declared reader is missing from the patched tree:\n{result.stdout}"
    assert result.stdout.strip().endswith("clean"), result.stdout


def test_a_planted_sglang_port_fails_and_names_sglangs_reader(sglang_patched, shipped):
    result = run_audit(sglang_patched, *envset.audit_args(shipped), "SGLANG_PORT=compose")
    assert result.returncode == 1, f"an undeclared variable SGLang reads must fail the build:\n{result.stdout}{result.stderr}"
    line = next((line_ for line_ in result.stderr.splitlines() if "SGLANG_PORT" in line_), "")
    assert "sglang/srt/utils/common.py:" in line and "not declared" in line, f"the error must name the reader: {line!r}"
    assert "Traceback" not in result.stderr, result.stderr


def test_a_name_meant_for_us_that_sglang_reads_fails(sglang_patched, tmp_path):
    declarations = tmp_path / "environment.toml"
    declarations.write_text('[SGLANG_PORT]\nreader = "sglang-stack"\neffect = "the health probe\'s port"\n')
    result = run_audit(sglang_patched, "SGLANG_PORT=image", declarations=declarations)
    assert result.returncode == 1, f"our own name read by SGLang must fail:\n{result.stdout}{result.stderr}"
    assert "meant for sglang-stack only, but sglang/srt/utils/common.py" in result.stderr, result.stderr


def test_sglangs_prefix_copy_counts_as_a_reader(sglang_patched):
    readers = envaudit.scan([sglang_patched], {"SGL_KERNEL_VERSION", "SGLANG_STACK_PORT"})
    assert any("srt/environ.py" in r and "SGL_*" in r for r in readers.found.get("SGL_KERNEL_VERSION", [])), \
        f"SGLang copies SGL_* to SGLANG_*: {readers.found}"
    assert "SGLANG_STACK_PORT" not in readers.found, \
        f"the probe's own setting must be a name SGLang does not read: {readers.found.get('SGLANG_STACK_PORT')}"


def test_a_shared_library_holding_the_name_is_a_reader(tmp_path):
    lib = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF" + b"\x00" * 16 + b"\x00NCCL_DEBUG\x00NCCL_DEBUG_SUBSYSX\x00")
    readers = envaudit.scan([tmp_path], {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"})
    assert readers.found == {"NCCL_DEBUG": ["nvidia/nccl/lib/libnccl.so.2"]}, f"only whole NUL-terminated names: {readers.found}"
    assert "nvidia/nccl" in readers.packages


def test_a_name_right_after_another_string_is_found(tmp_path):
    """Strings sit back to back in .rodata: the NUL that ends one opens the next."""
    lib = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF\x00NCCL_ALGO\x00NCCL_DEBUG\x00NCCL_PROTO\x00")
    readers = envaudit.scan([tmp_path], {"NCCL_DEBUG", "NCCL_PROTO"})
    assert sorted(readers.found) == ["NCCL_DEBUG", "NCCL_PROTO"], f"adjacent names missed: {readers.found}"


def test_a_bad_declaration_is_one_line(tmp_path):
    declarations = tmp_path / "environment.toml"
    declarations.write_text('[HF_HOME]\nreader = "huggingface_hub"\n')
    result = run_audit(tmp_path, "HF_HOME=image", declarations=declarations)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == f"error: {declarations}: [HF_HOME]: effect must say what setting it does", result.stderr


def test_a_name_built_by_an_f_string_is_read_by_that_file(tmp_path):
    """Triton 3.5 reads TRITON_PTXAS_PATH as f"TRITON_{binary.upper()}_PATH" (triton/knobs.py): the literal is nowhere."""
    knobs = tmp_path / "triton" / "knobs.py"
    knobs.parent.mkdir(parents=True)
    knobs.write_text('class env_nvidia_tool:\n    def __init__(self, binary):\n'
                     '        super().__init__(f"TRITON_{binary.upper()}_PATH")\n'
                     'label = f"{name}"\n')
    readers = envaudit.scan([tmp_path], {"TRITON_PTXAS_PATH", "TRITON_PATH", "CUDA_HOME"})
    assert readers.found.get("TRITON_PTXAS_PATH") == ["triton/knobs.py:3 (f\"TRITON_{...}_PATH\")"], readers.found
    assert set(readers.found) == {"TRITON_PTXAS_PATH"}, f"the braces stand for at least one character, f\"{{name}}\" for no name: {readers.found}"


def test_an_f_string_whose_placeholder_holds_the_other_quote_is_read(tmp_path):
    """Triton 3.8: f"TRITON_{binary.upper().replace('-', '_')}_PATH" (ptxas-blackwell becomes PTXAS_BLACKWELL)."""
    knobs = tmp_path / "triton" / "knobs.py"
    knobs.parent.mkdir(parents=True)
    knobs.write_text("""super().__init__(f"TRITON_{binary.upper().replace('-', '_')}_PATH")\nx = f'{a}"{b}'\n""")
    readers = envaudit.scan([tmp_path], {"TRITON_PTXAS_PATH", "CUDA_HOME"})
    assert readers.found.get("TRITON_PTXAS_PATH") == ["triton/knobs.py:1 (f\"TRITON_{...}_PATH\")"], readers.found


def test_a_declared_reader_that_holds_no_name_warns_and_fails_under_strict(tmp_path):
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "knobs.py").write_text("x = 1\n")
    declarations = tmp_path / "environment.toml"
    declarations.write_text('[CUDA_HOME]\nreader = ["triton"]\neffect = "a CUDA_HOME"\n')
    result = run_audit(tmp_path, "CUDA_HOME=image", declarations=declarations)
    assert result.returncode == 0 and "warning: CUDA_HOME: declared as read by triton" in result.stdout, result
    result = subprocess.run([sys.executable, "-m", "sglang_stack.image.steps.envaudit", "--strict", "--declarations", str(declarations),
                             "--root", str(tmp_path), "CUDA_HOME=image"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and "error: CUDA_HOME: declared as read by triton" in result.stderr, result


def test_a_profiles_declarations_change_only_what_its_release_reads(tmp_path):
    """profiles/NAME/docker/environment.toml replaces the keys it writes; it cannot declare a new name."""
    (tmp_path / "huggingface_hub").mkdir()
    (tmp_path / "huggingface_hub" / "constants.py").write_text('OFFLINE = os.environ.get("HF_HUB_OFFLINE")\n')
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "envs.py").write_text("x = 1\n")  # a release whose own tree no longer reads it
    declarations = tmp_path / "environment.toml"
    declarations.write_text('[HF_HUB_OFFLINE]\nreader = ["huggingface_hub", "sglang"]\neffect = "offline"\n')
    argv = [sys.executable, "-m", "sglang_stack.image.steps.envaudit", "--strict", "--declarations", str(declarations),
            "--root", str(tmp_path), "HF_HUB_OFFLINE=image"]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and "declared as read by sglang" in result.stderr, result
    profile = tmp_path / "environment.profile.toml"  # where the build copies a profile's file, found beside
    profile.write_text('[HF_HUB_OFFLINE]\nreader = ["huggingface_hub"]\n')
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and "clean" in result.stdout, result
    profile.write_text('[HF_HUB_OFFLINE]\nreader = ["huggingface_hub"]\n[NEW_NAME]\nreader = "x"\neffect = "y"\n')
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and "[NEW_NAME]: not a variable environment.toml declares" in result.stderr, result


def test_each_profiles_declarations_file_changes_only_declared_names():
    from sglang_stack.lock import profiles

    for profile in profiles.available().values():
        overlay = profile.root / "docker" / "environment.toml"
        if not profile.default and overlay.is_file():
            envaudit.load_declarations(envset.DECLARATIONS, overlay)  # exits with one line on a bad entry
