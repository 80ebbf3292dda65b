"""The speculative-algorithm enum of an SGLang tree: what a condition can be when the algorithm is EAGLE3.

``Spec`` reads the enum (its members, its one-line predicates such as ``is_eagle3()``, and the
worker factory) and answers, for a condition on a call's path, whether it can hold under
EAGLE3. ``callsites`` walks the tree with it. Standard library only.
"""

from __future__ import annotations

import ast
import copy
import re

from sglang_stack.errors import UserError
from sglang_stack.audit.source import Tree, chain_of

# ANCHORS the algorithm is read from: a release that renames one gets an error naming it, never a pass.
SPEC_MODULE = "sglang.srt.speculative.spec_info"  # the speculative-algorithm enum and create_worker
EAGLE3, NO_SPEC, WORKER_FACTORY = "EAGLE3", "NONE", "create_worker"
LAYOUT = "this SGLang layout is not one the audit knows (sglang_stack/audit/callsites.py)"
SPEC_WORD = re.compile(r"(?:^|_)(?:spec(?:_|$)|specul|eagle)")  # spec_info, speculative_*, eagle_*
NOT_SPEC = {"find_spec"}  # importlib.util.find_spec: SGLang probes optional packages with it
SPEC_ALGO = re.compile(r"spec\w*algo")  # spec_algorithm, speculative_algorithm: the algorithm itself


