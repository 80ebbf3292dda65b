"""The settings table as recorded: where each profile's lives and how it is read.

``invoke settings --write`` (``image/derive.py``) records what SGLang decides at our settings, per host, in
docker/settings.json (a profile's own profiles/NAME/docker/settings.json) and docs/settings.md. The doctor (which
EAGLE-3 drafters a release's model registry loads) and the tests read it back here, without running SGLang; the image
build's ahead-of-time step reads the same file inside the image (``image/steps/aot.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack.errors import UserError, read_text

TABLE_JSON = ROOT / "docker" / "settings.json"
TABLE_MD = ROOT / "docs" / "settings.md"


def tables(profile) -> tuple[Path, Path]:
    """Where a profile's table lives: docker/settings.json and docs/settings.md for the default; a profile's
    own docker/settings.json (which its image build copies) and docs/settings-NAME.md for another."""
    if profile.default:
        return TABLE_JSON, TABLE_MD
    return profile.root / "docker" / "settings.json", ROOT / "docs" / f"settings-{profile.name}.md"


def load(path: Path = TABLE_JSON) -> dict:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: not JSON: {err.msg} (regenerate it: invoke settings --write)") from None
    except RecursionError:
        raise UserError(f"{path}: nested deeper than the table ever is (regenerate it: invoke settings --write)") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise UserError(f"{path}: expected {{'runs': [...]}} (regenerate it: invoke settings --write)")
    return data
