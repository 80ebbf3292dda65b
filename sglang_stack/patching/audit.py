"""Static EAGLE-3 readiness audit of an SGLang package tree.

SGLang's EAGLE-3 path calls a handful of methods on the *target* model
(``set_eagle3_layers_to_capture``, ``get_embed_and_head`` in 0.5.9). A model
class that lacks one loads all its weights, minutes for a 1T-parameter model,
and only then dies with ``AttributeError``. This module finds the same gap by
reading the source, in seconds, before anything loads.

Nothing here is a list of method names. The audit derives, from the tree:

1. the speculative-algorithm enum (the class with an ``EAGLE3`` member) and
   the value of each of its one-line predicates (``is_eagle3()``,
   ``is_eagle()``, ``is_none()`` ...) for EAGLE3 and for no speculation;
2. the EAGLE-3 worker classes, from the branches of the enum's
   ``create_worker`` that EAGLE3 can take;
3. EAGLE-3 flags: attributes that are only ever set to a falsy constant
   outside EAGLE-3 code (``eagle_use_aux_hidden_state``);
4. every call on the target model: ``self.model`` in ``ModelRunner``,
   ``<x>.model_runner.model`` outside the speculative package, and
   ``<x>.target_worker.model_runner.model`` anywhere. A call counts when it
   runs under EAGLE3 and not without speculation, or sits in an EAGLE-3
   worker module outside a branch EAGLE3 cannot take. ``hasattr`` /
   ``getattr(..., None)`` / ``except AttributeError`` make a call optional;
   a receiver named ``draft*``/``mtp*`` is the draft model;
5. the architecture class, through the model registry (``EntryClass``) and
   in-tree inheritance.

The structural names it starts from (``ModelRunner``, ``model_runner``,
``target_worker``, ``create_worker``, ``EntryClass``) are the ANCHORS below;
if a release renames one, the audit stops with an error naming it rather
than passing on a tree it no longer understands.

Runs inside the image right after patching, so the standard library only.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack.errors import UserError, run_main
from sglang_stack.patching.patches import tree_version

DEFAULT_ARCH = "KimiK25ForConditionalGeneration"

# ANCHORS: the structural names in SGLang that the derivation starts from (see module doc).
EAGLE3_MEMBER = "EAGLE3"  # SpeculativeAlgorithm.EAGLE3
NO_SPEC_MEMBER = "NONE"  # SpeculativeAlgorithm.NONE: speculative decoding off
WORKER_FACTORY = "create_worker"  # SpeculativeAlgorithm.create_worker(server_args)
RUNTIME_PACKAGE = "srt"  # sglang/srt: the server runtime; the EAGLE-3 path lives here
RUNNER_CLASS = "ModelRunner"  # owns the model: self.model
RUNNER_ATTR = "model_runner"  # what workers and graph runners call their ModelRunner
MODEL_ATTR = "model"  # ModelRunner.model
TARGET_ATTR = "target_worker"  # what the speculative workers call the target's worker
REGISTRY_NAME = "EntryClass"  # models/*.py: the classes the registry serves
MODELS_PACKAGE = ("srt", "models")  # where the registry looks, under sglang/
DRAFT_MARKERS = ("draft", "mtp")  # a receiver named like this holds the draft model
DRAFT_FLAG_PREFIX = "is_draft"  # ModelRunner.is_draft_worker: code under it runs for the draft only

EAGLE3 = "eagle3"  # context: runs with EAGLE-3 and not without speculation
GENERAL = "general"  # context: runs without speculation too
EXCLUDED = "excluded"  # context: EAGLE-3 never gets here

_FALSY = (False, None, 0, "")
_MODEL_ALIAS = re.compile(rf"self\.\w+\s*=\s*[\w.()\[\]]*\.{MODEL_ATTR}\s*$", re.M)
_GUARD_EXCEPTIONS = {"AttributeError", "Exception", "BaseException"}


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    """One call of ``method`` on a model, at ``path:line`` (path relative to the tree)."""

    path: str
    line: int
    method: str
    receiver: str
    role: str  # "target" or "draft"
    context: str  # EAGLE3 or GENERAL
    guard: str = ""  # why the call is optional ("hasattr", "except AttributeError"), or ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Missing:
    method: str
    sites: tuple[CallSite, ...]

    def line(self, arch: str) -> str:
        where = ", ".join(str(s) for s in self.sites)
        return f"missing: {arch}.{self.method}() is called on the target model at {where}"


@dataclass
class Report:
    """What ``audit`` found. ``passed`` is False iff ``missing`` is not empty."""

    arch: str
    arch_site: str  # path:line of the class
    sglang_version: str
    required: dict[str, tuple[CallSite, ...]]  # unguarded target calls on the EAGLE-3 path
    optional: dict[str, tuple[CallSite, ...]]  # guarded target calls on the EAGLE-3 path
    outside: dict[str, tuple[CallSite, ...]]  # target calls off the EAGLE-3 path (not checked)
    draft: dict[str, tuple[CallSite, ...]]  # calls on the draft model (not the target's business)
    providers: dict[str, str]  # method -> "Class (path:line)" for every required method found
    missing: list[Missing]
    external_bases: list[str]  # bases outside the tree, assumed to add none of these methods
    dynamic: list[str]  # in-tree classes of the MRO that define __getattr__
    flags: list[str]  # derived EAGLE-3 flag attributes
    workers: list[str]  # derived EAGLE-3 worker classes
    files_read: int
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.missing

    @property
    def summary(self) -> str:
        n_sites = sum(len(s) for s in self.required.values())
        names = ", ".join(sorted(self.required))
        if self.passed:
            return (
                f"audit passed: {self.arch} provides all {len(self.required)} methods that the EAGLE-3 path "
                f"of sglang {self.sglang_version} calls on the target model ({names}; {n_sites} call sites)"
            )
        lacking = ", ".join(m.method for m in self.missing)
        return (
            f"audit failed: {self.arch} lacks {len(self.missing)} of the {len(self.required)} methods that the "
            f"EAGLE-3 path of sglang {self.sglang_version} calls on the target model: {lacking}"
        )

    def lines(self, verbose: bool = False) -> list[str]:
        """The command's output: one line per missing method, then the summary."""
        out = [m.line(self.arch) for m in self.missing]
        if verbose:
            out.append(f"architecture: {self.arch} at {self.arch_site}")
            out.append(f"EAGLE-3 workers: {', '.join(self.workers)}")
            out.append(f"EAGLE-3 flags: {', '.join(self.flags) or '-'}")
            for title, group in (
                ("required", self.required),
                ("optional (guarded)", self.optional),
                ("outside the EAGLE-3 path (not checked)", self.outside),
                ("on the draft model (not checked)", self.draft),
            ):
                for method, sites in sorted(group.items()):
                    where = ", ".join(f"{s}{' [' + s.guard + ']' if s.guard else ''}" for s in sites)
                    provider = self.providers.get(method)
                    tail = f" -> {provider}" if provider and group is self.required else ""
                    out.append(f"{title}: {method} at {where}{tail}")
            for base in self.external_bases:
                out.append(f"note: base class {base} is outside the tree; assumed to add none of these methods")
            for cls in self.dynamic:
                out.append(f"note: {cls} defines __getattr__; a method it forwards dynamically is not seen")
            out.append(f"read {self.files_read} files in {self.seconds:.2f} s")
        out.append(self.summary)
        return out

    def to_json(self) -> dict:
        def sites(group):
            return {m: [str(s) for s in ss] for m, ss in sorted(group.items())}

        return {
            "arch": self.arch,
            "arch_site": self.arch_site,
            "sglang_version": self.sglang_version,
            "passed": self.passed,
            "summary": self.summary,
            "missing": {m.method: [str(s) for s in m.sites] for m in self.missing},
            "required": sites(self.required),
            "optional": sites(self.optional),
            "outside": sites(self.outside),
            "draft": sites(self.draft),
            "providers": dict(sorted(self.providers.items())),
            "flags": self.flags,
            "workers": self.workers,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------


class Tree:
    """An unpacked sglang package: ``root/sglang/...``. Reads and parses lazily."""

    def __init__(self, sglang_src: Path):
        self.src = Path(sglang_src)
        self.pkg = self.src / "sglang"
        if not (self.pkg / RUNTIME_PACKAGE).is_dir():
            hint = ""
            if (self.src / "srt").is_dir() and self.src.name == "sglang":
                hint = f" (pass its parent, {self.src.parent})"
            raise UserError(f"{self.src}: no sglang/ package here{hint}; pass the directory that contains sglang/")
        self._text: dict[str, str] = {}
        self._ast: dict[str, ast.Module] = {}
        runtime = self.pkg / RUNTIME_PACKAGE
        self.paths = sorted(
            p.relative_to(self.src).as_posix() for p in runtime.rglob("*.py") if "__pycache__" not in p.parts
        )
        self.by_module = {self.module_of(p): p for p in self.paths}

    @staticmethod
    def module_of(rel: str) -> str:
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def text(self, rel: str) -> str:
        if rel not in self._text:
            self._text[rel] = (self.src / rel).read_text(encoding="utf-8", errors="replace")
        return self._text[rel]

    def parse(self, rel: str) -> ast.Module:
        if rel not in self._ast:
            try:
                self._ast[rel] = ast.parse(self.text(rel), filename=rel)
            except SyntaxError as err:
                raise UserError(f"{self.src / rel}:{err.lineno}: cannot parse: {err.msg}") from None
        return self._ast[rel]

    def grep(self, words, among=None, pattern: re.Pattern | None = None) -> list[str]:
        """Files that contain any of ``words`` (plain substrings: fast), and match ``pattern`` if given."""
        words = [words] if isinstance(words, str) else list(words)
        out = []
        for p in self.paths if among is None else among:
            text = self.text(p)
            if any(w in text for w in words) and (pattern is None or pattern.search(text)):
                out.append(p)
        return out

    @property
    def files_parsed(self) -> int:
        return len(self._ast)

    def version(self) -> str:
        return tree_version(self.src)


# --------------------------------------------------------------------------
# Small AST helpers
# --------------------------------------------------------------------------


def chain_of(node: ast.AST) -> list[str] | None:
    """``self.a[i].b(x).c`` -> ["self", "a", "[]", "b", "()", "c"]; None if not a plain chain."""
    out: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            out.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            out.append("[]")
            node = node.value
        elif isinstance(node, ast.Call):
            out.append("()")
            node = node.func
        elif isinstance(node, ast.Name):
            out.append(node.id)
            return out[::-1]
        else:
            return None


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_falsy_const(node: ast.AST | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant):
        return node.value in _FALSY and not isinstance(node.value, float)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not node.elts:
        return True
    if isinstance(node, ast.Dict) and not node.keys:
        return True
    return False


def _terminates(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _raises(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Raise)


def _kleene_and(values):
    if any(v is False for v in values):
        return False
    if all(v is True for v in values):
        return True
    return None


def _kleene_or(values):
    if any(v is True for v in values):
        return True
    if all(v is False for v in values):
        return False
    return None


def _kleene_not(value):
    return None if value is None else not value


def _has_guard(test: ast.AST, method: str, polarity: bool) -> bool:
    """Does ``test`` being ``polarity`` imply that the receiver has ``method``?"""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _has_guard(test.operand, method, not polarity)
    if isinstance(test, ast.BoolOp):
        parts = [_has_guard(v, method, polarity) for v in test.values]
        conj = isinstance(test.op, ast.And) == polarity
        return any(parts) if conj else all(parts)
    if not polarity:
        return False
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
        name, args = test.func.id, test.args
        if name == "callable" and len(args) == 1:
            return _has_guard(args[0], method, True)
        if name in ("hasattr", "getattr") and len(args) >= 2 and _const_str(args[1]) == method:
            return True
    return False


# --------------------------------------------------------------------------
# Derivation
# --------------------------------------------------------------------------


@dataclass
class SpecEnum:
    path: str
    name: str
    members: list[str]
    predicates: dict[str, dict[str, bool | None]]  # name -> member -> value
    node: ast.ClassDef


@dataclass
class _Env:
    module: str
    path: str
    cls: str | None = None
    aliases: dict[str, list[str]] = field(default_factory=dict)
    try_guard: str = ""
    in_function: bool = False


class _Audit:
    def __init__(self, tree: Tree):
        self.tree = tree
        self.flags: set[str] = set()
        self.runner_classes = {RUNNER_CLASS}
        self.class_aliases: dict[tuple[str, str], dict[str, list[str]]] = {}
        self.enum = self._find_enum()
        self.workers = self._eagle3_workers()
        self.worker_modules = {mod for mod, _ in self.workers}
        self.spec_package = self.tree.module_of(self.enum.path).rsplit(".", 1)[0]

    # --- the enum and its predicates ---------------------------------------

    def _find_enum(self) -> SpecEnum:
        member = re.compile(rf"^\s+{EAGLE3_MEMBER}\s*=", re.M)
        for path in self.tree.grep(EAGLE3_MEMBER, pattern=member):
            for node in ast.walk(self.tree.parse(path)):
                if not isinstance(node, ast.ClassDef):
                    continue
                members = [
                    t.id
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign)
                    for t in stmt.targets
                    if isinstance(t, ast.Name) and t.id.isupper()
                ]
                if EAGLE3_MEMBER in members and NO_SPEC_MEMBER in members:
                    return SpecEnum(path, node.name, members, self._predicates(node, members), node)
        raise UserError(
            f"{self.tree.src}: no speculative-algorithm enum (a class with members {EAGLE3_MEMBER} and "
            f"{NO_SPEC_MEMBER}) in this tree; this SGLang layout is not one the audit knows (sglang_stack/patching/audit.py)"
        )

    def _predicates(self, cls: ast.ClassDef, members: list[str]) -> dict[str, dict[str, bool | None]]:
        bodies: dict[str, ast.expr] = {}
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            stmts = [s for s in fn.body if not (isinstance(s, ast.Expr) and _const_str(s.value) is not None)]
            if len(stmts) == 1 and isinstance(stmts[0], ast.Return) and stmts[0].value is not None:
                if len(fn.args.args) == 1:  # self only
                    bodies[fn.name] = stmts[0].value
        table: dict[str, dict[str, bool | None]] = {}

        def value(name: str, member: str, stack: tuple = ()) -> bool | None:
            if name in stack:
                return None
            return evaluate(bodies[name], member, stack + (name,))

        def evaluate(node: ast.AST, member: str, stack: tuple) -> bool | None:
            if isinstance(node, ast.BoolOp):
                vals = [evaluate(v, member, stack) for v in node.values]
                return _kleene_and(vals) if isinstance(node.op, ast.And) else _kleene_or(vals)
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                return _kleene_not(evaluate(node.operand, member, stack))
            if isinstance(node, ast.Compare) and len(node.ops) == 1:
                left, right, op = node.left, node.comparators[0], node.ops[0]
                if isinstance(right, ast.Name) and right.id == "self":
                    left, right = right, left
                if isinstance(left, ast.Name) and left.id == "self":
                    named = self._member_refs(right, cls.name, members)
                    if named is not None:
                        hit = member in named
                        if isinstance(op, (ast.Eq, ast.Is, ast.In)):
                            return hit
                        if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
                            return not hit
                return None
            if (
                isinstance(node, ast.Call)
                and not node.args
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and node.func.attr in bodies
            ):
                return value(node.func.attr, member, stack)
            return None

        for name in bodies:
            table[name] = {m: value(name, m) for m in members}
        return {n: v for n, v in table.items() if v[EAGLE3_MEMBER] is not None}

    @staticmethod
    def _member_refs(node: ast.AST, cls_name: str, members: list[str]) -> set[str] | None:
        """``Cls.EAGLE3`` / ``(Cls.A, Cls.B)`` / ``"EAGLE3"`` -> the member names; None if not that."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            out: set[str] = set()
            for elt in node.elts:
                got = _Audit._member_refs(elt, cls_name, members)
                if got is None:
                    return None
                out |= got
            return out
        if isinstance(node, ast.Attribute) and node.attr in members:
            chain = chain_of(node.value)
            if chain and chain[-1] == cls_name:
                return {node.attr}
        text = _const_str(node)
        if text is not None and text.upper() in members:
            return {text.upper()}
        return None

    # --- EAGLE-3 workers ----------------------------------------------------

    def _eagle3_workers(self) -> list[tuple[str, str]]:
        factory = next(
            (f for f in self.enum.node.body if isinstance(f, ast.FunctionDef) and f.name == WORKER_FACTORY), None
        )
        if factory is None:
            raise UserError(
                f"{self.tree.src / self.enum.path}: {self.enum.name}.{WORKER_FACTORY}() not found; "
                f"the audit needs it to find the EAGLE-3 workers (sglang_stack/patching/audit.py)"
            )
        module = self.tree.module_of(self.enum.path)
        imports = _imports(self.tree.parse(self.enum.path), module)
        found: list[tuple[str, str]] = []

        def block(stmts, local: dict[str, str]):
            local = dict(local)
            for stmt in stmts:
                if isinstance(stmt, ast.ImportFrom):
                    local.update(_import_from(stmt, module))
                elif isinstance(stmt, ast.If):
                    value = self.eval_test(stmt.test, EAGLE3_MEMBER, in_enum=True)
                    if value is not False:
                        block(stmt.body, local)
                    if value is not True:
                        block(stmt.orelse, local)
                    if value is True and _terminates(stmt.body):
                        return
                    if value is False and _terminates(stmt.orelse):
                        return
                elif isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Name):
                    name = stmt.value.id
                    origin = local.get(name) or imports.get(name)
                    if origin and "." in origin:
                        mod, _, cls = origin.rpartition(".")
                        found.append((mod, cls))
                    return
                elif isinstance(stmt, (ast.With, ast.Try)):
                    block(stmt.body, local)

        block(factory.body, {})
        if not found:
            raise UserError(
                f"{self.tree.src / self.enum.path}: {self.enum.name}.{WORKER_FACTORY}() returns no worker class "
                f"for {EAGLE3_MEMBER}; the audit cannot find the EAGLE-3 path (sglang_stack/patching/audit.py)"
            )
        for mod, cls in found:
            if mod not in self.tree.by_module:
                raise UserError(f"{self.tree.src}: EAGLE-3 worker {cls} comes from {mod}, which is not in the tree")
        return found

    # --- conditions ---------------------------------------------------------

    def eval_test(self, node: ast.AST, world: str, in_enum: bool = False) -> bool | None:
        """Value of a condition when the algorithm is ``world`` (EAGLE3 or NONE); None if unknown."""
        if isinstance(node, ast.BoolOp):
            vals = [self.eval_test(v, world, in_enum) for v in node.values]
            return _kleene_and(vals) if isinstance(node.op, ast.And) else _kleene_or(vals)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return _kleene_not(self.eval_test(node.operand, world, in_enum))
        if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute):
            pred = self.enum.predicates.get(node.func.attr)
            if pred is not None:
                receiver = " ".join(chain_of(node.func.value) or ["()"]).lower()
                # is_none() and friends exist on other enums too (the MoE a2a backend):
                # only a receiver that names the speculative algorithm counts.
                if "spec" in receiver or "algo" in receiver or receiver == "()" or (in_enum and receiver == "self"):
                    return pred[world]
            return None
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right, op = node.left, node.comparators[0], node.ops[0]
            for a, b in ((left, right), (right, left)):
                named = self._member_refs(b, self.enum.name, self.enum.members)
                if named is None:
                    continue
                if isinstance(b, ast.Constant) and not (chain_of(a) and "spec" in " ".join(chain_of(a)).lower()):
                    continue
                hit = world in named
                if isinstance(op, (ast.Eq, ast.Is, ast.In)):
                    return hit
                if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
                    return not hit
            return None
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name and name.startswith(DRAFT_FLAG_PREFIX):
            return False  # `is_draft_worker` is False where the target model runs
        if isinstance(node, ast.Attribute) and node.attr in self.flags:
            return None if world == EAGLE3_MEMBER else False
        return None

    def context(self, conds: tuple, env: _Env, by_condition: bool = False) -> str:
        def value(world):
            return _kleene_and(
                [self.eval_test(t, world) if pol else _kleene_not(self.eval_test(t, world)) for t, pol, _ in conds]
            )

        if value(EAGLE3_MEMBER) is False:
            return EXCLUDED
        if env.module in self.worker_modules and not by_condition:
            return EAGLE3
        if value(NO_SPEC_MEMBER) is False:
            return EAGLE3
        return GENERAL

    # --- roles --------------------------------------------------------------

    def role(self, node: ast.AST, env: _Env) -> tuple[str, list[str]] | None:
        chain = chain_of(node)
        if not chain:
            return None
        if chain[0] in env.aliases:
            chain = env.aliases[chain[0]] + chain[1:]
        elif chain[0] == "self" and len(chain) > 1 and env.cls:
            attrs = self.class_aliases.get((env.path, env.cls), {})
            if chain[1] in attrs:
                chain = attrs[chain[1]] + chain[2:]
        if chain[-1] != MODEL_ATTR:
            return None
        if any(marker in part.lower() for part in chain for marker in DRAFT_MARKERS):
            return "draft", chain
        if TARGET_ATTR in chain and chain[-2:] == [RUNNER_ATTR, MODEL_ATTR]:
            return "target", chain
        if env.module == self.spec_package or env.module.startswith(self.spec_package + "."):
            # Inside the speculative package a worker *is* the draft worker: its own
            # model_runner holds the draft model. The target is only reached
            # through target_worker (handled above).
            if chain[-2:] == [RUNNER_ATTR, MODEL_ATTR] or chain == ["self", MODEL_ATTR]:
                return "draft", chain
            return None
        if chain[-2:] == [RUNNER_ATTR, MODEL_ATTR] and len(chain) >= 2:
            return "target", chain
        if chain == ["self", MODEL_ATTR] and env.cls in self.runner_classes:
            return "target", chain
        return None


def _import_from(node: ast.ImportFrom, module: str) -> dict[str, str]:
    base = node.module or ""
    if node.level:
        parent = module.split(".")[: -node.level] if node.level else []
        base = ".".join(parent + ([base] if base else []))
    return {(a.asname or a.name): f"{base}.{a.name}" for a in node.names if a.name != "*"}


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Module-level names bound by imports: name -> dotted origin."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            out.update(_import_from(node, module))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    out[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom):
                    out.update(_import_from(sub, module))
    return out


# --------------------------------------------------------------------------
# Scanning: calls on models, and assignments that make flags
# --------------------------------------------------------------------------


@dataclass
class _Scan:
    calls: list[CallSite] = field(default_factory=list)
    # attribute -> [(falsy constant?, context)]
    assigns: dict[str, list[tuple[bool, str]]] = field(default_factory=dict)
    # the path conditions of each target call, and of each attribute assignment
    call_conds: list[tuple] = field(default_factory=list)
    assign_conds: dict[str, list[tuple]] = field(default_factory=dict)

    def condition_names(self) -> set[str]:
        """Attribute names that can decide whether a target call runs, directly or
        through the condition an attribute was set under: the only candidate flags."""
        out: set[str] = set()
        todo = list(self.call_conds)
        while todo:
            for test, _, _ in todo.pop():
                for node in ast.walk(test):
                    name = node.attr if isinstance(node, ast.Attribute) else None
                    if name and name not in out:
                        out.add(name)
                        todo.extend(self.assign_conds.get(name, ()))
        return out


class _Scanner:
    """Walks one module with the path condition of every statement and expression."""

    def __init__(self, audit: _Audit, path: str, out: _Scan):
        self.audit = audit
        self.path = path
        self.module = audit.tree.module_of(path)
        self.out = out
        self.lines = audit.tree.text(path).split("\n")

    def relevant(self, node: ast.AST, env: _Env) -> bool:
        """Can this expression hold a call on a model? (Skipping the rest halves the audit's time.)"""
        lines = self.lines[node.lineno - 1 : node.end_lineno]
        names = [f"{a}." for a in env.aliases]
        if env.cls:
            names += [f".{a}." for a in self.audit.class_aliases.get((env.path, env.cls), ())]
        return any(
            f".{MODEL_ATTR}." in line or "getattr(" in line or any(n in line for n in names) for line in lines
        )

    def run(self) -> None:
        tree = self.audit.tree.parse(self.path)
        self.block(tree.body, (), _Env(self.module, self.path))

    # statements ------------------------------------------------------------

    def block(self, stmts: list[ast.stmt], conds: tuple, env: _Env) -> None:
        for stmt in stmts:
            self.stmt(stmt, conds, env)
            if isinstance(stmt, ast.If):
                # `if not cond: return` guards the rest of the block. An exit by
                # `raise` does too, but a missing method then still fails the
                # server: it does not make a hasattr-checked call optional.
                if _terminates(stmt.body) and not _terminates(stmt.orelse):
                    conds = conds + ((stmt.test, False, not _raises(stmt.body)),)
                elif _terminates(stmt.orelse) and not _terminates(stmt.body):
                    conds = conds + ((stmt.test, True, not _raises(stmt.orelse)),)

    def stmt(self, stmt: ast.stmt, conds: tuple, env: _Env) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = _Env(env.module, env.path, env.cls, dict(env.aliases), "", True)
            self.block(stmt.body, conds, inner)
            return
        if isinstance(stmt, ast.ClassDef):
            cls_env = _Env(env.module, env.path, stmt.name)
            if (env.path, stmt.name) not in self.audit.class_aliases:
                self.audit.class_aliases[(env.path, stmt.name)] = self.attribute_aliases(stmt, cls_env)
            self.block(stmt.body, conds, cls_env)
            return
        if isinstance(stmt, ast.If):
            if self.relevant(stmt.test, env):
                self.expr(stmt.test, conds, env)
            self.block(stmt.body, conds + ((stmt.test, True, not _raises(stmt.orelse)),), env)
            self.block(stmt.orelse, conds + ((stmt.test, False, not _raises(stmt.body)),), env)
            return
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            guard = _try_guard(stmt)
            body_env = env if not guard else _Env(env.module, env.path, env.cls, env.aliases, guard, env.in_function)
            self.block(stmt.body, conds, body_env)
            for handler in stmt.handlers:
                self.block(handler.body, conds, env)
            self.block(stmt.orelse, conds, env)
            self.block(stmt.finalbody, conds, env)
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            self.assignment(stmt, conds, env)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                # `model = self.model_runner.model` makes `model` a model from here on.
                got = self.audit.role(stmt.value, env)
                if got:
                    env.aliases[stmt.targets[0].id] = got[1]
                else:
                    env.aliases.pop(stmt.targets[0].id, None)
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                self.block(value, conds, env)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST) and (not hasattr(item, "lineno") or self.relevant(item, env)):
                        self.expr(item, conds, env)
            elif isinstance(value, ast.AST):
                if not hasattr(value, "lineno") or self.relevant(value, env):
                    self.expr(value, conds, env)

    def assignment(self, stmt, conds: tuple, env: _Env) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            name = None
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                name = target.attr
            elif isinstance(target, ast.Name) and env.cls is not None and not env.in_function and not conds:
                name = target.id  # class-level default (dataclass field, class attribute)
            if name is None or value is None and isinstance(stmt, ast.AnnAssign):
                continue
            # Flags come from conditions only: in a worker module every
            # attribute is set on the EAGLE-3 path, and that alone says nothing.
            context = self.audit.context(conds, env, by_condition=True)
            self.out.assigns.setdefault(name, []).append((_is_falsy_const(value), context))
            if conds:
                self.out.assign_conds.setdefault(name, []).append(conds)

    def attribute_aliases(self, cls: ast.ClassDef, env: _Env) -> dict[str, list[str]]:
        """``self.target_model = self.target_worker.model_runner.model`` makes ``self.target_model`` a model."""
        out: dict[str, list[str]] = {}
        text = "\n".join(self.lines[cls.lineno - 1 : cls.end_lineno])
        if not _MODEL_ALIAS.search(text):
            return out
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id == "self" and target.attr != MODEL_ATTR:
                        got = self.audit.role(node.value, env)
                        if got:
                            out[target.attr] = got[1]
        return out

    # expressions -----------------------------------------------------------

    def expr(self, node: ast.AST, conds: tuple, env: _Env) -> None:
        if isinstance(node, ast.BoolOp):
            prior: tuple = ()
            for value in node.values:
                self.expr(value, conds + prior, env)
                prior = prior + ((value, isinstance(node.op, ast.And), True),)
            return
        if isinstance(node, ast.IfExp):
            self.expr(node.test, conds, env)
            self.expr(node.body, conds + ((node.test, True, True),), env)
            self.expr(node.orelse, conds + ((node.test, False, True),), env)
            return
        if isinstance(node, ast.Call):
            self.call(node, conds, env)
        if isinstance(node, ast.Lambda):
            self.expr(node.body, conds, env)
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child, conds, env)

    def call(self, node: ast.Call, conds: tuple, env: _Env) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver, method, guard = func.value, func.attr, ""
        elif (
            isinstance(func, ast.Call)
            and isinstance(func.func, ast.Name)
            and func.func.id == "getattr"
            and len(func.args) >= 2
            and _const_str(func.args[1])
        ):
            # getattr(model, "m")(...) needs m; getattr(model, "m", default)(...) does not.
            receiver, method = func.args[0], _const_str(func.args[1])
            guard = "getattr default" if len(func.args) > 2 else ""
        else:
            return
        got = self.audit.role(receiver, env)
        if got is None:
            return
        context = self.audit.context(conds, env)
        if context == EXCLUDED:
            return
        if not guard:
            if any(_has_guard(test, method, pol) for test, pol, guards in conds if guards):
                guard = "hasattr"
            elif env.try_guard:
                guard = env.try_guard
        self.out.calls.append(
            CallSite(self.path, node.lineno, method, ast.unparse(receiver), got[0], context, guard)
        )
        if got[0] == "target":
            self.out.call_conds.append(conds)


