"""The whole-image smoke's stand-ins (docker/standins.toml): the lock they make, the libraries gcc builds for them."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from sglang_stack import ROOT
from sglang_stack.smoke import substitutes
from sglang_stack.errors import UserError
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock.pins import read_pins

from pins import PIN

# What PyPI's build of the pinned torch declares on Linux x86_64 (its METADATA), cut to a few lines of each kind.
TORCH_REQUIRES = ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", "jinja2", "fsspec>=0.8.5", "setuptools",
                  "networkx>=2.5.1", "nvidia-cuda-runtime-cu12==12.8.90; platform_system == \"Linux\"",
                  "nvidia-cublas-cu12==12.8.4.1; platform_system == \"Linux\"", f"triton=={PIN['triton']}; platform_system == \"Linux\""]


def dynamic_symbols(path: Path) -> tuple[str, set[str], set[str]]:
    """SONAME, defined dynamic symbols and defined version names of a shared library."""
    with path.open("rb") as handle:
        elf = ELFFile(handle)
        soname = next(t.soname for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_SONAME")
        names = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols() if s.entry.st_shndx != "SHN_UNDEF" and s.name}
        verdef = elf.get_section_by_name(".gnu.version_d")
        versions = {aux.name for _, auxes in verdef.iter_versions() for aux in auxes} if verdef else set()
    return soname, names, versions


@pytest.fixture(scope="module")
def declared():
    return substitutes.load()


def stand_in_lock(tmp_path: Path, declared, requires: dict[str, list[str]]) -> Path:
    for name in ("requirements.lock.txt", "requirements.router.lock.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    pinned = {p.name for p in read_pins(ROOT / "requirements.lock.txt", [])}
    path = tmp_path / "versions.lock"
    path.write_text(substitutes.overlay((ROOT / "versions.lock").read_text(), declared, requires, pinned))
    return path


def test_the_stand_in_lock_passes_the_lock_check_with_the_stand_in_wheels(tmp_path, declared):
    """versions.lock with PyPI's torch: its cu12 requirements omitted, the real cu13 overrides of torch gone."""
    requires = {"torch": TORCH_REQUIRES, "torchvision": ["numpy", f"torch=={PIN['torch'].split('+')[0]}", "pillow!=8.3.*,>=5.3.0"], "sgl-kernel": []}
    path = stand_in_lock(tmp_path, declared, requires)
    lock = lockmod.check(path)  # raises LockProblems, naming each, if the stand-in lock is inconsistent
    wheels = {w.name: w for w in lock.wheels}
    for wheel in declared.wheels:
        assert (wheels[wheel.name].version, wheels[wheel.name].sha256) == (wheel.version, wheel.sha256), wheel.name
    overrides = {(o.of, o.package): o for o in lock.overrides}
    assert ("torch", "nvidia-cuda-runtime-cu12") in overrides and overrides[("torch", "nvidia-cuda-runtime-cu12")].omit
    assert ("torch", "nvidia-cublas") not in overrides, "the real lock's override of torch's cu13 cuBLAS pin was kept"
    assert ("sglang", "flashinfer-python") in overrides, "an override of sglang's was dropped with torch's"
    real = tomllib.loads((ROOT / "versions.lock").read_text())
    assert real["wheel"][0]["sha256"] != declared.wheels[0].sha256, "the real versions.lock was changed"


def test_a_stand_in_for_a_wheel_the_lock_lacks_is_refused(tmp_path, declared):
    broken = substitutes.Standins(**{**declared.__dict__, "wheels": declared.wheels + (substitutes.Wheel("nosuch", "1", "https://x/y.whl", "0" * 64),)})
    with pytest.raises(UserError, match="'nosuch' is not a \\[\\[wheel\\]\\] of versions.lock"):
        substitutes.overlay((ROOT / "versions.lock").read_text(), broken, {}, set())


def test_a_malformed_declaration_is_one_line_naming_the_key(tmp_path):
    path = tmp_path / "standins.toml"
    path.write_text((ROOT / "docker" / "standins.toml").read_text().replace('suite = "bookworm"', "suite = 12"))
    with pytest.raises(UserError, match=r"standins.toml: base.suite is missing or not a str"):
        substitutes.load(path)


def test_the_link_stub_exports_every_driver_entry_point_of_cuda_h(tmp_path):
    """The cuda.h of the pinned runtime wheel: plain, _v2 and per-thread-stream names, SONAME libcuda.so.1."""
    header = (
        "#define cuMemAlloc cuMemAlloc_v2\n#define cuMemcpyAsync __CUDA_API_PTSZ(cuMemcpyAsync)\n"
        + "".join(f"CUresult CUDAAPI cuFn{i}(int x);\n" for i in range(120))
        + "CUresult CUDAAPI cuMemAlloc(int *p, unsigned long n);\nCUresult CUDAAPI cuMemcpyAsync(int a);\n"
    )
    soname, names, _ = dynamic_symbols(substitutes.libcuda_stub(header, tmp_path))
    assert soname == "libcuda.so.1"
    assert {"cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyAsync", "cuMemcpyAsync_ptsz", "cuFn0", "cuFn119"} <= names, sorted(names)[:10]


def test_a_header_that_is_not_cuda_h_is_refused(tmp_path):
    with pytest.raises(UserError, match="only 1 cu\\* functions"):
        substitutes.libcuda_stub("CUresult CUDAAPI cuInit(unsigned int flags);\n", tmp_path)


def test_a_cuda12_stand_in_library_satisfies_a_binary_linked_against_the_real_versioned_one(tmp_path):
    """gcc links a consumer against a versioned 'libcudart.so.12'; the stand-in built from the consumer's imports loads it."""
    import zipfile

    real = tmp_path / "real"
    real.mkdir()
    (real / "cudart.c").write_text("int cudaMalloc(void **p, unsigned long n) { return 1; }\nint cudaFree(void *p) { return 1; }\n")
    (real / "cudart.map").write_text("libcudart.so.12 { global: cudaMalloc; cudaFree; local: *; };\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(real / "libcudart.so.12"), str(real / "cudart.c"),
                    "-Wl,-soname,libcudart.so.12", f"-Wl,--version-script={real / 'cudart.map'}"], check=True)
    (real / "libcudart.so").symlink_to("libcudart.so.12")
    (tmp_path / "consumer.c").write_text("int cudaMalloc(void **, unsigned long); int cudaFree(void *);\n"
                                         "int consume(void) { void *p; return cudaMalloc(&p, 1) + cudaFree(p); }\n")
    consumer = tmp_path / "libconsumer.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(consumer), str(tmp_path / "consumer.c"), f"-L{real}", "-lcudart"], check=True)
    wheel = tmp_path / "consumer-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(consumer, "consumer/libconsumer.so")
    out = tmp_path / "standin"
    out.mkdir()
    (lib,) = substitutes.cuda12_libraries([wheel], ("libcudart.so.12",), out)
    soname, names, versions = dynamic_symbols(lib)
    assert (soname, {"cudaMalloc", "cudaFree"} <= names, "libcudart.so.12" in versions) == ("libcudart.so.12", True, True)
    # The loader itself: the consumer resolves every import against the stand-in, with RTLD_NOW.
    probe = f"import ctypes, os; ctypes.CDLL({str(lib)!r}); ctypes.CDLL({str(consumer)!r}, mode=os.RTLD_NOW); print('ok')"
    proc = subprocess.run(["python3", "-c", probe], capture_output=True, text=True)
    assert proc.stdout.strip() == "ok", proc.stderr[-500:]
