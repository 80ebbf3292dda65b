"""The patch series in ``patches/``: read it and apply it fail-closed (``refresh`` rebases it, on the host).

Runs on the host (``invoke patch``) and inside the image's SGLang stage, so it
uses the standard library only.

The series is applied by a strict unified-diff applier written here rather
than by GNU ``patch``: ``invoke patch-check`` must work on a host that has
only Python and PyPI (``patch`` is an optional package on Debian and Ubuntu),
and the applier needs to know, before it writes a byte, whether every hunk
of every patch matches exactly (no fuzz), was already applied, or conflicts.
Every new file content is computed in memory first; only when the whole
series matches is anything written, file by file through a temporary file
and ``os.replace``. tests/patching/test_patches.py checks that the result is
byte-identical to GNU ``patch -p1 --fuzz=0``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sglang_stack import ROOT
from sglang_stack.errors import UserError, read_text, run_main
from sglang_stack.patching.diff import (
    FileDiff,
    Hunk,
    ParsedPatch,
    _decode,
    _encode,
    _lines,
    parse_patch,
)

DEFAULT_PATCHES_DIR = ROOT / "patches"
CONTEXT_LINES = 3  # lines of context `--refresh` writes around each change, as diff -u does
NO_NEWLINE = "\\ No newline at end of file"
# How far (in lines) a hunk may sit from where its header says and still apply; the
# offset is logged, and `--strict` (the image build, `invoke patch-check`) allows none.
# A few lines absorb a small local edit above a hunk, such as an added import. A hunk
# further away means the file is another revision of the code than the one the patch
# was written against, so it is refused: rebase the series rather than patch code
# nobody has read. (GNU patch searches the whole file.)
MAX_OFFSET = 5
# `# target: sglang` in patches/series: the release the series is made for.
TARGET_RE = re.compile(r"^#\s*target:\s*sglang\s+(\S+)\s*$", re.M)

UNAPPLIED = "unapplied"
APPLIED = "applied"
CONFLICT = "conflict"


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str


def read_series(patches_dir: Path) -> list[Patch]:
    """The patches named by ``patches_dir/series``, in order.

    One file name per line; blank lines and ``#`` comments are ignored. A name is a file beside the series,
    or else of the checkout's ``patches/``: a profile's series (``profiles/NAME/patches/series``) names the
    patch files every profile shares, one file each.
    """
    series = patches_dir / "series"
    if not series.is_file():
        raise UserError(f"{series}: missing (the ordered list of patches)")
    out = []
    for lineno, raw in enumerate(read_text(series).splitlines(), 1):
        name = raw.split("#", 1)[0].strip()
        if not name:
            continue
        path = patches_dir / name
        if not path.is_file():
            path = DEFAULT_PATCHES_DIR / name
        if "/" in name or not path.is_file():
            raise UserError(f"{series}:{lineno}: {name!r} is not a patch file in {patches_dir}")
        out.append(Patch(name, path, hashlib.sha256(path.read_bytes()).hexdigest()))
    return out


def series_target(patches_dir: Path) -> str | None:
    """The SGLang version the series is made for (``# target: sglang X`` in ``series``), if it says."""
    series = patches_dir / "series"
    match = TARGET_RE.search(series.read_text()) if series.is_file() else None
    return match.group(1) if match else None


def touched_files(patch_path: Path) -> list[str]:
    """Paths (relative to the tree, ``sglang/srt/...``) that one patch changes, in patch order."""
    path = Path(patch_path)
    return [f.path for f in parse_patch(_decode(path.read_bytes()), path.name).files]


# --------------------------------------------------------------------------
# Applying, in memory
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """Why one hunk does not apply."""

    patch: str
    path: str
    hunk: Hunk | None  # None: the whole file (missing, or already there)
    reason: str

    def __str__(self) -> str:
        if self.hunk is None:
            return f"{self.patch}: {self.path}: {self.reason}"
        return (
            f"{self.patch}: {self.path} hunk #{self.hunk.index} ({self.hunk.header}, "
            f"line {self.hunk.patch_line} of the patch): {self.reason}"
        )


class _NoMatch(Exception):
    def __init__(self, hunk: Hunk | None, reason: str):
        super().__init__(reason)
        self.hunk = hunk
        self.reason = reason


def _find(lines: list[str], want: list[str], expected: int, lo: int, max_offset: int | None) -> int | None:
    """Where ``want`` occurs in ``lines`` at or after ``lo``, nearest to ``expected``; exact lines only.

    ``max_offset`` bounds the distance from ``expected`` (None: anywhere in the file).
    """
    hi = len(lines) - len(want)
    reach = max(expected - lo, hi - expected) if max_offset is None else max_offset
    for dist in range(0, max(reach, 0) + 1):
        for pos in (expected - dist, expected + dist) if dist else (expected,):
            if lo <= pos <= hi and lines[pos : pos + len(want)] == want:
                return pos
    return None


def _visible(line: str) -> str:
    """A line with its whitespace made visible: a space is shown as ·, a tab as →."""
    return repr(line.removesuffix("\n").replace(" ", "\u00b7").replace("\t", "\u2192"))


def _whitespace_difference(got: str, expect: str) -> str | None:
    """What differs between two lines that differ only in whitespace; None if more differs."""
    if got.split() != expect.split():
        return None
    if got.rstrip("\n") == expect.rstrip("\n"):
        return "only the newline at the end of the file"
    if got.rstrip("\r\n") == expect.rstrip("\r\n"):
        return "only a carriage return (CRLF line end)"
    if got.rstrip() == expect.rstrip():
        return "only trailing whitespace"
    return "only whitespace (indentation, or tabs against spaces)"


def _first_difference(lines: list[str], want: list[str], at: int) -> str:
    for k, expect in enumerate(want):
        got = lines[at + k]
        if got != expect:
            what = _whitespace_difference(got, expect)
            if what:
                return (
                    f"line {at + k + 1} differs from the patch in {what} (· is a space, → a tab): "
                    f"the file has {_visible(got)}, the patch expects {_visible(expect)}"
                )
            return f"line {at + k + 1} is {got.rstrip()!r}, the patch expects {expect.rstrip()!r}"
    return "the context is not there"


def _mismatch(lines: list[str], want: list[str], expected: int, lo: int) -> str:
    """Why a hunk's lines are not within MAX_OFFSET of ``expected``."""
    expected = max(expected, 0)
    first, last = expected + 1, expected + len(want)
    if last > len(lines):
        where = f"line {first}" if len(want) <= 1 else f"lines {first}-{last}"
        return f"the file has {len(lines)} lines, but this hunk expects {where}"
    elsewhere = _find(lines, want, expected, lo, None) if want else None
    if elsewhere is not None:
        return (
            f"its lines are {elsewhere - expected:+d} lines from where its header says, beyond the "
            f"{MAX_OFFSET}-line limit: this file is another revision than the patch was made for; "
            f"rebase the series (docs/patches.md)"
        )
    return f"does not match (no fuzz): {_first_difference(lines, want, expected)}"


def _apply_file(content: str | None, fd: FileDiff, reverse: bool) -> tuple[str | None, list[int]]:
    """New content of one file (None: deleted) and each hunk's offset; raises _NoMatch."""
    creates = fd.old_path is None if not reverse else fd.new_path is None
    deletes = fd.new_path is None if not reverse else fd.old_path is None
    if creates:
        if content is not None:
            raise _NoMatch(None, "the patch creates this file, but it already exists")
        content = ""
    elif content is None:
        raise _NoMatch(None, "file not found in the tree")
    lines = _lines(content)
    offsets: list[int] = []
    delta = 0
    lo = 0
    for hunk in fd.hunks:
        old, new = hunk.side(reverse), hunk.side(not reverse)
        start = (hunk.new_start if reverse else hunk.old_start) - 1
        if not old:  # pure insertion: the header names the line after which it goes
            start += 1
        expected = start + delta
        pos = _find(lines, old, expected, lo, MAX_OFFSET) if old else (expected if lo <= expected <= len(lines) else None)
        if pos is None:
            raise _NoMatch(hunk, _mismatch(lines, old, expected, lo))
        offsets.append(pos - expected)
        lines[pos : pos + len(old)] = new
        lo = pos + len(new)
        delta += len(new) - len(old) + (pos - expected)
    result = "".join(lines)
    if deletes:
        if result:
            raise _NoMatch(None, "the patch deletes this file, but its content differs")
        return None, offsets
    return result, offsets


@dataclass
class PatchState:
    patch: Patch
    parsed: ParsedPatch
    state: str  # UNAPPLIED, APPLIED or CONFLICT
    failures: list[Failure] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)  # "path hunk #n: +k lines"


