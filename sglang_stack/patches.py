"""The patch series in ``patches/``: read it, apply it fail-closed, refresh it.

Runs on the host (``invoke patch``) and inside the image's SGLang stage, so it
uses the standard library only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str


def read_series(patches_dir: Path) -> list[Patch]:
    """The patches named by ``patches_dir/series``, in order.

    One file name per line; blank lines and ``#`` comments are ignored.
    """
    series = patches_dir / "series"
    if not series.is_file():
        raise UserError(f"{series}: missing (the ordered list of patches)")
    out = []
    for lineno, raw in enumerate(series.read_text().splitlines(), 1):
        name = raw.split("#", 1)[0].strip()
        if not name:
            continue
        path = patches_dir / name
        if "/" in name or not path.is_file():
            raise UserError(f"{series}:{lineno}: {name!r} is not a patch file in {patches_dir}")
        out.append(Patch(name, path, hashlib.sha256(path.read_bytes()).hexdigest()))
    return out
