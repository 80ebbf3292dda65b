"""One writer of a lock at a time: `invoke bump` and `invoke lock` hold an exclusive ``flock`` for their whole run.

Two bumps of one profile at once both read versions.lock, both resolve and both write: each says done, and the one
that wrote first is lost. The lock is taken on the directory that holds versions.lock (not on the file: every write
replaces it, and a lock on the replaced file holds nothing), so nothing is written to hold it. The kernel drops it
when the process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sglang_stack.errors import UserError
from sglang_stack.lock.profiles import display

_held: dict[Path, int] = {}  # locked directory -> depth: bump's own resolve runs inside bump's hold


@contextmanager
def writer(lock_path: Path) -> Iterator[None]:
    """Hold the writer lock of ``lock_path``'s profile, or refuse in one line."""
    key = Path(lock_path).resolve().parent
    if _held.get(key):
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    try:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise UserError(f"{display(Path(lock_path))}: cannot hold its lock ({err.strerror or err}): nothing was "
                        "changed") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{display(Path(lock_path))}: another `invoke bump` or `invoke lock` is rewriting it now: "
                            "wait for it to finish, then run this again (nothing was changed)") from None
        _held[key] = 1
        try:
            yield
        finally:
            _held.pop(key, None)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
