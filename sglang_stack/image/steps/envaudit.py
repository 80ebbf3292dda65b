"""Environment audit: every variable we set is declared, and none of ours is read by a dependency by accident.

    python3 -m sglang_stack.image.steps.envaudit --declarations docker/environment.toml \\
        --root /opt/sglang [--root SITE ...] [NAME=WHERE[,WHERE] ...]

The names are every variable the declarations file declares, which the build copies (or, given,
each ``NAME=WHERE``: a variable this project sets and where, ``image``, ``compose`` or ``k8s``). That
the file declares every variable the image's ENV, compose.yaml and the Kubernetes render set is checked
on the host, where those are read (tests/envset.py and tests/image/test_environment.py). Under each
``--root`` (an installed tree: the patched sglang, the venv's site-packages) the audit finds who reads
each name:

- a Python file that holds the name as a string literal (``os.getenv("X")``,
  ``os.environ["X"]``, ``get_bool_env_var("X")``), defines it as one of SGLang's ``envs``
  descriptors (``X = EnvBool(...)`` in ``sglang/srt/environ.py``), or copies every variable of
  its prefix (``key.startswith("SGL_")`` beside ``os.environ``: SGLang turns each ``SGL_*``
  into ``SGLANG_*``, with a warning in every process), or builds it with an f-string around one
  placeholder (``f"TRITON_{binary.upper()}_PATH"`` in Triton's knobs.py reads ``TRITON_PTXAS_PATH``);
- a shared library that holds the name as a NUL-terminated string (NCCL, torch, CUDA).

The rules, each failing the build with the variable and the reading file named:

1. A variable set but not declared in the declarations file is an error.
2. A variable declared for ``sglang-stack`` (our own tools only) must not be read by any
   dependency. This is the defect that made SGLang take the API port: ``SGLANG_PORT``,
   set for our health probe, is what 0.5.9's ``get_open_port()`` hands to the TP message
   queue (``sglang/srt/utils/common.py``).
3. A declared reader found nowhere under a scanned root is a warning (a pin bump that dropped it);
   with ``--strict``, which the build's steps use, an error. Only a reader whose package is under a
   scanned root is checked, so each step checks its own tree's readers.

Exit 0 when clean, 1 with one line per error. Stdlib only: it runs inside the image build.
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

OURS = "sglang-stack"
WHERE = ("image", "compose", "k8s")
NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# A loop that takes every variable of a prefix: `for key, value in os.environ.items():` and, within
# three lines, `if key.startswith("SGL_"):` (SGLang's environ.py turns each into SGLANG_*).
PREFIX_COPY = re.compile(r"""for [^\n]*\bin os\.environ[^\n]*\n(?:[^\n]*\n){0,2}?[^\n]*\.startswith\(\s*["']([A-Z][A-Z0-9]*_)["']\s*\)""")
# Test suites shipped inside packages are not run by the server.
TEST_DIRS = {"test", "tests", "testing"}
# A name built by an f-string around one placeholder: Triton 3.5 reads TRITON_PTXAS_PATH as
# f"TRITON_{binary.upper()}_PATH" (triton/knobs.py), so that literal is nowhere in it.
# The placeholder may hold the other kind of quote (triton 3.8: f"TRITON_{binary.upper().replace('-', '_')}_PATH").
F_NAME = re.compile(r"""\bf(["'])([A-Z][A-Z0-9_]*_)?\{(?:(?!\1)[^{}\n])+\}(_[A-Z0-9_]*)?\1""")
ENVS_FIELD = re.compile(r"^\s+([A-Z_][A-Z0-9_]*)\s*=\s*Env[A-Za-z]*\(", re.M)
LIBRARY = re.compile(r"\.so(\.\d+)*\Z")
# Every NUL-terminated name-like string of a library, then kept if declared: one pass over the bytes is about
# three times faster on libtorch_cuda.so than an alternation of the names, and the lookahead leaves the closing
# NUL to open the next string, so a name right after another string is still found.
C_NAME = re.compile(rb"\x00([A-Z_][A-Z0-9_]*)(?=\x00)")


@dataclass(frozen=True)
class Declaration:
    name: str
    reader: tuple[str, ...]  # the packages meant to read it ("sglang", "nvidia/nccl", ...) or ("sglang-stack",)
    effect: str


@dataclass
class Readers:
    """Where each name is read: name -> ["sglang/srt/utils/common.py:2583", ...]."""

    found: dict[str, list[str]] = field(default_factory=dict)
    packages: set[str] = field(default_factory=set)  # every package seen under the roots

    def add(self, name: str, where: str) -> None:
        self.found.setdefault(name, []).append(where)


def package_of(relpath: str) -> str:
    """The reading package: the top directory, or ``nvidia/X`` for NVIDIA's wheels, which share one."""
    parts = relpath.split("/")
    if parts[0] == "nvidia" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0].split(".")[0] if len(parts) == 1 else parts[0]


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise SystemExit(f"error: {path}: {err}") from None


def load_declarations(path: Path, overlay: Path | None = None) -> dict[str, Declaration]:
    """The declarations file: ``[NAME]`` tables with ``reader`` and ``effect``; a bad entry is one line naming it.

    ``overlay`` is a profile's own file (``profiles/NAME/docker/environment.toml``): what its release reads
    differently. Each of its tables replaces the keys it writes of that variable's declaration; a variable
    it names that the declarations file does not is refused (every name is declared once, for every profile).
    """
    data = _read_toml(path)
    if overlay is not None:
        for name, entry in _read_toml(overlay).items():
            if name not in data or not isinstance(entry, dict) or not isinstance(data[name], dict):
                raise SystemExit(f"error: {overlay}: [{name}]: not a variable {path.name} declares "
                                 "(a profile's file only changes what its release reads)")
            data[name] = {**data[name], **entry}
        path = overlay
    out = {}
    for name, entry in data.items():
        where = f"{path}: [{name}]"
        if not NAME.fullmatch(name) or not isinstance(entry, dict):
            raise SystemExit(f"error: {where}: expected a table named after an environment variable")
        reader = entry.get("reader")
        reader = [reader] if isinstance(reader, str) else reader
        if not reader or not all(isinstance(r, str) and r for r in reader):
            raise SystemExit(f"error: {where}: reader must name who reads it ({OURS!r} for our own tools)")
        effect = entry.get("effect")
        if not isinstance(effect, str) or not effect.strip():
            raise SystemExit(f"error: {where}: effect must say what setting it does")
        unknown = set(entry) - {"reader", "effect"}
        if unknown:
            raise SystemExit(f"error: {where}: unknown key {sorted(unknown)[0]!r} (known: reader, effect)")
        out[name] = Declaration(name, tuple(reader), effect.strip())
    return out


def _scan_python(text: str, names: set[str], relpath: str, readers: Readers) -> None:
    for match in re.finditer(r"""["']([A-Z_][A-Z0-9_]*)["']""", text):
        if match[1] in names:
            readers.add(match[1], f"{relpath}:{text.count(chr(10), 0, match.start()) + 1}")
    if relpath.endswith("srt/environ.py"):  # SGLang's envs descriptors: the attribute is the variable
        for match in ENVS_FIELD.finditer(text):
            if match[1] in names:
                readers.add(match[1], f"{relpath}:{text.count(chr(10), 0, match.start()) + 1}")
    for match in F_NAME.finditer(text):
        prefix, suffix = match[2] or "", match[3] or ""
        if prefix or suffix:
            built = re.compile(re.escape(prefix) + "[A-Z0-9_]+" + re.escape(suffix))
            for name in sorted(n for n in names if built.fullmatch(n)):
                readers.add(name, f"{relpath}:{text.count(chr(10), 0, match.start()) + 1} (f\"{prefix}{{...}}{suffix}\")")
    if "os.environ" in text:
        for match in PREFIX_COPY.finditer(text):
            line = text.count("\n", 0, match.end()) + 1
            for name in names:
                if name.startswith(match[1]):
                    readers.add(name, f"{relpath}:{line} (every {match[1]}* variable)")


def _scan_library(path: Path, names: set[str], relpath: str, readers: Readers) -> None:
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for name in sorted({m[1].decode() for m in C_NAME.finditer(data)} & names):
                readers.add(name, relpath)
    except (OSError, ValueError):  # an empty file cannot be mapped; an unreadable one is not a reader
        pass


def scan(roots: list[Path], names: set[str]) -> Readers:
    """Every reader of ``names`` under ``roots``: Python sources and shared libraries."""
    readers = Readers()
    if not names:
        return readers
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and d not in TEST_DIRS)
            rel_dir = os.path.relpath(dirpath, root)
            for filename in sorted(filenames):
                relpath = filename if rel_dir == "." else f"{rel_dir}/{filename}"
                if rel_dir == "." and not filename.endswith(".py"):
                    continue  # *.pth, *.dist-info records and the like at the top
                readers.packages.add(package_of(relpath))
                path = Path(dirpath, filename)
                if filename.endswith(".py"):
                    try:
                        text = path.read_text(encoding="utf-8", errors="replace")
                    except OSError:
                        continue
                    if any(n in text for n in names) or "startswith" in text or "_{" in text or "}_" in text:
                        _scan_python(text, names, relpath, readers)
                elif LIBRARY.search(filename) and not path.is_symlink():
                    _scan_library(path, names, relpath, readers)
    return readers


