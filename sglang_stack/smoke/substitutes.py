"""Stand-ins for what a CI machine cannot fetch, for the whole-image smoke (``invoke smoke --target runtime``).

docker/standins.toml declares each one and how its bytes differ from the real input:

- the CUDA base image: Debian bookworm by debootstrap, with this host's CPython 3.12 copied in and,
  for the CUDA 12 stand-in wheels to import, gcc-built libraries named like CUDA 12's;
- the devel image, of which the build takes one file: a gcc-built ``libcuda.so`` link stub with
  every entry point of the pinned ``cuda.h``;
- the three URL wheels: PyPI's CUDA 12.8 builds of the same releases, written into a copy of
  versions.lock (``overlay``), with the overrides and binary exceptions they need.

Runs on the host. Nothing here is read by ``invoke build``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from sglang_stack.engine import Engine
from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.image import store
from sglang_stack.shell import require, run

DECLARATION = ROOT / "docker" / "standins.toml"
CUDA12_DIR = "/usr/local/lib/cuda12-standin"
STUB_PATH = "usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"
# Bumped when make_images() changes what it puts in the images: part of their tag.
IMAGE_RECIPE = 2


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Standins:
    path: Path
    text: str
    suite: str
    packages: tuple[str, ...]
    python: str
    header_wheel: str
    header: str
    wheels: tuple[Wheel, ...]
    cuda12: tuple[str, ...]
    omit_reason: str
    binary_exceptions: tuple[dict, ...]

    def for_lock(self, lock: dict) -> "Standins":
        """The stand-ins a lock needs: a wheel stand-in for each of its URL wheels, and the CUDA 12 libraries and
        binary exceptions only where a stand-in wheel is a CUDA 12 build (a profile whose every byte is on PyPI
        needs neither: only the base and devel images stand in)."""
        urls = {w.get("name") for w in lock.get("wheel", [])}
        wheels = tuple(w for w in self.wheels if w.name in urls)
        names = {w.name for w in wheels}
        return replace(self, wheels=wheels, cuda12=self.cuda12 if wheels else (),
                       binary_exceptions=tuple(e for e in self.binary_exceptions if e.get("package") in names))

    @property
    def key(self) -> str:
        """A short hash of what the stand-in images are made of: their tag, so an edit makes new ones."""
        made_of = (self.suite, self.packages, self.python, self.header_wheel, self.header, self.cuda12,
                   [(w.name, w.sha256) for w in self.wheels], IMAGE_RECIPE)
        return hashlib.sha256(repr(made_of).encode()).hexdigest()[:12]


def load(path: Path = DECLARATION) -> Standins:
    """Read and check docker/standins.toml; a missing or malformed key is one line naming it."""
    try:
        text = path.read_text()
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read: {err}") from None

    def get(table: str, key: str, kind: type):
        value = data.get(table, {}).get(key) if table else data.get(key)
        if not isinstance(value, kind):
            raise UserError(f"{path}: {table + '.' if table else ''}{key} is missing or not a {kind.__name__}")
        return value

    wheels = []
    for i, entry in enumerate(data.get("wheel", [])):
        missing = [k for k in ("name", "version", "url", "sha256") if not isinstance(entry.get(k), str)]
        if missing:
            raise UserError(f"{path}: wheel[{i}].{missing[0]} is missing or not a string")
        if not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]):
            raise UserError(f"{path}: wheel[{i}].sha256 {entry['sha256']!r} is not a sha256")
        wheels.append(Wheel(entry["name"], entry["version"], entry["url"], entry["sha256"]))
    return Standins(
        path=path,
        text=text,
        suite=get("base", "suite", str),
        packages=tuple(get("base", "packages", list)),
        python=get("base", "python", str),
        header_wheel=get("devel", "header_wheel", str),
        header=get("devel", "header", str),
        wheels=tuple(wheels),
        cuda12=tuple(get("cuda12", "sonames", list)),
        omit_reason=get("overrides", "omit_reason", str),
        binary_exceptions=tuple(data.get("binary_exception", [])),
    )


# --- the lock, with the stand-in wheels -----------------------------------------------------


def _toml(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _blocks(text: str) -> list[str]:
    """The text cut before every table header line, comments above a header going with it."""
    lines = text.splitlines(keepends=True)
    cuts = [0]
    for i, line in enumerate(lines):
        if line.startswith("[") and i:
            j = i
            while j > cuts[-1] and lines[j - 1].startswith("#"):
                j -= 1
            cuts.append(j)
    cuts.append(len(lines))
    return ["".join(lines[a:b]) for a, b in zip(cuts, cuts[1:]) if b > a]


def overlay(lock_text: str, standins: Standins, requires: dict[str, list[str]], pinned: set[str]) -> str:
    """versions.lock with the stand-in wheels in place of the real ones, and what their own requirements need.

    - each stand-in's version, url, sha256 and requires replace the real wheel's;
    - a real [[override]] of a stand-in's requirement that the stand-in does not have goes;
    - each requirement of a stand-in that neither requirements.lock.txt (``pinned``) nor a [[wheel]] pins becomes an
      omitted [[override]]: the CUDA 12 libraries of PyPI's builds, which the image never installs;
    - the stand-ins' [[binary_exception]]s are added.

    ``requires`` is each stand-in wheel's own Requires-Dist, read from the wheel, not typed in.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from sglang_stack.lock.lockfile import TARGET_ENV

    env = dict(TARGET_ENV, python_version=standins.python, python_full_version=standins.python + ".0")
    pinned = pinned | {canonicalize_name(w["name"]) for w in tomllib.loads(lock_text).get("wheel", [])}
    by_name = {w.name: w for w in standins.wheels}
    needs = {name: {canonicalize_name(Requirement(r).name): r for r in reqs} for name, reqs in requires.items()}
    out, replaced = [], set()
    for block in _blocks(lock_text):
        fields = dict(re.findall(r'^(name|of|package) = "([^"]+)"', block, re.M))
        if "[[wheel]]" in block and fields.get("name") in by_name:
            wheel = by_name[fields["name"]]
            body = re.sub(r"^(requires|superseded) = \[.*?\]\n", "", block, flags=re.M | re.S)
            for key in ("version", "url", "sha256"):
                body = re.sub(rf"^{key} = .*$", f"{key} = {_toml(getattr(wheel, key))}", body, count=1, flags=re.M)
            body = re.sub(r"^status = .*$", 'status = "checked"', body, count=1, flags=re.M)
            out.append(body.rstrip("\n") + f"\nrequires = {_toml(requires.get(wheel.name, []))}\n\n")
            replaced.add(wheel.name)
            continue
        if "[[override]]" in block and fields.get("of") in needs and canonicalize_name(fields.get("package", "")) not in needs[fields["of"]]:
            print(f"stand-in lock: drops [[override]] {fields['package']} of {fields['of']} (the stand-in does not require it)")
            continue
        out.append(block)
    missing = [w.name for w in standins.wheels if w.name not in replaced]
    if missing:
        raise UserError(f"{standins.path}: wheel {missing[0]!r} is not a [[wheel]] of versions.lock")
    out.append("\n# --- stand-ins (docker/standins.toml) ---------------------------------------------------\n")
    for source, reqs in needs.items():
        for name, line in sorted(reqs.items()):
            req = Requirement(line)
            if name in pinned or (req.marker is not None and not req.marker.evaluate(env)):
                continue
            out.append(f"\n[[override]]\npackage = {_toml(req.name)}\nomit = true\nof = {_toml(source)}\n"
                       f"declared = {_toml(str(req.specifier))}\nreason = {_toml(standins.omit_reason)}\n")
    for entry in standins.binary_exceptions:
        out.append("\n[[binary_exception]]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in entry.items()))
    text = "".join(out)
    # Derive, don't trust the edit: the result must read back with exactly the stand-ins' values.
    data = tomllib.loads(text)
    for wheel in standins.wheels:
        entry = next(e for e in data["wheel"] if e["name"] == wheel.name)
        if (entry["version"], entry["url"], entry["sha256"]) != (wheel.version, wheel.url, wheel.sha256):
            raise UserError(f"{standins.path}: wheel {wheel.name!r} did not replace versions.lock's entry cleanly")
    return text


# --- the interpreter ------------------------------------------------------------------------


def host_python(version: str) -> Path:
    """The prefix of a CPython ``version`` on this host with venv, ensurepip and Python.h."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")), reverse=True)
    candidates += sorted(glob.glob(f"/usr/local/bin/python{version}") + glob.glob(f"/opt/*/bin/python{version}"))
    probe = ("import sys, sysconfig, os, ensurepip, venv; "
             "print(sys.base_prefix); print(int(os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))))")
    for exe in filter(None, candidates):
        try:
            proc = subprocess.run([exe, "-c", probe], capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        lines = proc.stdout.split()
        if proc.returncode == 0 and len(lines) == 2 and lines[1] == "1":
            return Path(lines[0])
    raise UserError(f"no CPython {version} with venv, ensurepip and Python.h on this host "
                    f"(docker/standins.toml [base] python): install one, e.g. `pyenv install {version}`")


def copy_python(prefix: Path, version: str, rootfs: Path) -> None:
    """CPython from ``prefix`` into ``rootfs``/usr/local: the interpreter, its library, stdlib and headers."""
    dest = rootfs / "usr" / "local"
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(prefix / "bin" / f"python{version}", dest / "bin" / f"python{version}")
    for name in ("python3", "python"):
        (dest / "bin" / name).symlink_to(f"python{version}")
    for lib in (prefix / "lib").glob(f"libpython{version}*.so*"):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=False)
    # No Tk: like Ubuntu's python3.12, whose _tkinter is a package of its own (python3-tk).
    skip = shutil.ignore_patterns("__pycache__", "test", "tests", "idlelib", "tkinter", "turtledemo", "site-packages", "_tkinter*")
    shutil.copytree(prefix / "lib" / f"python{version}", dest / "lib" / f"python{version}", ignore=skip, symlinks=True)
    (dest / "lib" / f"python{version}" / "site-packages").mkdir()
    shutil.copytree(prefix / "include" / f"python{version}", dest / "include" / f"python{version}", symlinks=True)


def missing_libraries(rootfs: Path, version: str) -> list[str]:
    """Libraries the copied interpreter or its extension modules need that the rootfs's loader cannot find."""
    lib = Path("/usr/local/lib")
    targets = [Path("/usr/local/bin") / f"python{version}"]
    targets += [lib / f"python{version}" / "lib-dynload" / p.name
                for p in sorted((rootfs / f"usr/local/lib/python{version}/lib-dynload").glob("*.so"))]
    proc = run(["chroot", str(rootfs), "ldd", *map(str, targets)], capture=True, check=False, quiet=True, what="ldd")
    return sorted({line.split()[0] for line in proc.stdout.splitlines() if "not found" in line})


# --- gcc-built libraries --------------------------------------------------------------------


def _gcc(c_source: str, out: Path, soname: str, version_script: str | None = None) -> None:
    src = out.with_suffix(out.suffix + ".c")
    src.write_text(c_source)
    argv = [require("gcc", "install gcc (apt-get install build-essential)"), "-shared", "-fPIC", "-O0", "-o", str(out),
            str(src), f"-Wl,-soname,{soname}"]
    if version_script:
        script = out.with_suffix(out.suffix + ".map")
        script.write_text(version_script)
        argv.append(f"-Wl,--version-script={script}")
    run(argv, capture=True, what=f"gcc ({soname})")
    src.unlink()


def cuda_entry_points(header: str) -> list[str]:
    """Every cu* function cuda.h declares, under its plain, versioned (``_v2``) and per-thread-stream names."""
    names = set(re.findall(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(", header))
    names |= set(re.findall(r"#define\s+cu\w+\s+(cu\w+_v\d+)\b", header))
    # Per-thread default stream variants: cuX_ptds and cuX_ptsz, what __CUDA_API_PTDS/PTSZ expand to.
    for macro, target in re.findall(r"#define\s+cu\w+\s+__CUDA_API_(PTDS|PTSZ)\((cu\w+)\)", header):
        names |= {target, f"{target}_{macro.lower()}"}
    return sorted(names)


def libcuda_stub(header: str, out_dir: Path) -> Path:
    """A link stub with SONAME libcuda.so.1 exporting every entry point of ``header``."""
    names = cuda_entry_points(header)
    if len(names) < 100:
        raise UserError(f"cuda.h declares only {len(names)} cu* functions: not the CUDA driver API header")
    out = out_dir / "libcuda.so"
    _gcc("".join(f"int {n}(void) {{ return 0; }}\n" for n in names), out, "libcuda.so.1")
    return out


def _stem(soname: str) -> str:
    return soname.removeprefix("lib").split(".so")[0]


def imported_symbols(wheels: list[Path], sonames: tuple[str, ...]) -> dict[str, dict[str, set[str]]]:
    """For each of ``sonames``: version name ('' for none) -> the symbols the wheels' ELF files import from it.

    A versioned import names its library; an unversioned one is given to the library of the
    file's needed ``sonames`` whose name it starts with (cublasLt... to libcublasLt, cuda... to libcudart).
    """
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
    from elftools.common.exceptions import ELFError
    import io

    wanted = {s: {} for s in sonames}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if not re.search(r"\.so(\.\d+)*$", name):
                    continue
                try:
                    elf = ELFFile(io.BytesIO(zf.read(name)))
                    dynamic = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
                except ELFError:
                    continue
                if dynamic is None:
                    continue
                needed = [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
                ours = [s for s in needed if s in wanted]
                if not ours:
                    continue
                versions: dict[int, tuple[str, str]] = {}
                versym = None
                for section in elf.iter_sections():
                    if isinstance(section, GNUVerNeedSection):
                        for verneed, aux in section.iter_versions():
                            for a in aux:
                                versions[a.entry.vna_other] = (verneed.name, a.name)
                    elif isinstance(section, GNUVerSymSection):
                        versym = section
                dynsym = elf.get_section_by_name(".dynsym")
                for index, sym in enumerate(dynsym.iter_symbols()):
                    if sym.entry.st_shndx != "SHN_UNDEF" or not sym.name or sym.entry.st_info.bind == "STB_LOCAL":
                        continue
                    ver = versym.get_symbol(index).entry.ndx if versym is not None else 0
                    ver = ver if isinstance(ver, int) else 0
                    if ver in versions:
                        lib, vname = versions[ver]
                        if lib in wanted:
                            wanted[lib].setdefault(vname, set()).add(sym.name)
                        continue
                    owner = _owner(sym.name, ours)
                    if owner:
                        wanted[owner].setdefault("", set()).add(sym.name)
    return wanted


def _owner(symbol: str, sonames: list[str]) -> str | None:
    low = symbol.lower().lstrip("_")
    best = None
    for soname in sonames:
        stem = _stem(soname).lower()
        prefixes = ("cuda",) if stem == "cudart" else (stem,)
        if any(low.startswith(p) for p in prefixes) and (best is None or len(stem) > len(_stem(best))):
            best = soname
    return best


# Every stand-in function returns 0 (success, or a NULL pointer), but the two an import reaches with
# outputs that matter: no device, and an error string that is a string (torch prints it).
STUB_PRELUDE = 'static const char standin[] = "CUDA 12 stand-in library: no device";\nvoid cuda12_standin(void) {}\n'


def _stub_function(symbol: str) -> str:
    if symbol == "cudaGetDeviceCount":
        return "int cudaGetDeviceCount(int *count) { if (count) *count = 0; return 100; }\n"  # cudaErrorNoDevice
    if symbol.endswith(("GetErrorString", "GetErrorName")):
        return f"const char *{symbol}(int error) {{ return standin; }}\n"
    return f"long {symbol}(void) {{ return 0; }}\n"


def cuda12_libraries(wheels: list[Path], sonames: tuple[str, ...], out_dir: Path) -> list[Path]:
    """One gcc-built library per soname with the symbol versions and symbols the wheels import from it."""
    made = []
    for soname, versions in imported_symbols(wheels, sonames).items():
        symbols = sorted(set().union(*versions.values())) if versions else []
        named = [v for v in versions if v]
        script = None
        if named:
            # Unversioned imports bind to any version: they go into the first node.
            nodes = []
            for k, vname in enumerate(sorted(named)):
                syms = sorted(versions[vname] | (versions.get("", set()) if k == 0 else set()))
                nodes.append(f"{vname} {{ global: {' '.join(s + ';' for s in syms)} }};\n")
            script = "".join(nodes)
        out = out_dir / soname
        _gcc(STUB_PRELUDE + "".join(_stub_function(s) for s in symbols), out, soname, script)
        made.append(out)
    return made


# --- the images -----------------------------------------------------------------------------


def image_refs(standins: Standins) -> tuple[str, str]:
    """The stand-in base and devel images' names, tagged by the declaration's hash."""
    return (f"localhost/sglang-stack-standin-base:{standins.key}", f"localhost/sglang-stack-standin-devel:{standins.key}")


def make_images(engine: Engine, standins: Standins, wheels: list[Path], header: str) -> tuple[str, str]:
    """debootstrap the stand-in base, add CPython and the CUDA 12 libraries, import it; then the devel image on top."""
    base, devel = image_refs(standins)
    if store.exists(engine, base) and store.exists(engine, devel):
        print(f"reusing stand-in images {base} {devel}", flush=True)
        return base, devel
    prefix = host_python(standins.python)
    with tempfile.TemporaryDirectory(prefix="sglang-stack-standin-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        store.debootstrap(standins.suite, standins.packages, rootfs)
        shutil.rmtree(rootfs / "var" / "lib" / "apt" / "lists", ignore_errors=True)
        (rootfs / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (rootfs / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
        print(f"stand-in base: CPython {standins.python} from {prefix}", flush=True)
        copy_python(prefix, standins.python, rootfs)
        run(["chroot", str(rootfs), "ldconfig"], capture=True, what="ldconfig")
        unresolved = missing_libraries(rootfs, standins.python)
        if unresolved:
            raise UserError(f"{standins.path}: CPython {standins.python} from {prefix} needs {', '.join(unresolved)}, which "
                            f"the stand-in base lacks: add its Debian package to [base] packages")
        if standins.cuda12:  # only for stand-in wheels that are CUDA 12 builds
            libs = rootfs / CUDA12_DIR.lstrip("/")
            libs.mkdir(parents=True)
            for lib in cuda12_libraries(wheels, standins.cuda12, libs):
                print(f"stand-in base: {CUDA12_DIR}/{lib.name}", flush=True)
            (rootfs / "etc" / "ld.so.conf.d" / "cuda12-standin.conf").write_text(CUDA12_DIR + "\n")
            run(["chroot", str(rootfs), "ldconfig"], capture=True, what="ldconfig")
        store.import_rootfs(engine, rootfs, base)
        stub = rootfs / STUB_PATH
        stub.parent.mkdir(parents=True)
        shutil.copy2(libcuda_stub(header, Path(tmp)), stub)
        store.import_rootfs(engine, rootfs, devel)
    return base, devel


def header_text(standins: Standins, requirements: Path | None = None) -> str:
    """cuda.h from the runtime wheel the requirement lock pins (hash-checked): the root's, or a profile's."""
    from sglang_stack.image.size import locked_wheel

    wheel = locked_wheel(standins.header_wheel, requirements)
    with zipfile.ZipFile(wheel) as zf:
        try:
            return zf.read(standins.header).decode()
        except KeyError:
            raise UserError(f"{standins.path}: devel.header {standins.header!r} is not in {wheel.name}") from None
