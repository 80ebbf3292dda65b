"""An unpacked SGLang tree read with ``ast``: its modules, what their names resolve to, classes and their MRO.

The standard library only: the image's ``sglang`` stage, which runs the audit, has no torch.
``callsites`` finds the EAGLE-3 path's calls on the target model in it; ``audit`` checks the class.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from pathlib import Path

from sglang_stack.errors import UserError

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
AMBIGUOUS = "<ambiguous>"  # an import whose origin depends on what is installed

@dataclass(frozen=True)
class CallSite:
    """A call of ``method`` on a model at ``path:line``, with the shape of its arguments."""

    path: str
    line: int
    method: str
    receiver: str
    guard: str = ""  # what makes it optional ("hasattr", "except AttributeError"), or ""
    args: int = 0  # positional arguments
    keywords: tuple[str, ...] = ()
    star: bool = False  # *args or **kwargs: any arity binds
    unless: tuple[str, ...] = ()  # attributes of the model whose presence keeps the call from running

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(eq=False)
class Cls:
    name: str
    module: str
    path: str
    node: ast.ClassDef


# --- The tree: modules, names, classes ------------------------------------------------------------


class Tree:
    """An unpacked sglang package, ``src/sglang/...``; reads and parses each file once, when needed."""

    def __init__(self, sglang_src: Path):
        self.src = Path(sglang_src)
        if not (self.src / "sglang" / "srt").is_dir():
            hint = f" (pass its parent, {self.src.parent})" if (self.src / "srt").is_dir() else ""
            raise UserError(f"{self.src}: no sglang/ package here{hint}; pass the directory that contains sglang/")
        self.modules: dict[str, str] = {}  # dotted name -> path relative to src
        for p in (self.src / "sglang" / "srt").rglob("*.py"):
            parts = p.relative_to(self.src).with_suffix("").parts
            self.modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p.relative_to(self.src).as_posix()
        self._text: dict[str, str] = {}
        self._ast: dict[str, ast.Module] = {}
        self._imports: dict[str, dict] = {}
        self._classes: dict[int, Cls] = {}
        self._standins: dict = {}

    def text(self, rel: str) -> str:
        if rel not in self._text:
            self._text[rel] = (self.src / rel).read_bytes().decode("utf-8-sig", errors="replace")
        return self._text[rel]

    def parse(self, module: str) -> ast.Module:
        rel = self.modules[module]
        if rel not in self._ast:
            try:
                self._ast[rel] = ast.parse(self.text(rel), filename=rel)
            except SyntaxError as err:
                raise UserError(f"{self.src / rel}:{err.lineno}: cannot parse: {err.msg}") from None
        return self._ast[rel]

    def imports(self, module: str) -> dict[str, str]:
        """Names that module-level imports bind when the module runs: name -> dotted origin.

        ``if TYPE_CHECKING:`` binds at run time only what its ``else`` does. A ``try`` whose import
        is outside the tree may fall back to its ``except ImportError`` one: where the two differ, the
        name's origin is ``AMBIGUOUS`` (it resolves to nothing, so what rests on it stays undecided)."""
        if module not in self._imports:
            package, out = self.modules[module].endswith("__init__.py"), {}
            for node in self.parse(module).body:
                if isinstance(node, ast.If) and (chain_of(node.test) or [""])[-1] == "TYPE_CHECKING":
                    blocks = [node.orelse]
                elif isinstance(node, ast.If):
                    blocks = [node.body, node.orelse]
                elif isinstance(node, ast.Try):
                    tried = {k: v for stmt in node.body for k, v in import_names(stmt, module, package).items()}
                    fallback = {k: v for h in node.handlers for stmt in h.body for k, v in import_names(stmt, module, package).items()}
                    for name, origin in tried.items():
                        parts = origin.split(".")
                        inside = any(".".join(parts[:i]) in self.modules for i in range(len(parts), 0, -1))
                        out[name] = origin if inside or fallback.get(name, origin) == origin else AMBIGUOUS
                    out.update({k: v for k, v in fallback.items() if k not in tried})
                    continue
                else:
                    blocks = [[node]]
                for block in blocks:
                    for stmt in block:
                        out.update(import_names(stmt, module, package))
            self._imports[module] = out
        return self._imports[module]

    def resolve(self, dotted: str, depth: int = 0):
        """What a dotted name (``sglang.srt.x.f``) is: a module's name, a Cls, a (module, def), or None.
        A module's own defs come first, then what its imports bind, followed as far as the tree goes."""
        if dotted in self.modules or depth > 8:  # deeper: an import cycle
            return dotted if dotted in self.modules else None
        module, _, name = dotted.rpartition(".")
        module = self.resolve(module, depth + 1) if module else None  # `utils` in `utils.f`: the module it names
        if not isinstance(module, str):
            return None
        found = next((n for n in self.parse(module).body if getattr(n, "name", None) == name), None)
        if isinstance(found, ast.ClassDef):
            return self._classes.setdefault(id(found), Cls(found.name, module, self.modules[module], found))
        if isinstance(found, FUNCTIONS):
            return module, found
        origin = self.imports(module).get(name)
        return self.resolve(origin, depth + 1) if origin else None

    def base(self, module: str, node: ast.expr):
        """A base class: its Cls, or the dotted name it stands for outside the tree (``nn.Module``: torch.nn.Module)."""
        chain = chain_of(node.value if isinstance(node, ast.Subscript) else node) or [ast.unparse(node)]
        found = self.resolve(".".join([module, *chain])) if len(chain) <= 2 else None
        return found if isinstance(found, Cls) else ".".join([self.imports(module).get(chain[0], chain[0])] + chain[1:])

    def mro(self, c) -> list:
        """The MRO of ``c``, as Python computes it (C3) over stand-in classes; a base outside the tree is a leaf."""
        return [t.origin for t in self.standin(c).__mro__[:-1]]

    def standin(self, c) -> type:
        if c not in self._standins:
            self._standins[c] = type("standin", (), {"origin": c})  # a leaf until its bases are made: cycles end here
            bases = [self.base(c.module, b) for b in c.node.bases] if isinstance(c, Cls) else []
            try:
                self._standins[c] = type("standin", tuple(dict.fromkeys(map(self.standin, bases))), {"origin": c})
            except TypeError:  # bases Python cannot order: it would refuse the class itself
                pass
        return self._standins[c]


