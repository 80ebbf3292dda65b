"""The build's slim step (sglang_stack/image/steps/slim.py, docker/slim.toml): nothing goes without its evidence holding."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_stack import ROOT

SLIM = ROOT / "sglang_stack" / "image" / "steps" / "slim.py"


def run_slim(site: Path, declarations: str, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """slim.py as the build runs it: copied alone, standard library only (-S -I), on a site-packages tree."""
    decl = site.parent / "slim.toml"
    decl.write_text(declarations)
    code = site.parent / "code" / "slim.py"
    code.parent.mkdir(exist_ok=True)
    shutil.copy(SLIM, code)
    return subprocess.run([sys.executable, "-S", "-I", str(code), "--site", str(site), "--declarations", str(decl), *flags],
                          capture_output=True, text=True, env=env or {})


def tree(tmp_path: Path, files: dict[str, bytes]) -> Path:
    site = tmp_path / "site"
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    return site


def entry(glob: str, evidence: str, keep: str = "") -> str:
    return f'[[remove]]\nglob = "{glob}"\nevidence = "{evidence}"\nwhy = "test"\n{keep}\n'


def test_an_unreferenced_library_goes_and_a_referenced_one_stops_the_step(tmp_path):
    site = tree(tmp_path, {"pkg/lib/liba.alt.so": b"\x7fELF a", "pkg/lib/libb.so": b"\x7fELF b", "pkg/loader.py": b"x = 1\n"})
    proc = run_slim(site, entry("pkg/lib/*.alt.so", "unreferenced"))
    assert proc.returncode == 0 and not (site / "pkg/lib/liba.alt.so").exists(), proc.stderr
    site = tree(tmp_path / "2", {"pkg/lib/liba.alt.so": b"\x7fELF a", "pkg/loader.py": b"ctypes.CDLL('liba.alt.so')\n"})
    proc = run_slim(site, entry("pkg/lib/*.alt.so", "unreferenced"))
    assert proc.returncode == 2 and "liba.alt.so is named by pkg/loader.py" in proc.stderr, proc.stderr
    assert (site / "pkg/lib/liba.alt.so").exists(), "a refused step removed the file anyway"
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_test_suite_goes_unless_an_import_statement_names_it(tmp_path):
    files = {"pkg/__init__.py": b'"""pkg.tests is where the tests live."""\n', "pkg/tests/test_x.py": b"def test(): pass\n"}
    site = tree(tmp_path, files)
    proc = run_slim(site, entry("pkg/tests", "unimported"))
    assert proc.returncode == 0 and not (site / "pkg/tests").exists(), f"prose naming the suite is no import: {proc.stderr}"
    site = tree(tmp_path / "2", {**files, "pkg/util.py": b"from pkg.tests.test_x import test\n"})
    proc = run_slim(site, entry("pkg/tests", "unimported"))
    assert proc.returncode == 2 and "pkg.tests is imported by pkg/util.py" in proc.stderr, proc.stderr


def test_a_suites_pytest_configuration_goes_with_it_unless_a_module_imports_it(tmp_path):
    """numpy 2.3's conftest.py imports numpy._core.tests: removed with the suites, it is no importer; imported, it stays."""
    files = {"pkg/__init__.py": b"", "pkg/_core/tests/t.py": b"", "pkg/conftest.py": b"import pkg._core.tests\n"}
    site = tree(tmp_path, files)
    proc = run_slim(site, entry("pkg/**/tests", "unimported"))
    assert proc.returncode == 2 and "pkg._core.tests is imported by pkg/conftest.py" in proc.stderr, proc.stderr
    proc = run_slim(site, entry("pkg/**/tests", "unimported") + entry("pkg/conftest.py", "unimported"))
    assert proc.returncode == 0 and not (site / "pkg/conftest.py").exists(), proc.stderr
    site = tree(tmp_path / "2", {**files, "pkg/testing.py": b"from pkg import conftest\n"})
    proc = run_slim(site, entry("pkg/**/tests", "unimported") + entry("pkg/conftest.py", "unimported"))
    assert proc.returncode == 2 and "pkg.conftest is imported by pkg/testing.py" in proc.stderr, proc.stderr


def test_keep_spares_a_matched_suite(tmp_path):
    site = tree(tmp_path, {"pkg/a/tests/t.py": b"", "pkg/b/tests/t.py": b"", "pkg/b/dev.py": b"import pkg.b.tests.t\n"})
    proc = run_slim(site, entry("pkg/**/tests", "unimported", 'keep = ["pkg/b/tests"]'))
    assert proc.returncode == 0, proc.stderr
    assert not (site / "pkg/a/tests").exists() and (site / "pkg/b/tests").exists()


def test_only_a_static_archive_passes_as_static(tmp_path):
    site = tree(tmp_path, {"pkg/libx_static.a": b"!<arch>\n", "pkg/libx_static.so": b"\x7fELF"})
    proc = run_slim(site, entry("pkg/libx_static.*", "static"))
    assert proc.returncode == 2 and "libx_static.so is not a static archive" in proc.stderr, proc.stderr
    assert (site / "pkg/libx_static.a").exists()