@dataclass
class Plan:
    """What applying the series to a tree would do. Nothing is written to build it."""

    sglang_src: Path
    states: list[PatchState]
    changes: dict[str, str | None]  # path -> new content (None: delete), for a series that applies

    def by_state(self, state: str) -> list[PatchState]:
        return [s for s in self.states if s.state == state]


def _read(sglang_src: Path, rel: str) -> str | None:
    path = sglang_src / rel
    return _decode(path.read_bytes()) if path.is_file() else None


def inside_package(sglang_src: Path, rel: str, patch: str) -> None:
    """A patch changes files of the ``sglang`` package only: ``/opt/sglang`` is on the image's
    ``sys.path``, so a ``sitecustomize.py`` beside the package would run in every Python process."""
    parts = PurePosixPath(rel).parts
    if (not parts or parts[0] != "sglang" or len(parts) < 2 or ".." in parts or rel.startswith("/") or "\\" in rel
            or "\0" in rel):
        raise UserError(f"{patch}: {rel!r}: a patch may change files under sglang/ only; nothing was changed")
    target = (Path(sglang_src) / rel).resolve()
    if not target.is_relative_to((Path(sglang_src) / "sglang").resolve()):
        raise UserError(f"{patch}: {rel!r} leads outside sglang/ (to {target}) through a symbolic link; nothing was changed")


