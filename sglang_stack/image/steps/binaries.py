"""Binary audit: every ELF object in a site-packages tree needs only this stack's CUDA, and finds every library it needs.

    python3 -m sglang_stack.image.steps.binaries --path SITE_PACKAGES [--lock versions.lock]
    invoke binaries --path DIR

Reads the dynamic section of every x86-64 ELF file under the path (pyelftools), and reports:

- **wrong CUDA major**: a ``DT_NEEDED`` of a CUDA library whose soname tracks the toolkit's
  major (``libcudart.so.12``, ``libcublas.so.12``, ``libnvrtc.so.12``, ...) other than the
  stack's (``[cuda] version`` in versions.lock). Such a library fails to load in a CUDA 13
  image, and some packages swallow the ImportError (the pinned torchao's bare ``except:``).
- **unresolved**: a needed library found nowhere: not in the object's RPATH/RUNPATH
  (``$ORIGIN`` expanded), not in the system's library directories, and not as the file name or
  soname of another ELF object in the tree (torch's own libraries are found that way, loaded
  by the import that precedes the extension). The driver's ``libcuda.so.1`` is the one
  library allowed to be absent: the NVIDIA runtime mounts it into the container.

Each finding is an error unless versions.lock declares it in a ``[[binary_exception]]``
(package, the libraries it needs, why, and which SGLang features it breaks). A declaration
whose package is in the tree but which no longer matches a finding is stale, and an error
too. Exit 1 with one line per error; 0 when clean. Only the stdlib and pyelftools.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
# CUDA libraries whose soname major is the toolkit's major: libcudart.so.13 belongs to CUDA 13.
# (cuFFT, cuRAND, cuSPARSE, cuSOLVER, cuDNN and NCCL version their sonames on their own.)
CUDA_MAJOR_LIBS = re.compile(r"^lib(cudart|cublas|cublasLt|nvrtc|nvrtc-builtins|nvJitLink|cupti|nvblas)\.so\.(\d+)$")
DRIVER = {"libcuda.so.1"}
SYSTEM_DIRS = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
               "/usr/local/lib", "/usr/local/cuda/lib64", "/usr/local/cuda/compat"]


@dataclass(frozen=True)
class Finding:
    package: str
    file: str
    library: str
    kind: str  # "cuda-major" or "unresolved"


@dataclass(frozen=True)
class Exception_:
    package: str
    needs: tuple[str, ...]
    reason: str
    breaks: str


@dataclass
class Report:
    objects: int = 0
    findings: list[Finding] = field(default_factory=list)
    declared: list[tuple[Finding, Exception_]] = field(default_factory=list)
    stale: list[Exception_] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        matched = {id(f) for f, _ in self.declared}
        return [f for f in self.findings if id(f) not in matched]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def owners(root: Path) -> dict[str, str]:
    """Relative file path -> "name version" of the distribution whose RECORD lists it."""
    owned = {}
    for record in root.glob("*.dist-info/RECORD"):
        meta = record.parent / "METADATA"
        name = version = None
        if meta.is_file():
            for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Name: "):
                    name = line[6:].strip()
                elif line.startswith("Version: "):
                    version = line[9:].strip()
                elif not line:
                    break
        label = f"{name or record.parent.name} {version or '?'}"
        for row in csv.reader(record.read_text(encoding="utf-8", errors="replace").splitlines()):
            if row and row[0]:
                owned[os.path.normpath(row[0])] = label
    return owned


def dynamic(path: Path) -> tuple[list[str], list[str], str | None] | None:
    """(DT_NEEDED, RPATH+RUNPATH, DT_SONAME) of an x86-64 ELF file, or None for anything else."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    try:
        with path.open("rb") as fh:
            if fh.read(4) != ELF_MAGIC:
                return None
            fh.seek(0)
            elf = ELFFile(fh)
            if elf["e_machine"] != "EM_X86_64":
                return None  # cubins (EM_CUDA) and foreign builds
            needed, paths, soname = [], [], None
            for section in elf.iter_sections():
                if not isinstance(section, DynamicSection):
                    continue
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                        paths += (tag.rpath if tag.entry.d_tag == "DT_RPATH" else tag.runpath).split(":")
                    elif tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
            return needed, paths, soname
    except (ELFError, OSError, ValueError):
        return None


