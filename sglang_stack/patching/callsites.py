"""Where the EAGLE-3 path of an SGLang tree calls the target model, found in the source.

Reads the tree with ``ast`` on the standard library alone (the image's ``sglang`` stage has no
torch). It knows no method names: from the speculative-algorithm enum, the EAGLE-3 workers and
``ModelRunner`` it derives every call on the target model, the conditions it runs under, and
whether a guard makes it optional. ``sglang_stack.patching.audit`` checks the model class
against these calls; docs/patches.md ("The EAGLE-3 audit") states the rules and their limits.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglang_stack.errors import UserError

# ANCHORS: the structural names in SGLang the audit starts from. A release that renames one gets
# an error naming it, never a pass.
SPEC_MODULE = "sglang.srt.speculative.spec_info"  # the speculative-algorithm enum and create_worker
SPEC_PACKAGE = "sglang.srt.speculative."
RUNNER_MODULE, RUNNER_CLASS = "sglang.srt.model_executor.model_runner", "ModelRunner"  # holds self.model
EAGLE3, NO_SPEC, WORKER_FACTORY = "EAGLE3", "NONE", "create_worker"
RUNNER_ATTR, MODEL_ATTR, TARGET_ATTR = "model_runner", "model", "target_worker"
DRAFT_MARKERS = ("draft", "mtp")
MAX_DEPTH = 4  # calls followed from where the target is in hand
LAYOUT = "this SGLang layout is not one the audit knows (sglang_stack/patching/callsites.py)"

DOT_MODEL = re.compile(rf"\.{MODEL_ATTR}\b")
SPEC_WORD = re.compile(r"(?:^|_)(?:spec(?:_|$)|specul|eagle)")  # spec_info, speculative_*, eagle_*
NOT_SPEC = {"find_spec"}  # importlib.util.find_spec: SGLang probes optional packages with it
SPEC_ALGO = re.compile(r"spec\w*algo")  # spec_algorithm, speculative_algorithm: the algorithm itself
YES, NO, EITHER = 1, 2, 3  # what a condition can be under EAGLE3
MODEL, RUNNER, WORKER, DRAFT, LOOSE, LOOSE_RUNNER = "model", "runner", "worker", "draft", "loose", "loose runner"


# --- The tree: modules, imports, classes ---------------------------------------------------------


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

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(eq=False)
class Cls:
    name: str
    module: str
    path: str
    node: ast.ClassDef
    bases: list | None = None  # Cls in the tree, or a dotted name outside it; filled by Tree.mro

    def body(self, name: str) -> ast.stmt | None:
        """The last statement of the class body that binds ``name``: a def, or an assignment."""
        found = None
        for stmt in self.node.body:
            targets = getattr(stmt, "targets", [getattr(stmt, "target", None)]) if getattr(stmt, "value", None) else []
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                found = stmt
            elif any(getattr(t, "id", "") == name for t in targets):
                found = stmt
        return found


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
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.modules[name] = p.relative_to(self.src).as_posix()
        self._text: dict[str, str] = {}
        self._ast: dict[str, ast.Module] = {}
        self._imports: dict[str, dict] = {}
        self._classes: dict[tuple, Cls | None] = {}

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
        """Names that module-level imports bind (TYPE_CHECKING blocks included): name -> dotted origin."""
        if module not in self._imports:
            package, out = self.modules[module].endswith("__init__.py"), {}
            for node in self.parse(module).body:
                for stmt in [node] + (node.body if isinstance(node, (ast.If, ast.Try)) else []):
                    out.update(import_names(stmt, module, package))
            self._imports[module] = out
        return self._imports[module]

    def resolve(self, module: str, name: str, depth: int = 0):
        """What ``name`` is in ``module``: a module name (str), a (module, def or class node), or None."""
        if module not in self.modules or depth > 8:
            return None
        for node in self.parse(module).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return module, node
        origin = self.imports(module).get(name, "")
        if origin in self.modules:
            return origin
        return self.resolve(*origin.rsplit(".", 1), depth + 1) if "." in origin else None

    def cls(self, module: str, name: str) -> Cls | None:
        if (module, name) not in self._classes:
            found = self.resolve(module, name)
            ok = isinstance(found, tuple) and isinstance(found[1], ast.ClassDef)
            self._classes[module, name] = Cls(name, found[0], self.modules[found[0]], found[1]) if ok else None
        return self._classes[module, name]

    def base(self, module: str, node: ast.expr):
        """A base class: the in-tree Cls, or the dotted name it stands for (``nn.Module``: torch.nn.Module)."""
        chain = chain_of(node.value if isinstance(node, ast.Subscript) else node) or [ast.unparse(node)]
        inner = self.resolve(module, chain[0]) if len(chain) == 2 else None  # module.Class
        found = self.cls(module, chain[0]) if len(chain) == 1 else None
        found = found or (self.cls(inner, chain[1]) if isinstance(inner, str) else None)
        return found or ".".join([self.imports(module).get(chain[0], chain[0])] + chain[1:])

    def mro(self, c, seen: tuple = ()) -> list:
        """Python's C3 linearisation over in-tree classes; a base outside the tree is a leaf."""
        if not isinstance(c, Cls) or c in seen:
            return [c]
        if c.bases is None:
            c.bases = [self.base(c.module, b) for b in c.node.bases]
        seqs, out = [self.mro(b, seen + (c,)) for b in c.bases] + [list(c.bases)], [c]
        while any(seqs):
            heads = [s[0] for s in seqs if s]  # an order Python would refuse falls back to the first head
            head = next((h for h in heads if not any(h in s[1:] for s in seqs)), heads[0])
            out.append(head)
            seqs = [s[1:] if s and s[0] == head else s for s in seqs]
        return out


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


