"""Where the EAGLE-3 path of an SGLang tree calls the target model, found in the source.

Reads the tree with ``ast`` on the standard library alone (the image's ``sglang`` stage has no
torch). It knows no method names: from the speculative-algorithm enum, the EAGLE-3 workers and
``ModelRunner`` it derives every call on the target model, the conditions it runs under, and
whether a guard makes it optional. ``sglang_stack.audit.eagle3`` checks the model class
against these calls; docs/patches.md ("The EAGLE-3 audit") states the rules and their limits.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from sglang_stack.errors import UserError
from sglang_stack.audit.algorithm import (
    EAGLE3, LAYOUT, SPEC_MODULE, SPEC_WORD, WORKER_FACTORY, Spec, inline, is_self, operands, returned,
    words,
)
from sglang_stack.audit.source import (
    FUNCTIONS, CallSite, Cls, Tree, chain_of, import_names, member, signature_of, statements,
)

# ANCHORS: the structural names in SGLang the audit starts from. A release that renames one gets
# an error naming it, never a pass.
SPEC_PACKAGE = "sglang.srt.speculative."
RUNNER_MODULE, RUNNER_CLASS = "sglang.srt.model_executor.model_runner", "ModelRunner"  # holds self.model
RUNNER_ATTR, MODEL_ATTR, TARGET_ATTR = "model_runner", "model", "target_worker"
DRAFT_MARKERS = ("draft", "mtp")
MAX_DEPTH = 4  # calls followed from where the target is in hand

DOT_MODEL = re.compile(rf"\.{MODEL_ATTR}\b")
# What the walk treats apart: blocks, scopes, branches, guards, imports.
SPECIAL = (list, *FUNCTIONS, ast.ClassDef, ast.If, ast.While, ast.IfExp, ast.BoolOp, ast.Try, ast.TryStar, ast.Import,
           ast.ImportFrom, ast.Match, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor)
# What catches the AttributeError of a missing method: a handler of one of these recovers from it.
CATCHES_ATTRIBUTE_ERROR = {"AttributeError", "Exception", "BaseException"}

# A name that holds a model's method (``fn = model.m``, ``getattr(model, "m", None)``) is aliased to a
# Bound: the call made through it later is a call of that method.
class Bound(NamedTuple):
    role: str
    method: str
    receiver: ast.expr
    default: ast.expr | None  # getattr's default: what the name holds where the method is missing


# Roles: what an expression holds. There is one target model, so a receiver is known by its role.
# A loose runner is one whose owner, target or draft, its name does not tell.
MODEL, RUNNER, WORKER, LOOSE, LOOSE_RUNNER = "model", "runner", "worker", "loose model", "loose runner"
DRAFT, DRAFT_MODEL = "draft", "draft model"
SPEC_WORKER = "EAGLE-3 worker"  # an EAGLE-3 worker handed to a helper: it holds the target worker and its own draft
STEPS = {(WORKER, RUNNER_ATTR): RUNNER, (RUNNER, MODEL_ATTR): MODEL, (LOOSE_RUNNER, MODEL_ATTR): LOOSE,
         (SPEC_WORKER, TARGET_ATTR): WORKER, (SPEC_WORKER, RUNNER_ATTR): DRAFT}


def exits(body: list) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def stored(body: list) -> set[str]:
    return {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def set_to_none(body: list) -> set[str]:
    """Names a block binds to ``None``: ``x = None``, ``x = y = None``, ``x, y = None, None``."""
    names = set()
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                pairs = zip(t.elts, stmt.value.elts) if isinstance(t, ast.Tuple) and isinstance(stmt.value, ast.Tuple) else [(t, stmt.value)]
                names |= {n.id for n, v in pairs if isinstance(n, ast.Name) and is_none(v)}
    return names


def is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def callable_default(node: ast.expr | None) -> bool:
    """May a ``getattr`` default be called? A constant (``None``, ``False``) cannot: calling it raises."""
    return node is not None and not isinstance(node, ast.Constant)


# --- Calls on models, with their path conditions -------------------------------------------------


class Cond(NamedTuple):
    """A condition on the walk's path: ``test`` is ``truth`` there."""

    test: ast.expr
    truth: bool
    checks: dict  # id of a node in the test -> the (role, method) without which it is false
    via: tuple  # the caller's arguments that the test's names stand for


