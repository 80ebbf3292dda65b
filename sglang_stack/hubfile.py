"""The hash a Hugging Face Hub repository records for a file: the LFS sha256, or the git blob id of a file kept in
git. Standard library only: the image's model prefetch step (``image/steps/prefetch.py``) checks with it too."""

from __future__ import annotations

import hashlib
from pathlib import Path


def digest(path: Path, sha256: str = "", git_sha1: str = "") -> str:
    """The hash of ``path`` of the kind the Hub recorded: sha256 where it gave one, else the git blob id."""
    if sha256:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(usedforsecurity=False)
        h.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(8 << 20), b""):
            h.update(block)
    return h.hexdigest()
