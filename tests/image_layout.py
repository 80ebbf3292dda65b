"""The project's in-image modules, laid out as docker/Dockerfile copies them.

Tests that run those modules "as in the image" read the Dockerfile's own COPY
lines, so the test and the image cannot drift apart.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sglang_stack import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
IN_IMAGE_ROOT = "/opt/sglang-stack/"


def copies() -> list[tuple[list[str], str]]:
    """``(sources, destination)`` of every COPY of package files from the build context."""
    out = []
    for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not words[1].startswith("--") and words[1].startswith("sglang_stack/"):
            out.append((words[1:-1], words[-1]))
    return out


def modules() -> list[str]:
    """Every package file the image receives, relative to the repository root."""
    files = []
    for sources, _ in copies():
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                files += sorted(str(p.relative_to(ROOT)) for p in path.glob("*.py"))
            else:
                files.append(source)
    return files


def install(opt: Path) -> Path:
    """Copy the in-image package files under ``opt`` (standing for /opt/sglang-stack); return ``opt``."""
    for sources, dest in copies():
        target = opt / dest.removeprefix(IN_IMAGE_ROOT)
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target / path.name)
    return opt
