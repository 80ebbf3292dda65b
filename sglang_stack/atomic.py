"""Atomic file writes: readers see the old file or the new one, never half of either.

Standard library only: the image's SGLang stage uses it (through ``patches``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it into place."""
    write_all({Path(path): data})


def write_all(files: dict[Path, str | bytes]) -> None:
    """Write a set of files whole or not at all: every one to a temporary file beside it first, then,
    once all are on disk, each renamed into place (a rename needs no space, so a full disk fails the
    set before any file changes). A failure names the file it was writing; no temporary file stays."""
    temps: list[tuple[str, Path]] = []
    current = None
    try:
        for path, data in files.items():
            current = path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data.encode() if isinstance(data, str) else data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
        for tmp, path in temps:
            current = path
            os.replace(tmp, path)
        temps = []
    except OSError as err:
        if err.filename is None and current is not None:
            raise OSError(err.errno, err.strerror, str(current)) from None
        raise
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def check_creatable(path: Path, flag: str = "--out") -> None:
    """Refuse, creating nothing, a directory ``path`` that could not be made or written: a file in its way, no permission.

    ``prepare_dir`` creates it later, once the run is sure to start, so a run
    refused for another reason leaves no empty directory behind.
    """
    from sglang_stack.errors import UserError

    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        where = "exists and" if probe == path else f"is under {probe}, which"
        raise UserError(f"{flag} {path}: {where} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot write there ({probe}: permission denied)")


def out_path(value: str | Path, flag: str = "--out") -> Path:
    """A user's output directory as a Path; an empty one is refused (``Path("")`` is the current directory)."""
    from sglang_stack.errors import UserError

    if not str(value).strip():
        raise UserError(f"{flag} {str(value)!r}: empty: name a directory (an empty path would write into the current one)")
    return Path(value)


def prepare_dir(path: Path, flag: str = "--out", need: int = 1 << 20) -> Path:
    """Create ``path`` (and its parents) and prove it writable, before any work that will write there.

    A long run must not learn at its end that its output cannot be written: a path under a
    file, an unwritable parent, a read-only mount or less free space than ``need`` bytes is one
    ``UserError`` naming the flag and the path, at once.
    """
    from sglang_stack.errors import UserError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
        free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
    except OSError as err:
        raise UserError(f"{flag} {path}: cannot write there ({err.strerror or err.__class__.__name__}"
                        f"{': ' + err.filename if err.filename and str(err.filename) != str(path) else ''})") from None
    if free < need:
        raise UserError(f"{flag} {path}: only {free // 1024} KiB free there, and this writes up to "
                        f"{need // 1024} KiB: free some space, or write elsewhere")
    return path

