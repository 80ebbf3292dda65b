"""A copy of this checkout's tracked files, as a clone would have them: for tests that edit what users edit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sglang_stack import ROOT


def copy(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        source, target = ROOT / rel, dest / rel
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)
    return dest


def context(dest: Path) -> Path:
    """The checkout's files (what git tracks or would: untracked files that are not ignored), as the build context a
    user has; mirror/wheels left out."""
    import os
    import shutil

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file() and not os.fsdecode(name).startswith("mirror/wheels"):
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))
    return dest
