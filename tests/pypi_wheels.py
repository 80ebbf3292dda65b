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

    problems: list[str] = []
    pin = next(p for p in read_pins(lockmod.REQUIREMENTS_PATH, problems) if p.name == name)
    # The release's own document, or (where the index answers 404 for it) the project's.
    url = f"https://pypi.org/pypi/{name}/{pin.version}/json"
    resp = requests.get(url, timeout=30)
    if resp.status_code == 200:
        entries = resp.json()["urls"]
    else:
        url = f"https://pypi.org/pypi/{name}/json"
        entries = requests.get(url, timeout=30).json()["releases"][pin.version]
    for entry in entries:
        filename, sha = entry["filename"], entry["digests"]["sha256"]
        if not filename.endswith(".whl") or sha not in pin.hashes:
            continue
        glibc_x86 = "manylinux" in filename and "x86_64" in filename  # the image is glibc (Ubuntu), not musl
        if (glibc_x86 or filename.endswith("-none-any.whl")) and ("cp312" in filename or "abi3" in filename or "py3-none" in filename):
            return fetch(urljoin(url, entry["url"]), sha)  # a mirror may answer with relative URLs
    raise AssertionError(f"no x86-64 wheel of {name} {pin.version} among the lock's hashes")


def unpack(wheel: Path, site: Path) -> Path:
    """Lay a wheel out as pip would in site-packages (files and .dist-info), without installing anything."""
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site
