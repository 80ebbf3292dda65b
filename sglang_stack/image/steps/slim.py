"""Remove what nothing in the image loads, each removal with its evidence checked (runs in the image, standard library only).

    python3 -m sglang_stack.image.steps.slim --site SITE_PACKAGES --declarations /opt/sglang-stack/slim.toml
    python3 -m sglang_stack.image.steps.slim --site SITE_PACKAGES --declarations ... --check

docker/slim.toml declares each removal: a glob under site-packages, why nothing loads it, and the
kind of evidence this module checks before it deletes anything, in the same step that installed the
files (a later step would only hide them under another layer):

- ``static``: static archives (``.a``), which a linker reads and a process never loads;
- ``unreferenced``: no other file under site-packages names the file (its basename, as bytes), so
  no ``dlopen``, ``DT_NEEDED`` or Python string can reach it;
- ``unimported``: a test suite, whose dotted package no import statement of a remaining ``.py`` file names;
- ``compiled``: C or C++ source (Cython's output) beside the extension module compiled from it
  (``driver.cpp`` beside ``driver.cpython-312-x86_64-linux-gnu.so``): Python imports the module;
- ``env:NAME``: the image sets NAME to another file, which exists (Triton's ptxas: TRITON_PTXAS_PATH);
- ``arch:MAJOR`` or ``arch:!MAJOR``: what a loader takes only on GPUs of that compute-capability major (or of
  any other), removed when the image's architecture list (``FLASHINFER_CUDA_ARCH_LIST``, the build argument of
  ``invoke build --cuda-arch-list``) holds none: the entrypoint refuses every GPU outside that list, so nothing
  can load it. With the list empty or unset nothing is removed.

Evidence that does not hold fails the step, naming the entry and the file that refers to it. A glob
that matches nothing in this step is fine (the entries span two install steps); ``--check`` at the
end fails if any declared path exists: a removal that came back.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

KINDS = ("static", "unreferenced", "unimported", "compiled")
SOURCES = (".c", ".cc", ".cpp", ".cxx")


class UserError(Exception):
    """One line on stderr and exit 2. Not sglang_stack.errors': this module runs where only it is copied."""


ARCH = re.compile(r"arch:(!?)(\d+)")


def arch_list(value: str | None = None) -> list[str]:
    """The image's GPU architectures (``9.0a 12.0a``), from the build argument the install step sees."""
    return (os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "") if value is None else value).split()


def unused_here(kind: str, archs: list[str]) -> bool:
    """Whether an ``arch:`` entry's files are for no GPU of ``archs`` (an empty list keeps everything)."""
    match = ARCH.fullmatch(kind)
    if match is None or not archs:
        return False
    majors = {a.split(".")[0] for a in archs}
    return (majors <= {match[2]}) if match[1] else (match[2] not in majors)