@dataclass
class Frame:
    """Where the walk is: the scope, what its names hold, and the conditions that lead there."""

    module: str
    scope: ast.AST  # the function (or module) walked
    cls: ast.ClassDef | None = None
    aliases: dict = field(default_factory=dict)  # name -> role
    imports: dict = field(default_factory=dict)  # imports inside the function
    conds: tuple = ()
    arguments: dict = field(default_factory=dict)  # parameter -> the caller's argument expression
    on_path: bool = False  # in an EAGLE-3 worker's module or class, or reached from the EAGLE-3 path
    guard: str = ""  # an enclosing `except AttributeError`
    depth: int = 0

    def under(self, cond: Cond) -> Frame:
        return replace(self, conds=self.conds + (cond,))


class Scan:
    """Walks modules, and the functions the target is passed to; records every call on a model."""

    def __init__(self, tree: Tree, spec: Spec, runners: set):
        self.tree, self.spec, self.runners = tree, spec, runners  # runners: ModelRunner and its in-tree bases, by name
        self.on_classes: set = set()  # (module, name) of the speculative classes the workers inherit from
        self.sites: list = []  # (CallSite, conds, on_path, role, the def it is in, unless followed)
        self.returns: list = []  # (value, frame) of each `return` in the worker factory
        self._members: dict = {}
        self._followed: set = set()
        self._text: str | None = None
        self._predicate_methods: dict = {}
        self._counts: dict = {}  # a def's name -> how often it occurs in the tree's text
        self._predicates: set | None = None

    def lookup(self, node: ast.expr, f: Frame):
        """What a dotted name is where the walk is, as ``Tree.resolve`` answers."""
        chain = chain_of(node) or [""]
        local = f.imports.get(chain[0])
        return self.tree.resolve(".".join([local] + chain[1:] if local else [f.module] + chain))

    # roles -----------------------------------------------------------------------------------

    def role(self, node: ast.AST, f: Frame) -> str | None:
        """What an expression holds: the target's model, runner or worker, a draft's, or None."""
        if isinstance(node, ast.Name):
            if node.id == "self":
                return RUNNER if f.cls is not None and f.cls.name in self.runners else None
            held = f.aliases.get(node.id)
            if isinstance(held, (Bound, ast.Call)):  # a method or a partial, not a model
                return None
            return held or self.named(node.id, f.module, False)
        if isinstance(node, ast.NamedExpr):  # (m := self.model_runner.model).method()
            return self.role(node.value, f)
        if isinstance(node, (ast.Subscript, ast.Call)):  # self.mtp_model_runner(i), self.draft_runners[i]
            inner = self.role(node.value if isinstance(node, ast.Subscript) else node.func, f)
            return DRAFT if inner in (DRAFT, DRAFT_MODEL) else None
        if not isinstance(node, ast.Attribute):
            return None
        inner, attr = self.role(node.value, f), node.attr
        if inner in (DRAFT, DRAFT_MODEL):
            return DRAFT_MODEL if attr == MODEL_ATTR else DRAFT
        if is_self(node.value) and f.cls is not None and attr in self.members(f):
            return self.members(f)[attr]  # data flow first: what the class stored there, whatever its name says
        if any(m in attr.lower() for m in DRAFT_MARKERS):
            return DRAFT
        if inner:
            return STEPS.get((inner, attr))
        return self.named(attr, f.module, is_self(node.value))

    @staticmethod
    def named(name: str, module: str, of_self: bool) -> str | None:
        """The role a name gives: ``target_worker``, ``model_runner``, ``draft*``; any other ``*runner`` is loose."""
        if any(m in name.lower() for m in DRAFT_MARKERS):
            return DRAFT
        if name == TARGET_ATTR:
            return WORKER
        if name == RUNNER_ATTR:  # a speculative worker's own runner holds the draft model
            return RUNNER if not module.startswith(SPEC_PACKAGE) else DRAFT if of_self else LOOSE_RUNNER
        return LOOSE_RUNNER if name.lower().endswith("runner") else None

    def members(self, f: Frame) -> dict:
        """``self.x = <model, runner or worker>`` anywhere in the class makes ``self.x`` one in every method."""
        if id(f.cls) not in self._members:
            table = self._members[id(f.cls)] = {}
            plain = replace(f, aliases={})
            for node in statements(f.cls.body):
                target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
                if isinstance(target, ast.Attribute) and is_self(target.value) and self.role(node.value, plain):
                    table[target.attr] = self.role(node.value, plain)
        return self._members[id(f.cls)]

    # conditions and guards ---------------------------------------------------------------------

    def cond(self, test: ast.expr, truth: bool, f: Frame, taken=(), skipped=(), node=None) -> Cond:
        """A path condition. Its checks that a method exists count unless the branch they skip raises (the
        server still fails) or leaves unset a name, bound in ``taken``, that is read after ``node``."""
        test = inline(test, lambda name: self.predicate(name, f), lambda node: self.function(node, f))
        via = tuple(f.arguments[w] for w in words(test) if w in f.arguments) if f.arguments else ()
        checks = {id(n): check for n in operands(test) if (check := self.check(n, f))}
        if checks and (skipped and isinstance(skipped[-1], ast.Raise) or self.unset(taken, skipped, node, f)):
            checks = {}
        return Cond(test, truth, checks, via)

    def predicate(self, name: str, f: Frame) -> tuple | None:
        """(def, is a property) for a method of the walked class that takes only self: a predicate it may read."""
        if f.cls is None or f.cls is self.spec.node:
            return None
        if id(f.cls) not in self._predicate_methods:
            table = self._predicate_methods[id(f.cls)] = {}
            for stmt in f.cls.body:
                if isinstance(stmt, ast.FunctionDef) and len(stmt.args.args) == 1 and not stmt.args.vararg:
                    if not stmt.args.kwonlyargs and returned(stmt) is not None:
                        decorators = {(chain_of(d) or [""])[-1] for d in stmt.decorator_list}
                        table[stmt.name] = stmt, bool(decorators & {"property", "cached_property"})
        return self._predicate_methods[id(f.cls)].get(name)

    def function(self, node: ast.expr, f: Frame) -> ast.FunctionDef | None:
        """The in-tree def a call's name resolves to, where the walk is."""
        chain = chain_of(node)  # a function by name or module.name; self.x.y() is a method, the enum's predicates too
        plain = chain is not None and len(chain) <= 2 and chain[0] != "self" and chain[-1] in self.predicates()
        found = self.lookup(node, f) if plain else None
        return found[1] if isinstance(found, tuple) and isinstance(found[1], ast.FunctionDef) else None

    def check(self, node: ast.expr, f: Frame) -> tuple | None:
        """(role, method, the value ``node`` has without the method) where that value is fixed: ``hasattr(m, "x")``,
        ``getattr(m, "x", None)`` or a name holding one, ``callable(...)`` of those, ``... is not None`` and
        ``... is None``."""
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and is_none(node.comparators[0]):
            inner = self.check(node.left, f)
            if inner is None or not isinstance(node.ops[0], (ast.IsNot, ast.NotEq, ast.Is, ast.Eq)):
                return None
            return inner if isinstance(node.ops[0], (ast.IsNot, ast.NotEq)) else (*inner[:2], not inner[2])
        if isinstance(node, ast.Name) and isinstance(held := f.aliases.get(node.id), Bound):
            falsy = isinstance(held.default, ast.Constant) and not held.default.value
            return (held.role, held.method, False) if falsy else None
        name, args = getattr(getattr(node, "func", None), "id", ""), getattr(node, "args", [])
        if name == "callable" and len(args) == 1:
            inner = self.check(args[0], f)
            if inner is None and isinstance(args[0], ast.Name) and isinstance(held := f.aliases.get(args[0].id), Bound):
                inner = (held.role, held.method, False) if not callable_default(held.default) else None
            return inner
        defaulted = len(args) == 3 and isinstance(args[2], ast.Constant) and not args[2].value
        if (name == "hasattr" and len(args) == 2 or name == "getattr" and defaulted) and isinstance(
            getattr(args[1], "value", 0), str
        ):
            return self.role(args[0], f), args[1].value, False
        return None

    def unset(self, taken, skipped, after: ast.AST, f: Frame) -> bool:
        """Would running ``skipped`` instead of ``taken`` break the code after ``after``: leave a name unset that
        it reads, or ``None`` (the fallback's value, or the one bound before) in a name it dereferences?"""
        bound = set() if exits(skipped) else stored(taken)
        if not bound:
            return False
        before = self.bound_before(after, f)
        unset = bound - stored(skipped) - before.keys()
        nones = bound & set_to_none(skipped) | {n for n in bound - stored(skipped) if is_none(before.get(n, 0))}
        for n in ast.walk(f.scope):
            if getattr(n, "lineno", 0) <= after.end_lineno:
                continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in unset:
                return True
            used = n.value if isinstance(n, (ast.Attribute, ast.Subscript)) else n.func if isinstance(n, ast.Call) else None
            if isinstance(used, ast.Name) and used.id in nones:  # None.x, None[i], None(): the server dies later
                return True
        return False

    @staticmethod
    def bound_before(node: ast.AST, f: Frame) -> dict:
        """Name -> the value of its last plain binding in the scope before ``node``."""
        values = {}
        for s in sorted((s for s in ast.walk(f.scope) if isinstance(s, ast.Assign) and s.lineno < node.lineno),
                        key=lambda s: s.lineno):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    values[t.id] = s.value
        return values

    def try_guard(self, node: ast.Try, f: Frame) -> str:
        """A handler that catches AttributeError (``except AttributeError``, ``Exception``, a bare ``except``) makes
        the body optional if it recovers: it neither raises, nor leaves a name unset that is read later, nor
        calls again on the target a method the body calls there (the fallback would die the same way)."""
        called = {n.func.attr for n in ast.walk(ast.Module(node.body, [])) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute)}
        for handler in node.handlers:
            types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            names = {(chain_of(t) or [""])[-1] for t in types if t is not None} if handler.type is not None else {"BaseException"}
            if names & CATCHES_ATTRIBUTE_ERROR:
                reraises = any(isinstance(n, ast.Raise) for n in ast.walk(handler))
                again = any(isinstance(n, ast.Call) and getattr(n.func, "attr", None) in called
                            and self.role(n.func.value, f) in (MODEL, LOOSE) for n in ast.walk(handler))
                if not reraises and not again and not self.unset(node.body, handler.body, node, f):
                    return f"except {sorted(names & CATCHES_ATTRIBUTE_ERROR)[0]}"
        return ""

    def suppress_guard(self, node: ast.With, f: Frame) -> str:
        """``with contextlib.suppress(AttributeError):`` recovers like an ``except`` that passes."""
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and (chain_of(call.func) or [""])[-1] == "suppress":
                caught = {(chain_of(a) or [""])[-1] for a in call.args}
                if caught & CATCHES_ATTRIBUTE_ERROR and not self.unset(node.body, [], node, f):
                    return "suppress"
        return ""

    def constant(self, node: ast.expr, f: Frame):
        """A string the expression is: a literal, or a name bound once to one in the function or module."""
        if isinstance(node, ast.Constant):
            return node.value
        if not isinstance(node, ast.Name):
            return None
        for scope in (f.scope, self.tree.parse(f.module)):
            values = [s.value.value for s in (statements(scope.body) if scope is f.scope else scope.body)
                      if isinstance(s, ast.Assign) and [getattr(t, "id", None) for t in s.targets] == [node.id]
                      and isinstance(s.value, ast.Constant)]
            if values:
                return values[0] if len(set(values)) == 1 else None
        return None

    def cases(self, node: ast.Match, f: Frame) -> None:
        """``match`` on the algorithm: each ``case`` runs where its pattern equals the subject (and its guard
        holds), and no earlier unguarded case matched."""
        earlier: list = []
        for case in node.cases:
            test = self.pattern(node.subject, case.pattern)
            here = f
            for prior in earlier:
                here = here.under(self.cond(prior, False, f))
            if test is not None:
                here = here.under(self.cond(test, True, f, case.body, [], node))
            if case.guard is not None:
                self.visit(case.guard, here)
                here = here.under(self.cond(case.guard, True, f, case.body, [], node))
            self.visit(case.body, here)
            if test is not None and case.guard is None:
                earlier.append(test)

    def pattern(self, subject: ast.expr, pattern: ast.pattern) -> ast.expr | None:
        """A case pattern as the comparison it makes (``subject == value``, ``or`` of those); None: any subject."""
        if isinstance(pattern, ast.MatchValue):
            return ast.copy_location(ast.Compare(subject, [ast.Eq()], [pattern.value]), pattern)
        if isinstance(pattern, ast.MatchSingleton):
            return ast.copy_location(ast.Compare(subject, [ast.Is()], [ast.Constant(pattern.value)]), pattern)
        if isinstance(pattern, ast.MatchOr):
            parts = [self.pattern(subject, p) for p in pattern.patterns]
            return None if None in parts else ast.copy_location(ast.BoolOp(ast.Or(), parts), pattern)
        if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
            return self.pattern(subject, pattern.pattern)
        return None  # `case _`, a capture, a class or sequence pattern: not a test of the value

    # the walk --------------------------------------------------------------------------------

    def visit(self, node: ast.AST | list, f: Frame) -> None:
        """Walk a node, or a block of statements, where ``f`` says."""
        if not isinstance(node, SPECIAL):  # most nodes: a call, a return, an assignment, or none
            if isinstance(node, ast.Call):
                self.call(node, f)
            if isinstance(node, ast.Return) and f.scope is self.spec.factory:
                self.returns.append((node.value, f))
            for child in ast.iter_child_nodes(node):
                self.visit(child, f)
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                self.assign(node, f)
        elif isinstance(node, list):
            for stmt in node:
                self.visit(stmt, f)
                if isinstance(stmt, ast.If) and exits(stmt.body) != exits(stmt.orelse):
                    # `if not ok: return` guards the rest of the block (an exit by `raise` proves nothing)
                    leaving = stmt.body if exits(stmt.body) else stmt.orelse
                    f = f.under(self.cond(stmt.test, leaving is stmt.orelse, f, [], leaving, stmt))
        elif isinstance(node, FUNCTIONS):
            params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            aliases = {k: v for k, v in f.aliases.items() if k not in params}
            self.visit(node.body, replace(f, scope=node, aliases=aliases, imports=dict(f.imports)))
        elif isinstance(node, ast.ClassDef):
            if {(chain_of(b) or [""])[-1] for b in node.bases} & self.runners:
                self.runners.add(node.name)
            on_path = f.on_path or (f.module, node.name) in self.on_classes
            self.visit(node.body, replace(f, cls=node, aliases={}, on_path=on_path))
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            self.visit(node.test, f)
            body, orelse = ([node.body], [node.orelse]) if isinstance(node, ast.IfExp) else (node.body, node.orelse)
            self.visit(node.body, f.under(self.cond(node.test, True, f, body, orelse, node)))
            otherwise = f if isinstance(node, ast.While) else f.under(self.cond(node.test, False, f, orelse, body, node))
            self.visit(node.orelse, otherwise)
        elif isinstance(node, ast.BoolOp):  # `a and b`: b runs where a is true
            for value in node.values:
                self.visit(value, f)
                f = f.under(self.cond(value, isinstance(node.op, ast.And), f))
        elif isinstance(node, (ast.Try, ast.TryStar)):
            self.visit(node.body, replace(f, guard=self.try_guard(node, f) or f.guard))
            for part in [h.body for h in node.handlers] + [node.orelse, node.finalbody]:
                self.visit(part, f)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            f.imports.update(import_names(node, f.module))
        elif isinstance(node, (ast.For, ast.AsyncFor)):  # the loop's name is bound before its body runs
            self.visit(node.iter, f)
            self.assign(node, f)
            self.visit(node.body, f)
            self.visit(node.orelse, f)
        elif isinstance(node, ast.Match):
            self.visit(node.subject, f)
            self.cases(node, f)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.visit(item.context_expr, f)
                if isinstance(item.optional_vars, ast.Name):  # `with x as m`: m holds what x.__enter__() gives
                    held = item.context_expr
                    if isinstance(held, ast.Call) and (chain_of(held.func) or [""])[-1] == "nullcontext" and held.args:
                        held = held.args[0]  # contextlib.nullcontext(x) gives x; another manager, what it likes
                    self.kill(item.optional_vars, f)
                    if held is not item.context_expr:
                        self.bind(item.optional_vars, held, f)
            self.visit(node.body, replace(f, guard=self.suppress_guard(node, f) or f.guard))

    def assign(self, stmt: ast.stmt, f: Frame) -> None:
        """Every form that binds a name: ``=``, annotated, augmented, tuple and star unpacking, walrus, ``for``."""
        if isinstance(stmt, (ast.For, ast.AsyncFor)):  # `for m in (a, b)`: m holds what every element holds
            elts = stmt.iter.elts if isinstance(stmt.iter, (ast.Tuple, ast.List, ast.Set)) else []
            roles = {self.role(e, f) for e in elts}
            self.kill(stmt.target, f)
            if isinstance(stmt.target, ast.Name) and len(roles) == 1 and None not in roles:
                f.aliases[stmt.target.id] = roles.pop()
            return
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for t in targets:
            if isinstance(t, ast.Attribute):  # a flag: set True under a condition that tests the algorithm
                tested = any(self.spec.tests(c.test) for c in f.conds)
                if getattr(value, "value", None) is True and tested and self.possible(f.conds):
                    self.spec.flags.add(t.attr)
                continue
            self.kill(t, f)
            if value is None or isinstance(stmt, ast.AugAssign) or len(targets) > 1:
                continue
            if isinstance(t, ast.Name):
                self.bind(t, value, f)  # `model = self.model_runner.model`
            elif isinstance(t, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
                stars = [i for i, e in enumerate(t.elts) if isinstance(e, ast.Starred)]
                if any(isinstance(e, ast.Starred) for e in value.elts) or len(stars) > 1:
                    continue
                # `model, runner = self.model, self`; `model, *rest = self.model, a, b`: the names before the
                # star take the first values, those after it the last
                star = stars[0] if stars else len(t.elts)
                after = len(t.elts) - star - 1 if stars else 0
                pairs = list(zip(t.elts[:star], value.elts[:star]))
                pairs += list(zip(t.elts[len(t.elts) - after:], value.elts[len(value.elts) - after:])) if after else []
                if len(value.elts) >= len(t.elts) - len(stars):
                    for name, part in pairs:
                        if isinstance(name, ast.Name):
                            self.bind(name, part, f)

    def bind(self, name: ast.Name, value: ast.expr, f: Frame) -> None:
        role = self.role(value, f)
        if role:
            f.aliases[name.id] = role
        elif held := self.bound(value, f):
            f.aliases[name.id] = held

    def bound(self, value: ast.expr, f: Frame) -> Bound | ast.Call | None:
        """What a name assigned ``value`` holds that a later call goes through: a model's method (``model.m``,
        ``getattr(model, "m"[, default])``), another name's, or a ``functools.partial`` of a function."""
        if isinstance(value, ast.Name):
            held = f.aliases.get(value.id)
            return held if isinstance(held, (Bound, ast.Call)) else None
        if isinstance(value, ast.Attribute) and self.role(value.value, f) in (MODEL, LOOSE, DRAFT_MODEL):
            return Bound(self.role(value.value, f), value.attr, value.value, None)
        name = (chain_of(value.func) or [""])[-1] if isinstance(value, ast.Call) else ""
        if name == "getattr" and len(value.args) in (2, 3) and self.role(value.args[0], f) in (MODEL, LOOSE, DRAFT_MODEL):
            method = self.constant(value.args[1], f)
            if isinstance(method, str):
                return Bound(self.role(value.args[0], f), method, value.args[0], value.args[2] if len(value.args) == 3 else None)
        if name == "partial" and value.args and not isinstance(value.args[0], ast.Attribute):
            return value
        return None

    @staticmethod
    def kill(target: ast.AST, f: Frame) -> None:
        for name in [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]:
            f.aliases.pop(name, None)

    def call(self, node: ast.Call, f: Frame) -> None:
        func, guard, recv, method, role = node.func, f.guard, None, "", None
        if isinstance(func, ast.Name) and isinstance(f.aliases.get(func.id), ast.Call):
            func = f.aliases[func.id]  # fn = functools.partial(helper, model); fn(): the partial's call
        if isinstance(func, ast.Call) and (chain_of(func.func) or [""])[-1] == "partial" and func.args:
            # functools.partial(helper, model)(...) calls helper(model, ...): follow it there
            inner = ast.copy_location(ast.Call(func.args[0], func.args[1:] + node.args, func.keywords + node.keywords), node)
            if not isinstance(func.args[0], ast.Attribute) or self.role(func.args[0].value, f) not in (MODEL, LOOSE, DRAFT_MODEL):
                self.call(inner, f)
                return
        if isinstance(func, ast.Name) and isinstance(held := f.aliases.get(func.id), Bound):
            # fn = model.m, or getattr(model, "m", default), called later: a call of m; a default that can be
            # called (a lambda) makes it optional, one that cannot (None) dies in the call
            recv, method, role = held.receiver, held.method, held.role
            guard = guard or ("getattr default" if callable_default(held.default) else "")
        elif isinstance(func, ast.Attribute):
            recv, method = func.value, func.attr
        elif getattr(getattr(func, "func", None), "id", "") == "getattr" and len(func.args) >= 2:
            # getattr(model, "m")(...) needs m; with a default that can be called it is optional, with None it
            # dies in the call all the same. "m" may be a named constant.
            recv, method = func.args[0], self.constant(func.args[1], f)
            guard = guard or ("getattr default" if len(func.args) > 2 and callable_default(func.args[2]) else "")
        if (chain_of(func) or [""])[-1] == "partial" and node.args and isinstance(node.args[0], ast.Attribute):
            # functools.partial(model.m, ...) reads model.m: it needs m, and the later call's arguments are unknown
            recv, method = node.args[0].value, node.args[0].attr
            node = ast.copy_location(ast.Call(node.args[0], [ast.Starred(ast.Name("args"))], []), node)
        if role is None:
            role = self.role(recv, f) if recv is not None and isinstance(method, str) else None
        if role in (MODEL, LOOSE, DRAFT_MODEL):
            star = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            keywords = tuple(k.arg for k in node.keywords if k.arg)
            path = self.tree.modules[f.module]
            site = CallSite(path, node.lineno, method, ast.unparse(recv), guard, len(node.args), keywords, star)
            scope = f.scope if isinstance(f.scope, FUNCTIONS) and not f.depth else None  # a followed one is called
            self.sites.append((site, f.conds, f.on_path, role, scope))
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if f.depth < MAX_DEPTH and any(self.carried(a, f) for a in arguments):
            self.follow(node, f)

    def carried(self, node: ast.expr, f: Frame) -> str | None:
        """The role an argument hands to the function it is passed to: the target's model, runner or worker, or
        an EAGLE-3 worker itself (``helper(self)``), through which the helper reaches the target."""
        role = self.role(node, f)
        if role in (MODEL, RUNNER, WORKER):
            return role
        on_worker = is_self(node) and f.on_path and f.cls is not None and f.cls.name not in self.runners
        return SPEC_WORKER if on_worker else None

    def follow(self, node: ast.Call, f: Frame) -> None:
        """Walk the function or method the target is passed to, its parameter bound to it."""
        chain, cls = chain_of(node.func) or [""], None
        if chain[0] == "self" and len(chain) == 2 and f.cls is not None:  # self.method(...)
            found, cls = (f.module, member(f.cls, chain[1])), f.cls
        else:
            found = self.lookup(node.func, f)
        if isinstance(found, Cls):  # a constructor
            found, cls = (found.module, member(found.node, "__init__")), found.node
        if not (isinstance(found, tuple) and isinstance(found[1], FUNCTIONS)):
            return
        module, fn = found
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        try:  # the arguments by parameter, as Python binds them (a method's self aside)
            bound = signature_of(fn.args).bind_partial(*[None] * (cls is not None), *node.args, **keywords)
        except TypeError:
            return
        # a flag passed along keeps its meaning under the parameter's name: `if enabled:`
        arguments = {p: a for p, a in bound.arguments.items() if isinstance(a, ast.expr)}
        binding = {p: self.carried(a, f) for p, a in arguments.items() if self.carried(a, f)}
        key = (id(fn), tuple(sorted(binding.items())), tuple(id(c.test) for c in f.conds), f.on_path, f.guard)
        if binding and key not in self._followed:
            self._followed.add(key)
            inner = replace(f, module=module, scope=fn, cls=cls, aliases=binding, imports={}, arguments=arguments)
            self.visit(fn.body, replace(inner, depth=f.depth + 1))

    def unreachable(self, fn: ast.AST | None) -> bool:
        """A def nothing can call: not a dunder, not decorated (a decorator may register it), and its name in
        no file of the tree but at its own def. Any other occurrence, even inside a longer name or a string
        (``getattr(self, "name")``), counts as a call: only the certainly dead are left off the path."""
        if fn is None or fn.decorator_list or fn.name.startswith("__"):
            return False
        if fn.name not in self._counts:
            self._counts[fn.name] = self.text().count(fn.name)
        return self._counts[fn.name] <= 1

    def text(self) -> str:
        """Every module of the tree, as one string: what the textual checks search."""
        if self._text is None:
            self._text = "\n".join(self.tree.text(rel) for rel in self.tree.modules.values())
        return self._text

    def predicates(self) -> set:
        """Names of defs whose first lines return something about speculation: the only functions a condition
        is worth resolving (and parsing modules) for. Found in the text, so that a condition's every call
        (``is_cuda()``, ``envs.X.get()``) does not parse the module it comes from."""
        if self._predicates is None:
            text, self._predicates = self.text(), set()
            for m in re.finditer(r"def (\w+)\(", text):
                window = text[m.end():m.end() + 600]
                low = window.lower()
                if "return " not in window or not ("spec" in low or "eagle" in low or "algo" in low):
                    continue
                lines = [line.strip() for line in window.splitlines()[1:6]]
                first = next((line for line in lines if line and not line.startswith(("#", '"', "'"))), "")
                if first.startswith("return ") and (SPEC_WORD.search(first.lower()) or "algo" in first.lower()):
                    self._predicates.add(m.group(1))
        return self._predicates

    # after the walk ----------------------------------------------------------------------------

    def possible(self, conds: tuple, lacking: tuple | None = None, present: tuple | None = None) -> bool:
        """Can every condition hold under EAGLE3, and if ``lacking`` is a (role, method), without that method; if
        ``present`` is one, with it?"""
        for c in conds:
            known = {i: {v if (role, name) == lacking else not v} for i, (role, name, v) in c.checks.items()
                     if (role, name) in (lacking, present)}
            if not self.spec.can(c.test, c.truth, known):
                return False
        return True

    def where(self, conds: tuple, on_path: bool) -> str:
        """Is the call "on" the EAGLE-3 path, "off" it (it runs, but not for speculation), or "never" run?"""
        if not self.possible(conds):
            return "never"
        mentioned = (self.spec.mentions(c.test) or any(map(self.spec.mentions, c.via)) for c in conds)
        return "on" if on_path or any(mentioned) else "off"


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
    runner = tree.resolve(f"{RUNNER_MODULE}.{RUNNER_CLASS}")
    if not isinstance(runner, Cls):
        raise UserError(f"{tree.src}: class {RUNNER_CLASS} not found in {RUNNER_MODULE}; {LAYOUT}")
    runners = [c for c in tree.mro(runner) if isinstance(c, Cls)]
    scan = Scan(tree, spec, {c.name for c in runners})
    # The EAGLE-3 workers are the classes the factory returns on a path EAGLE3 can take.
    scan.visit(spec.factory.body, Frame(SPEC_MODULE, spec.factory, spec.node))
    returned = [scan.lookup(v, f) for v, f in scan.returns if isinstance(v, ast.Name) and scan.possible(f.conds)]
    workers = list(dict.fromkeys(c for c in returned if isinstance(c, Cls)))
    if not workers:
        raise UserError(f"{spec.file}: {spec.name}.{WORKER_FACTORY}() returns no in-tree worker class for "
                        f"{EAGLE3}; the audit cannot find the EAGLE-3 path; {LAYOUT}")
    # The workers' modules are on the EAGLE-3 path, and so are the speculative-package classes that
    # their classes inherit from (the draft worker's base).
    on_path = {c.module for c in workers}
    classes = [tree.resolve(f"{m}.{n.name}") for m in on_path for n in tree.parse(m).body if isinstance(n, ast.ClassDef)]
    bases = [b for c in classes for b in tree.mro(c) if isinstance(b, Cls)]
    scan.on_classes = {(b.module, b.name) for b in bases if b.module.startswith(SPEC_PACKAGE)}
    # The target model is `<runner>.model`, and every runner is rooted at `model_runner`, `target_worker`
    # or a ModelRunner's `self`: a module that names no root, or never reads `.model`, holds no call on
    # it. Others are reached by following the target into the calls it is passed to.
    roots = {m for m, rel in tree.modules.items() if RUNNER_ATTR in tree.text(rel) or TARGET_ATTR in tree.text(rel)}
    roots = {m for m in roots if DOT_MODEL.search(tree.text(tree.modules[m]))}
    for module in sorted(on_path | roots | {c.module for c in runners} | {m for m, _ in scan.on_classes}):
        parsed = tree.parse(module)
        scan.visit(parsed.body, Frame(module, parsed, on_path=module in on_path))

    best: dict = {}  # (path, line, method, role) -> ((on the path, unguarded), site): its best context
    for site, conds, on_path, role, scope in scan.sites:
        where = scan.where(conds, on_path)
        where = "never" if where == "on" and scan.unreachable(scope) else where
        if role == LOOSE and where == "on":
            raise UserError(f"{tree.src / site.path}:{site.line}: {site.receiver}.{site.method}() is on the EAGLE-3 "
                            f"path, but the audit cannot tell whether {site.receiver} is the target or the draft model "
                            f"(the target is reached through {TARGET_ATTR}); {LAYOUT}")
        if where == "never" or role == LOOSE:
            continue
        if not site.guard and not scan.possible(conds, (role, site.method)):
            site = replace(site, guard="hasattr")  # a condition on its path cannot hold without the method
        if not site.guard and where == "on":  # `if hasattr(m, "language_model"): ... else: m.method()`
            unless = {name for c in conds for (r, name, _) in c.checks.values() if r == role and name != site.method}
            unless = tuple(sorted(n for n in unless if not scan.possible(conds, present=(role, n))))
            site = replace(site, unless=unless) if unless else site
        key, rank = (site.path, site.line, site.method, role), (where == "on", where == "on" and not site.guard)
        if key not in best or rank > best[key][0]:
            best[key] = rank, site
    # Data flow over names: a call the walk followed to the draft model is not also a target call by its name.
    drafts = {key[:3] for key, ((on_path, _), _) in best.items() if key[3] == DRAFT_MODEL and on_path}
    best = {key: value for key, value in best.items() if not (key[3] == MODEL and key[:3] in drafts)}
    on, outside, draft = {}, {}, {}
    for (*_, method, role), ((on_path, _), site) in sorted(best.items()):
        group = (draft if role == DRAFT_MODEL else on) if on_path else outside if role == MODEL else {}
        group.setdefault(method, []).append(site)
    if not on:
        raise UserError(f"{tree.src}: found no call on the target model on the EAGLE-3 path, so the audit cannot "
                        f"pass it; {LAYOUT}")
    workers = [f"{c.module}.{c.name}" for c in workers]
    return Calls({m: tuple(ss) for m, ss in on.items()}, {m: tuple(ss) for m, ss in outside.items() if m not in on},
                 {m: tuple(ss) for m, ss in draft.items()}, workers, sorted(spec.flags))
