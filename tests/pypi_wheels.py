"""The real PyPI wheels that requirements.lock.txt pins, fetched by URL and checked against the lock's hashes.

PyPI's JSON API names each file's URL and sha256; the file is fetched through
``sglang_stack.fetch`` (hash-verified, cached in ~/.cache/sglang-stack) and accepted only if
its sha256 is one the lock allows for that pin, so a test runs on the bytes the image installs.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from urllib.parse import urljoin

from sglang_stack.image import lock as lockmod
from sglang_stack.image.pins import read_pins

def locked_wheel(name: str) -> Path:
    """The x86-64 Linux (or pure-Python) cp312/abi3 wheel of ``name`` at its locked version, as a local file."""
    import requests

    from sglang_stack.fetch import fetch
    from sglang_stack.image.size import image_tags, pick, release_files

    problems: list[str] = []
    pin = next(p for p in read_pins(lockmod.REQUIREMENTS_PATH, problems) if p.name == name)
    url, entries = release_files(requests.Session(), "https://pypi.org/simple", name, pin.version)
    entry = pick([e for e in entries if e["digests"]["sha256"] in pin.hashes], image_tags("3.12"))
    assert entry is not None, f"no wheel of {name} {pin.version} for the image's platform among the lock's hashes"
    return fetch(urljoin(url, entry["url"]), entry["digests"]["sha256"])  # a mirror may answer with relative URLs


def unpack(wheel: Path, site: Path) -> Path:
    """Lay a wheel out as pip would in site-packages (files and .dist-info), without installing anything."""
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site
