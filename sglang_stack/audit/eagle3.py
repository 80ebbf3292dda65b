"""EAGLE-3 readiness audit: does a model class provide every method the EAGLE-3 path calls on it?

SGLang's EAGLE-3 path calls methods on the *target* model (``set_eagle3_layers_to_capture`` and
``get_embed_and_head`` in 0.5.9). A model class that lacks one loads all its weights, minutes for a
1T-parameter model, and only then dies. ``sglang_stack.audit.callsites`` finds those calls in the
source (read by ``sglang_stack.audit.source``). ``sglang_stack.audit.runtime`` asks Python what
the class provides: its probe imports the model with stand-ins and builds it. Where Python cannot tell,
this module reads the class from the source (``provider``): SGLang's registry, the real MRO, each
method's signature against every call site. All on the standard library alone: it runs in the image's
``sglang`` stage, which has no torch. ``confirm`` (``--dynamic``) repeats the check on the class
imported with the real torch. The rules and their limits: docs/patches.md ("The EAGLE-3 audit").
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
from sglang_stack.audit import runtime
from sglang_stack.audit.callsites import calls
from sglang_stack.audit.algorithm import is_self
from sglang_stack.audit.standins import NN_MODULE_METHODS
from sglang_stack.audit.source import FUNCTIONS, CallSite, Cls, Tree, chain_of, member, signature_of, statements
from sglang_stack.patching.patches import tree_version

DEFAULT_ARCH = "KimiK25ForConditionalGeneration"
MODELS_PACKAGE, REGISTRY_NAME = "sglang.srt.models", "EntryClass"  # the registry reads top-level modules

# Bases outside the tree whose methods are known: torch.nn.Module's public methods (NN_MODULE_METHODS, torch
# 2.9, shared with the run); its __getattr__ returns parameters, buffers and submodules only, never a
# method: the 0.5.9 crash is its AttributeError.
NN_MODULE = "torch.nn.Module"
NN_MODULES = {NN_MODULE, "torch.nn.modules.module.Module"}
KNOWN_BASES = {"object", "abc.ABC", "typing.Generic", "typing.Protocol", *NN_MODULES}
PROPERTIES = {"property", "cached_property", "setter", "getter", "deleter"}
# Decorators that keep the method a method of the same signature; any other may replace it (a forwarder that
# `functools.wraps` a stub), which only the run can follow.
KEEPS = {"staticmethod", "classmethod", "abstractmethod", "override", "no_grad", "inference_mode", "cache", "lru_cache"}


# --- Report --------------------------------------------------------------------------------------


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
    providers: dict = field(default_factory=dict)  # method -> where the class gets it
    missing: list = field(default_factory=list)
    undecided: list = field(default_factory=list)  # what the source cannot settle: __getattr__, a base outside the tree
    flags: list = field(default_factory=list)  # attributes set True under a condition that tests the algorithm
    workers: list = field(default_factory=list)  # EAGLE-3 worker classes
    files_read: int = 0
    seconds: float = 0.0
    confirmed: list = field(default_factory=list)  # what --dynamic checked on the imported class
    decided: dict = field(default_factory=dict)  # method -> "run" (Python's answer) or "source: why the run could not"
    run: str = ""  # what the probe did
    allow_undecided: bool = False  # --allow-undecided: pass what the audit could not decide (the image build never does)

    @property
    def passed(self) -> bool:
        """Fail closed: an undecided method fails too, unless ``allow_undecided``."""
        return not self.missing and (self.allow_undecided or not self.undecided)

    @property
    def exit_code(self) -> int:
        """0 passed, 1 a method missing, 3 only undecided ones (2 is bad input)."""
        return 0 if self.passed else 1 if self.missing else 3

    @property
    def summary(self) -> str:
        n, what = len(self.required), f"the EAGLE-3 path of sglang {self.sglang_version} calls on the target model"
        if self.missing:
            lacking = list(dict.fromkeys(m.method for m in self.missing))
            return f"audit failed: {self.arch} lacks {len(lacking)} of the {n} methods that {what}: " + ", ".join(lacking)
        sites = f"({', '.join(sorted(self.required))}; {sum(map(len, self.required.values()))} call sites)"
        if not self.undecided:
            return f"audit passed: {self.arch} provides all {n} methods that {what} {sites}"
        undecided = [m.method for m in self.undecided]
        provided = f"provides {n - len(undecided)} of the {n} methods that {what} {sites}"
        if self.allow_undecided:
            return f"audit passed with --allow-undecided: {self.arch} {provided}; undecided: {', '.join(undecided)}"
        return (f"audit undecided: {self.arch} {provided}; could not decide {', '.join(undecided)} (why: the lines above). "
                "It fails closed: a server may die on them after loading. --allow-undecided passes anyway "
                "(the image build never does); --dynamic, where the class imports, may decide them")

    def lines(self, verbose: bool = False) -> list[str]:
        """The command's output: one line per missing or undecided method, then the summary."""
        out = [
            f"{label}: {self.arch}.{m.method}() is called on the target model at "
            f"{', '.join(map(str, m.sites))}{': ' + m.reason if m.reason else ''}"
            for label, group in (("missing", self.missing), ("undecided", self.undecided))
            for m in group
        ]
        if verbose:
            out.append(f"architecture: {self.arch} at {self.arch_site}")
            out.append(f"EAGLE-3 workers: {', '.join(self.workers)}")
            out.append(f"EAGLE-3 flags set under a condition: {', '.join(self.flags) or '-'}")
            groups = {"required": self.required, "optional (guarded)": self.optional,
                      "outside the EAGLE-3 path (not checked)": self.outside,
                      "on the draft model (not checked)": self.draft}
            for title, group in groups.items():
                for method, sites in sorted(group.items()):
                    where = ", ".join(f"{s}{' [' + s.guard + ']' if s.guard else ''}" for s in sites)
                    source = self.providers.get(method) if title in ("required", "optional (guarded)") else None
                    out.append(f"{title}: {method} at {where}{' -> ' + source if source else ''}")
            out.append(self.run)
            out += [f"decided by the {how}: {m}" for m, how in sorted(self.decided.items())]
            out += [f"confirmed: {c}" for c in self.confirmed]
            out.append(f"read {self.files_read} files in {self.seconds:.2f} s")
        return out + [self.summary]

    def to_json(self) -> dict:
        out = dict(vars(self), passed=self.passed, exit_code=self.exit_code, summary=self.summary, seconds=round(self.seconds, 3))
        for key in ("required", "optional", "outside", "draft"):
            out[key] = {m: [str(s) for s in ss] for m, ss in sorted(out[key].items())}
        for key in ("missing", "undecided"):
            out[key] = {m.method: {"sites": [str(s) for s in m.sites], "reason": m.reason} for m in out[key]}
        return out