def chain_of(node: ast.AST) -> list[str] | None:
    """``self.a.b`` -> ["self", "a", "b"]; None if not a plain dotted name."""
    out: list[str] = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    return [node.id, *out[::-1]] if isinstance(node, ast.Name) else None


def words(node: ast.AST) -> list[str]:
    """Every name and attribute in an expression."""
    return [getattr(n, "id", None) or n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]


def speculative(word: str) -> bool:
    return word not in NOT_SPEC and SPEC_WORD.search(word.lower()) is not None


def exits(body: list) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def raises(body: list) -> bool:
    return bool(body) and isinstance(body[-1], ast.Raise)


def stored(body: list) -> set[str]:
    return {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


# --- The algorithm: what a condition can be under EAGLE3; the EAGLE-3 workers --------------------


class Spec:
    def __init__(self, tree: Tree):
        if SPEC_MODULE not in tree.modules:
            raise UserError(f"{tree.src}: no {SPEC_MODULE} (the speculative-algorithm enum); {LAYOUT}")
        self.tree, self.path = tree, tree.modules[SPEC_MODULE]
        for node in tree.parse(SPEC_MODULE).body:
            assigned = [t for s in getattr(node, "body", []) if isinstance(s, ast.Assign) for t in s.targets]
            members = {t.id for t in assigned if isinstance(t, ast.Name)}
            if isinstance(node, ast.ClassDef) and {EAGLE3, NO_SPEC} <= members:
                self.name, self.node, self.members = node.name, node, members
                break
        else:
            raise UserError(f"{tree.src / self.path}: no enum with members {EAGLE3} and {NO_SPEC}; {LAYOUT}")
        self.bodies = {}  # the one-line predicates: is_eagle3 -> the expression it returns
        for fn in self.node.body:
            body = [s for s in getattr(fn, "body", []) if not isinstance(getattr(s, "value", None), ast.Constant)]
            if isinstance(fn, ast.FunctionDef) and len(fn.args.args) == 1 and len(body) == 1:
                if isinstance(body[0], ast.Return) and body[0].value is not None:
                    self.bodies[fn.name] = body[0].value
        self.flags: set[str] = set()
        self.touched = False  # value() met a predicate call or a comparison of the algorithm
        self._predicates: dict[str, int] = {}
        self._memo: dict[int, tuple[int, bool]] = {}

    def predicate(self, name: str) -> int:
        if name not in self._predicates:
            self._predicates[name] = EITHER  # a cycle stays unknown
            self._predicates[name] = self.value(self.bodies[name], in_enum=True)
        return self._predicates[name]

    def refs(self, node: ast.expr) -> set[str] | None:
        """``Enum.EAGLE3``, ``"EAGLE3"``, ``None``, or a tuple of them -> the member names; None if not that."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            parts = [self.refs(e) for e in node.elts]
            return None if None in parts else set().union(*parts)
        if isinstance(node, ast.Attribute) and node.attr in self.members:
            return {node.attr} if (chain_of(node.value) or [""])[-1] == self.name else None
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
            return {str(node.value).upper()}
        return None

    def value(self, node: ast.expr, in_enum: bool = False) -> int:
        """YES, NO or EITHER: what the condition can be when the algorithm is EAGLE3."""
        if isinstance(node, ast.BoolOp):
            vals = [self.value(v, in_enum) for v in node.values]
            t, f = (all, any) if isinstance(node.op, ast.And) else (any, all)
            return (YES if t(v & YES for v in vals) else 0) | (NO if f(v & NO for v in vals) else 0)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.value(node.operand, in_enum)
            return ((v & YES) << 1) | ((v & NO) >> 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in self.bodies:
            # is_none() is on other enums too (the MoE all-to-all backend): the receiver must be the algorithm
            recv = node.func.value
            if in_enum and getattr(recv, "id", "") == "self" or any(
                speculative(w) or "algo" in w.lower() or w == self.name for w in words(recv)
            ):
                self.touched = True
                return self.predicate(node.func.attr)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            for subject, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                named, member = self.refs(other), any(isinstance(n, ast.Attribute) for n in ast.walk(other))
                about = in_enum and getattr(subject, "id", "") == "self" or member  # an enum member is unambiguous
                if named is not None and (about or any(SPEC_ALGO.search(w.lower()) for w in words(subject))):
                    self.touched, negated = True, isinstance(node.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn))
                    if not negated and not isinstance(node.ops[0], (ast.Eq, ast.Is, ast.In)):
                        return EITHER
                    return YES if (EAGLE3 in named) != negated else NO
        if (getattr(node, "attr", None) or getattr(node, "id", "")).startswith("is_draft"):
            return NO  # ModelRunner.is_draft_worker: the target's runner is not the draft's
        return (YES if node.value else NO) if isinstance(node, ast.Constant) else EITHER

    def judge(self, test: ast.expr) -> tuple[int, bool]:
        """(value under EAGLE3, does it test the algorithm), per condition node."""
        if id(test) not in self._memo:
            self.touched = False
            self._memo[id(test)] = (self.value(test), self.touched)
        return self._memo[id(test)]

    def mentions(self, test: ast.expr) -> bool:
        """Does the condition test the algorithm, or name a flag (``spec``/``eagle`` in it, or a set one)?
        A flag is the name read, not where it is read from: ``spec_aux_config.dflash_use_aux_hidden_state`` is none."""
        inner = {id(n.value) for n in ast.walk(test) if isinstance(n, ast.Attribute)}
        read = [getattr(n, "id", None) or n.attr for n in ast.walk(test) if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in inner]
        return self.judge(test)[1] or any(speculative(w) or w in self.flags for w in read)

    def workers(self) -> list[Cls]:
        """The classes ``create_worker`` can return under EAGLE3."""
        factory = next((f for f in self.node.body if getattr(f, "name", "") == WORKER_FACTORY), None)
        if factory is None:
            raise UserError(f"{self.tree.src / self.path}: {self.name}.{WORKER_FACTORY}() not found; {LAYOUT}")
        found: list[Cls] = []

        def block(stmts, local: dict) -> bool:  # True: every path through it returned
            for stmt in stmts:
                local.update(import_names(stmt, SPEC_MODULE))
                if isinstance(stmt, ast.If):
                    v = self.value(stmt.test, in_enum=True)
                    if (not v & YES or block(stmt.body, local)) and (not v & NO or block(stmt.orelse, local)):
                        return True
                elif isinstance(stmt, (ast.With, ast.Try)) and block(stmt.body, local):
                    return True
                elif isinstance(stmt, (ast.Return, ast.Raise)):
                    name = getattr(getattr(stmt, "value", None), "id", "")
                    origin = local.get(name) or self.tree.imports(SPEC_MODULE).get(name) or ""
                    c = self.tree.cls(*origin.rsplit(".", 1)) if "." in origin else None
                    if c is not None and c not in found:
                        found.append(c)
                    return True
            return False

        block(factory.body, {})
        if not found:
            raise UserError(f"{self.tree.src / self.path}: {self.name}.{WORKER_FACTORY}() returns no in-tree worker "
                            f"class for {EAGLE3}; the audit cannot find the EAGLE-3 path; {LAYOUT}")  # fmt: skip
        return found


# --- Calls on models, with their path conditions -------------------------------------------------


@dataclass
class Frame:
    """Where the walk is: the scope, what its names hold, and the conditions that lead there."""

    module: str
    path: str
    spec_pkg: bool  # inside the speculative package, where a class's own runner is the draft's
    scope: ast.AST  # the function (or module) walked
    cls: ast.ClassDef | None = None
    runner: bool = False  # `self` is a ModelRunner
    aliases: dict = field(default_factory=dict)  # name -> (role, canonical receiver)
    imports: dict = field(default_factory=dict)  # imports inside the function
    conds: tuple = ()  # (test, polarity, {(receiver, method)} it proves present, arguments its names stand for)
    arguments: dict = field(default_factory=dict)  # parameter -> the caller's argument expression
    on_path: bool = False  # in an EAGLE-3 worker's module or class, or reached from the EAGLE-3 path
    guard: str = ""  # an enclosing `except AttributeError`
    depth: int = 0


class Scan:
    """Walks modules, and the functions the target is passed to; records every call on a model."""

    def __init__(self, tree: Tree, spec: Spec, runner_names: set, on_classes: set):
        self.tree, self.spec, self.runner_names, self.on_classes = tree, spec, runner_names, on_classes
        self.sites: list = []  # (CallSite, conds, on_path, role)
        self.flag_sets: list = []  # (attribute set True, conds)
        self._class_aliases: dict = {}
        self._followed: set = set()

    def module(self, module: str, on_path: bool) -> None:
        tree = self.tree.parse(module)
        f = Frame(module, self.tree.modules[module], module.startswith(SPEC_PACKAGE), tree, on_path=on_path)
        self.block(tree.body, f)

    # values ----------------------------------------------------------------------------------

    def value(self, node: ast.AST, f: Frame) -> tuple[str | None, str]:
        """(role, canonical text) of an expression; the role of the model, runner or worker it holds, or None."""
        if isinstance(node, ast.Name):
            if node.id == "self":
                return (RUNNER if f.runner else None), f"self@{f.cls.name if f.cls else ''}"
            return f.aliases.get(node.id) or (self.named(node.id, f, False), node.id)
        if isinstance(node, (ast.Subscript, ast.Call)):  # self.mtp_model_runner(i), self.draft_runners[i]
            role, canon = self.value(node.value if isinstance(node, ast.Subscript) else node.func, f)
            return (DRAFT if role == DRAFT else None), canon + "()"
        if not isinstance(node, ast.Attribute):
            return None, ast.unparse(node)
        (role, base), attr = self.value(node.value, f), node.attr
        if role == DRAFT or any(m in attr.lower() for m in DRAFT_MARKERS):
            return DRAFT, f"{base}.{attr}"
        if role:
            step = {(WORKER, RUNNER_ATTR): RUNNER, (RUNNER, MODEL_ATTR): MODEL, (LOOSE_RUNNER, MODEL_ATTR): LOOSE}
            return step.get((role, attr)), f"{base}.{attr}"
        is_self = getattr(node.value, "id", "") == "self"
        if is_self and f.cls is not None and attr in self.class_aliases(f):
            return self.class_aliases(f)[attr]
        return self.named(attr, f, is_self), f"{base}.{attr}"

    @staticmethod
    def named(name: str, f: Frame, is_self: bool) -> str | None:
        """The role a name gives: ``target_worker``, ``model_runner``, ``draft*``; any other ``*runner`` is loose."""
        if any(m in name.lower() for m in DRAFT_MARKERS):
            return DRAFT
        if name == TARGET_ATTR:
            return WORKER
        if name == RUNNER_ATTR:  # a speculative worker's own runner holds the draft model
            return RUNNER if not f.spec_pkg else DRAFT if is_self else LOOSE_RUNNER
        return LOOSE_RUNNER if name.lower().endswith("runner") else None

    def class_aliases(self, f: Frame) -> dict:
        """``self.x = <model, runner or worker>`` anywhere in the class makes ``self.x`` one in every method."""
        if id(f.cls) not in self._class_aliases:
            table = self._class_aliases[id(f.cls)] = {}
            todo, inner = list(f.cls.body), replace(f, aliases={})
            while todo:
                stmt = todo.pop(0)
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "self":
                    role, canon = self.value(stmt.value, inner)
                    if role:
                        table[target.attr] = role, canon
                for name in ("body", "orelse", "finalbody", "handlers"):
                    todo.extend(s for s in getattr(stmt, name, ()) if not isinstance(s, ast.ClassDef))
        return self._class_aliases[id(f.cls)]

    # conditions and guards ---------------------------------------------------------------------

    def cond(self, test: ast.expr, polarity: bool, f: Frame, proves=True) -> tuple:
        """A path condition. ``proves`` False: a check that raises proves nothing; (taken, skipped, stmt):
        nor does one whose other branch leaves unset a name that is read after ``stmt``."""
        via = tuple(f.arguments[w] for w in words(test) if w in f.arguments) if f.arguments else ()
        guards = self.guards(test, polarity, f) if proves else ()
        if guards and isinstance(proves, tuple) and self.unset(*proves, f):
            guards = ()
        return test, polarity, frozenset(guards), via

    def guards(self, test: ast.expr, polarity: bool, f: Frame) -> set:
        """(receiver, method) pairs that ``test`` being ``polarity`` proves present."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.guards(test.operand, not polarity, f)
        if isinstance(test, ast.BoolOp):
            parts = [self.guards(v, polarity, f) for v in test.values]
            return set().union(*parts) if isinstance(test.op, ast.And) == polarity else set.intersection(*parts)
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
            if getattr(test.comparators[0], "value", 0) is None:  # getattr(m, "x", None) is not None
                return self.guards(test.left, polarity, f)
        if not polarity or not isinstance(test, ast.Call):
            return set()
        name, args = getattr(test.func, "id", ""), test.args
        if name == "callable" and len(args) == 1:
            return self.guards(args[0], True, f)
        defaulted = len(args) == 3 and isinstance(args[2], ast.Constant) and not args[2].value
        if (name == "hasattr" and len(args) == 2 or name == "getattr" and defaulted) and isinstance(
            getattr(args[1], "value", 0), str
        ):
            return {(self.value(args[0], f)[1], args[1].value)}
        return set()

    def unset(self, taken: list, skipped: list, after: ast.stmt, f: Frame) -> bool:
        """Would running ``skipped`` instead of ``taken`` leave a name unset that the code after ``after`` reads?"""
        bound = set() if exits(skipped) else stored(taken) - stored(skipped)
        return bool(bound) and any(
            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in bound and n.lineno > after.end_lineno
            for n in ast.walk(f.scope)
        )

    def try_guard(self, node: ast.Try, f: Frame) -> str:
        """``except AttributeError`` that neither raises nor leaves a name unset makes the body optional."""
        for handler in node.handlers:
            types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            if "AttributeError" in [(chain_of(t) or [""])[-1] for t in types if t is not None]:
                reraises = any(isinstance(n, ast.Raise) for n in ast.walk(handler))
                if not reraises and not self.unset(node.body, handler.body, node, f):
                    return "except AttributeError"
        return ""

    # statements ------------------------------------------------------------------------------

    def block(self, stmts: list, f: Frame) -> None:
        for stmt in stmts:
            self.stmt(stmt, f)
            if isinstance(stmt, ast.If) and exits(stmt.body) != exits(stmt.orelse):
                # `if not ok: return` guards the rest of the block; an exit by `raise` does too,
                # but then a missing method still fails the server.
                leaving = stmt.body if exits(stmt.body) else stmt.orelse
                proves = not raises(leaving)
                f = replace(f, conds=f.conds + (self.cond(stmt.test, leaving is stmt.orelse, f, proves),))

    def stmt(self, stmt: ast.stmt, f: Frame) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in ast.walk(stmt.args) if isinstance(a, ast.arg)}
            aliases = {k: v for k, v in f.aliases.items() if k not in params}
            self.block(stmt.body, replace(f, aliases=aliases, imports=dict(f.imports), scope=stmt))
        elif isinstance(stmt, ast.ClassDef):
            bases = {(chain_of(b) or [""])[-1] for b in stmt.bases}
            runner = stmt.name in self.runner_names or bool(bases & self.runner_names)
            if runner:
                self.runner_names.add(stmt.name)
            on_path = f.on_path or (f.module, stmt.name) in self.on_classes
            self.block(stmt.body, replace(f, cls=stmt, runner=runner, aliases={}, on_path=on_path))
        elif isinstance(stmt, (ast.If, ast.While)):
            self.expr(stmt.test, f)
            proves = not raises(stmt.orelse) and (stmt.body, stmt.orelse, stmt)
            self.block(stmt.body, replace(f, conds=f.conds + (self.cond(stmt.test, True, f, proves),)))
            proves = not raises(stmt.body) and (stmt.orelse, stmt.body, stmt)
            otherwise = f.conds + (self.cond(stmt.test, False, f, proves),) if isinstance(stmt, ast.If) else f.conds
            self.block(stmt.orelse, replace(f, conds=otherwise))
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.block(stmt.body, replace(f, guard=self.try_guard(stmt, f) or f.guard))
            for part in [h.body for h in stmt.handlers] + [stmt.orelse, stmt.finalbody]:
                self.block(part, f)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            f.imports.update(import_names(stmt, f.module))
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    self.block([child], f)
                elif type(child).__name__ == "match_case":
                    self.block(child.body, f)
                else:
                    self.expr(child, f)
            if isinstance(stmt, ast.Assign):
                self.assign(stmt, f)

    def assign(self, stmt: ast.Assign, f: Frame) -> None:
        for t in stmt.targets:
            if isinstance(t, ast.Attribute):
                if getattr(stmt.value, "value", None) is True:
                    self.flag_sets.append((t.attr, f.conds))
                continue
            for name in [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]:
                f.aliases.pop(name, None)
            got = self.value(stmt.value, f) if isinstance(t, ast.Name) and len(stmt.targets) == 1 else (None, "")
            if got[0]:
                f.aliases[t.id] = got  # `model = self.model_runner.model`

    # expressions -----------------------------------------------------------------------------

    def expr(self, node: ast.AST, f: Frame) -> None:
        if isinstance(node, ast.BoolOp):
            conds = f.conds
            for value in node.values:
                self.expr(value, replace(f, conds=conds))
                conds += (self.cond(value, isinstance(node.op, ast.And), f),)
            return
        if isinstance(node, ast.IfExp):
            self.expr(node.test, f)
            self.expr(node.body, replace(f, conds=f.conds + (self.cond(node.test, True, f),)))
            self.expr(node.orelse, replace(f, conds=f.conds + (self.cond(node.test, False, f),)))
            return
        if isinstance(node, ast.Call):
            self.call(node, f)
        for child in ast.iter_child_nodes(node):
            self.expr(child, f)

    def call(self, node: ast.Call, f: Frame) -> None:
        func, guard, recv, method = node.func, f.guard, None, ""
        if isinstance(func, ast.Attribute):
            recv, method = func.value, func.attr
        elif getattr(getattr(func, "func", None), "id", "") == "getattr" and len(func.args) >= 2:
            # getattr(model, "m")(...) needs m; with a default it is optional
            recv, method = func.args[0], getattr(func.args[1], "value", None)
            guard = guard or ("getattr default" if len(func.args) > 2 else "")
        role, canon = self.value(recv, f) if recv is not None and isinstance(method, str) else (None, "")
        if role in (MODEL, LOOSE) or role == DRAFT and canon.endswith("." + MODEL_ATTR):
            if not guard and any((canon, method) in c[2] for c in f.conds):
                guard = "hasattr"
            star = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            keywords = tuple(k.arg for k in node.keywords if k.arg)
            site = CallSite(f.path, node.lineno, method, ast.unparse(recv), guard, len(node.args), keywords, star)
            self.sites.append((site, f.conds, f.on_path, role))
        slots = [*enumerate(node.args), *((k.arg, k.value) for k in node.keywords if k.arg)]
        passed = [(slot, self.value(a, f)) for slot, a in slots]
        passed = [(slot, v) for slot, v in passed if v[0] in (MODEL, RUNNER, WORKER)]
        if passed and f.depth < MAX_DEPTH:
            self.follow(node, slots, passed, f)

    def follow(self, node: ast.Call, slots: list, passed: list, f: Frame) -> None:
        """Walk the function or method the target is passed to, its parameter bound to it."""
        func, found, cls = node.func, None, None
        if isinstance(func, ast.Name):
            origin = f.imports.get(func.id, "")
            found = self.tree.resolve(*origin.rsplit(".", 1)) if "." in origin else self.tree.resolve(f.module, func.id)
        elif isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "self" and f.cls is not None:
            found, cls = (f.module, Cls(f.cls.name, f.module, f.path, f.cls).body(func.attr)), f.cls
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):  # module.function(...)
            module = f.imports.get(func.value.id) or self.tree.resolve(f.module, func.value.id)
            found = self.tree.resolve(module, func.attr) if isinstance(module, str) else None
        if not isinstance(found, tuple):
            return
        module, fn = found
        if isinstance(fn, ast.ClassDef):
            cls, fn = fn, Cls(fn.name, module, self.tree.modules[module], fn).body("__init__")
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args][1 if cls is not None else 0 :]
        names = set(params) | {a.arg for a in fn.args.kwonlyargs}

        def param(slot):
            return params[slot] if isinstance(slot, int) and slot < len(params) else slot if slot in names else None

        binding = {param(slot): v for slot, v in passed if param(slot)}
        key = (id(fn), tuple(sorted(binding.items())), tuple(id(c[0]) for c in f.conds), f.on_path, f.guard)
        if binding and key not in self._followed:
            self._followed.add(key)
            # a flag passed along keeps its meaning under the parameter's name: `if enabled:`
            arguments = {param(slot): a for slot, a in slots if param(slot)}
            runner = cls is not None and cls.name in self.runner_names
            inner = Frame(module, self.tree.modules[module], module.startswith(SPEC_PACKAGE), fn, cls, runner,
                          binding, {}, f.conds, arguments, f.on_path, f.guard, f.depth + 1)  # fmt: skip
            self.block(fn.body, inner)

    # after the walk ----------------------------------------------------------------------------

    def flags(self) -> set[str]:
        """Attributes set True under a condition that tests the algorithm and can hold under EAGLE3."""
        out = set()
        for name, conds in self.flag_sets:
            judged = [(self.spec.judge(t), p) for t, p, *_ in conds]
            if all(value & (YES if p else NO) for (value, _), p in judged) and any(algo for (_, algo), _ in judged):
                out.add(name)
        return out

    def where(self, conds: tuple, on_path: bool) -> str:
        """Is the call "on" the EAGLE-3 path, "off" it (it runs, but not for speculation), or "never" run?"""
        for test, polarity, _, via in conds:
            if not self.spec.judge(test)[0] & (YES if polarity else NO):
                return "never"
            on_path = on_path or self.spec.mentions(test) or any(map(self.spec.mentions, via))
        return "on" if on_path else "off"