def test_a_generated_source_goes_only_beside_the_module_compiled_from_it(tmp_path):
    site = tree(tmp_path, {"pkg/driver.cpp": b"/* Cython */", "pkg/driver.cpython-312-x86_64-linux-gnu.so": b"\x7fELF",
                           "pkg/loader.cpp": b"/* no module of its own */", "pkg/driver.py": b""})
    proc = run_slim(site, entry("pkg/*.cpp", "compiled"))
    assert proc.returncode == 2 and "pkg/loader.cpp has no compiled module beside it" in proc.stderr, proc.stderr
    assert (site / "pkg/driver.cpp").exists(), "a refused step removed the file anyway"
    proc = run_slim(site, entry("pkg/driver.*", "compiled"))
    assert proc.returncode == 2 and "pkg/driver.py is not C or C++ source" in proc.stderr, proc.stderr
    proc = run_slim(site, entry("pkg/*.cpp", "compiled", 'keep = ["pkg/loader.cpp"]'))
    assert proc.returncode == 0 and not (site / "pkg/driver.cpp").exists() and (site / "pkg/loader.cpp").exists(), proc.stderr


def test_a_tool_goes_only_while_the_variable_names_another_that_exists(tmp_path):
    site = tree(tmp_path, {"triton/bin/ptxas": b"old", "cu13/bin/ptxas": b"new"})
    proc = run_slim(site, entry("triton/bin/ptxas", "env:TRITON_PTXAS_PATH"), env={})
    assert proc.returncode == 2 and "TRITON_PTXAS_PATH=''" in proc.stderr, proc.stderr
    proc = run_slim(site, entry("triton/bin/ptxas", "env:TRITON_PTXAS_PATH"), env={"TRITON_PTXAS_PATH": str(site / "triton/bin/ptxas")})
    assert proc.returncode == 2, "the variable naming the file itself is no evidence"
    proc = run_slim(site, entry("triton/bin/ptxas", "env:TRITON_PTXAS_PATH"), env={"TRITON_PTXAS_PATH": str(site / "cu13/bin/ptxas")})
    assert proc.returncode == 0 and not (site / "triton/bin/ptxas").exists(), proc.stderr


def test_check_fails_when_a_removal_is_back(tmp_path):
    site = tree(tmp_path, {"pkg/tests/t.py": b""})
    proc = run_slim(site, entry("pkg/tests", "unimported"), "--check")
    assert proc.returncode == 1 and "pkg/tests is back" in proc.stderr, proc.stderr
    shutil.rmtree(site / "pkg/tests")
    assert run_slim(site, entry("pkg/tests", "unimported"), "--check").returncode == 0


@pytest.mark.parametrize("text, names", [
    (entry("/etc/passwd", "static"), "must stay under site-packages"),
    (entry("pkg/x", "because"), "remove[0].evidence 'because'"),
    ('[[remove]]\nglob = "x"\nevidence = "static"\n', "remove[0].why is missing"),
])
def test_a_bad_declaration_is_one_line_naming_the_entry(tmp_path, text, names):
    proc = run_slim(tree(tmp_path, {"pkg/a.py": b""}), text)
    assert proc.returncode == 2 and names in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.network
def test_the_declared_removals_hold_on_the_locked_wheels(tmp_path):
    """docker/slim.toml on the real wheels requirements.lock.txt pins: every entry's evidence holds, and each removes something."""
    from sglang_stack.image.size import locked_wheel

    site = tmp_path / "site"
    for name in ("triton", "nvidia-cuda-nvrtc", "nvidia-cuda-nvcc", "pandas", "numpy", "scipy", "sympy", "cuda-bindings", "cuda-pathfinder", "nvidia-cusolver", "torchao"):
        with zipfile.ZipFile(locked_wheel(name)) as zf:
            zf.extractall(site)
    env = {"TRITON_PTXAS_PATH": str(site / "nvidia/cu13/bin/ptxas")}
    proc = run_slim(site, (ROOT / "docker" / "slim.toml").read_text(), env=env)
    assert proc.returncode == 0, proc.stderr
    removed = [line for line in proc.stdout.splitlines() if line.startswith("slim: removed")]
    from sglang_stack.image.steps.slim import ARCH, load

    # The arch: entries apply to a one-architecture image of sgl-kernel, a URL wheel (tested above on its layout).
    declared = len([e for e in load(ROOT / "docker" / "slim.toml") if not ARCH.fullmatch(e["evidence"])])
    assert len(removed) == declared, f"{declared} declared, {len(removed)} removed something:\n{proc.stdout}"


