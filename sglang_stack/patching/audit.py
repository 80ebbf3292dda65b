"""EAGLE-3 readiness audit of an SGLang package tree.

SGLang's EAGLE-3 path calls methods on the *target* model (``set_eagle3_layers_to_capture`` and
``get_embed_and_head`` in 0.5.9). A model class that lacks one loads all its weights, minutes for a
1T-parameter model, and only then dies. This module finds the gap in the source with ``ast``, on
the standard library alone: it runs in the image's ``sglang`` stage, which has no torch. It knows
no method names: it derives the calls, the conditions they run under and the class's methods from
the tree. The rules and their limits are in docs/patches.md ("The EAGLE-3 audit"). ``confirm``
(``--dynamic``) repeats the provider half on the imported class, where torch is installed.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import gc
import inspect
import json
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglang_stack.errors import UserError, run_main
from sglang_stack.patching.patches import tree_version

DEFAULT_ARCH = "KimiK25ForConditionalGeneration"

# ANCHORS: the structural names in SGLang the audit starts from. A release that renames one gets
# an error naming it, never a pass.
SPEC_MODULE = "sglang.srt.speculative.spec_info"  # the speculative-algorithm enum and create_worker
SPEC_PACKAGE = "sglang.srt.speculative."
RUNNER_MODULE, RUNNER_CLASS = "sglang.srt.model_executor.model_runner", "ModelRunner"  # holds self.model
MODELS_PACKAGE, REGISTRY_NAME = "sglang.srt.models", "EntryClass"  # the registry reads top-level modules
EAGLE3, NO_SPEC, WORKER_FACTORY = "EAGLE3", "NONE", "create_worker"
RUNNER_ATTR, MODEL_ATTR, TARGET_ATTR = "model_runner", "model", "target_worker"
DRAFT_MARKERS = ("draft", "mtp")
MAX_DEPTH = 4  # calls followed from where the target is in hand
LAYOUT = "this SGLang layout is not one the audit knows (sglang_stack/patching/audit.py)"

DOT_MODEL = re.compile(rf"\.{MODEL_ATTR}\b")
SPEC_WORD = re.compile(r"(?:^|_)(?:spec(?:_|$)|specul|eagle)")  # spec_info, speculative_*, eagle_*
NOT_SPEC = {"find_spec"}  # importlib.util.find_spec: SGLang probes optional packages with it
SPEC_ALGO = re.compile(r"spec\w*algo")  # spec_algorithm, speculative_algorithm: the algorithm itself
YES, NO, EITHER = 1, 2, 3  # what a condition can be under EAGLE3
MODEL, RUNNER, WORKER, DRAFT, LOOSE, LOOSE_RUNNER = "model", "runner", "worker", "draft", "loose", "loose runner"

# Bases outside the tree whose methods are known. torch.nn.Module's public methods (torch 2.9); its
# __getattr__ returns parameters, buffers and submodules only, never a method: the 0.5.9 crash is
# its AttributeError.
NN_MODULE = "torch.nn.Module"
NN_MODULE_METHODS = frozenset("""
add_module apply bfloat16 buffers children compile cpu cuda double eval extra_repr float forward get_buffer
get_extra_state get_parameter get_submodule half ipu load_state_dict modules mtia named_buffers named_children
named_modules named_parameters parameters register_backward_hook register_buffer register_forward_hook
register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
register_load_state_dict_post_hook register_load_state_dict_pre_hook register_module register_parameter
register_state_dict_post_hook register_state_dict_pre_hook requires_grad_ set_extra_state set_submodule
share_memory state_dict to to_empty train type xpu zero_grad""".split())
KNOWN_BASES = {"object", NN_MODULE, "torch.nn.modules.module.Module", "abc.ABC", "typing.Generic", "typing.Protocol"}
PROPERTIES = {"property", "cached_property", "setter", "getter", "deleter"}


# --- Report --------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Missing:
    """A method the class lacks, or cannot take the way ``sites`` call it; in ``undecided``: may lack."""

    method: str
    sites: tuple[CallSite, ...]
    reason: str = ""


@dataclass
class Report:
    """What ``audit`` found. ``passed`` is False iff ``missing`` is not empty."""

    arch: str
    arch_site: str  # path:line of the class
    sglang_version: str
    required: dict  # method -> its unguarded target call sites on the EAGLE-3 path
    optional: dict  # method -> its guarded ones
    outside: dict  # target calls off the EAGLE-3 path (not checked)
    draft: dict  # calls on the draft model on the EAGLE-3 path (not checked)
    providers: dict  # method -> where the class gets it
    missing: list
    undecided: list  # what the source cannot settle: __getattr__, a base outside the tree
    flags: list  # attributes set True under a condition that tests the algorithm
    workers: list  # EAGLE-3 worker classes
    files_read: int
    seconds: float = 0.0
    confirmed: list = field(default_factory=list)  # what --dynamic checked on the imported class

    @property
    def passed(self) -> bool:
        return not self.missing

    @property
    def summary(self) -> str:
        n, what = len(self.required), f"the EAGLE-3 path of sglang {self.sglang_version} calls on the target model"
        if self.missing:
            lacking = list(dict.fromkeys(m.method for m in self.missing))
            return f"audit failed: {self.arch} lacks {len(lacking)} of the {n} methods that {what}: {', '.join(lacking)}"
        sites = f"({', '.join(sorted(self.required))}; {sum(map(len, self.required.values()))} call sites)"
        if self.undecided:
            u = [m.method for m in self.undecided]
            return f"audit passed: {self.arch} provides {n - len(u)} of the {n} methods that {what} {sites}; undecided: {', '.join(u)}"
        return f"audit passed: {self.arch} provides all {n} methods that {what} {sites}"

    def lines(self, verbose: bool = False) -> list[str]:
        """The command's output: one line per missing or undecided method, then the summary."""
        out = [
            f"{label}: {self.arch}.{m.method}() is called on the target model at "
            f"{', '.join(map(str, m.sites))}{': ' + m.reason if m.reason else ''}"
            for label, group in (("missing", self.missing), ("undecided", self.undecided))
            for m in group
        ]
        if verbose:
            out += [f"architecture: {self.arch} at {self.arch_site}", f"EAGLE-3 workers: {', '.join(self.workers)}",
                    f"EAGLE-3 flags set under a condition: {', '.join(self.flags) or '-'}"]  # fmt: skip
            for title, group in (("required", self.required), ("optional (guarded)", self.optional),
                                 ("outside the EAGLE-3 path (not checked)", self.outside),
                                 ("on the draft model (not checked)", self.draft)):  # fmt: skip
                for method, sites in sorted(group.items()):
                    where = ", ".join(f"{s}{' [' + s.guard + ']' if s.guard else ''}" for s in sites)
                    source = self.providers.get(method) if group is self.required or group is self.optional else None
                    out.append(f"{title}: {method} at {where}{' -> ' + source if source else ''}")
            out += [f"confirmed: {c}" for c in self.confirmed] + [f"read {self.files_read} files in {self.seconds:.2f} s"]
        return out + [self.summary]

    def to_json(self) -> dict:
        def sites(group):
            return {m: [str(s) for s in ss] for m, ss in sorted(group.items())}

        def findings(items):
            return {m.method: {"sites": [str(s) for s in m.sites], "reason": m.reason} for m in items}

        return {"arch": self.arch, "arch_site": self.arch_site, "sglang_version": self.sglang_version,
                "passed": self.passed, "summary": self.summary, "missing": findings(self.missing),
                "undecided": findings(self.undecided), "required": sites(self.required),
                "optional": sites(self.optional), "outside": sites(self.outside), "draft": sites(self.draft),
                "providers": dict(sorted(self.providers.items())), "flags": self.flags, "workers": self.workers,
                "confirmed": self.confirmed, "seconds": round(self.seconds, 3)}  # fmt: skip