def system_libraries() -> set[str]:
    dirs = list(SYSTEM_DIRS) + [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for conf in Path("/etc/ld.so.conf.d").glob("*.conf"):
        dirs += [line.strip() for line in conf.read_text(errors="replace").splitlines()
                 if line.strip().startswith("/")]
    names = set()
    for d in dirs:
        try:
            names.update(os.listdir(d))
        except OSError:
            pass
    return names


def load_exceptions(lock: Path) -> tuple[int, list[Exception_]]:
    """The stack's CUDA major and the declared exceptions, from versions.lock."""
    data = tomllib.loads(lock.read_text(encoding="utf-8"))
    major = int(str(data["cuda"]["version"]).split(".")[0])
    declared = [Exception_(e["package"], tuple(e["needs"]), e["reason"], e["breaks"])
                for e in data.get("binary_exception", [])]
    return major, declared


def scan(root: Path, cuda_major: int, declared: list[Exception_]) -> Report:
    owned = owners(root)
    report = Report()
    objects = []
    provided: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.endswith(".dist-info") and d != "__pycache__"]
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or name.endswith((".py", ".pyc", ".pyi", ".h", ".cuh", ".txt", ".json")):
                provided.add(name)
                continue
            info = dynamic(path)
            if info is None:
                continue
            objects.append((path, info))
            provided.add(name)
            if info[2]:
                provided.add(info[2])
    system = system_libraries()
    report.objects = len(objects)
    for path, (needed, rpaths, _) in objects:
        rel = os.path.relpath(path, root)
        package = owned.get(os.path.normpath(rel), "(no package)")
        dirs = [Path(p.replace("$ORIGIN", str(path.parent)).replace("${ORIGIN}", str(path.parent))) for p in rpaths if p]
        for lib in needed:
            m = CUDA_MAJOR_LIBS.match(lib)
            if m and int(m.group(2)) != cuda_major:
                report.findings.append(Finding(package, rel, lib, "cuda-major"))
                continue
            if lib in DRIVER or lib in provided or lib in system or any((d / lib).exists() for d in dirs):
                continue
            report.findings.append(Finding(package, rel, lib, "unresolved"))
    present = {normalize(label.split()[0]) for label in owned.values()}
    for exc in declared:
        hits = [f for f in report.findings if normalize(f.package.split()[0]) == normalize(exc.package) and f.library in exc.needs]
        report.declared += [(f, exc) for f in hits]
        if normalize(exc.package) in present and {f.library for f in hits} != set(exc.needs):
            report.stale.append(exc)
    return report


def lines(report: Report, cuda_major: int, lock_name: str = "versions.lock") -> list[str]:
    """One line per ELF file and kind of finding (declared ones first), then one per stale declaration."""
    def grouped(findings):
        groups: dict[tuple[str, str, str], list[str]] = {}
        for f in findings:
            groups.setdefault((f.package, f.file, f.kind), []).append(f.library)
        return groups.items()

    out = []
    breaks = {f: exc.breaks for f, exc in report.declared}
    for (package, file, kind), libs in grouped(f for f, _ in report.declared):
        first = next(f for f in breaks if (f.package, f.file, f.kind) == (package, file, kind))
        out.append(f"declared: {package}: {file} needs {', '.join(libs)} (breaks: {breaks[first]})")
    for (package, file, kind), libs in grouped(report.errors):
        if kind == "cuda-major":
            majors = sorted({CUDA_MAJOR_LIBS.match(lib).group(2) for lib in libs})
            what, fix = f"(CUDA {'/'.join(majors)}; this stack is CUDA {cuda_major})", f"use a CUDA {cuda_major} build"
        else:
            what, fix = "(nothing in the image provides it)", "install what provides it"
        out.append(f"error: {package}: {file} needs {', '.join(libs)} {what}: {fix}, or declare it in "
                   f"{lock_name} [[binary_exception]] with the features it breaks")
    out += [f"error: {lock_name} [[binary_exception]] {exc.package} ({', '.join(exc.needs)}) is stale: "
            "its package no longer needs that; remove the declaration" for exc in report.stale]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, required=True, help="an unpacked site-packages directory")
    parser.add_argument("--lock", type=Path, default=Path(__file__).resolve().parents[3] / "versions.lock",
                        help="versions.lock with [cuda] version and the [[binary_exception]]s")
    args = parser.parse_args(argv)
    if not args.path.is_dir():
        print(f"error: --path {args.path}: not a directory", file=sys.stderr)
        return 2
    try:
        cuda_major, declared = load_exceptions(args.lock)
    except (OSError, tomllib.TOMLDecodeError, KeyError, ValueError, TypeError) as err:
        print(f"error: {args.lock}: cannot read [cuda] version and [[binary_exception]]: {err}", file=sys.stderr)
        return 2
    report = scan(args.path, cuda_major, declared)
    for line in lines(report, cuda_major, args.lock.name):
        print(line)
    bad = len(report.errors) + len(report.stale)
    print(f"binaries: {report.objects} ELF objects under {args.path}: "
          f"{len(report.declared)} declared exception(s), {bad} error(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
