"""Reading a YAML file the user edits (compose.yaml, a values file): one line naming the file and line on error."""

from __future__ import annotations

from pathlib import Path

from sglang_stack.errors import UserError, read_text


def _loader():
    """PyYAML's safe loader, plus Compose's merge tags (``!reset``, ``!override``), read as their plain values.

    An override file may carry them (compose.multinode.yaml does); Compose itself applies
    them when it merges, so for a syntax check and a single file their value is enough.
    """
    import yaml  # host-side only: the in-image modules never read YAML

    class Loader(yaml.SafeLoader):
        pass

    def plain(loader, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    for tag in ("!reset", "!override"):
        Loader.add_constructor(tag, plain)
    return Loader


def load(path: Path):
    """The document in ``path``, anchors and merge keys resolved; a missing file or bad YAML is a ``UserError``."""
    return loads(read_text(path), str(path))


def loads(text: str, where: str):
    """The document in ``text`` (a file's, or a command's output named by ``where``); bad YAML is a ``UserError``."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{where}{at}: invalid YAML: {getattr(err, 'problem', err)}") from None