def load(path: Path) -> list[dict]:
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("remove", [])
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"{path}: cannot read: {err}") from None
    for i, entry in enumerate(entries):
        for key in ("glob", "evidence", "why"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise UserError(f"{path}: remove[{i}].{key} is missing or empty")
        kind = entry["evidence"]
        if kind not in KINDS and not re.fullmatch(r"env:[A-Z_][A-Z0-9_]*", kind) and not ARCH.fullmatch(kind):
            raise UserError(f"{path}: remove[{i}].evidence {kind!r}: one of {', '.join(KINDS)}, env:NAME or arch:MAJOR")
        if not isinstance(entry.get("keep", []), list):
            raise UserError(f"{path}: remove[{i}].keep must be a list of paths")
        if entry["glob"].startswith("/") or ".." in Path(entry["glob"]).parts:
            raise UserError(f"{path}: remove[{i}].glob {entry['glob']!r} must stay under site-packages")
    return entries


def size_of(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return path.lstat().st_size


def files_under(paths: list[Path]) -> set[Path]:
    out = set()
    for path in paths:
        out.add(path)
        if path.is_dir() and not path.is_symlink():
            out.update(path.rglob("*"))
    return out


def referrers(site: Path, needles: dict[str, bytes], skip: set[Path], imports: bool = False) -> dict[str, Path]:
    """For each needle, one file under ``site`` (not in ``skip``, not pip's RECORD) whose bytes contain it;
    with ``imports``, only in an import statement (``import X``, ``from X import``), not in prose.

    One scan for all needles. Bytes: a match consumes its span, so a needle that starts inside it (a
    shorter name it begins with, or one that overlaps its end) is looked up at every offset of the span;
    a lookahead instead would find them, but scans 25 times slower. Imports: each imported dotted name
    counts for every package above it.
    """
    if not needles:
        return {}
    targets = set(needles.values())
    lengths = {len(n) for n in targets}
    if imports:
        # ``import a.b`` and ``from a import b`` (which names a.b too, when b is a module or package).
        pattern = re.compile(rb"(?:^|\n)[ \t]*(?:from|import)[ \t]+([\w.]+)(?:[ \t]+import[ \t]+\(?[ \t]*([\w \t,]*))?")
    else:
        alternatives = b"|".join(re.escape(n) for n in sorted(targets, key=len, reverse=True))
        pattern = re.compile(b"(" + alternatives + b")")
    found: dict[bytes, Path] = {}
    for here, dirs, names in os.walk(site):
        dirs.sort()
        for name in sorted(names):
            path = Path(here, name)
            if path in skip or name in ("RECORD", "INSTALLER") or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            for match in pattern.finditer(data):
                if imports:
                    candidates = prefixes(match.group(1))
                    candidates += [match.group(1) + b"." + n.strip() for n in (match.group(2) or b"").split(b",") if n.strip()]
                else:
                    candidates = [data[at:at + n] for at in range(*match.span(1)) for n in lengths]
                for needle in candidates:
                    if needle in targets:
                        found.setdefault(needle, path)
    return {key: found[value] for key, value in needles.items() if value in found}


def prefixes(name: bytes) -> list[bytes]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: the packages an import of it loads."""
    parts = name.split(b".")
    return [b".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def dotted(site: Path, path: Path) -> str:
    """The module name of a package directory or a module file under ``site``."""
    return ".".join(path.relative_to(site).with_suffix("").parts if path.suffix == ".py" else path.relative_to(site).parts)


def slim(site: Path, entries: list[dict], archs: list[str] | None = None) -> list[str]:
    """Check every entry's evidence, then remove; returns one line per entry."""
    archs = arch_list() if archs is None else archs
    entries = [e for e in entries if not ARCH.fullmatch(e["evidence"]) or unused_here(e["evidence"], archs)]
    matched = {i: [p for p in sorted(site.glob(e["glob"])) if p.relative_to(site).as_posix() not in e.get("keep", ())]
               for i, e in enumerate(entries)}
    doomed = files_under([p for paths in matched.values() for p in paths])
    lines, problems = [], []
    unreferenced = {}
    for i, entry in enumerate(entries):
        kind = entry["evidence"]
        for path in matched[i]:
            if kind == "static" and not (path.is_file() and path.suffix == ".a"):
                problems.append(f"remove[{i}] {entry['glob']}: {path.relative_to(site)} is not a static archive (.a)")
            elif kind == "unreferenced":
                unreferenced[f"{i}:{path.name}"] = path.name.encode()
            elif kind.startswith("env:"):
                name = kind[4:]
                value = os.environ.get(name, "")
                if not value or not Path(value).is_file() or Path(value).resolve() == path.resolve():
                    problems.append(f"remove[{i}] {entry['glob']}: {name}={value!r} does not name another file that exists")
            elif kind == "compiled" and path.suffix not in SOURCES:
                problems.append(f"remove[{i}] {entry['glob']}: {path.relative_to(site)} is not C or C++ source")
            elif kind == "compiled" and not any(m.is_file() for m in path.parent.glob(f"{glob.escape(path.stem)}.*so")):
                problems.append(f"remove[{i}] {entry['glob']}: {path.relative_to(site)} has no compiled module beside it")
            elif kind == "unimported" and not (path.is_dir() or path.suffix == ".py"):
                problems.append(f"remove[{i}] {entry['glob']}: {path.relative_to(site)} is not a package directory "
                                "or a module")
    for key, where in referrers(site, unreferenced, doomed).items():
        i, name = key.split(":", 1)
        problems.append(f"remove[{i}] {entries[int(i)]['glob']}: {name} is named by {where.relative_to(site)}")
    suites = {f"{i}:{p}": dotted(site, p).encode() for i, e in enumerate(entries) if e["evidence"] == "unimported"
              for p in matched[i]}
    py_skip = doomed | {p for p in site.rglob("*") if p.suffix != ".py"}
    for key, where in referrers(site, suites, py_skip, imports=True).items():
        i, path = key.split(":", 1)
        problems.append(f"remove[{i}] {entries[int(i)]['glob']}: {dotted(site, Path(path))} is imported by {where.relative_to(site)}")
    if problems:
        raise UserError("; ".join(problems))
    for i, entry in enumerate(entries):
        freed = 0
        for path in matched[i]:
            freed += size_of(path)
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        if matched[i]:
            lines.append(f"slim: removed {entry['glob']} ({len(matched[i])} path(s), {freed / 1e6:.1f} MB; {entry['evidence']})")
    return lines


def check(site: Path, entries: list[dict], archs: list[str] | None = None) -> list[str]:
    """Every declared path that exists: a removal that came back (an ``arch:`` entry only where it applies)."""
    archs = arch_list() if archs is None else archs
    entries = [e for e in entries if not ARCH.fullmatch(e["evidence"]) or unused_here(e["evidence"], archs)]
    return [f"{entry['glob']}: {p.relative_to(site)} is back" for entry in entries for p in sorted(site.glob(entry["glob"]))
            if p.relative_to(site).as_posix() not in entry.get("keep", ())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, required=True, help="the site-packages directory")
    parser.add_argument("--declarations", type=Path, required=True, help="docker/slim.toml, as copied into the image")
    parser.add_argument("--check", action="store_true", help="remove nothing; fail if any declared path exists")
    args = parser.parse_args(argv)
    try:
        entries = load(args.declarations)
        if not args.site.is_dir():
            raise UserError(f"--site {args.site}: not a directory")
        if args.check:
            back = check(args.site, entries)
            for line in back:
                print(f"error: slim: {line}", file=sys.stderr)
            print(f"slim: {len(entries)} declared removal(s), {len(back)} back")
            return 1 if back else 0
        for line in slim(args.site, entries):
            print(line)
    except UserError as err:
        print(f"error: slim: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