def parse_set(items: list[str]) -> dict[str, tuple[str, ...]]:
    """``NAME=image,compose`` -> {NAME: ("image", "compose")}."""
    out = {}
    for item in items:
        name, _, where = item.partition("=")
        places = tuple(w for w in where.split(",") if w)
        if not NAME.fullmatch(name) or not places or set(places) - set(WHERE):
            raise SystemExit(f"error: {item!r}: expected NAME=WHERE[,WHERE] with WHERE one of {', '.join(WHERE)}")
        out[name] = places
    return out


def audit(declared: dict[str, Declaration], set_: dict[str, tuple[str, ...]], readers: Readers,
          declarations: str = "docker/environment.toml") -> tuple[list[str], list[str]]:
    """(errors, warnings), each one line naming the variable and who reads it."""
    errors, warnings = [], []
    for name in sorted(set_):
        where = "+".join(set_[name])
        set_by = "" if where == "declared" else f" (set by {where})"
        found = [r for r in readers.found.get(name, []) if package_of(r) != OURS and not r.startswith("sglang_stack/")]
        decl = declared.get(name)
        if decl is None:
            read = (f"{found[0]} reads it" + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
                    if found else "nothing scanned reads it")
            errors.append(f"{name}{set_by} is not declared in {declarations}; {read}: "
                          "declare who reads it and what it does, or stop setting it")
            continue
        if OURS in decl.reader and found:
            errors.append(f"{name}{set_by} is meant for {OURS} only, but {found[0]} reads it"
                          + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
                          + ": give our setting a name of its own")
            continue
        for package in decl.reader:
            if package != OURS and package in readers.packages and not any(package_of(r) == package for r in found):
                warnings.append(f"{name}: declared as read by {package}, but nothing in {package} holds the name "
                                f"(stale after a pin bump?)")
    return errors, warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.image.steps.envaudit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--declarations", type=Path, default=Path("/opt/sglang-stack/environment.toml"),
                        help="docker/environment.toml (default: where the image build copies it)")
    parser.add_argument("--profile-declarations", type=Path, default=None,
                        help="a profile's docker/environment.toml: what its release reads differently "
                        "(default: environment.profile.toml beside --declarations, where the build copied one)")
    parser.add_argument("--root", type=Path, action="append", required=True, help="an installed tree to scan (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="also list every reader found")
    parser.add_argument("--strict", action="store_true", help="a declared reader that holds no name is an error, not a warning")
    parser.add_argument("variables", nargs="*", help="NAME=WHERE[,WHERE]: what this project sets, and where "
                        "(default: every name the declarations file declares)")
    args = parser.parse_args(argv)
    overlay = args.profile_declarations or args.declarations.with_name("environment.profile.toml")
    declared = load_declarations(args.declarations, overlay if overlay.is_file() else None)
    set_ = parse_set(args.variables) if args.variables else {name: ("declared",) for name in declared}
    readers = scan(args.root, set(set_))
    errors, warnings = audit(declared, set_, readers, args.declarations.name)
    if args.strict:
        errors, warnings = errors + warnings, []
    for name in sorted(set_) if args.verbose else ():
        print(f"envaudit: {name}: " + (", ".join(readers.found.get(name, [])[:6]) or "read by nothing scanned"))
    for line in warnings:
        print(f"envaudit: warning: {line}")
    for line in errors:
        print(f"error: {line}", file=sys.stderr)
    roots = ", ".join(str(r) for r in args.root)
    print(f"envaudit: {len(set_)} variables against {len(declared)} declarations under {roots}: "
          + (f"{len(errors)} error(s)" if errors else "clean"), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