def plan(sglang_src: Path, patches_dir: Path) -> Plan:
    """Check every patch of the series against the tree, in order, without writing anything.

    Each patch is ``unapplied`` (every hunk matches exactly), ``applied`` (every
    hunk matches in reverse) or ``conflict``. Later patches see the content the
    earlier ones would produce.
    """
    sglang_src = Path(sglang_src)
    series = read_series(patches_dir)
    if not series:  # a profile whose release upstream fixed needs none: nothing to apply, nothing to check
        return Plan(sglang_src, [], {})
    parsed_series = [parse_patch(_decode(patch.path.read_bytes()), patch.name) for patch in series]
    for patch, parsed in zip(series, parsed_series):
        for fd in parsed.files:
            inside_package(sglang_src, fd.path, patch.name)
    # Whether each patch is applied: undone from the last patch back, so a patch sees its file
    # as it was right after it, also where a later patch changed the same file.
    reverse_ok: dict[str, bool] = {}
    undone: dict[str, str | None] = {}
    for patch, parsed in zip(reversed(series), reversed(parsed_series)):
        try:
            back = {fd.path: _apply_file(undone[fd.path] if fd.path in undone else _read(sglang_src, fd.path), fd,
                                         reverse=True)[0] for fd in parsed.files}
        except _NoMatch:
            reverse_ok[patch.name] = False
        else:
            reverse_ok[patch.name] = True
            undone.update(back)
    work: dict[str, str | None] = {}
    states: list[PatchState] = []
    for patch, parsed in zip(series, parsed_series):

        def current(rel):
            return work[rel] if rel in work else _read(sglang_src, rel)

        forward: dict[str, str | None] = {}
        failures: list[Failure] = []
        offsets: list[str] = []
        for fd in parsed.files:
            try:
                forward[fd.path], shifts = _apply_file(current(fd.path), fd, reverse=False)
                offsets += [
                    f"{fd.path} hunk #{h.index}: {s:+d} lines" for h, s in zip(fd.hunks, shifts) if s
                ]
            except _NoMatch as miss:
                failures.append(Failure(patch.name, fd.path, miss.hunk, miss.reason))
        applied = reverse_ok[patch.name]
        if not failures and applied:
            failures.append(
                Failure(patch.name, parsed.files[0].path, None, "matches both unapplied and applied; widen its context")
            )
            states.append(PatchState(patch, parsed, CONFLICT, failures))
        elif not failures:
            work.update(forward)
            states.append(PatchState(patch, parsed, UNAPPLIED, offsets=offsets))
        elif applied:
            states.append(PatchState(patch, parsed, APPLIED))
        else:
            states.append(PatchState(patch, parsed, CONFLICT, failures))
    return Plan(sglang_src, states, work)


def check_tree(sglang_src: Path, patches_dir: Path) -> str:
    """The tree's SGLang version; a ``UserError`` if it is not an sglang tree or not the series' target."""
    sglang_src = Path(sglang_src)
    if not (sglang_src / "sglang").is_dir():
        hint = f" (pass its parent, {sglang_src.parent})" if sglang_src.name == "sglang" else ""
        raise UserError(f"{sglang_src}: no sglang/ package here{hint}; pass the directory that contains sglang/")
    version = tree_version(sglang_src)
    target = series_target(patches_dir)
    if target and version != target:
        raise UserError(
            f"{sglang_src}: this is sglang {version}, but {patches_dir / 'series'} targets sglang {target}; "
            f"rebase the series onto {version} first (docs/patches.md, 'Rebasing')",
            code=1,
        )
    return version


