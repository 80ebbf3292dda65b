"""The real PyPI wheels that requirements.lock.txt pins, fetched by URL and checked against the lock's hashes.

PyPI's JSON API names each file's URL and sha256; the file is fetched through
``sglang_stack.fetch`` (hash-verified, cached in ~/.cache/sglang-stack) and accepted only if
its sha256 is one the lock allows for that pin, so a test runs on the bytes the image installs.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from sglang_stack.image import lock as lockmod
from sglang_stack.image.pins import read_pins

PLATFORM_TAGS = ("manylinux", "linux_x86_64", "-none-any")


def locked_wheel(name: str) -> Path:
    """The x86-64 Linux (or pure-Python) cp312/abi3 wheel of ``name`` at its locked version, as a local file."""
    import requests

    from sglang_stack.fetch import fetch

    problems: list[str] = []
    pin = next(p for p in read_pins(lockmod.REQUIREMENTS_PATH, problems) if p.name == name)
    answer = requests.get(f"https://pypi.org/pypi/{name}/{pin.version}/json", timeout=30).json()
    for entry in answer["urls"]:
        filename, sha = entry["filename"], entry["digests"]["sha256"]
        if not filename.endswith(".whl") or sha not in pin.hashes:
            continue
        if ("x86_64" in filename or filename.endswith("-none-any.whl")) and ("cp312" in filename or "abi3" in filename or "py3-none" in filename):
            return fetch(entry["url"], sha)
    raise AssertionError(f"no x86-64 wheel of {name} {pin.version} among the lock's hashes")


def unpack(wheel: Path, site: Path) -> Path:
    """Lay a wheel out as pip would in site-packages (files and .dist-info), without installing anything."""
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site
