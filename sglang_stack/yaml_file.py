"""Reading a YAML file the user edits (compose.yaml, a values file): one line naming the file and line on error."""

from __future__ import annotations

from pathlib import Path

from sglang_stack.errors import UserError, read_text


def load(path: Path):
    """The document in ``path``, anchors and merge keys resolved; a missing file or bad YAML is a ``UserError``."""
    import yaml  # host-side only: the in-image modules never read YAML

    try:
        return yaml.safe_load(read_text(path))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{at}: invalid YAML: {getattr(err, 'problem', err)}") from None