# --- The tree: modules, imports, classes ---------------------------------------------------------


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
            self.modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p.relative_to(self.src).as_posix()
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
        found = self.cls(module, chain[0]) if len(chain) == 1 else self.cls(inner, chain[1]) if isinstance(inner, str) else None
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
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]


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
            body = [s for s in getattr(fn, "body", []) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
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
        if isinstance(node, ast.Attribute) and node.attr in self.members and (chain_of(node.value) or [""])[-1] == self.name:
            return {node.attr}
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
        """Does the condition test the algorithm, or name a flag (``spec``/``eagle`` in it, or a set one)?"""
        return self.judge(test)[1] or any(speculative(w) or w in self.flags for w in words(test))

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
                    if (block(stmt.body, local) if v & YES else True) and (block(stmt.orelse, local) if v & NO else True):
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
        self.block(tree.body, Frame(module, self.tree.modules[module], module.startswith(SPEC_PACKAGE), tree, on_path=on_path))

    # values ----------------------------------------------------------------------------------

    def value(self, node: ast.AST, f: Frame) -> tuple[str, str] | None:
        """(role, canonical receiver) of an expression that holds a model, runner or worker; else None."""
        if isinstance(node, ast.Name):
            if node.id in f.aliases:
                return f.aliases[node.id]
            if node.id == "self":
                return (RUNNER, f"self@{f.cls.name}") if f.runner else None
            role = self.named(node.id, f, False)
            return role and (role, node.id)
        if isinstance(node, (ast.Subscript, ast.Call)):  # self.mtp_model_runner(i), self.draft_runners[i]
            inner = self.value(node.value if isinstance(node, ast.Subscript) else node.func, f)
            return (DRAFT, inner[1] + "()") if inner and inner[0] == DRAFT else None
        if not isinstance(node, ast.Attribute):
            return None
        base = self.value(node.value, f)
        canon = f"{base[1] if base else self.canon(node.value, f)}.{node.attr}"
        if any(m in node.attr.lower() for m in DRAFT_MARKERS) or base and base[0] == DRAFT:
            return DRAFT, canon
        if base:
            step = {(WORKER, RUNNER_ATTR): RUNNER, (RUNNER, MODEL_ATTR): MODEL, (LOOSE_RUNNER, MODEL_ATTR): LOOSE}
            role = step.get((base[0], node.attr))
            return role and (role, canon)
        is_self = getattr(node.value, "id", "") == "self"
        if is_self and f.cls is not None and node.attr in self.class_aliases(f):
            return self.class_aliases(f)[node.attr]
        role = self.named(node.attr, f, is_self)
        return role and (role, canon)

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

    def canon(self, node: ast.AST, f: Frame) -> str:
        got = self.value(node, f)
        if got:
            return got[1]
        if isinstance(node, ast.Attribute):
            return f"{self.canon(node.value, f)}.{node.attr}"
        return f"self@{f.cls.name}" if getattr(node, "id", "") == "self" and f.cls else ast.unparse(node)

    def class_aliases(self, f: Frame) -> dict:
        """``self.x = <model, runner or worker>`` anywhere in the class makes ``self.x`` one in every method."""
        if id(f.cls) not in self._class_aliases:
            table = self._class_aliases[id(f.cls)] = {}
            todo, inner = list(f.cls.body), replace(f, aliases={})
            while todo:
                stmt = todo.pop(0)
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "self":
                    got = self.value(stmt.value, inner)
                    if got:
                        table[target.attr] = got
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
            return {(self.canon(args[0], f), args[1].value)}
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
            got = self.value(stmt.value, f) if isinstance(t, ast.Name) and len(stmt.targets) == 1 else None
            if got:
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
        got = self.value(recv, f) if recv is not None and isinstance(method, str) else None
        if got and (got[0] in (MODEL, LOOSE) or got[0] == DRAFT and got[1].endswith("." + MODEL_ATTR)):
            if not guard and any((got[1], method) in c[2] for c in f.conds):
                guard = "hasattr"
            star = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            keywords = tuple(k.arg for k in node.keywords if k.arg)
            site = CallSite(f.path, node.lineno, method, ast.unparse(recv), guard, len(node.args), keywords, star)
            self.sites.append((site, f.conds, f.on_path, got[0]))
        slots = [*enumerate(node.args), *((k.arg, k.value) for k in node.keywords if k.arg)]
        passed = [(slot, v) for slot, v in ((s, self.value(a, f)) for s, a in slots) if v and v[0] in (MODEL, RUNNER, WORKER)]
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


# --- The architecture class and what it provides -------------------------------------------------


def find_arch(tree: Tree, arch: str) -> Cls:
    """The class SGLang's registry serves for ``arch``: an ``EntryClass`` entry of a top-level models module."""
    models = sorted(m for m in tree.modules if m.rpartition(".")[0] == MODELS_PACKAGE)
    if not models:
        raise UserError(f"{tree.src}: no {MODELS_PACKAGE} in this tree; it is not an SGLang runtime tree")
    for module in models:
        text = tree.text(tree.modules[module])
        for node in tree.parse(module).body if arch in text and REGISTRY_NAME in text else ():
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == REGISTRY_NAME for t in node.targets):
                for entry in getattr(node.value, "elts", [node.value]):
                    c = tree.cls(module, entry.id) if isinstance(entry, ast.Name) else None
                    if c is not None and c.name == arch:
                        return c
    entries = rf"^{REGISTRY_NAME}\s*=\s*(\[[^\]]*\]|\S+)"
    served = {w for m in models for line in re.findall(entries, tree.text(tree.modules[m]), re.M) for w in re.findall(r"\w+", line)}
    close = difflib.get_close_matches(arch, sorted(served), n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UserError(f"{arch}: no model class of that name in the registry ({REGISTRY_NAME} in {MODELS_PACKAGE}) of {tree.src}{hint}")


@dataclass
class Provider:
    kind: str  # "def", "attribute", "torch", "absent", "not a method", "undecided"
    where: str = ""
    signature: inspect.Signature | None = None  # of a def, self included
    static: bool = False  # a staticmethod: no self to pass

    def problem(self, site: CallSite) -> str:
        """Why ``site`` fails against this provider; "" if it binds."""
        if self.kind == "not a method" or not self.signature:
            return self.where if self.kind == "not a method" else ""
        why = binds(self.signature, site, self.static)
        return why and f"{self.where}: {why}"


def signature_of(args: ast.arguments) -> inspect.Signature:
    """The signature a def's parameters make; defaults stand in as None."""
    P = inspect.Parameter
    pos = [(a, P.POSITIONAL_ONLY) for a in args.posonlyargs] + [(a, P.POSITIONAL_OR_KEYWORD) for a in args.args]
    defaults = [P.empty] * (len(pos) - len(args.defaults)) + [None] * len(args.defaults)
    params = [P(a.arg, kind, default=d) for (a, kind), d in zip(pos, defaults)]
    params += [P(args.vararg.arg, P.VAR_POSITIONAL)] if args.vararg else []
    params += [P(a.arg, P.KEYWORD_ONLY, default=P.empty if d is None else None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return inspect.Signature(params + ([P(args.kwarg.arg, P.VAR_KEYWORD)] if args.kwarg else []))


def binds(sig: inspect.Signature, site: CallSite, static: bool = False) -> str:
    """Why ``site``'s arguments (and self, for a method) do not bind to ``sig``; "" if they do."""
    try:
        site.star or sig.bind(*([] if static else [object()]), *[None] * site.args, **dict.fromkeys(site.keywords))
    except TypeError as err:
        return str(err)
    return ""


def provider(tree: Tree, arch: Cls, method: str) -> Provider:
    """Where ``arch`` gets ``method``, by Python's lookup: attributes set in ``__init__``, then the MRO."""
    order = tree.mro(arch)
    for c in order:
        init = c.body("__init__") if isinstance(c, Cls) else None
        for node in ast.walk(init) if isinstance(init, ast.FunctionDef) else ():
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(getattr(t, "attr", "") == method and getattr(t.value, "id", "") == "self" for t in targets):
                where = f"{c.name}.__init__ ({c.path}:{node.lineno})"
                if isinstance(node.value, ast.Constant):
                    return Provider("not a method", f"{where} sets it to {node.value.value!r}")
                return Provider("attribute", f"attribute set in {where}")
    for c in order:
        if c in (NN_MODULE, "torch.nn.modules.module.Module") and method in NN_MODULE_METHODS:
            return Provider("torch", NN_MODULE)
        if isinstance(c, str) and c not in KNOWN_BASES:  # it may define the method, ahead of any later base
            return Provider("undecided", f"its base {c} is outside the tree")
        stmt = c.body(method) if isinstance(c, Cls) else None
        if stmt is None:
            continue
        where, value = f"{c.name}.{method} ({c.path}:{stmt.lineno})", getattr(stmt, "value", None)
        fn = (c.body(value.id) or tree.resolve(c.module, value.id)) if isinstance(value, ast.Name) else value
        fn = stmt if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn[1] if isinstance(fn, tuple) else fn
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):  # a function assigned becomes a method
            decorators = {(chain_of(d.func if isinstance(d, ast.Call) else d) or [""])[-1] for d in getattr(fn, "decorator_list", [])}
            if decorators & PROPERTIES:
                return Provider("not a method", f"{where} is a property, not a method")
            sig = signature_of(fn.args)
            return Provider("def", f"{c.name}.{method}{sig} ({c.path}:{stmt.lineno})", sig, "staticmethod" in decorators)
        if isinstance(value, ast.Constant):
            return Provider("not a method", f"{where} is {value.value!r}, not a method")
        return Provider("undecided", f"{where} is assigned from {ast.unparse(value)}, which the audit cannot evaluate")
    dynamic = [c for c in order if isinstance(c, Cls) and c.body("__getattr__") is not None]
    return Provider("undecided", f"{dynamic[0].name} defines __getattr__, which may supply it") if dynamic else Provider("absent")


# --- The audit -----------------------------------------------------------------------------------


def audit(sglang_src: Path, arch: str = DEFAULT_ARCH) -> Report:
    """Check that ``arch`` provides every method the EAGLE-3 path calls on the target model.

    ``sglang_src`` is the directory that contains ``sglang/``. Raises ``UserError`` for a tree or an
    architecture the audit cannot read, or a tree it no longer understands.
    """
    # Parsing makes millions of objects and no garbage cycles: the collector's passes cost more than the parse.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _audit(Path(sglang_src), arch)
    finally:
        if collecting:
            gc.enable()


def _audit(sglang_src: Path, arch: str) -> Report:
    started = time.perf_counter()
    tree = Tree(sglang_src)
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
                            f"(the target is reached through {TARGET_ATTR}); see sglang_stack/patching/audit.py")  # fmt: skip
        if where != "never" and role in (MODEL, DRAFT):
            records.setdefault((role, site.path, site.line, site.method), []).append((where, site))
    on, outside, draft = {}, {}, {}
    for (role, *_), found in sorted(records.items(), key=lambda kv: kv[0][1:]):
        hits = sorted((s for w, s in found if w == "on"), key=lambda s: bool(s.guard))  # unguarded first
        group = (draft if role == DRAFT else on) if hits else outside if role == MODEL else {}
        group.setdefault(found[0][1].method, []).append((hits or [found[0][1]])[0])
    if not on:
        raise UserError(f"{tree.src}: found no call on the target model on the EAGLE-3 path; the audit no longer "
                        f"understands this SGLang layout (sglang_stack/patching/audit.py), so it cannot pass it")  # fmt: skip
    required = {m: tuple(s for s in ss if not s.guard) for m, ss in on.items() if any(not s.guard for s in ss)}

    info = find_arch(tree, arch)
    providers, missing, undecided = {}, [], []
    for method, sites in on.items():
        p = provider(tree, info, method)
        if p.kind in ("absent", "undecided"):  # only an unguarded call needs the method to exist
            if method in required:
                (missing if p.kind == "absent" else undecided).append(Missing(method, required[method], p.where))
            continue
        bad = [(s, p.problem(s)) for s in sites if p.problem(s)]
        if bad:
            missing.append(Missing(method, tuple(s for s, _ in bad), bad[0][1]))
        else:
            providers[method] = p.where
    return Report(
        arch=arch,
        arch_site=f"{info.path}:{info.node.lineno}",
        sglang_version=tree_version(tree.src),
        required=required,
        optional={m: tuple(ss) for m, ss in on.items() if m not in required},
        outside={m: tuple(ss) for m, ss in outside.items() if m not in on},
        draft={m: tuple(ss) for m, ss in draft.items()},
        providers=providers,
        missing=sorted(missing, key=lambda m: (m.sites[0].path, m.sites[0].line)),
        undecided=undecided,
        flags=sorted(spec.flags),
        workers=[f"{c.module}.{c.name}" for c in workers],
        files_read=len(tree._ast),
        seconds=time.perf_counter() - started,
    )


def confirm(report: Report, sglang_src: Path) -> Report:
    """The dynamic half, where the model's module imports (torch installed: the image's runtime stage).

    Imports the class the static half resolved and binds every call site it found on the EAGLE-3
    path to the real signature with ``inspect.signature(...).bind``; its verdict replaces the static
    one for each method it can see. It settles what the source cannot (a base outside the tree, a
    decorator that changes a signature, a method added at import time), but it needs the static half
    for the call sites, and an instance (the weights) for ``__getattr__`` or an attribute set in
    ``__init__``.
    """
    import importlib
    import sys

    sys.path.insert(0, str(Path(sglang_src)))
    module = report.arch_site.split(":")[0][:-3].replace("/", ".")
    try:
        cls = getattr(importlib.import_module(module), report.arch)
    except Exception as err:  # whatever the import raises is the answer: say which and why
        raise UserError(f"{module}.{report.arch}: cannot import for --dynamic: {type(err).__name__}: {err}") from None
    missing, settled = [], set()
    for method in sorted(set(report.required) | set(report.optional)):
        calls = report.required.get(method, ()) + report.optional.get(method, ())
        static = inspect.getattr_static(cls, method, None)
        if static is None:
            if method in report.required and not any(m.method == method and "__getattr__" in m.reason for m in report.undecided):
                if "attribute set in" not in report.providers.get(method, ""):
                    missing.append(Missing(method, report.required[method], "not on the imported class"))
                    settled.add(method)
            continue
        settled.add(method)
        if isinstance(static, property) or not callable(getattr(cls, method)):
            missing.append(Missing(method, calls, f"a {type(static).__name__} on the imported class, not a method"))
            continue
        sig = inspect.signature(getattr(cls, method))  # bound already for a classmethod
        bad = [(s, binds(sig, s, isinstance(static, (staticmethod, classmethod)))) for s in calls]
        bad = [(s, why) for s, why in bad if why]
        if bad:
            missing.append(Missing(method, tuple(s for s, _ in bad), f"{cls.__name__}.{method}{sig} (imported): {bad[0][1]}"))
        else:
            report.confirmed.append(f"{method}{sig} binds all {len(calls)} call sites")
    kept = [m for m in report.missing if m.method not in settled]
    report.missing = sorted(kept + missing, key=lambda m: (m.sites[0].path, m.sites[0].line))
    report.undecided = [m for m in report.undecided if m.method not in settled]
    return report


def arch_from_config(path: Path) -> str:
    """The first entry of ``architectures`` in a model's ``config.json``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid JSON: {err}") from None
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise UserError(f"{path}: key 'architectures' must be a non-empty list of class names")
    return archs[0]


def check_wheel(wheel: Path, patches_dir: Path, arch: str, workdir: Path, *, log=None) -> Report:
    """What ``invoke patch-check`` proves: the wheel unpacks, the series applies exactly, the audit passes.

    Unpacks into ``workdir/site``. Raises ``UserError`` if a step fails; returns the audit report,
    which the caller checks with ``report.passed``.
    """
    from sglang_stack.patching.patches import apply_series, unpack_wheel

    say = log or (lambda msg: print(msg, flush=True))
    site = unpack_wheel(wheel, Path(workdir) / "site")
    say(f"unpacked {Path(wheel).name} into {site}")
    apply_series(site, patches_dir, strict=True, log=say)
    return audit(site, arch)


# --- Command line (the image runs this right after patching) -------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m sglang_stack.patching.audit",
        description="Check, from the source, that a model class provides every method the EAGLE-3 path calls on "
        "the target model. Exit 0: all present (any the source cannot settle are listed as undecided); 1: some "
        "missing (one line each); 2: bad input, or a tree the audit no longer understands.",
    )
    parser.add_argument("--sglang-src", required=True, type=Path, help="directory that contains sglang/")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--arch", help=f"model class name, as in config.json 'architectures' (default {DEFAULT_ARCH})")
    which.add_argument("--model-config", type=Path, help="a model's config.json: audit its first 'architectures' entry")
    parser.add_argument("--dynamic", action="store_true", help="also import the class (needs torch and SGLang's "
                        "imports: the runtime image) and bind every call site to its real signature")  # fmt: skip
    parser.add_argument("--verbose", "-v", action="store_true", help="also list every call site and each method's source")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    arch = args.arch or (arch_from_config(args.model_config) if args.model_config else DEFAULT_ARCH)
    report = audit(args.sglang_src, arch)
    if args.dynamic:
        confirm(report, args.sglang_src)
    print(json.dumps(report.to_json(), indent=2) if args.json else "\n".join(report.lines(verbose=args.verbose)))
    return 0 if report.passed else 1


if __name__ == "__main__":
    run_main(main)