# --- The EAGLE-3 path -----------------------------------------------------------------------------


@dataclass
class Calls:
    """The calls the EAGLE-3 path makes on models, by method: what ``calls`` finds in a tree."""

    on: dict  # method -> target call sites on the EAGLE-3 path (guarded or not)
    outside: dict  # method -> target call sites off it
    draft: dict  # method -> draft-model call sites on it
    workers: list  # the EAGLE-3 worker classes
    flags: list  # attributes set True under a condition that tests the algorithm


def calls(tree: Tree) -> Calls:
    """Every call on a model that the EAGLE-3 path makes. Raises ``UserError`` on a layout it does not know."""
    spec = Spec(tree)
    workers = spec.workers()
    runner = tree.cls(RUNNER_MODULE, RUNNER_CLASS) if RUNNER_MODULE in tree.modules else None
    if runner is None:
        raise UserError(f"{tree.src}: class {RUNNER_CLASS} not found in {RUNNER_MODULE}; {LAYOUT}")
    runners = [c for c in tree.mro(runner) if isinstance(c, Cls)]
    # The workers' modules are on the EAGLE-3 path, and so are the speculative-package classes that
    # their classes inherit from (the draft worker's base).
    on_path = {c.module for c in workers}
    on_classes = {
        (b.module, b.name)
        for m in on_path
        for node in tree.parse(m).body
        if isinstance(node, ast.ClassDef)
        for b in tree.mro(tree.cls(m, node.name))
        if isinstance(b, Cls) and b.module.startswith(SPEC_PACKAGE)
    }
    # The target model is `<runner>.model`, and every runner is rooted at `model_runner`, `target_worker`
    # or a ModelRunner's `self`: a module that names no root, or never reads `.model`, holds no call on
    # it. Others are reached by following the target into the calls it is passed to.
    roots = {m for m, rel in tree.modules.items() if RUNNER_ATTR in tree.text(rel) or TARGET_ATTR in tree.text(rel)}
    roots = {m for m in roots if DOT_MODEL.search(tree.text(tree.modules[m]))}
    scan = Scan(tree, spec, {c.name for c in runners}, on_classes)
    for module in sorted(on_path | roots | {c.module for c in runners} | {m for m, _ in on_classes}):
        scan.module(module, module in on_path)
    spec.flags = scan.flags()

    records: dict = {}  # (role, path, line, method) -> [(where, site)]: a site reached in several contexts
    for site, conds, base, role in scan.sites:
        where = scan.where(conds, base)
        if role == LOOSE and where == "on":
            raise UserError(f"{tree.src / site.path}:{site.line}: {site.receiver}.{site.method}() is on the EAGLE-3 "
                            f"path, but the audit cannot tell whether {site.receiver} is the target or the draft model "
                            f"(the target is reached through {TARGET_ATTR}); {LAYOUT}")  # fmt: skip
        if where != "never" and role in (MODEL, DRAFT):
            records.setdefault((role, site.path, site.line, site.method), []).append((where, site))
    on, outside, draft = {}, {}, {}
    for (role, *_), found in sorted(records.items(), key=lambda kv: kv[0][1:]):
        hits = sorted((s for w, s in found if w == "on"), key=lambda s: bool(s.guard))  # unguarded first
        group = (draft if role == DRAFT else on) if hits else outside if role == MODEL else {}
        group.setdefault(found[0][1].method, []).append((hits or [found[0][1]])[0])
    if not on:
        raise UserError(f"{tree.src}: found no call on the target model on the EAGLE-3 path, so the audit cannot "
                        f"pass it; {LAYOUT}")  # fmt: skip
    workers = [f"{c.module}.{c.name}" for c in workers]
    return Calls({m: tuple(ss) for m, ss in on.items()}, {m: tuple(ss) for m, ss in outside.items() if m not in on},
                 {m: tuple(ss) for m, ss in draft.items()}, workers, sorted(spec.flags))  # fmt: skip