def _try_guard(node) -> str:
    """``try: ... except AttributeError: <no raise>`` makes the body's calls optional."""
    for handler in node.handlers:
        names = []
        if handler.type is None:
            names = ["BaseException"]
        else:
            for t in handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]:
                chain = chain_of(t)
                if chain:
                    names.append(chain[-1])
        if set(names) & _GUARD_EXCEPTIONS and not any(isinstance(n, ast.Raise) for n in ast.walk(handler)):
            return f"except {'/'.join(names)}"
    return ""


# --------------------------------------------------------------------------
# The architecture class: registry and inheritance
# --------------------------------------------------------------------------


@dataclass
class _ClassInfo:
    name: str
    path: str
    line: int
    methods: dict[str, int]  # name -> line
    bases: list[tuple[str, str | None]]  # (as written, resolved "module.Class" or None)


class _Classes:
    def __init__(self, tree: Tree):
        self.tree = tree
        self._cache: dict[tuple[str, str], _ClassInfo | None] = {}

    def lookup(self, module: str, name: str, depth: int = 0) -> _ClassInfo | None:
        """Class ``name`` as seen from ``module``: defined there, or imported into it."""
        key = (module, name)
        if key in self._cache:
            return self._cache[key]
        self._cache[key] = None  # cycles
        path = self.tree.by_module.get(module)
        info = None
        if path is not None and depth < 20:
            tree = self.tree.parse(path)
            node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
            if node is not None:
                info = self._info(node, path, module)
            else:
                origin = _imports(tree, module).get(name)
                if origin and "." in origin:
                    mod, _, cls = origin.rpartition(".")
                    info = self.lookup(mod, cls, depth + 1)
        self._cache[key] = info
        return info

    def _info(self, node: ast.ClassDef, path: str, module: str) -> _ClassInfo:
        methods: dict[str, int] = {}
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[stmt.name] = stmt.lineno
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        methods[t.id] = stmt.lineno
        imports = _imports(self.tree.parse(path), module)
        local = {n.name for n in self.tree.parse(path).body if isinstance(n, ast.ClassDef)}
        bases = []
        for base in node.bases:
            written = ast.unparse(base)
            chain = chain_of(base)
            resolved = None
            if chain and "()" not in chain and "[]" not in chain:
                if len(chain) == 1 and chain[0] in local:
                    resolved = f"{module}.{chain[0]}"
                elif chain[0] in imports:
                    resolved = ".".join([imports[chain[0]]] + chain[1:])
            bases.append((written, resolved))
        return _ClassInfo(node.name, path, node.lineno, methods, bases)

    def mro(self, info: _ClassInfo) -> tuple[list[_ClassInfo], list[str]]:
        """In-tree classes, depth-first in base order, and the bases outside the tree."""
        seen: list[_ClassInfo] = []
        external: list[str] = []

        def visit(ci: _ClassInfo):
            if any(c.path == ci.path and c.name == ci.name for c in seen):
                return
            seen.append(ci)
            for written, resolved in ci.bases:
                base = None
                if resolved and resolved.startswith("sglang."):
                    mod, _, cls = resolved.rpartition(".")
                    base = self.lookup(mod, cls)
                if base is None:
                    label = resolved or written
                    if label not in ("object", "Generic") and not label.startswith(("Generic[", "typing.")):
                        if label not in external:
                            external.append(label)
                else:
                    visit(base)

        visit(info)
        return seen, external


