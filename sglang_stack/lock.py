"""versions.lock: load it, validate it, re-resolve the Python set from it.

``load`` is pure and offline. ``check`` returns one line per problem, each
naming the key and the value. ``resolve`` (network) regenerates
``requirements.lock.txt`` with ``uv pip compile``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from . import ROOT
from .errors import UserError

LOCK_PATH = ROOT / "versions.lock"


def load(path: Path = LOCK_PATH) -> dict:
    """Parse versions.lock; a syntax error is one line naming the file and line."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: not found") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: invalid TOML: {err}") from None
