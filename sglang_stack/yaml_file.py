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

    def mapping(loader, node, deep=False):
        # YAML says a key appears once; PyYAML keeps the last silently (`replicas: 2`, then `replicas: 20`). Keys a
        # merge (<<) brings in may be overridden, as YAML's merge says: only the keys written here are counted.
        seen = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key_node.value!r} is given twice (lines {seen[key_node.value] + 1} and "
                    f"{key_node.start_mark.line + 1})", key_node.start_mark)
            seen[key_node.value] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Loader.construct_mapping = mapping
    for tag in ("!reset", "!override"):
        Loader.add_constructor(tag, plain)
    return Loader


EXPANSION_LIMIT = 1_000_000  # nodes once every alias is expanded: compose.yaml is a few thousand


def expanded_size(text: str, where: str) -> int:
    """How many nodes the document holds with every alias expanded, counted on the shared node graph (so an alias
    bomb is counted, not built); over ``EXPANSION_LIMIT`` is a ``UserError`` naming ``where``."""
    import yaml

    try:
        root = yaml.compose(text, Loader=_loader())
    except yaml.YAMLError:
        return 0  # a syntax error is the loader's to name
    memo: dict[int, int] = {}

    def size(node) -> int:
        if id(node) in memo:
            return memo[id(node)]
        memo[id(node)] = 1  # a cycle counts once
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in node.value)
        else:
            total = 1
        memo[id(node)] = total = min(total, EXPANSION_LIMIT + 1)
        return total

    total = size(root) if root is not None else 0
    if total > EXPANSION_LIMIT:
        raise UserError(f"{where}: its YAML expands to more than {EXPANSION_LIMIT:,} nodes through aliases of aliases "
                        "(an alias bomb?): remove the aliases")
    return total


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
    except RecursionError:
        raise UserError(f"{where}: nested deeper than any file of this kind is") from None