def resolve_arch(tree: Tree, arch: str) -> _ClassInfo:
    """The class SGLang's registry serves for ``arch`` (a config.json ``architectures`` entry)."""
    models = "/".join(("sglang",) + MODELS_PACKAGE) + "/"
    candidates = [p for p in tree.paths if p.startswith(models)]
    if not candidates:
        raise UserError(f"{tree.src}: no {models} in this tree; it is not an SGLang runtime tree")
    registry = re.compile(rf"^{REGISTRY_NAME}\s*=", re.M)
    classes = _Classes(tree)
    for path in tree.grep(arch, candidates, pattern=registry):
        module = tree.module_of(path)
        for node in tree.parse(path).body:
            if not (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == REGISTRY_NAME for t in node.targets
            )):
                continue
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for value in values:
                chain = chain_of(value)
                if chain and chain[-1] == arch:
                    info = classes.lookup(module, arch)
                    if info is not None:
                        return info
    served = sorted(
        {
            name
            for path in tree.grep(REGISTRY_NAME, candidates, pattern=registry)
            for line in re.findall(rf"^{REGISTRY_NAME}\s*=\s*(\[[^\]]*\]|\S+)", tree.text(path), re.M)
            for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line)
        }
    )
    close = difflib.get_close_matches(arch, served, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UserError(
        f"{arch}: no model class of that name in the registry ({REGISTRY_NAME} in {models}*.py) of {tree.src}{hint}"
    )


# --------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------


def derive(tree: Tree) -> tuple[_Audit, _Scan]:
    """Every call on a model that the tree makes, classified, and the audit state behind it."""
    audit = _Audit(tree)
    runner_def = re.compile(rf"^\s*class\s+{RUNNER_CLASS}\b", re.M)
    if not tree.grep(f"class {RUNNER_CLASS}", pattern=runner_def):
        raise UserError(
            f"{tree.src}: class {RUNNER_CLASS} not found; this SGLang layout is not one the audit knows "
            f"(sglang_stack/patching/audit.py)"
        )
    worker_paths = {tree.by_module[mod] for mod, _ in audit.workers}
    # A file that names no predicate, no EAGLE3, no target_worker and no flag
    # has no EAGLE-3 condition and no target call: it need not be parsed.
    # A file that names no predicate on a speculative-algorithm receiver, no EAGLE3,
    # no target_worker and no flag has no EAGLE-3 condition and no target call on the
    # EAGLE-3 path: it need not be parsed (a third of the cost is parsing).
    predicates = sorted(audit.enum.predicates)
    on_spec = re.compile(
        rf"(?i)(spec|algo)[\w.]*(\([^()]*\))?\.({'|'.join(map(re.escape, predicates))})\("
    )
    atom_files = set(tree.grep([f".{p}(" for p in predicates], pattern=on_spec))
    _runner_classes(audit, tree)
    files: set[str] = set()
    for _ in range(10):
        # Files only join, so a flag that a newly read file sets truthy drops out again.
        files |= atom_files | set(tree.grep([EAGLE3_MEMBER, TARGET_ATTR] + sorted(audit.flags))) | worker_paths
        scan = _Scan()
        for path in sorted(files):
            _Scanner(audit, path, scan).run()
        deciding = scan.condition_names()
        flags = {
            name
            for name, seen in scan.assigns.items()
            if name in deciding
            and any(ctx == EAGLE3 and not falsy for falsy, ctx in seen)
            and all(falsy for falsy, ctx in seen if ctx != EAGLE3)
        }
        if flags == audit.flags and not set(tree.grep(sorted(flags))) - files:
            return audit, scan
        audit.flags = flags
    raise UserError(f"{tree.src}: the EAGLE-3 flags do not settle ({', '.join(sorted(audit.flags))}); see sglang_stack/patching/audit.py")


def _runner_classes(audit: _Audit, tree: Tree) -> None:
    """ModelRunner, its in-tree subclasses and its mixins: in all of them ``self.model`` is the model."""
    definition = re.compile(rf"^class\s+{RUNNER_CLASS}\b", re.M)
    for path in tree.grep(f"class {RUNNER_CLASS}", pattern=definition):
        for node in tree.parse(path).body:
            if isinstance(node, ast.ClassDef) and node.name == RUNNER_CLASS:
                audit.runner_classes.update((chain_of(b) or [""])[-1] for b in node.bases)
    audit.runner_classes -= {"", "object"}
    subclass = re.compile(rf"^\s*class\s+\w+\([^)]*\b{RUNNER_CLASS}\b", re.M)
    files = tree.grep(RUNNER_CLASS, pattern=subclass)
    found = {RUNNER_CLASS}
    changed = True
    while changed:
        changed = False
        for path in files:
            for node in ast.walk(tree.parse(path)):
                if isinstance(node, ast.ClassDef) and node.name not in found:
                    if any((chain_of(b) or [""])[-1] in found for b in node.bases):
                        found.add(node.name)
                        changed = True
    audit.runner_classes |= found


def audit(sglang_src: Path, arch: str = DEFAULT_ARCH) -> Report:
    """Check that ``arch`` provides every method the EAGLE-3 path calls on the target model.

    ``sglang_src`` is the directory that contains ``sglang/``. Raises
    ``UserError`` for a tree or an architecture the audit cannot read.
    """
    started = time.perf_counter()
    tree = Tree(Path(sglang_src))
    state, scan = derive(tree)
    info = resolve_arch(tree, arch)
    classes = _Classes(tree)
    mro, external = classes.mro(info)

    def group(sites):
        out: dict[str, list[CallSite]] = {}
        for s in sorted(sites, key=lambda s: (s.path, s.line)):
            out.setdefault(s.method, []).append(s)
        return {m: tuple(v) for m, v in out.items()}

    target = [s for s in scan.calls if s.role == "target"]
    required = group(s for s in target if s.context == EAGLE3 and not s.guard)
    optional = group(s for s in target if s.context == EAGLE3 and s.guard and s.method not in required)
    outside = group(s for s in target if s.context == GENERAL and s.method not in required)
    draft = group(s for s in scan.calls if s.role == "draft" and s.context == EAGLE3)
    if not required:
        raise UserError(
            f"{tree.src}: found no call on the target model on the EAGLE-3 path; the audit no longer "
            f"understands this SGLang layout (sglang_stack/patching/audit.py), so it cannot pass it"
        )
    providers: dict[str, str] = {}
    missing: list[Missing] = []
    for method, sites in required.items():
        owner = next((c for c in mro if method in c.methods), None)
        if owner is None:
            missing.append(Missing(method, sites))
        else:
            providers[method] = f"{owner.name} ({owner.path}:{owner.methods[method]})"
    missing.sort(key=lambda m: (m.sites[0].path, m.sites[0].line))
    dynamic = [f"{c.name} ({c.path}:{c.methods['__getattr__']})" for c in mro if "__getattr__" in c.methods]
    return Report(
        arch=arch,
        arch_site=f"{info.path}:{info.line}",
        sglang_version=tree.version(),
        required=required,
        optional=optional,
        outside=outside,
        draft=draft,
        providers=providers,
        missing=missing,
        external_bases=external,
        dynamic=dynamic,
        flags=sorted(state.flags),
        workers=[f"{mod}.{cls}" for mod, cls in state.workers],
        files_read=tree.files_parsed,
        seconds=time.perf_counter() - started,
    )


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


# --------------------------------------------------------------------------
# Command line (the image runs this right after patching)
# --------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m sglang_stack.patching.audit",
        description="Check, from the source, that a model class provides every method the EAGLE-3 path "
        "calls on the target model. Exit 0: all present; 1: some missing (one line each); 2: bad input.",
    )
    parser.add_argument("--sglang-src", required=True, type=Path, help="directory that contains sglang/")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--arch", help=f"model class name, as in config.json 'architectures' (default {DEFAULT_ARCH})")
    which.add_argument("--model-config", type=Path, help="a model's config.json: audit its first 'architectures' entry")
    parser.add_argument("--verbose", "-v", action="store_true", help="also list every call site and where each method comes from")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    arch = args.arch or (arch_from_config(args.model_config) if args.model_config else DEFAULT_ARCH)
    report = audit(args.sglang_src, arch)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for line in report.lines(verbose=args.verbose):
            print(line)
    return 0 if report.passed else 1


if __name__ == "__main__":
    run_main(main)


def check_wheel(wheel: Path, patches_dir: Path, arch: str, workdir: Path, *, log=None) -> Report:
    """What ``invoke patch-check`` proves: the wheel unpacks, the series applies exactly, the audit passes.

    Unpacks into ``workdir/site``. Raises ``UserError`` if a step fails; returns
    the audit report, which the caller checks with ``report.passed``.
    """
    from sglang_stack.patching.patches import apply_series, unpack_wheel

    say = log or (lambda msg: print(msg, flush=True))
    site = unpack_wheel(wheel, Path(workdir) / "site")
    say(f"unpacked {Path(wheel).name} into {site}")
    apply_series(site, patches_dir, strict=True, log=say)
    return audit(site, arch)