def operands(test: ast.expr):
    """What ``and``, ``or`` and ``not`` combine in a condition."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from operands(value)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from operands(test.operand)
    else:
        yield test


def words(node: ast.AST, outer: bool = False) -> list[str]:
    """Every name and attribute in an expression; ``outer``: only those not read through (``b``, not ``a``, of ``a.b``)."""
    inner = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)} if outer else ()
    named = [n for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in inner]
    return [getattr(n, "id", None) or n.attr for n in named]


def speculative(word: str) -> bool:
    return word not in NOT_SPEC and SPEC_WORD.search(word.lower()) is not None


def is_self(node: ast.AST) -> bool:
    return getattr(node, "id", "") == "self"


class Spec:
    """The speculative-algorithm enum: its members, one-line predicates and worker factory."""

    def __init__(self, tree: Tree):
        if SPEC_MODULE not in tree.modules:
            raise UserError(f"{tree.src}: no {SPEC_MODULE} (the speculative-algorithm enum); {LAYOUT}")
        self.file = tree.src / tree.modules[SPEC_MODULE]
        for node in tree.parse(SPEC_MODULE).body:
            assigned = [t for s in getattr(node, "body", []) if isinstance(s, ast.Assign) for t in s.targets]
            members = {t.id for t in assigned if isinstance(t, ast.Name)}
            if isinstance(node, ast.ClassDef) and {EAGLE3, NO_SPEC} <= members:
                break
        else:
            raise UserError(f"{self.file}: no enum with members {EAGLE3} and {NO_SPEC}; {LAYOUT}")
        self.name, self.node, self.members = node.name, node, members
        self.inside = {id(n) for n in ast.walk(node)}  # in the enum, `self` is the algorithm
        self.bodies = {}  # the one-line predicates: is_eagle3 -> the expression it returns
        for fn in node.body:
            body = [s for s in getattr(fn, "body", []) if not isinstance(getattr(s, "value", None), ast.Constant)]
            if isinstance(fn, ast.FunctionDef) and len(fn.args.args) == 1 and len(body) == 1:
                if isinstance(body[0], ast.Return) and body[0].value is not None:
                    self.bodies[fn.name] = body[0].value
        self.factory = next((f for f in node.body if getattr(f, "name", "") == WORKER_FACTORY), None)
        if self.factory is None:
            raise UserError(f"{self.file}: {self.name}.{WORKER_FACTORY}() not found; {LAYOUT}")
        self.flags: set[str] = set()  # attributes set True under a condition that tests the algorithm
        self._predicates: dict[str, set] = {}

    def can(self, node: ast.expr, truth: bool = True, known: dict | None = None) -> bool:
        """Can the condition be ``truth`` when the algorithm is EAGLE3 (and ``known``: id of a node -> its values)?"""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.can(node.operand, not truth, known)
        if isinstance(node, ast.BoolOp):
            parts = [self.can(v, truth, known) for v in node.values]
            return all(parts) if isinstance(node.op, ast.And) == truth else any(parts)
        values = (known or {}).get(id(node)) or self.test(node)
        if values is None and (getattr(node, "attr", None) or getattr(node, "id", "")).startswith("is_draft"):
            values = {False}  # ModelRunner.is_draft_worker: the target's runner is not the draft's
        if values is None and isinstance(node, ast.Constant):
            values = {bool(node.value)}
        return values is None or truth in values

    def mentions(self, test: ast.expr) -> bool:
        """Does the condition test the algorithm, or read a flag (``spec``/``eagle`` in it, or a set one)?
        A flag is the name read, not where it is read from: ``spec_aux_config.dflash_use_aux_hidden_state`` is none."""
        return self.tests(test) or any(speculative(w) or w in self.flags for w in words(test, outer=True))

    def tests(self, node: ast.expr) -> bool:
        """Does the condition test the algorithm: a predicate call or a comparison, through and/or/not?"""
        return any(self.test(n) is not None for n in operands(node))

    def test(self, node: ast.expr) -> set | None:
        """The values a predicate call or a comparison of the algorithm can take under EAGLE3; None if not one."""
        mine = id(node) in self.inside
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in self.bodies:
            # is_none() is on other enums too (the MoE all-to-all backend): the receiver must be the algorithm
            recv = node.func.value
            if mine and is_self(recv) or any(speculative(w) or "algo" in w.lower() or w == self.name for w in words(recv)):
                return self.predicate(node.func.attr)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            for subject, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                named, member = self.refs(other), any(isinstance(n, ast.Attribute) for n in ast.walk(other))
                about = mine and is_self(subject) or member  # an enum member is unambiguous
                if named is not None and (about or any(SPEC_ALGO.search(w.lower()) for w in words(subject))):
                    if isinstance(node.ops[0], (ast.Eq, ast.Is, ast.In)):
                        return {EAGLE3 in named}
                    if isinstance(node.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn)):
                        return {EAGLE3 not in named}
                    return {True, False}
        return None

    def predicate(self, name: str) -> set:
        if name not in self._predicates:
            self._predicates[name] = {True, False}  # a cycle stays unknown
            self._predicates[name] = {t for t in (True, False) if self.can(self.bodies[name], t)}
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


def returned(fn: ast.AST) -> ast.expr | None:
    """What a def returns if its body is one ``return`` (a docstring aside); else None."""
    body = [s for s in getattr(fn, "body", []) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None


def inline(test: ast.expr, method_of, function_of, depth: int = 0) -> ast.expr:
    """The condition with each one-line predicate it reads replaced by what the predicate returns, so that the
    enum's evaluator sees the algorithm test inside: ``self.uses_eagle3()`` (a method of the class),
    ``self.eagle3_on`` (a property), ``eagle3_enabled(self.server_args)`` (a function, its parameters bound to
    the call's arguments). ``method_of(name)`` gives (def, is_property) or None; ``function_of(node)`` a def or
    None. The test is copied only where something is replaced."""
    if depth > 2:
        return test

    def named(node: ast.AST) -> bool:  # the cheap test first: a plain dotted name, called or read
        return chain_of(node.func if isinstance(node, ast.Call) else node) is not None

    def replacement(node: ast.AST) -> ast.expr | None:
        chain = chain_of(node.func if isinstance(node, ast.Call) else node) or []
        if len(chain) == 2 and chain[0] == "self":
            found = method_of(chain[1])
            if found and found[1] == isinstance(node, ast.Attribute) and not getattr(node, "args", None):
                return returned(found[0])
            return None
        fn = function_of(node.func) if isinstance(node, ast.Call) and not chain[:1] == ["self"] else None
        value = returned(fn) if fn is not None else None
        if value is None or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if len(node.args) != len(params) or fn.args.vararg or fn.args.kwonlyargs:
            return None
        return _substitute(copy.deepcopy(value), dict(zip(params, node.args)))

    candidates = [n for n in ast.walk(test) if isinstance(n, (ast.Call, ast.Attribute)) and named(n) and replacement(n) is not None]
    if not candidates:
        return test

    class Inliner(ast.NodeTransformer):
        def visit_Call(self, node):
            value = replacement(node)
            return self.generic_visit(node) if value is None else ast.copy_location(copy.deepcopy(value), node)

        visit_Attribute = visit_Call

    return inline(Inliner().visit(copy.deepcopy(test)), method_of, function_of, depth + 1)


def _substitute(body: ast.expr, bound: dict) -> ast.expr:
    """``body`` with each name in ``bound`` replaced by a copy of its argument."""

    class Bind(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(copy.deepcopy(bound[node.id]), node) if node.id in bound else node

    return Bind().visit(body)
