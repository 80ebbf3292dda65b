"""Atomic file writes: readers see the old file or the new one, never half of either.

Standard library only: the image's SGLang stage uses it (through ``patches``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
