"""One writer of a lock at a time: `invoke bump` and `invoke lock` hold an exclusive ``flock`` for their whole run.

Two bumps of one profile at once both read versions.lock, both resolve and both write: each says done, and the one
that wrote first is lost. The lock is a file under ``build/locks/`` (not versions.lock itself: every write replaces
that file, and a lock on the replaced file holds nothing). The kernel drops it when the process ends, however it
ends, so a killed run leaves nothing to clean up.
"""

from __future__ import annotations

import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.lock.profiles import display

LOCKS = ROOT / "build" / "locks"
_held: dict[str, int] = {}  # lock name -> depth: bump's own resolve runs inside bump's hold


def name_of(lock_path: Path) -> str:
    path = Path(lock_path).resolve()
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return str(where).strip("/").replace("/", "_")


@contextmanager
def writer(lock_path: Path, locks: Path = LOCKS) -> Iterator[None]:
    """Hold ``lock_path``'s writer lock, or refuse in one line naming the process that holds it."""
    key = name_of(lock_path)
    if _held.get(key):
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    try:
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(f"{locks}: cannot hold the lock for {lock_path} ({err.strerror or err}): nothing was "
                        "changed") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise UserError(f"{display(Path(lock_path))}: {holder} is rewriting it now: wait for it to finish, then run this again "
                            "(nothing was changed)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({' '.join(os.path.basename(a) for a in sys.argv[:3])})".encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            _held.pop(key, None)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