def test_invoke_size_subtracts_exactly_what_the_slim_step_removes(tmp_path):
    """The budget's file-list rule and the build's Path.glob agree, ``**`` and ``keep`` included."""
    from sglang_stack.image.size import slimmed

    files = {"numpy/tests/a.py": 10, "numpy/core/tests/b.py": 20, "numpy/core/x.py": 40, "numpy/testsuite/c.py": 80,
             "scipy/special/tests/d.py": 160, "scipy/linalg/tests/e.py": 320, "triton/lib/libx_static.a": 640,
             "triton/lib/libx.so": 1280, "nvidia/cu13/lib/libnvrtc.alt.so.13": 2560, "nvidia/cu13/lib/libnvrtc.so.13": 5120}
    text = (entry("numpy/**/tests", "unimported") + entry("scipy/**/tests", "unimported", 'keep = ["scipy/special/tests"]')
            + entry("triton/lib/*_static.a", "static") + entry("nvidia/cu13/lib/libnvrtc*.alt.so*", "unreferenced"))
    import tomllib

    site = tree(tmp_path, {name: b"\x00" * size for name, size in files.items()})
    gone, gone_py = slimmed([[n, s] for n, s in files.items()], tomllib.loads(text)["remove"])
    before = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    proc = run_slim(site, text)
    assert proc.returncode == 0, proc.stderr
    after = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    assert (gone, gone_py) == (before - after, 10 + 20 + 320), f"budget subtracts {gone}, the step removed {before - after}"


@pytest.mark.parametrize("loader", [
    b"ctypes.CDLL('liba.so.1.2')\n",  # a longer name begins with the doomed one's
    b"names = 'libzliba.so'\n",  # another doomed name ends where this one begins
])
def test_a_name_inside_or_overlapping_another_name_still_counts_as_a_reference(tmp_path, loader):
    """One scan over all names must find each where it overlaps another match, or a loaded file goes."""
    files = {"pkg/lib/liba.so": b"\x7fELF a", "pkg/lib/libzli": b"\x7fELF z", "pkg/lib/liba.so.1.2": b"\x7fELF a12",
             "pkg/loader.py": loader}
    site = tree(tmp_path, files)
    proc = run_slim(site, entry("pkg/lib/liba.so*", "unreferenced") + entry("pkg/lib/libzli", "unreferenced"))
    assert proc.returncode == 2 and "liba.so is named by pkg/loader.py" in proc.stderr, proc.stderr
    assert (site / "pkg/lib/liba.so").exists()


def test_an_import_of_a_longer_dotted_name_counts_for_the_suite_it_begins_with(tmp_path):
    files = {"pkg/tests/__init__.py": b"", "pkg/tests/deep/__init__.py": b"", "pkg/tests/deep/t.py": b"",
             "pkg/tests2/t.py": b"", "pkg/util.py": b"from pkg.tests.deep import t\n"}
    site = tree(tmp_path, files)
    proc = run_slim(site, entry("pkg/tests", "unimported") + entry("pkg/tests/deep", "unimported"))
    assert proc.returncode == 2 and "pkg.tests is imported by pkg/util.py" in proc.stderr, proc.stderr
    site = tree(tmp_path / "2", {**files, "pkg/util.py": b"from pkg.tests2 import t\n"})
    proc = run_slim(site, entry("pkg/tests", "unimported"))
    assert proc.returncode == 0, f"pkg.tests2 is not pkg.tests: {proc.stderr}"


@pytest.mark.parametrize(("archs", "gone"), [
    ("9.0a 12.0a", []), ("", []), ("12.0a", ["sgl_kernel/sm90"]), ("9.0a", ["sgl_kernel/sm100"]),
    ("10.0a 12.0a", ["sgl_kernel/sm90"]),
], ids=["both", "unset", "sm120", "sm90", "blackwell"])
def test_a_one_architecture_image_leaves_out_what_loads_only_on_other_gpus(tmp_path, archs, gone):
    """sgl-kernel's loader takes sm90/ on capability 9.0 and sm100/ on any other; the image's list decides."""
    files = {"sgl_kernel/sm90/common_ops.abi3.so": b"\x7fELF 90", "sgl_kernel/sm100/common_ops.abi3.so": b"\x7fELF 100"}
    site = tree(tmp_path, files)
    declarations = entry("sgl_kernel/sm90", "arch:9") + entry("sgl_kernel/sm100", "arch:!9")
    env = {"FLASHINFER_CUDA_ARCH_LIST": archs}
    proc = run_slim(site, declarations, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(d for d in ("sgl_kernel/sm90", "sgl_kernel/sm100") if not (site / d).exists()) == sorted(gone), proc.stdout
    assert run_slim(site, declarations, "--check", env=env).returncode == 0, "what the list keeps is not 'back'"
    if gone:  # built for both, then checked as a one-architecture image: the directory it keeps is back
        site = tree(tmp_path / "2", files)
        proc = run_slim(site, declarations, "--check", env=env)
        assert proc.returncode == 1 and f"{gone[0]} is back" in proc.stderr, proc.stderr


def test_the_shipped_arch_entries_are_the_loaders_rule():
    from sglang_stack.image.steps import slim

    entries = {e["glob"]: e["evidence"] for e in slim.load(ROOT / "docker" / "slim.toml") if slim.ARCH.fullmatch(e["evidence"])}
    assert entries == {"sgl_kernel/sm90": "arch:9", "sgl_kernel/sm100": "arch:!9"}, entries
    assert [slim.unused_here(entries["sgl_kernel/sm90"], a.split()) for a in ("12.0a", "9.0a", "9.0a 12.0a")] == [True, False, False]