def tree_version(sglang_src: Path) -> str:
    """The version of an unpacked sglang tree: ``sglang/_version.py``, else its dist-info, else ``unknown``."""
    path = sglang_src / "sglang" / "_version.py"
    if path.is_file():
        match = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", path.read_text(), re.M)
        if match:
            return match.group(1)
    for meta in sorted(sglang_src.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def apply_series(
    sglang_src: Path,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    *,
    quiet: bool = False,
    dry_run: bool = False,
    strict: bool = False,
    log=None,
) -> list[Patch]:
    """Apply the whole series to ``sglang_src`` (the directory holding ``sglang/``), or nothing.

    Logs each patch's name and sha256. Raises ``UserError`` (the tree is then
    untouched) if a patch does not apply (naming patch, file and hunk), if the
    series is already applied or partly applied, or if the tree is another
    SGLang version than the series targets. A hunk may sit up to ``MAX_OFFSET``
    lines from where its header says (logged); ``strict`` refuses any offset.
    ``dry_run`` checks everything and writes nothing.
    """
    say = (lambda *_: None) if quiet else (log or (lambda msg: print(msg, flush=True)))
    sglang_src = Path(sglang_src)
    patches_dir = Path(patches_dir)
    version = check_tree(sglang_src, patches_dir)
    result = plan(sglang_src, patches_dir)
    n = len(result.states)
    conflicts = result.by_state(CONFLICT)
    applied = result.by_state(APPLIED)
    if conflicts:
        first = conflicts[0].failures[0]
        more = sum(len(s.failures) for s in conflicts) - 1
        tail = f" (and {more} more failing hunk{'s' if more != 1 else ''})" if more else ""
        for state in conflicts:
            for failure in state.failures:
                say(f"does not apply: {failure}")
        raise UserError(f"patch {first}{tail}; {sglang_src} is untouched", code=1)
    if applied and len(applied) == n:
        raise UserError(
            f"{sglang_src}: the series is already applied (all {n} patches: "
            f"{', '.join(s.patch.name for s in applied)}); nothing was changed",
            code=1,
        )
    if applied:
        todo = [s.patch.name for s in result.states if s.state == UNAPPLIED]
        raise UserError(
            f"{sglang_src}: the series is partly applied ({', '.join(s.patch.name for s in applied)} already in, "
            f"{', '.join(todo)} not); start again from a fresh unpack of the wheel; nothing was changed",
            code=1,
        )
    if not n:
        say(f"{patches_dir / 'series'}: names no patch: sglang {version} is applied as released")
    offsets = [o for s in result.states for o in s.offsets]
    if strict and offsets:
        raise UserError(
            f"the series applies only at offsets ({'; '.join(offsets)}); run `invoke patch --refresh` "
            f"to make it exact for sglang {version}; {sglang_src} is untouched",
            code=1,
        )
    for state in result.states:
        files = ", ".join(f.path for f in state.parsed.files)
        say(f"patch {state.patch.name} sha256={state.patch.sha256} ({files})")
        for offset in state.offsets:
            say(f"  offset: {offset}")
    if dry_run:
        say(f"dry run: all {n} patches apply to sglang {version} at {sglang_src}; nothing written")
        return [s.patch for s in result.states]
    _write_all(sglang_src, result.changes)
    say(f"applied {n} patches to sglang {version} at {sglang_src}")
    return [s.patch for s in result.states]


def _write_all(root: Path, changes: dict[str, str | None]) -> None:
    """Write every changed file through a temporary file, then rename them all into place."""
    staged: list[tuple[Path, Path]] = []
    try:
        for rel, content in sorted(changes.items()):
            target = root / rel
            if content is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as out:
                out.write(_encode(content))
            mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
            os.chmod(tmp, mode)
            staged.append((Path(tmp), target))
    except OSError as err:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write into {root}: {err}; nothing was changed") from None
    for tmp, target in staged:
        os.replace(tmp, target)
    for rel, content in changes.items():
        if content is None:
            (root / rel).unlink(missing_ok=True)


# --------------------------------------------------------------------------
# Unpacking the wheel
# --------------------------------------------------------------------------


def unpack_wheel(wheel: Path, dest: Path) -> Path:
    """Unpack a wheel into ``dest`` (created; must be empty), as ``pip install --target`` lays it out."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise UserError(f"{dest}: not empty; unpack into a new directory")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest)
    except zipfile.BadZipFile as err:
        raise UserError(f"{wheel}: not a wheel (zip): {err}") from None
    return dest


# --------------------------------------------------------------------------
# Command line (the image runs `apply`)
# --------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m sglang_stack.patching.patches",
        description="Apply the patch series to an unpacked sglang tree, all or nothing (`invoke patch --refresh` "
        "rebases the series on the host).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    apply = sub.add_parser("apply", help="apply the series (fail closed: any failure leaves the tree untouched)")
    apply.add_argument("--dry-run", action="store_true", help="check every patch, write nothing")
    apply.add_argument("--strict", action="store_true", help=f"fail on any offset (without it, a hunk may sit up to {MAX_OFFSET} lines from its header's line)")
    apply.add_argument("--sglang-src", required=True, type=Path, help="directory that contains sglang/")
    apply.add_argument("--patches-dir", type=Path, default=DEFAULT_PATCHES_DIR, help="default: %(default)s")
    args = parser.parse_args(argv)
    apply_series(args.sglang_src, args.patches_dir, dry_run=args.dry_run, strict=args.strict)
    return 0


if __name__ == "__main__":
    run_main(main)
