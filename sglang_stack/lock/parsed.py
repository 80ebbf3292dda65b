"""A lock file parsed once per run: the same bytes are never parsed twice by one command.

`invoke build` reads versions.lock (and a profile's) from several places: the profile lookup names each profile by
its SGLang release, the checks read the lock and then read it again with the wheel's requirements, the render reads
it for the Dockerfile and the README's patch table. Each asks here; the file is read each time (an edit between two
reads is seen), and parsed only when its bytes are new. Each caller gets its own copy, so one that edits the tables
(a bump) changes nobody else's.
"""

from __future__ import annotations

import copy
import hashlib
import tomllib
from pathlib import Path

from sglang_stack.errors import UserError, read_text

_PARSED: dict[str, dict] = {}


def toml(path: Path, shown: str) -> dict:
    """``path`` parsed (its bytes' parse, cached); a syntax error is one line naming it as ``shown``."""
    text = read_text(path)
    key = hashlib.sha256(text.encode()).hexdigest()
    if key not in _PARSED:
        try:
            _PARSED[key] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise UserError(f"{shown}: invalid TOML: {err}") from None
    return copy.deepcopy(_PARSED[key])
