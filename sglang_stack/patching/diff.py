"""Unified diffs, as the patch series holds them: parsed into files and hunks, strictly.

Standard library only: the image's SGLang stage runs it. A malformed diff is a
``UserError`` naming the patch and line. Text is split on ``\\n`` only and kept
byte-exact (``_decode``/``_encode``), so what is applied is what the file says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sglang_stack.errors import UserError

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def _lines(text: str) -> list[str]:
    """Split on \\n only, keeping it (str.splitlines would also split on \\f, which Python source may hold)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based within its file
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str  # what follows the closing @@ (the enclosing def/class), may be empty
    lines: tuple[str, ...]  # body lines with their " ", "-", "+" prefix; a "\\" line marks a missing newline
    patch_line: int  # line of the @@ header in the .patch file

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@{self.section}".rstrip()

    def side(self, new: bool) -> list[str]:
        """The lines this hunk expects (old side) or leaves (new side)."""
        keep = "+" if new else "-"
        out: list[str] = []
        last_kind = None
        for line in self.lines:
            kind = line[:1]
            if kind == "\\":
                if last_kind in (" ", keep) and out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]
                continue
            last_kind = kind
            if kind in (" ", keep):
                out.append(line[1:])
        return out


@dataclass(frozen=True)
class FileDiff:
    old_path: str | None  # None: the patch creates the file
    new_path: str | None  # None: the patch deletes the file
    hunks: tuple[Hunk, ...]
    patch_line: int

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


@dataclass(frozen=True)
class ParsedPatch:
    name: str
    header: str  # the description above the first diff, kept verbatim by --refresh
    files: tuple[FileDiff, ...]


def _diff_path(raw: str, name: str, lineno: int) -> str | None:
    value = raw[4:].split("\t", 1)[0].strip()
    if value == "/dev/null":
        return None
    parts = value.split("/")
    if parts[0] in ("a", "b") and len(parts) > 1:
        parts = parts[1:]  # git-style a/ and b/ prefixes: applied as -p1
    rel = "/".join(parts)
    if not rel or rel.startswith("/") or ".." in parts:
        raise UserError(f"{name}:{lineno}: file name {value!r} must be relative to the tree (a/sglang/...)")
    return rel


def parse_patch(text: str, name: str) -> ParsedPatch:
    """Parse a unified diff. A malformed one is a ``UserError`` naming the patch and line."""
    lines = _lines(text)
    files: list[FileDiff] = []
    header_end = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if header_end is None:
                header_end = i
            start = i + 1
            old = _diff_path(line.rstrip("\n"), name, i + 1)
            new = _diff_path(lines[i + 1].rstrip("\n"), name, i + 2)
            if old is None and new is None:
                raise UserError(f"{name}:{i + 1}: both sides are /dev/null")
            i += 2
            hunks: list[Hunk] = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _parse_hunk(lines, i, name, new or old or "", len(hunks) + 1)
                hunks.append(hunk)
            files.append(FileDiff(old, new, tuple(hunks), start))
            continue
        if line.startswith("@@") and files:
            raise UserError(f"{name}:{i + 1}: hunk outside a file diff (a line is missing or extra above it)")
        i += 1
    if not files:
        raise UserError(f"{name}: no unified diff in this file (no '--- a/...' / '+++ b/...' pair)")
    paths = [f.path for f in files]
    dup = sorted({p for p in paths if paths.count(p) > 1})
    if dup:
        raise UserError(f"{name}: {dup[0]} appears twice; merge its hunks into one file diff")
    return ParsedPatch(name, "".join(lines[:header_end]), tuple(files))


def _parse_hunk(lines: list[str], i: int, name: str, path: str, index: int) -> tuple[Hunk, int]:
    match = HUNK_RE.match(lines[i].rstrip("\n"))
    if not match:
        raise UserError(f"{name}:{i + 1}: malformed hunk header {lines[i].rstrip()!r} in {path}")
    old_start, old_len, new_start, new_len = (
        int(match.group(1)),
        int(match.group(2) if match.group(2) is not None else 1),
        int(match.group(3)),
        int(match.group(4) if match.group(4) is not None else 1),
    )
    header_line = i + 1
    body: list[str] = []
    need_old, need_new = old_len, new_len
    i += 1
    while need_old > 0 or need_new > 0:
        if i >= len(lines):
            raise UserError(
                f"{name}:{header_line}: hunk #{index} of {path} ends early: "
                f"{need_old} old and {need_new} new lines still expected"
            )
        line = lines[i]
        kind = line[:1]
        if line in ("\n", ""):  # an empty context line whose leading space was stripped
            line, kind = " " + line, " "
        if kind == " ":
            need_old, need_new = need_old - 1, need_new - 1
        elif kind == "-":
            need_old -= 1
        elif kind == "+":
            need_new -= 1
        elif kind == "\\":
            body.append(line)
            i += 1
            continue
        else:
            raise UserError(
                f"{name}:{i + 1}: hunk #{index} of {path} is corrupt: line starts with {kind!r}, "
                f"not ' ', '-' or '+' ({need_old} old and {need_new} new lines still expected)"
            )
        if need_old < 0 or need_new < 0:
            raise UserError(f"{name}:{header_line}: hunk #{index} of {path} has more lines than its header says")
        body.append(line)
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        body.append(lines[i])
        i += 1
    section = match.group(5)
    return Hunk(index, old_start, old_len, new_start, new_len, section, tuple(body), header_line), i
