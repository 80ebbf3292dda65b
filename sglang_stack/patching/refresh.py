"""Refreshing the patch series from an edited tree (rebasing onto a new SGLang release).

``refresh`` regenerates each patch's diff from the tree at ``--sglang-src`` against a
pristine tree, keeping each patch's header, and refuses, writing nothing, an edit that
belongs to no patch, an edit of a shared file beyond what its patches do, or a patch with nothing
left to change.
Standard library only, like ``patches.py``: the image may run it.
"""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

from sglang_stack import atomic
from sglang_stack.errors import UserError
from sglang_stack.patching.patches import CONTEXT_LINES, DEFAULT_PATCHES_DIR, NO_NEWLINE, TARGET_RE, UNAPPLIED, _apply_file, _NoMatch, _read, plan, read_series, tree_version
from sglang_stack.patching.diff import ParsedPatch, _decode, _encode, _lines, parse_patch



def unified_diff(old: str | None, new: str | None, rel: str, context: int = CONTEXT_LINES) -> str:
    """``diff -u`` of one file as the series writes it: a/ and b/ prefixes, \\ No newline markers."""
    a, b = _lines(old or ""), _lines(new or "")
    out = []
    for line in difflib.unified_diff(
        a,
        b,
        fromfile=f"a/{rel}" if old is not None else "/dev/null",
        tofile=f"b/{rel}" if new is not None else "/dev/null",
        n=context,
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n" + NO_NEWLINE + "\n")
    return "".join(out)


def refresh(
    edited_src: Path, pristine_src: Path, patches_dir: Path = DEFAULT_PATCHES_DIR, *, log=None
) -> list[str]:
    """Regenerate every patch's diff from ``edited_src`` against ``pristine_src``; keep each header.

    A file belongs to the patches whose diffs name it (to give a patch a new
    file, add its ``--- a/PATH`` / ``+++ b/PATH`` lines by hand). A file of one
    patch gets its whole edit; a file of several keeps each patch's own change,
    re-diffed in series order, and may not be edited beyond them (a refresh
    cannot tell which patch such an edit belongs to). Fails, writing nothing,
    if an edited file belongs to no patch, if a shared file is edited beyond
    its patches, or if a patch would become empty. Updates the
    series' ``# target:`` line to the pristine tree's version. Returns the
    names of the patches whose text changed.
    """
    say = log or (lambda msg: print(msg, flush=True))
    edited_src, pristine_src, patches_dir = Path(edited_src), Path(pristine_src), Path(patches_dir)
    for tree in (edited_src, pristine_src):
        if not (tree / "sglang").is_dir():
            raise UserError(f"{tree}: no sglang/ package here; pass the directory that contains sglang/")
    series = read_series(patches_dir)
    owner: dict[str, list[str]] = {}
    parsed: list[ParsedPatch] = []
    for patch in series:
        p = parse_patch(_decode(patch.path.read_bytes()), patch.name)
        for fd in p.files:
            owner.setdefault(fd.path, []).append(patch.name)
        parsed.append(p)
    steps = _shared_steps(owner, parsed, pristine_src, edited_src)
    stray = sorted(set(_changed_files(pristine_src, edited_src)) - set(owner))
    if stray:
        raise UserError(
            f"{edited_src}: {', '.join(stray[:5])} {'is' if len(stray) == 1 else 'are'} edited but in no patch; "
            f"add '--- a/PATH' and '+++ b/PATH' lines for it to the patch it belongs to, or undo the edit"
        )
    texts: dict[str, str] = {}
    for patch, p in zip(series, parsed):
        body = "".join(unified_diff(*steps[(patch.name, fd.path)], fd.path) if (patch.name, fd.path) in steps
                       else unified_diff(_read(pristine_src, fd.path), _read(edited_src, fd.path), fd.path)
                       for fd in p.files)
        if not body:
            raise UserError(
                f"{patch.name} no longer changes anything against {pristine_src} (merged upstream?); "
                f"remove it from {patches_dir / 'series'} and run the refresh again"
            )
        header = p.header if p.header.endswith("\n\n") or not p.header else p.header.rstrip("\n") + "\n\n"
        texts[patch.name] = header + body
    # Prove the regenerated series reproduces the edited tree before writing it.
    version = tree_version(pristine_src)
    with tempfile.TemporaryDirectory(prefix="sglang-stack-refresh-") as tmp:
        scratch = Path(tmp)
        for name, text in texts.items():
            (scratch / name).write_bytes(_encode(text))
        series_text = (patches_dir / "series").read_text()
        if TARGET_RE.search(series_text):
            series_text = TARGET_RE.sub(f"# target: sglang {version}", series_text)
        else:
            series_text = f"# target: sglang {version}\n" + series_text
        (scratch / "series").write_text(series_text)
        result = plan(pristine_src, scratch)
        bad = [s for s in result.states if s.state != UNAPPLIED]
        if bad:
            raise UserError(f"the refreshed {bad[0].patch.name} does not apply to {pristine_src}: {bad[0].failures[:1]}")
        for rel in owner:
            if result.changes.get(rel, _read(pristine_src, rel)) != _read(edited_src, rel):
                raise UserError(f"the refreshed series does not reproduce {rel} of {edited_src}; nothing was written")
    changed = []
    for patch in series:
        if _decode(patch.path.read_bytes()) != texts[patch.name]:
            _write_text(patch.path, texts[patch.name])
            changed.append(patch.name)
            say(f"refreshed {patch.name}")
        else:
            say(f"unchanged {patch.name}")
    if (patches_dir / "series").read_text() != series_text:
        _write_text(patches_dir / "series", series_text)
        say(f"series now targets sglang {version}")
    return changed


def _shared_steps(owner: dict[str, list[str]], parsed: list[ParsedPatch], pristine: Path,
                  edited: Path) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """(patch, file) -> (before, after) for each file that several patches change, in series order.

    Each patch's hunks are applied to what the patches before it made of the pristine file;
    the last state must be the edited file.
    """
    steps: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for rel, names in owner.items():
        if len(names) < 2:
            continue
        content = _read(pristine, rel)
        for p in parsed:
            for fd in (f for f in p.files if f.path == rel):
                try:
                    after, _ = _apply_file(content, fd, reverse=False)
                except _NoMatch as miss:
                    raise UserError(f"{rel} is changed by {' and '.join(names)}; {p.name}'s part of it no longer "
                                    f"applies to {pristine} ({miss.reason}): rebase that patch by hand") from None
                steps[(p.name, rel)] = (content, after)
                content = after
        if content != _read(edited, rel):
            raise UserError(f"{rel} is changed by {' and '.join(names)}, and {edited} changes it beyond what they do: "
                            "a refresh cannot tell which patch that edit belongs to; edit the patch by hand")
    return steps


def _write_text(path: Path, text: str) -> None:
    atomic.write(path, _encode(text))


def _changed_files(pristine: Path, edited: Path) -> list[str]:
    """Files under sglang/ that differ between two trees (added, removed or changed); caches ignored."""

    def listing(root: Path) -> dict[str, Path]:
        return {
            p.relative_to(root).as_posix(): p
            for p in (root / "sglang").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith((".pyc", ".rej", ".orig"))
        }

    a, b = listing(pristine), listing(edited)
    out = []
    for rel in sorted(set(a) | set(b)):
        pa, pb = a.get(rel), b.get(rel)
        if pa is None or pb is None or pa.stat().st_size != pb.stat().st_size or pa.read_bytes() != pb.read_bytes():
            out.append(rel)
    return out


