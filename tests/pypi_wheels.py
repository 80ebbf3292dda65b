"""The real PyPI wheels that requirements.lock.txt pins (``sglang_stack.image.size.locked_wheel``), laid out as pip would."""

from __future__ import annotations

import zipfile
from pathlib import Path


def unpack(wheel: Path, site: Path) -> Path:
    """Lay a wheel out as pip would in site-packages (files and .dist-info), without installing anything."""
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site
