"""Run functions straight out of an unpacked sglang tree, without torch or a GPU.

The patch tests compile the real functions of a tree (same file name and line
numbers, so a traceback points into the sglang source) into a namespace the test
controls: the names that matter to the test are given explicitly, and every other
global the function touches (torch, loggers, subsystems) can be an ``Anything``.
"""

from __future__ import annotations

import __future__
import ast
import builtins
import types
from pathlib import Path


def load_functions(path: Path, qualnames: list[str], namespace: dict) -> dict:
    """Compile functions/methods straight out of a source file (same file name and line numbers)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    out = {}
    for qualname in qualnames:
        scope = tree.body
        *owners, name = qualname.split(".")
        for owner in owners:
            cls = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner), None)
            assert cls is not None, f"{path}: no class {owner}"
            scope = cls.body
        fn = next((n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is None:
            raise LookupError(f"{path}: no function {qualname}")
        code = compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec", flags=flags, dont_inherit=True)
        exec(code, namespace)
        out[name] = namespace[name]
        # A stubbed decorator would replace the function with a stand-in, and the test would
        # then exercise nothing of the tree: refuse that outright.
        assert isinstance(out[name], types.FunctionType), f"{path}: {qualname} did not compile to a function"
    return out


class Anything:
    """Stands in for whatever a function touches that the test does not look at.

    Every attribute, call and item is another ``Anything``; it is falsy, empty,
    a no-op context manager, absorbs arithmetic and formats as its name. Being
    falsy, it takes the "feature off" branch of every ``if`` it meets.
    """

    _name = "anything"  # on the class, so that a subclass that skips __init__ still has one

    def __init__(self, name: str = "anything"):
        self._name = name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(f"{self._name}.{name}")

    def __call__(self, *args, **kwargs):
        return Anything(f"{self._name}()")

    def __getitem__(self, key):
        return Anything(f"{self._name}[]")

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __format__(self, spec):
        return self._name

    def _same(self, *other):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = _same

    def _no(self, other):
        return False

    __lt__ = __le__ = __gt__ = __ge__ = _no


class Namespace(dict):
    """Module globals for ``load_functions``: the given names, builtins, and ``Anything`` for the rest."""

    def __missing__(self, name):
        if hasattr(builtins, name):
            raise KeyError(name)  # fall through to the real builtin
        value = Anything(name)
        self[name] = value
        return value