def import_names(stmt: ast.stmt, module: str, package: bool = False) -> dict[str, str]:
    if isinstance(stmt, ast.ImportFrom):
        base = stmt.module or ""
        if stmt.level:
            parts = module.split(".")
            base = ".".join(parts[: len(parts) - stmt.level + package] + ([base] if base else []))
        return {(a.asname or a.name): f"{base}.{a.name}" for a in stmt.names if a.name != "*"}
    if isinstance(stmt, ast.Import):
        return {(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0]) for a in stmt.names}
    return {}


def member(cls: ast.ClassDef, name: str) -> ast.stmt | None:
    """The last statement of a class body that binds ``name``: a def, or an assignment."""
    found = None
    for stmt in cls.body:
        targets = getattr(stmt, "targets", [getattr(stmt, "target", None)]) if getattr(stmt, "value", None) else []
        if isinstance(stmt, FUNCTIONS) and stmt.name == name or name in [getattr(t, "id", "") for t in targets]:
            found = stmt
    return found


def signature_of(args: ast.arguments) -> inspect.Signature:
    """The signature a def's parameters make; defaults stand in as None."""
    P = inspect.Parameter
    pos = [(a, P.POSITIONAL_ONLY) for a in args.posonlyargs] + [(a, P.POSITIONAL_OR_KEYWORD) for a in args.args]
    defaults = [P.empty] * (len(pos) - len(args.defaults)) + [None] * len(args.defaults)
    params = [P(a.arg, kind, default=d) for (a, kind), d in zip(pos, defaults)]
    params += [P(args.vararg.arg, P.VAR_POSITIONAL)] if args.vararg else []
    keyword = zip(args.kwonlyargs, args.kw_defaults)
    params += [P(a.arg, P.KEYWORD_ONLY, default=P.empty if d is None else None) for a, d in keyword]
    return inspect.Signature(params + ([P(args.kwarg.arg, P.VAR_KEYWORD)] if args.kwarg else []))


def statements(body: list):
    """Every statement of a block, nested ones too, but not those of a nested class."""
    for stmt in body:
        yield stmt
        if not isinstance(stmt, ast.ClassDef):
            for name in ("body", "orelse", "finalbody", "handlers"):
                yield from statements(getattr(stmt, name, []))


def chain_of(node: ast.AST) -> list[str] | None:
    """``self.a.b`` -> ["self", "a", "b"]; None if not a plain dotted name."""
    out: list[str] = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    return [node.id, *out[::-1]] if isinstance(node, ast.Name) else None