# --- The architecture class and what it provides ------------------------------------------------


def find_arch(tree: Tree, arch: str) -> Cls:
    """The class SGLang's registry serves for ``arch``: an ``EntryClass`` entry of a top-level models module."""
    # pkgutil.iter_modules over the package, packages skipped: what SGLang's registry imports
    models = sorted(m for m in tree.modules if m.rpartition(".")[0] == MODELS_PACKAGE and not tree.modules[m].endswith("__init__.py"))
    if not models:
        raise UserError(f"{tree.src}: no {MODELS_PACKAGE} in this tree; it is not an SGLang runtime tree")
    for module in models:
        text = tree.text(tree.modules[module])
        for node in tree.parse(module).body if arch in text and REGISTRY_NAME in text else ():
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == REGISTRY_NAME for t in node.targets):
                for entry in getattr(node.value, "elts", [node.value]):
                    c = tree.resolve(f"{module}.{entry.id}") if isinstance(entry, ast.Name) else None
                    if isinstance(c, Cls) and c.name == arch:
                        return c
    entries = rf"^{REGISTRY_NAME}\s*=\s*(\[[^\]]*\]|\S+)"
    lines = [line for m in models for line in re.findall(entries, tree.text(tree.modules[m]), re.M)]
    close = difflib.get_close_matches(arch, sorted({w for line in lines for w in re.findall(r"\w+", line)}), n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    registry = f"the registry ({REGISTRY_NAME} in {MODELS_PACKAGE}) of {tree.src}"
    raise UserError(f"{arch}: no model class of that name in {registry}{hint}")


@dataclass
class Provider:
    """Where a class gets a method, or why it has none: ``kind`` is "found", "not a method", "absent" or
    "undecided". Each call site must bind the ``signature`` of a found method, where it is known."""

    kind: str
    where: str = ""
    signature: inspect.Signature | None = None  # self included, unless ``static``
    static: bool = False
    bad: dict | None = None  # from the run: call site (path:line) -> why it does not bind; None: bind ``signature``


def binds(p: Provider, site: CallSite) -> str:
    """Why ``site``'s arguments (and self, for a method) do not bind to ``p``'s signature; "" if they do."""
    if p.bad is not None:  # Python bound it already, to the signature of what it returned
        return p.bad.get(str(site), "")
    if site.star or p.signature is None:  # *args or **kwargs at the call: any arity binds
        return ""
    try:
        p.signature.bind(*([] if p.static else [object()]), *[None] * site.args, **dict.fromkeys(site.keywords))
    except TypeError as err:
        return f"{p.where}: {err}"
    return ""


def provider(tree: Tree, arch: Cls, method: str, depth: int = 0) -> Provider:
    """Where ``arch`` gets ``method``, by Python's lookup: attributes set in ``__init__``, then the MRO."""
    order = tree.mro(arch)
    for c in order:
        init = member(c.node, "__init__") if isinstance(c, Cls) else None
        for node in statements(init.body) if isinstance(init, ast.FunctionDef) else ():
            targets = node.targets if isinstance(node, ast.Assign) else []
            dynamic = isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "setattr"
            if dynamic and node.value.args and is_self(node.value.args[0]):
                name = getattr(node.value.args[1], "value", None) if len(node.value.args) > 1 else None
                if not isinstance(name, str) or name == method:  # a name it cannot read may be this one
                    return Provider("undecided", f"{c.name}.__init__ ({c.path}:{node.lineno}) sets attributes by setattr")
            if any(getattr(t, "attr", "") == method and is_self(t.value) for t in targets):
                where = f"{c.name}.__init__ ({c.path}:{node.lineno})"
                if isinstance(node.value, ast.Constant):
                    return Provider("not a method", f"{where} sets it to {node.value.value!r}")
                if node not in init.body:  # under an if, a loop, a try: not every instance has it
                    return Provider("undecided", f"{where} sets it under a condition")
                held = chain_of(node.value) or []
                if len(held) == 3 and held[0] == "self" and not sets_attribute(tree, c, init, held[1], node):
                    return Provider("undecided", f"{where} sets it from self.{held[1]}, which the class does not "
                                    "set before it")
                return Provider("found", f"attribute set in {where}")
    for c in order:
        if c in NN_MODULES and method in NN_MODULE_METHODS:
            return Provider("found", NN_MODULE)
        if isinstance(c, str) and c not in KNOWN_BASES:  # it may define the method, ahead of any later base
            return Provider("undecided", f"its base {c} is outside the tree")
        stmt = member(c.node, method) if isinstance(c, Cls) else None
        if stmt is None:
            if isinstance(c, Cls) and (conditional := nested_member(c.node, method)) is not None:
                return Provider("undecided", f"{c.name}.{method} ({c.path}:{conditional.lineno}) is defined under a "
                                "condition of the class body, which the audit cannot evaluate")
            if isinstance(c, Cls) and c.node.decorator_list:
                return Provider("undecided", f"{c.name} ({c.path}:{c.node.lineno}) has a class decorator, which may add it")
            continue
        where = f"{c.name}.{method} ({c.path}:{stmt.lineno})"
        fn = stmt if isinstance(stmt, FUNCTIONS) else stmt.value
        if isinstance(fn, ast.Name):  # get_embed_and_head = _shared
            found = member(c.node, fn.id) or tree.resolve(f"{c.module}.{fn.id}")
            fn = found[1] if isinstance(found, tuple) else found
        elif isinstance(fn, ast.Attribute) and isinstance(owner := tree.resolve(".".join([c.module, *(chain_of(fn.value) or ["?"])])), Cls):
            # get_embed_and_head = DeepseekV3ForCausalLM.get_embed_and_head: the owner's attribute, by its own MRO
            # (V3 inherits it from V2: sglang 0.5.10's Kimi class borrows it so)
            fn = next((m for b in tree.mro(owner) if isinstance(b, Cls) and (m := member(b.node, fn.attr)) is not None), None)
            me = fn.args.args[0].arg if isinstance(fn, FUNCTIONS) and fn.args.args else ""
            read = next((n for n in ast.walk(fn) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == me),
                        None) if me else None
            if me and read is not None and owner not in order:
                return Provider("undecided", f"{where} is borrowed from {owner.name} and reads {ast.unparse(read)}, which "
                                "only an instance can show")
        if isinstance(fn, (*FUNCTIONS, ast.Lambda)):  # a function assigned becomes a method
            decorated = [d.func if isinstance(d, ast.Call) else d for d in getattr(fn, "decorator_list", [])]
            decorators = {(chain_of(d) or [""])[-1] for d in decorated}
            if isinstance(fn, FUNCTIONS) and decorators - PROPERTIES - KEEPS:
                return Provider("undecided", f"{where} is decorated by {', '.join(sorted(decorators - PROPERTIES - KEEPS))}, "
                                "which may replace it")
            if decorators & PROPERTIES:
                body = [b for b in fn.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
                value = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
                if isinstance(value, ast.Lambda):  # a property whose value is a function: calling it calls that
                    sig = signature_of(value.args)
                    return Provider("found", f"{c.name}.{method}, a property returning lambda{sig} ({c.path}:{stmt.lineno})",
                                    sig, True)
                return Provider("not a method", f"{where} is a property, not a method")
            sig = signature_of(fn.args)
            kind, lacking = delegate_lacks(tree, arch, fn, method, depth) if isinstance(fn, FUNCTIONS) else ("", "")
            if kind:
                return Provider(kind, f"{where} delegates to {lacking}")
            return Provider("found", f"{c.name}.{method}{sig} ({c.path}:{stmt.lineno})", sig, "staticmethod" in decorators)
        if isinstance(stmt.value, ast.Constant):
            return Provider("not a method", f"{where} is {stmt.value.value!r}, not a method")
        return Provider("undecided", f"{where} is assigned from {ast.unparse(stmt.value)}, which the audit cannot evaluate")
    dynamic = [c for c in order if isinstance(c, Cls) and member(c.node, "__getattr__") is not None]
    if dynamic:
        return Provider("undecided", f"{dynamic[0].name} defines __getattr__, which may supply it")
    for c in order:
        if isinstance(c, Cls) and (line := set_on_class(tree, c, method)):
            return Provider("undecided", f"{c.name} ({c.path}:{line}) gets attributes set on the class after its body "
                            "(setattr or assignment at module level), which the imported class shows")
    return Provider("absent")


def set_on_class(tree: Tree, c: Cls, method: str) -> int | None:
    """The line of a module-level statement that may set ``method`` on class ``c`` after its body: ``C.m = ...``, or
    ``setattr(C, NAME, ...)`` whose name is ``method`` or one the audit cannot read (a loop's variable)."""
    for node in ast.walk(tree.parse(c.module)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == method and
                                                getattr(t.value, "id", "") == c.name for t in node.targets):
            return node.lineno
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr" and len(node.args) >= 2 \
                and getattr(node.args[0], "id", "") == c.name:
            name = getattr(node.args[1], "value", None)
            if not isinstance(name, str) or name == method:
                return node.lineno
    return None


def sets_attribute(tree: Tree, c: Cls, init: ast.FunctionDef, name: str, before: ast.stmt) -> bool:
    """Does ``self.name`` exist when ``before`` runs: set earlier in ``__init__``, or a member of the class's MRO?"""
    for node in statements(init.body):
        if node is before:
            break
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(getattr(t, "attr", "") == name and is_self(t.value) for t in targets):
            return True
    return any(isinstance(b, Cls) and member(b.node, name) is not None for b in tree.mro(c))


def nested_member(cls: ast.ClassDef, name: str) -> ast.stmt | None:
    """A def of ``name`` inside an ``if``/``try`` of the class body (``if not _is_npu:``), which only runs sometimes."""
    for stmt in cls.body:
        if isinstance(stmt, (ast.If, ast.Try)):
            for inner in statements(stmt.body + stmt.orelse + getattr(stmt, "finalbody", [])):
                if isinstance(inner, FUNCTIONS) and inner.name == name:
                    return inner
    return None


def delegate_lacks(tree: Tree, instance: Cls, fn: ast.FunctionDef, method: str, depth: int) -> tuple[str, str]:
    """For a def whose body forwards to ``self.X.method(...)``: ("not a method", why) where ``__init__`` makes
    ``self.X`` an in-tree class that lacks the method, ("undecided", why) where nothing sets ``self.X``;
    ("", "") otherwise."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    call = body[0].value if len(body) == 1 and isinstance(body[0], (ast.Return, ast.Expr)) else None
    chain = chain_of(call.func) if isinstance(call, ast.Call) else None
    if depth > 3 or not chain or len(chain) < 3 or chain[0] != "self" or chain[-1] != method:
        return "", ""
    if len(chain) > 3:  # self.a.b.method: each link's class from the __init__ that sets it, or undecided
        held, path = instance, "self"
        for link in chain[1:-1]:
            path += f".{link}"
            held = held_by(tree, held, link)
            if held is None:
                return "undecided", f"{path}, whose class the source does not show"
        kind = provider(tree, held, method, depth + 1).kind
        if kind in ("absent", "not a method"):
            return "not a method", f"{path} ({held.name}, {held.path}), which lacks it"
        return ("undecided", f"{path} ({held.name}), which may lack it") if kind == "undecided" else ("", "")
    # The instance is the architecture's: its __init__ (the first in its MRO) sets what a mixin forwards to.
    owner = next((b for b in tree.mro(instance) if isinstance(b, Cls) and isinstance(member(b.node, "__init__"), ast.FunctionDef)), None)
    assigned = False
    for node in statements(member(owner.node, "__init__").body) if owner is not None else ():
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if getattr(target, "attr", "") == chain[1] and is_self(target.value):
            assigned = True
            made = chain_of(node.value.func) if isinstance(node.value, ast.Call) else None
            held = tree.resolve(".".join([owner.module, *made])) if made else None
            if isinstance(held, Cls) and provider(tree, held, method, depth + 1).kind == "absent":
                return "not a method", f"self.{chain[1]} ({held.name}, {held.path}), which lacks it"
    held = [m for b in tree.mro(instance) if isinstance(b, Cls) and (m := member(b.node, chain[1])) is not None]
    if not assigned and not held:
        return "undecided", f"self.{chain[1]}, which the class never sets where the audit can see"
    if not assigned and isinstance(held[0], FUNCTIONS):  # self.X is a property: what it returns is run time's
        return "undecided", f"self.{chain[1]}, a property whose value the source cannot evaluate"
    return "", ""


def held_by(tree: Tree, cls: Cls, attr: str) -> Cls | None:
    """The in-tree class whose instance the first ``__init__`` of ``cls``'s MRO assigns to ``self.attr``, once."""
    owner = next((b for b in tree.mro(cls) if isinstance(b, Cls) and isinstance(member(b.node, "__init__"), ast.FunctionDef)), None)
    made = [node.value for node in statements(member(owner.node, "__init__").body) if owner is not None
            and isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "attr", "") == attr
            and is_self(node.targets[0].value)] if owner is not None else []
    chain = chain_of(made[0].func) if len(made) == 1 and isinstance(made[0], ast.Call) else None
    held = tree.resolve(".".join([owner.module, *chain])) if chain else None
    return held if isinstance(held, Cls) else None


def settle(report: Report, method: str, sites: tuple, p: Provider) -> None:
    """File ``method`` under missing, undecided or providers, by what ``p`` says of it and of ``sites``."""
    if p.kind in ("absent", "undecided"):  # only an unguarded call needs the method to exist
        if method in report.required:
            group = report.missing if p.kind == "absent" else report.undecided
            group.append(Missing(method, report.required[method], p.where))
        return
    problems = {s: p.where if p.kind == "not a method" else binds(p, s) for s in sites}
    bad = [s for s in sites if problems[s]]
    if bad:
        report.missing.append(Missing(method, tuple(bad), problems[bad[0]]))
    else:
        report.providers[method] = p.where


# --- The audit -----------------------------------------------------------------------------------


def audit(sglang_src: Path, arch: str = DEFAULT_ARCH, config: dict | None = None) -> Report:
    """Check that ``arch`` provides every method the EAGLE-3 path calls on the target model.

    ``sglang_src`` is the directory that contains ``sglang/``; ``config``, a model's config.json, is what
    the run builds the class with (stand-ins without it). Raises ``UserError`` for a tree or an
    architecture the audit cannot read, or a tree it no longer understands.
    """
    started, collecting = time.perf_counter(), gc.isenabled()
    gc.disable()  # parsing makes millions of objects and no cycles: the collector's passes cost more than it
    try:
        tree = Tree(Path(sglang_src))
        try:
            info, unread = find_arch(tree, arch), None
        except UserError as err:  # the source does not show it; the run may (an EntryClass built by an expression)
            info, unread = None, err
        probe = runtime.Probe(tree, arch, info, config)  # imports while the source is read: two cores
        found = calls(tree)
    finally:
        if collecting:
            gc.enable()
    run = probe.finish(found.on)
    if info is None and not run.cls:
        raise unread
    # A call that runs only where the model lacks an attribute (`if hasattr(m, "language_model"): ... else:
    # m.method()`) is never made on an instance the run built with that attribute.
    found.on = {m: tuple(replace(s, guard=f"never runs: the built instance has {held}")
                         if (held := next((a for a in s.unless if run.has(a)), None)) else s for s in ss)
                for m, ss in found.on.items()}
    required = {m: tuple(s for s in ss if not s.guard) for m, ss in found.on.items() if any(not s.guard for s in ss)}
    report = Report(
        arch=arch,
        arch_site=f"{info.path}:{info.node.lineno}" if info else run.cls,
        sglang_version=tree_version(tree.src),
        required=required,
        optional={m: ss for m, ss in found.on.items() if m not in required},
        outside=found.outside,
        draft=found.draft,
        flags=found.flags,
        workers=found.workers,
        run=run.summary,
    )
    for method, sites in found.on.items():
        p, report.decided[method] = choose(tree, info, method, run)
        settle(report, method, sites, p)
    report.missing.sort(key=lambda m: (m.sites[0].path, m.sites[0].line))
    report.files_read, report.seconds = len(tree._ast), time.perf_counter() - started
    return report


def choose(tree: Tree, info: Cls | None, method: str, run: runtime.Run) -> tuple[Provider, str]:
    """Python's verdict where the run gives one; the source's where it does not, with why."""
    v = run.verdicts.get(method)
    if v is not None and v.kind != "unknown":
        return Provider(v.kind, v.where, bad=v.bad if v.kind == "found" else None), "run"
    why = v.why if v is not None else run.summary.removeprefix("run: ")
    p = provider(tree, info, method) if info else Provider("undecided", "the source does not show the class")
    if p.kind == "undecided":
        p = replace(p, where=f"{p.where}; the run could not decide either: {why}")
    return p, f"source (the run could not: {why})"


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
    site = report.arch_site  # path:line, or the run's module.Class where the source does not show the class
    module = site.split(":")[0][:-3].replace("/", ".") if ":" in site else site.rpartition(".")[0]
    try:
        cls = getattr(importlib.import_module(module), report.arch)
    except Exception as err:  # whatever the import raises is the answer: say which and why
        raise UserError(f"{module}.{report.arch}: cannot import for --dynamic: {type(err).__name__}: {err}") from None
    for method in sorted(set(report.required) | set(report.optional)):
        sites = report.required.get(method, ()) + report.optional.get(method, ())
        p = imported(cls, method, report)
        if p is None:  # the class alone cannot settle it: the static verdict stands
            continue
        report.missing = [m for m in report.missing if m.method != method]
        report.undecided = [m for m in report.undecided if m.method != method]
        report.providers.pop(method, None)
        settle(report, method, sites, p)
        if p.kind == "found" and method in report.providers:
            report.confirmed.append(f"{method}{p.signature} binds all {len(sites)} call sites")
    report.missing.sort(key=lambda m: (m.sites[0].path, m.sites[0].line))
    return report


def imported(cls: type, method: str, report: Report) -> Provider | None:
    """What the imported class says of ``method``; None where only an instance could tell."""
    static = inspect.getattr_static(cls, method, None)
    if static is None:
        forwarded = any(m.method == method and "__getattr__" in m.reason for m in report.undecided)
        attribute = "attribute set in" in report.providers.get(method, "")
        needed = method in report.required and not forwarded and not attribute
        return Provider("absent", "not on the imported class") if needed else None
    if isinstance(static, property) or not callable(getattr(cls, method)):
        return Provider("not a method", f"a {type(static).__name__} on the imported class, not a method")
    sig = inspect.signature(getattr(cls, method))  # bound already for a classmethod
    where = f"{cls.__name__}.{method}{sig} (imported)"
    return Provider("found", where, sig, isinstance(static, (staticmethod, classmethod)))


def model_config(path: Path) -> tuple[str, dict]:
    """(the first entry of ``architectures``, the whole config) of a model's ``config.json``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid JSON: {err}") from None
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise UserError(f"{path}: key 'architectures' must be a non-empty list of class names")
    return archs[0], data


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
        prog="python3 -m sglang_stack.audit.eagle3",
        description="Check that a model class provides every method the EAGLE-3 path calls on the target model: "
        "the call sites read from the source, the class asked of Python (imported with stand-ins, built as the loader "
        "builds it). Exit 0: all present; 1: some missing (one line each); 3: none missing, but some the "
        "source cannot settle (one 'undecided' line each, with why; --allow-undecided passes them); 2: bad input, "
        "or a tree the audit no longer understands.",
    )
    parser.add_argument("--sglang-src", required=True, type=Path, help="directory that contains sglang/")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--arch", help=f"model class name, as in config.json 'architectures' (default {DEFAULT_ARCH})")
    which.add_argument("--model-config", type=Path, help="a model's config.json: audit its first 'architectures' entry, "
                       "and build the class with it")
    parser.add_argument("--dynamic", action="store_true", help="also import the class (needs torch and SGLang's "
                        "imports: the runtime image) and bind every call site to its real signature")
    parser.add_argument("--allow-undecided", action="store_true", help="exit 0 when nothing is missing, even if some "
                        "methods are undecided (the image build never passes this)")
    parser.add_argument("--verbose", "-v", action="store_true", help="also list every call site and each provider")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    arch, config = model_config(args.model_config) if args.model_config else (args.arch or DEFAULT_ARCH, None)
    report = audit(args.sglang_src, arch, config)
    report.allow_undecided = args.allow_undecided
    if args.dynamic:
        confirm(report, args.sglang_src)
    print(json.dumps(report.to_json(), indent=2) if args.json else "\n".join(report.lines(verbose=args.verbose)))
    return report.exit_code


if __name__ == "__main__":
    run_main(main)
