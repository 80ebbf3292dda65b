"""EAGLE-3 readiness audit of an SGLang package tree.

SGLang's EAGLE-3 path calls methods on the *target* model
(``set_eagle3_layers_to_capture``, ``get_embed_and_head`` in 0.5.9). A model
class that lacks one loads all its weights, minutes for a 1T-parameter model,
and only then dies with ``AttributeError``. This module finds the same gap by
reading the source with ``ast`` (standard library only: it runs in the image's
``sglang`` stage, which has no torch), in well under a second.

It knows no method names. The rules, stated in full in docs/patches.md:

* **Receivers.** ``self`` in ``ModelRunner`` (its in-tree bases and
  subclasses) is a model runner; so is ``<x>.model_runner`` outside the
  speculative package. ``<x>.target_worker`` is the target's worker, its
  ``.model_runner`` the target's runner, and a target runner's ``.model`` the
  target model. Names holding ``draft``/``mtp``, and a class's own
  ``self.model_runner`` inside the speculative package, are the draft. A
  runner there that is neither (a renamed ``target_worker``) is an error.
  Local and ``self.x`` aliases count, and so does a parameter: the target
  model, runner or worker is followed into the functions and methods it is
  passed to, ``MAX_DEPTH`` calls deep.
* **The EAGLE-3 path.** A call is on it when no condition on its path is
  false under EAGLE3 and one of them mentions the speculative algorithm or a
  flag (a name with ``spec``/``eagle`` in it, or an attribute set ``True``
  under such a condition), or it sits in a module of an EAGLE-3 worker
  (``create_worker``'s branches that EAGLE3 can take), or was reached from one.
* **Guards.** ``hasattr``/``getattr(..., default)`` on the same receiver, or
  ``try``/``except AttributeError`` whose handler neither raises nor leaves a
  name the call was to bind unset. A check whose failure branch raises is no
  guard: the server still fails.
* **Providers.** The class the registry (``EntryClass``) serves, through the
  C3 MRO of its in-tree bases: a ``def`` (or a function assigned to the name)
  whose parameters bind every call site, or an attribute set in ``__init__``.
  ``name = None`` and properties are not methods. An unknown base outside the
  tree, or ``__getattr__``, leaves the method undecided, never failed.

``confirm`` repeats the provider half on the imported class where torch is
installed (``--dynamic``): ``inspect.signature(...).bind`` for every site.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import gc
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack.errors import UserError, run_main
from sglang_stack.patching.patches import tree_version

DEFAULT_ARCH = "KimiK25ForConditionalGeneration"

# ANCHORS: the structural names in SGLang the audit starts from. A release that
# renames one gets an error naming it, never a pass.
SPEC_MODULE = "sglang.srt.speculative.spec_info"  # the speculative-algorithm enum
RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
RUNNER_CLASS = "ModelRunner"  # owns the model as self.model
MODELS_PACKAGE = "sglang.srt.models"  # the registry imports its top-level modules
REGISTRY_NAME = "EntryClass"
EAGLE3, NO_SPEC = "EAGLE3", "NONE"  # enum members
WORKER_FACTORY = "create_worker"
RUNNER_ATTR, MODEL_ATTR, TARGET_ATTR = "model_runner", "model", "target_worker"
DRAFT_MARKERS = ("draft", "mtp")
MAX_DEPTH = 4  # calls followed from where the target is in hand

ROOTS = re.compile(rf"{RUNNER_ATTR}|{TARGET_ATTR}")
DOT_MODEL = re.compile(rf"\.{MODEL_ATTR}\b")
SPEC_WORD = re.compile(r"(?:^|_)(?:spec(?:_|$)|specul|eagle)")  # spec_info, speculative_*, eagle_*
NOT_SPEC = {"find_spec"}  # importlib.util.find_spec: SGLang probes optional packages with it
SPEC_ALGO = re.compile(r"spec\w*algo")  # spec_algorithm, speculative_algorithm: the enum's value
YES, NO, EITHER = 1, 2, 3  # what a condition can be under EAGLE3: bit 1 true, bit 2 false
# Roles of a value: the target's model, runner, worker; the draft's; a runner of unknown owner.
MODEL, RUNNER, WORKER, DRAFT, LOOSE = "model", "runner", "worker", "draft", "loose"
TARGET_ROLES = (MODEL, RUNNER, WORKER)

# Bases outside the tree whose methods are known. torch.nn.Module's public methods
# (torch 2.9); its __getattr__ returns only registered parameters, buffers and
# submodules, so it never supplies a method: the 0.5.9 crash is its AttributeError.
NN_MODULE = "torch.nn.Module"
NN_MODULE_METHODS = frozenset("""
add_module apply bfloat16 buffers children compile cpu cuda double eval extra_repr float forward
get_buffer get_extra_state get_parameter get_submodule half ipu load_state_dict modules mtia
named_buffers named_children named_modules named_parameters parameters register_backward_hook
register_buffer register_forward_hook register_forward_pre_hook register_full_backward_hook
register_full_backward_pre_hook register_load_state_dict_post_hook register_load_state_dict_pre_hook
register_module register_parameter register_state_dict_post_hook register_state_dict_pre_hook
requires_grad_ set_extra_state set_submodule share_memory state_dict to to_empty train type xpu zero_grad
""".split())
KNOWN_BASES = {"object", NN_MODULE, "torch.nn.modules.module.Module", "abc.ABC", "typing.Generic", "typing.Protocol"}
PROPERTIES = {"property", "cached_property", "setter", "getter", "deleter"}


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
    guard: str = ""  # why the call is optional ("hasattr", "except AttributeError"), or ""
    args: int = 0  # positional arguments
    keywords: tuple[str, ...] = ()
    star: bool = False  # *args or **kwargs: the arity cannot be checked

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Missing:
    """A method the class does not provide for ``sites`` (or, in ``undecided``, may not)."""

    method: str
    sites: tuple[CallSite, ...]
    reason: str = ""

    def line(self, arch: str, label: str = "missing") -> str:
        where = ", ".join(str(s) for s in self.sites)
        tail = f": {self.reason}" if self.reason else ""
        return f"{label}: {arch}.{self.method}() is called on the target model at {where}{tail}"


@dataclass
class Report:
    """What ``audit`` found. ``passed`` is False iff ``missing`` is not empty."""

    arch: str
    arch_site: str  # path:line of the class
    sglang_version: str
    required: dict[str, tuple[CallSite, ...]]  # unguarded target calls on the EAGLE-3 path
    optional: dict[str, tuple[CallSite, ...]]  # guarded target calls on the EAGLE-3 path
    outside: dict[str, tuple[CallSite, ...]]  # target calls off the EAGLE-3 path (not checked)
    draft: dict[str, tuple[CallSite, ...]]  # calls on the draft model on the EAGLE-3 path (not checked)
    providers: dict[str, str]  # method -> where the class gets it
    missing: list[Missing]
    undecided: list[Missing]  # beyond what the source can tell: __getattr__, unknown bases
    external_bases: list[str]
    flags: list[str]  # attributes set True under an EAGLE-3 condition
    workers: list[str]  # EAGLE-3 worker classes
    files_read: int
    seconds: float = 0.0
    confirmed: list[str] = field(default_factory=list)  # what --dynamic checked on the imported class

    @property
    def passed(self) -> bool:
        return not self.missing

    @property
    def summary(self) -> str:
        n_sites = sum(len(s) for s in self.required.values())
        names = ", ".join(sorted(self.required))
        where = f"the EAGLE-3 path of sglang {self.sglang_version} calls on the target model"
        if not self.passed:
            lacking = ", ".join(dict.fromkeys(m.method for m in self.missing))
            return f"audit failed: {self.arch} lacks {len(set(m.method for m in self.missing))} of the {len(self.required)} methods that {where}: {lacking}"
        head = f"audit passed: {self.arch} provides all {len(self.required)} methods that {where} ({names}; {n_sites} call sites)"
        if self.undecided:
            head = head.replace("provides all", "provides or may provide all") + f"; undecided: {', '.join(m.method for m in self.undecided)}"
        return head

    def lines(self, verbose: bool = False) -> list[str]:
        """The command's output: one line per missing or undecided method, then the summary."""
        out = [m.line(self.arch) for m in self.missing] + [m.line(self.arch, "undecided") for m in self.undecided]
        if verbose:
            out.append(f"architecture: {self.arch} at {self.arch_site}")
            out.append(f"EAGLE-3 workers: {', '.join(self.workers)}")
            out.append(f"EAGLE-3 flags set under a condition: {', '.join(self.flags) or '-'}")
            for title, group in (("required", self.required), ("optional (guarded)", self.optional),
                                 ("outside the EAGLE-3 path (not checked)", self.outside),
                                 ("on the draft model (not checked)", self.draft)):  # fmt: skip
                for method, sites in sorted(group.items()):
                    where = ", ".join(f"{s}{' [' + s.guard + ']' if s.guard else ''}" for s in sites)
                    provider = self.providers.get(method) if group is not self.outside and group is not self.draft else None
                    out.append(f"{title}: {method} at {where}{' -> ' + provider if provider else ''}")
            out += [f"note: base class {b} is outside the tree" for b in self.external_bases]
            out += [f"confirmed: {c}" for c in self.confirmed]
            out.append(f"read {self.files_read} files in {self.seconds:.2f} s")
        out.append(self.summary)
        return out

    def to_json(self) -> dict:
        def sites(group):
            return {m: [str(s) for s in ss] for m, ss in sorted(group.items())}

        findings = lambda items: {m.method: {"sites": [str(s) for s in m.sites], "reason": m.reason} for m in items}  # noqa: E731
        return {
            "arch": self.arch, "arch_site": self.arch_site, "sglang_version": self.sglang_version,
            "passed": self.passed, "summary": self.summary,
            "missing": findings(self.missing), "undecided": findings(self.undecided),
            "required": sites(self.required), "optional": sites(self.optional),
            "outside": sites(self.outside), "draft": sites(self.draft),
            "providers": dict(sorted(self.providers.items())), "flags": self.flags, "workers": self.workers,
            "confirmed": self.confirmed, "seconds": round(self.seconds, 3),
        }  # fmt: skip


# --------------------------------------------------------------------------
# The tree: modules, imports, classes
# --------------------------------------------------------------------------


@dataclass(eq=False)
class Cls:
    name: str
    module: str
    path: str
    node: ast.ClassDef
    bases: list | None = None  # Cls (in the tree) or a dotted name (outside); resolved by Tree.mro

    def body(self, name: str) -> ast.stmt | None:
        """The last statement of the class body that binds ``name``."""
        found = None
        for stmt in self.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                found = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found = stmt
        return found


class Tree:
    """An unpacked sglang package: ``src/sglang/...``. Reads and parses each file once, when needed."""

    def __init__(self, sglang_src: Path):
        self.src = Path(sglang_src)
        if not (self.src / "sglang" / "srt").is_dir():
            hint = f" (pass its parent, {self.src.parent})" if (self.src / "srt").is_dir() else ""
            raise UserError(f"{self.src}: no sglang/ package here{hint}; pass the directory that contains sglang/")
        self.modules: dict[str, str] = {}
        for p in (self.src / "sglang" / "srt").rglob("*.py"):
            rel = p.relative_to(self.src).as_posix()
            parts = rel[:-3].split("/")
            self.modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = rel
        self._text: dict[str, str] = {}
        self._ast: dict[str, ast.Module] = {}
        self._imports: dict[str, dict[str, str]] = {}
        self._classes: dict[tuple[str, str], Cls | None] = {}

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

    @property
    def files_read(self) -> int:
        return len(self._ast)

    def imports(self, module: str) -> dict[str, str]:
        """Names bound by imports at module level (TYPE_CHECKING blocks included): name -> dotted origin."""
        if module not in self._imports:
            out: dict[str, str] = {}
            for node in self.parse(module).body:
                for stmt in [node] + (node.body if isinstance(node, (ast.If, ast.Try)) else []):
                    out.update(import_names(stmt, module, module in self.modules and self.modules[module].endswith("__init__.py")))
            self._imports[module] = out
        return self._imports[module]

    def resolve(self, module: str, name: str, depth: int = 0):
        """What ``name`` is in ``module``: a module name (str), a (module, def-or-class node), or None."""
        if module not in self.modules or depth > 8:
            return None
        for node in self.parse(module).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return module, node
        origin = self.imports(module).get(name)
        if origin is None:
            return None
        if origin in self.modules:
            return origin
        mod, _, attr = origin.rpartition(".")
        return self.resolve(mod, attr, depth + 1) if mod else None

    def origin(self, module: str, node: ast.expr) -> str:
        """The dotted name an expression refers to, through the module's imports: ``nn.Module`` -> torch.nn.Module."""
        chain = chain_of(node.value if isinstance(node, ast.Subscript) else node)
        if not chain:
            return ast.unparse(node)
        head = self.imports(module).get(chain[0], chain[0])
        return ".".join([head] + chain[1:])

    def cls(self, module: str, name: str) -> Cls | None:
        key = (module, name)
        if key not in self._classes:
            self._classes[key] = None  # cycles
            found = self.resolve(module, name)
            if isinstance(found, tuple) and isinstance(found[1], ast.ClassDef):
                self._classes[key] = Cls(found[1].name, found[0], self.modules[found[0]], found[1])
        return self._classes[key]

    def mro(self, c, seen: tuple = ()) -> list:
        """C3 linearisation over in-tree classes; a base outside the tree is a leaf (its own bases unknown)."""
        if not isinstance(c, Cls) or c in seen:
            return [c]
        if c.bases is None:
            c.bases = [self.base(c.module, b) for b in c.node.bases]
        seqs = [self.mro(b, seen + (c,)) for b in c.bases] + [list(c.bases)]
        out = [c]
        while any(seqs):
            heads = [s[0] for s in seqs if s]
            # inconsistent bases (Python would refuse the class): keep depth-first order
            head = next((h for h in heads if not any(h in s[1:] for s in seqs)), heads[0])
            out.append(head)
            seqs = [s[1:] if s and s[0] == head else s for s in seqs]
        return out

    def base(self, module: str, node: ast.expr):
        target = node.value if isinstance(node, ast.Subscript) else node
        chain = chain_of(target)
        if chain and len(chain) == 1:
            found = self.cls(module, chain[0])
        elif chain and len(chain) == 2 and isinstance(self.resolve(module, chain[0]), str):
            found = self.cls(self.resolve(module, chain[0]), chain[1])
        else:
            found = None
        return found or self.origin(module, node)


def import_names(stmt: ast.stmt, module: str, is_package: bool = False) -> dict[str, str]:
    if isinstance(stmt, ast.ImportFrom):
        base = stmt.module or ""
        if stmt.level:
            parent = module.split(".")[: len(module.split(".")) - stmt.level + (1 if is_package else 0)]
            base = ".".join(parent + ([base] if base else []))
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
    if not isinstance(node, ast.Name):
        return None
    out.append(node.id)
    return out[::-1]


# --------------------------------------------------------------------------
# Conditions under EAGLE3
# --------------------------------------------------------------------------


class Spec:
    """The speculative-algorithm enum, its predicates' values under EAGLE3, and the EAGLE-3 workers."""

    def __init__(self, tree: Tree):
        if SPEC_MODULE not in tree.modules:
            raise UserError(f"{tree.src}: no {SPEC_MODULE} (the speculative-algorithm enum); this SGLang layout is "
                            f"not one the audit knows (sglang_stack/patching/audit.py)")  # fmt: skip
        self.module, self.path = SPEC_MODULE, tree.modules[SPEC_MODULE]
        for node in tree.parse(SPEC_MODULE).body:
            members = {t.id for s in getattr(node, "body", []) if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.ClassDef) and {EAGLE3, NO_SPEC} <= members:
                self.name, self.node, self.members = node.name, node, members
                break
        else:
            raise UserError(f"{tree.src / self.path}: no enum with members {EAGLE3} and {NO_SPEC}; this SGLang layout is "
                            f"not one the audit knows (sglang_stack/patching/audit.py)")  # fmt: skip
        self.bodies: dict[str, ast.expr] = {}
        for fn in self.node.body:
            stmts = [s for s in getattr(fn, "body", []) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if isinstance(fn, ast.FunctionDef) and len(fn.args.args) == 1 and len(stmts) == 1 and isinstance(stmts[0], ast.Return) and stmts[0].value:
                self.bodies[fn.name] = stmts[0].value
        self._values: dict[str, int] = {}
        self.flags: set[str] = set()
        self.touched = False  # value() met a predicate or a comparison of the algorithm
        self._memo: dict[int, tuple[int, bool]] = {}

    def predicate(self, name: str) -> int:
        if name not in self._values:
            self._values[name] = EITHER  # a cycle stays unknown
            self._values[name] = self.value(self.bodies[name], in_enum=True)
        return self._values[name]

    def refs(self, node: ast.expr) -> set[str] | None:
        """``Enum.EAGLE3``, ``"EAGLE3"``, ``None``, or a tuple of them -> the member names; None if not that."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            parts = [self.refs(e) for e in node.elts]
            return None if any(p is None for p in parts) else set().union(*parts)
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
            recv = node.func.value
            # is_none() is on other enums too (the MoE all-to-all backend): the receiver must be the algorithm
            if (in_enum and getattr(recv, "id", "") == "self") or any(speculative(w) or "algo" in w.lower() or w == self.name for w in words(recv)):
                self.touched = True
                return self.predicate(node.func.attr)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            for subject, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                is_self = in_enum and getattr(subject, "id", "") == "self"
                named = self.refs(other)
                member = isinstance(other, ast.Attribute) or isinstance(other, (ast.Tuple, ast.List, ast.Set)) and any(isinstance(e, ast.Attribute) for e in other.elts)
                if named is not None and (is_self or member or any(SPEC_ALGO.search(w.lower()) for w in words(subject))):
                    self.touched = True
                    hit = EAGLE3 in named
                    if isinstance(node.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn)):
                        hit = not hit
                    elif not isinstance(node.ops[0], (ast.Eq, ast.Is, ast.In)):
                        return EITHER
                    return YES if hit else NO
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name.startswith("is_draft"):
            return NO  # ModelRunner.is_draft_worker: the target's runner is not the draft's
        if isinstance(node, ast.Constant):
            return YES if node.value else NO
        return EITHER

    def judge(self, test: ast.expr) -> tuple[int, bool]:
        """(value under EAGLE3, does it test the algorithm), per condition node."""
        key = id(test)
        if key not in self._memo:
            self.touched = False
            self._memo[key] = (self.value(test), self.touched)
        return self._memo[key]

    def mentions(self, test: ast.expr) -> bool:
        """Does the condition test the algorithm, or name a flag (``spec``/``eagle`` in it, or set True under EAGLE-3)?"""
        return self.judge(test)[1] or any(speculative(w) or w in self.flags for w in words(test))

    def workers(self, tree: Tree) -> list[Cls]:
        """The classes ``create_worker`` can return under EAGLE3."""
        factory = next((f for f in self.node.body if isinstance(f, ast.FunctionDef) and f.name == WORKER_FACTORY), None)
        if factory is None:
            raise UserError(f"{tree.src / self.path}: {self.name}.{WORKER_FACTORY}() not found; the audit needs it to "
                            f"find the EAGLE-3 workers (sglang_stack/patching/audit.py)")  # fmt: skip
        found: list[Cls] = []

        def block(stmts, local: dict[str, str]) -> bool:  # True: every path returned
            for stmt in stmts:
                local.update(import_names(stmt, self.module))
                if isinstance(stmt, ast.If):
                    v = self.value(stmt.test, in_enum=True)
                    body = block(stmt.body, local) if v & YES else True
                    orelse = block(stmt.orelse, local) if v & NO else True
                    if body and orelse:
                        return True
                elif isinstance(stmt, ast.Return):
                    origin = local.get(getattr(stmt.value, "id", ""), tree.imports(self.module).get(getattr(stmt.value, "id", "")))
                    c = tree.cls(*origin.rsplit(".", 1)) if origin and "." in origin else None
                    if c is not None and c not in found:
                        found.append(c)
                    return True
                elif isinstance(stmt, ast.Raise):
                    return True
            return False

        block(factory.body, {})
        if not found:
            raise UserError(f"{tree.src / self.path}: {self.name}.{WORKER_FACTORY}() returns no in-tree worker class for "
                            f"{EAGLE3}; the audit cannot find the EAGLE-3 path (sglang_stack/patching/audit.py)")  # fmt: skip
        return found


def speculative(word: str) -> bool:
    return word not in NOT_SPEC and SPEC_WORD.search(word.lower()) is not None


def words(node: ast.AST) -> list[str]:
    """Every name and attribute in an expression."""
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]


# --------------------------------------------------------------------------
# Calls on models, with their path conditions
# --------------------------------------------------------------------------


@dataclass
class Frame:
    """Where the walk is: the scope, what its names hold, and the conditions that lead here."""

    module: str
    path: str
    lines: list[str]
    spec_pkg: bool  # inside the speculative package: a runner there is the draft's unless shown otherwise
    cls: ast.ClassDef | None = None
    runner: bool = False  # `self` is a ModelRunner
    aliases: dict = field(default_factory=dict)  # name -> (role, canonical receiver)
    imports: dict = field(default_factory=dict)  # imports inside the function
    conds: tuple = ()  # (test, polarity, (receiver, method) pairs it proves present, arguments its names stand for)
    arguments: dict = field(default_factory=dict)  # parameter -> the caller's argument expression
    on_path: bool = False  # in an EAGLE-3 worker module, or reached from the EAGLE-3 path
    guard: str = ""  # an enclosing `except AttributeError`
    depth: int = 0
    scope: ast.AST | None = None  # the function (or module) being walked

    def but(self, **changes) -> Frame:
        return Frame(**{**self.__dict__, **changes})


class Scan:
    """Walks modules and the functions the target is passed to; records every call on a model."""

    def __init__(self, tree: Tree, spec: Spec, runner_names: set[str], on_classes: set):
        self.tree, self.spec, self.runner_names, self.on_classes = tree, spec, runner_names, on_classes
        self.spec_pkg = SPEC_MODULE.rsplit(".", 1)[0] + "."
        self.sites: list[tuple[CallSite, tuple, bool, str]] = []  # (site, conds, on_path, role)
        self.flag_sets: list[tuple[str, tuple]] = []  # (attribute set to a true constant, conds)
        self._class_aliases: dict[int, dict] = {}
        self._followed: set = set()

    def frame(self, module: str, **kw) -> Frame:
        rel = self.tree.modules[module]
        return Frame(module, rel, self.tree.text(rel).split("\n"), module.startswith(self.spec_pkg), **kw)

    def module(self, module: str, on_path: bool) -> None:
        tree = self.tree.parse(module)
        self.block(tree.body, self.frame(module, on_path=on_path, scope=tree))

    # values ----------------------------------------------------------------

    def value(self, node: ast.AST, f: Frame) -> tuple[str, str] | None:
        """(role, canonical receiver) of an expression that holds a model, runner or worker; else None."""
        if isinstance(node, ast.Name):
            name = node.id
            if name in f.aliases:
                return f.aliases[name]
            if name == "self":
                return (RUNNER, f"self@{f.cls.name}") if f.runner else None
            role = self.named(name, f, is_self=False)
            return (role, name) if role else None
        if isinstance(node, (ast.Subscript, ast.Call)):
            inner = self.value(node.value if isinstance(node, ast.Subscript) else node.func, f)
            return (DRAFT, inner[1] + "()") if inner and inner[0] == DRAFT else None
        if not isinstance(node, ast.Attribute):
            return None
        base = self.value(node.value, f)
        canon = f"{base[1] if base else self.canon(node.value, f)}.{node.attr}"
        if any(m in node.attr.lower() for m in DRAFT_MARKERS) or (base and base[0] == DRAFT):
            return DRAFT, canon
        if base:
            step = {(WORKER, RUNNER_ATTR): RUNNER, (RUNNER, MODEL_ATTR): MODEL, ("loose runner", MODEL_ATTR): LOOSE}
            role = step.get((base[0], node.attr))
            return (role, canon) if role else None
        is_self = isinstance(node.value, ast.Name) and node.value.id == "self"
        if is_self and f.cls is not None and node.attr in self.class_aliases(f):
            return self.class_aliases(f)[node.attr]
        role = self.named(node.attr, f, is_self)
        return (role, canon) if role else None

    def named(self, name: str, f: Frame, is_self: bool) -> str | None:
        if any(m in name.lower() for m in DRAFT_MARKERS):
            return DRAFT
        if name == TARGET_ATTR:
            return WORKER
        if not f.spec_pkg:
            return RUNNER if name == RUNNER_ATTR else None
        if name == RUNNER_ATTR and is_self:
            return DRAFT  # a speculative worker's own runner holds the draft model
        return "loose runner" if name.endswith("runner") else None

    def canon(self, node: ast.AST, f: Frame) -> str:
        got = self.value(node, f)
        if got:
            return got[1]
        if isinstance(node, ast.Name):
            return f"self@{f.cls.name}" if node.id == "self" and f.cls else node.id
        if isinstance(node, ast.Attribute):
            return f"{self.canon(node.value, f)}.{node.attr}"
        return ast.unparse(node)

    def class_aliases(self, f: Frame) -> dict:
        """``self.x = <model, runner or worker>`` anywhere in the class makes ``self.x`` one in every method."""
        key = id(f.cls)
        if key not in self._class_aliases:
            table = self._class_aliases[key] = {}
            inner = f.but(aliases={})
            todo = list(f.cls.body)
            while todo:
                stmt = todo.pop(0)
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    t = stmt.targets[0]
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        got = self.value(stmt.value, inner)
                        if got:
                            table[t.attr] = got
                for name in ("body", "orelse", "finalbody", "handlers"):
                    todo.extend(s for s in getattr(stmt, name, ()) if not isinstance(s, ast.ClassDef))
        return self._class_aliases[key]

    # statements ------------------------------------------------------------

    def cond(self, test: ast.expr, polarity: bool, f: Frame, proves=True) -> tuple:
        """A path condition. ``proves`` False: a check that raises proves nothing; (taken, skipped, stmt):
        neither does one whose other branch leaves unset a name read after ``stmt``."""
        via = tuple(f.arguments[w] for w in words(test) if w in f.arguments) if f.arguments else ()
        guards = self.guards(test, polarity, f) if proves else ()
        if guards and isinstance(proves, tuple) and self.unset(*proves, f):
            guards = ()
        return test, polarity, frozenset(guards), via

    def unset(self, taken: list, skipped: list, after: ast.stmt, f: Frame) -> bool:
        """Would running ``skipped`` instead of ``taken`` leave a name unset that the code after ``after`` reads?"""
        if exits(skipped):
            return False
        bound = stored(taken) - stored(skipped)
        return bool(bound) and any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in bound
                                   and n.lineno > after.end_lineno for n in ast.walk(f.scope))  # fmt: skip

    def try_guard(self, node: ast.Try, f: Frame) -> str:
        """``except AttributeError`` that neither raises nor leaves a name unset makes the body optional."""
        for handler in node.handlers:
            types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type] if handler.type else []
            if "AttributeError" in [(chain_of(t) or [""])[-1] for t in types]:
                if not any(isinstance(n, ast.Raise) for n in ast.walk(handler)) and not self.unset(node.body, handler.body, node, f):
                    return "except AttributeError"
        return ""

    def guards(self, test: ast.expr, polarity: bool, f: Frame) -> set:
        """(receiver, method) pairs that ``test`` being ``polarity`` proves present."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.guards(test.operand, not polarity, f)
        if isinstance(test, ast.BoolOp):
            parts = [self.guards(v, polarity, f) for v in test.values]
            return set().union(*parts) if isinstance(test.op, ast.And) == polarity else set.intersection(*parts)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
            if isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
                return self.guards(test.left, polarity, f)
        if not polarity or not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)):
            return set()
        args = test.args
        if test.func.id == "callable" and len(args) == 1:
            return self.guards(args[0], True, f)
        defaulted = len(args) == 3 and isinstance(args[2], ast.Constant) and not args[2].value
        if (test.func.id == "hasattr" and len(args) == 2) or (test.func.id == "getattr" and defaulted):
            if isinstance(args[1], ast.Constant) and isinstance(args[1].value, str):
                return {(self.canon(args[0], f), args[1].value)}
        return set()

    def block(self, stmts: list[ast.stmt], f: Frame) -> None:
        for stmt in stmts:
            self.stmt(stmt, f)
            if isinstance(stmt, ast.If):
                # `if not ok: return` guards the rest of the block; an exit by `raise`
                # does too, but then a missing method still fails the server.
                if exits(stmt.body) and not exits(stmt.orelse):
                    f = f.but(conds=f.conds + (self.cond(stmt.test, False, f, not raises(stmt.body)),))
                elif exits(stmt.orelse) and not exits(stmt.body):
                    f = f.but(conds=f.conds + (self.cond(stmt.test, True, f, not raises(stmt.orelse)),))

    def stmt(self, stmt: ast.stmt, f: Frame) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in ast.walk(stmt.args) if isinstance(a, ast.arg)}
            aliases = {k: v for k, v in f.aliases.items() if k not in params}
            self.block(stmt.body, f.but(aliases=aliases, imports=dict(f.imports), scope=stmt))
        elif isinstance(stmt, ast.ClassDef):
            bases = {(chain_of(b) or [""])[-1] for b in stmt.bases}
            runner = stmt.name in self.runner_names or bool(bases & self.runner_names)
            if runner:
                self.runner_names.add(stmt.name)
            on_path = f.on_path or (f.module, stmt.name) in self.on_classes
            self.block(stmt.body, f.but(cls=stmt, runner=runner, aliases={}, on_path=on_path))
        elif isinstance(stmt, (ast.If, ast.While)):
            self.expr(stmt.test, f, top=True)
            proves = not raises(stmt.orelse) and (stmt.body, stmt.orelse, stmt)
            self.block(stmt.body, f.but(conds=f.conds + (self.cond(stmt.test, True, f, proves),)))
            if isinstance(stmt, ast.If):
                proves = not raises(stmt.body) and (stmt.orelse, stmt.body, stmt)
                self.block(stmt.orelse, f.but(conds=f.conds + (self.cond(stmt.test, False, f, proves),)))
            else:
                self.block(stmt.orelse, f)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.block(stmt.body, f.but(guard=self.try_guard(stmt, f) or f.guard))
            for part in [h.body for h in stmt.handlers] + [stmt.orelse, stmt.finalbody]:
                self.block(part, f)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            f.imports.update(import_names(stmt, f.module))
        else:
            for value in ast.iter_child_nodes(stmt):
                if isinstance(value, ast.stmt):
                    self.block([value], f)
                else:
                    self.expr(value, f, top=True)
            if isinstance(stmt, ast.Assign):
                self.assign(stmt, f)

    def assign(self, stmt: ast.Assign, f: Frame) -> None:
        for t in stmt.targets:
            if isinstance(t, ast.Name):
                got = self.value(stmt.value, f) if len(stmt.targets) == 1 else None
                if got:
                    f.aliases[t.id] = got
                else:
                    f.aliases.pop(t.id, None)
            elif isinstance(t, ast.Attribute) and isinstance(stmt.value, ast.Constant) and stmt.value.value is True:
                self.flag_sets.append((t.attr, f.conds))
            elif isinstance(t, ast.Tuple):
                for elt in t.elts:
                    if isinstance(elt, ast.Name):
                        f.aliases.pop(elt.id, None)

    # expressions -----------------------------------------------------------

    def relevant(self, node: ast.AST, f: Frame) -> bool:
        """Can this expression hold a model, runner or worker? (Skipping the rest keeps the walk fast.)"""
        if not hasattr(node, "lineno"):
            return True
        text = "\n".join(f.lines[node.lineno - 1 : node.end_lineno])
        if "model" in text or "target" in text or (f.runner and "self" in text):
            return True
        if any(a in text for a in f.aliases):
            return True
        return f.cls is not None and any(a in text for a in self.class_aliases(f))

    def expr(self, node: ast.AST, f: Frame, top: bool = False) -> None:
        if top and not self.relevant(node, f):
            return
        if isinstance(node, ast.BoolOp):
            conds = f.conds
            for value in node.values:
                self.expr(value, f.but(conds=conds))
                conds = conds + (self.cond(value, isinstance(node.op, ast.And), f),)
            return
        if isinstance(node, ast.IfExp):
            self.expr(node.test, f)
            self.expr(node.body, f.but(conds=f.conds + (self.cond(node.test, True, f),)))
            self.expr(node.orelse, f.but(conds=f.conds + (self.cond(node.test, False, f),)))
            return
        if isinstance(node, ast.Call):
            self.call(node, f)
        for child in ast.iter_child_nodes(node):
            self.expr(child, f)

    def call(self, node: ast.Call, f: Frame) -> None:
        func, guard, recv = node.func, f.guard, None
        if isinstance(func, ast.Attribute):
            recv, method = func.value, func.attr
        elif (isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr"
              and len(func.args) >= 2 and isinstance(func.args[1], ast.Constant) and isinstance(func.args[1].value, str)):  # fmt: skip
            # getattr(model, "m")(...) needs m; getattr(model, "m", default)(...) does not
            recv, method = func.args[0], func.args[1].value
            guard = guard or ("getattr default" if len(func.args) > 2 else "")
        got = self.value(recv, f) if recv is not None else None
        if got and (got[0] in (MODEL, LOOSE) or got[0] == DRAFT and got[1].endswith("." + MODEL_ATTR)):
            if not guard and any((got[1], method) in c[2] for c in f.conds):
                guard = "hasattr"
            star = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            site = CallSite(f.path, node.lineno, method, ast.unparse(recv), "draft" if got[0] == DRAFT else "target",
                            guard, len(node.args), tuple(k.arg for k in node.keywords if k.arg), star)  # fmt: skip
            self.sites.append((site, f.conds, f.on_path, got[0]))
        if f.depth < MAX_DEPTH:
            passed = [(i, self.value(a, f)) for i, a in enumerate(node.args)]
            passed += [(k.arg, self.value(k.value, f)) for k in node.keywords if k.arg]
            passed = [(slot, v) for slot, v in passed if v and v[0] in TARGET_ROLES]
            if passed:
                self.follow(func, passed, node.args, node.keywords, f)

    def follow(self, func: ast.expr, passed: list, args: list, keywords: list, f: Frame) -> None:
        """Walk the function or method the target is passed to, with the parameter bound to it."""
        found, cls, drop = None, None, False
        if isinstance(func, ast.Name):
            origin = f.imports.get(func.id)
            found = self.tree.resolve(*origin.rsplit(".", 1)) if origin and "." in origin else self.tree.resolve(f.module, func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == "self" and f.cls is not None:
                found, drop = (f.module, f.cls.body and Cls(f.cls.name, f.module, f.path, f.cls).body(func.attr)), True
                cls = f.cls
            else:
                mod = f.imports.get(func.value.id) or self.tree.resolve(f.module, func.value.id)
                if isinstance(mod, str) and mod in self.tree.modules:
                    found = self.tree.resolve(mod, func.attr)
        if not isinstance(found, tuple) or found[1] is None:
            return
        module, fn = found
        if isinstance(fn, ast.ClassDef):
            cls, drop = fn, True
            fn = Cls(fn.name, module, self.tree.modules[module], fn).body("__init__")
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args][1 if drop else 0 :]
        names = set(params) | {a.arg for a in fn.args.kwonlyargs}

        def param(slot):
            return params[slot] if isinstance(slot, int) and slot < len(params) else slot if slot in names else None

        binding = {param(slot): v for slot, v in passed if param(slot)}
        # A flag passed in keeps its meaning under the parameter's name: `if enabled:`
        arguments = {param(i): a for i, a in enumerate(args)} | {param(k.arg): k.value for k in keywords if k.arg}
        arguments.pop(None, None)
        key = (id(fn), tuple(sorted(binding.items())), tuple(id(c[0]) for c in f.conds), f.on_path, f.guard)
        if not binding or key in self._followed:
            return
        self._followed.add(key)
        runner = cls is not None and cls.name in self.runner_names
        inner = self.frame(module, cls=cls, runner=runner, aliases=binding, conds=f.conds, on_path=f.on_path,
                           guard=f.guard, depth=f.depth + 1, arguments=arguments, scope=fn)  # fmt: skip
        self.block(fn.body, inner)

    # after the walk ----------------------------------------------------------

    def flags(self) -> set[str]:
        """Attributes set True under a condition that tests the algorithm and can hold under EAGLE3."""
        out = set()
        for name, conds in self.flag_sets:
            judged = [(self.spec.judge(t), p) for t, p, *_ in conds]
            if all(value & (YES if p else NO) for (value, _), p in judged) and any(algo for (_, algo), _ in judged):
                out.add(name)
        return out

    def where(self, conds: tuple, on_path: bool) -> str:
        """"on" the EAGLE-3 path, "off" it (runs, but not because of speculation), or "never" under EAGLE3."""
        for test, polarity, _, via in conds:
            if not self.spec.judge(test)[0] & (YES if polarity else NO):
                return "never"
            on_path = on_path or self.spec.mentions(test) or any(self.spec.mentions(a) for a in via)
        return "on" if on_path else "off"


def exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def raises(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Raise)


def stored(body: list[ast.stmt]) -> set[str]:
    return {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


# --------------------------------------------------------------------------
# The architecture class and what it provides
# --------------------------------------------------------------------------


def find_arch(tree: Tree, arch: str) -> Cls:
    """The class SGLang's registry serves for ``arch``: an ``EntryClass`` entry of a top-level models module."""
    depth = MODELS_PACKAGE.count(".") + 1
    models = [m for m in tree.modules if m.startswith(MODELS_PACKAGE + ".") and m.count(".") == depth]
    if not models:
        raise UserError(f"{tree.src}: no {MODELS_PACKAGE} in this tree; it is not an SGLang runtime tree")
    for module in sorted(models):
        text = tree.text(tree.modules[module])
        if REGISTRY_NAME not in text or arch not in text:
            continue
        for node in tree.parse(module).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == REGISTRY_NAME for t in node.targets):
                for entry in node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]:
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
    args: ast.arguments | None = None
    drop_first: bool = True  # the first parameter is self (or cls)

    def problem(self, site: CallSite) -> str:
        """Why ``site`` would fail against this provider; "" if it binds."""
        if self.kind in ("absent", "not a method"):
            return self.where if self.kind == "not a method" else ""
        if self.args is None or site.star:
            return ""
        a = self.args
        params = [p.arg for p in a.posonlyargs + a.args]
        required = params[: len(params) - len(a.defaults)]
        if self.drop_first:
            if not params and not a.vararg:
                return f"{self.where} takes no self"
            params, required = params[1:], required[1:]
        named = set(params[max(0, len(a.posonlyargs) - self.drop_first):]) | {k.arg for k in a.kwonlyargs}
        if site.args > len(params) and not a.vararg:
            return f"{self.where} takes {len(params)} positional arguments; called with {site.args}"
        bound = set(params[: site.args])
        for kw in site.keywords:
            if kw in bound or (kw not in named and not a.kwarg):
                return f"{self.where} has no parameter {kw!r} for that call"
        bound |= set(site.keywords)
        lacking = [p for p in required if p not in bound]
        lacking += [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None and k.arg not in bound]
        return f"{self.where} needs {lacking[0]!r}, which that call does not pass" if lacking else ""


def provider(tree: Tree, arch: Cls, method: str) -> Provider:
    """Where ``arch`` gets ``method``, by Python's own lookup: instance attributes, then the MRO."""
    order = tree.mro(arch)
    for c in order:
        init = c.body("__init__") if isinstance(c, Cls) else None
        for node in ast.walk(init) if isinstance(init, ast.FunctionDef) else ():
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == method and getattr(t.value, "id", "") == "self" for t in node.targets
            ):
                where = f"{c.name}.__init__ ({c.path}:{node.lineno})"
                if isinstance(node.value, ast.Constant):
                    return Provider("not a method", f"{where} sets it to {node.value.value!r}")
                return Provider("attribute", f"attribute set in {where}")
    unknown = []
    for c in order:
        if not isinstance(c, Cls):
            if c in (NN_MODULE, "torch.nn.modules.module.Module") and method in NN_MODULE_METHODS:
                return Provider("torch", NN_MODULE)
            if c not in KNOWN_BASES:
                unknown.append(c)
            continue
        stmt = c.body(method)
        if stmt is None:
            continue
        where = f"{c.name}.{method} ({c.path}:{stmt.lineno})"
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = {(chain_of(d.func if isinstance(d, ast.Call) else d) or [""])[-1] for d in stmt.decorator_list}
            if decorators & PROPERTIES:
                return Provider("not a method", f"{where} is a property, not a method")
            return Provider("def", where, stmt.args, "staticmethod" not in decorators)
        value = stmt.value
        if isinstance(value, ast.Lambda):
            return Provider("def", where, value.args)
        if isinstance(value, ast.Name):
            fn = c.body(value.id) or (tree.resolve(c.module, value.id) or (None, None))[1]
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return Provider("def", f"{where} = {value.id}", fn.args)
        if isinstance(value, ast.Constant):
            return Provider("not a method", f"{where} is {value.value!r}, not a method")
        return Provider("undecided", f"{where} is assigned from {ast.unparse(value)}, which the audit cannot evaluate")
    dynamic = [c for c in order if isinstance(c, Cls) and c.body("__getattr__") is not None]
    if dynamic:
        return Provider("undecided", f"{dynamic[0].name} defines __getattr__, which may supply it")
    if unknown:
        return Provider("undecided", f"its base {unknown[0]} is outside the tree")
    return Provider("absent")


# --------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------


def audit(sglang_src: Path, arch: str = DEFAULT_ARCH) -> Report:
    """Check that ``arch`` provides every method the EAGLE-3 path calls on the target model.

    ``sglang_src`` is the directory that contains ``sglang/``. Raises
    ``UserError`` for a tree or an architecture the audit cannot read.
    """
    # Parsing makes millions of objects and no garbage cycles; the collector's passes
    # over them cost more than the parsing itself.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _audit(Path(sglang_src), arch)
    finally:
        if collecting:
            gc.enable()


def _audit(sglang_src: Path, arch: str) -> Report:
    started = time.perf_counter()
    tree = Tree(Path(sglang_src))
    spec = Spec(tree)
    workers = spec.workers(tree)
    runner = tree.cls(RUNNER_MODULE, RUNNER_CLASS) if RUNNER_MODULE in tree.modules else None
    if runner is None:
        raise UserError(f"{tree.src}: class {RUNNER_CLASS} not found in {RUNNER_MODULE}; this SGLang layout is not one "
                        f"the audit knows (sglang_stack/patching/audit.py)")  # fmt: skip
    runners = [c for c in tree.mro(runner) if isinstance(c, Cls)]
    on_path = {c.module for c in workers}
    # The workers' modules are on the EAGLE-3 path, and so are the speculative-package
    # classes their classes inherit from (the draft worker's base, say).
    spec_pkg = SPEC_MODULE.rsplit(".", 1)[0] + "."
    on_classes = {(b.module, b.name) for m in on_path for node in tree.parse(m).body if isinstance(node, ast.ClassDef)
                  for b in tree.mro(tree.cls(m, node.name)) if isinstance(b, Cls) and b.module.startswith(spec_pkg)}  # fmt: skip
    scan = Scan(tree, spec, {c.name for c in runners}, on_classes)
    # The target model is `<runner>.model`, and every runner is rooted at `model_runner`,
    # `target_worker` or a ModelRunner's `self`: a module that names neither root, or
    # never reads `.model`, holds no call on it. Others are reached by following the target.
    roots = {m for m, rel in tree.modules.items() if ROOTS.search(tree.text(rel)) and DOT_MODEL.search(tree.text(rel))}
    for module in sorted(on_path | roots | {c.module for c in runners} | {m for m, _ in on_classes}):
        scan.module(module, module in on_path)
    spec.flags = scan.flags()

    records: dict[tuple, list] = {}
    for site, conds, base, role in scan.sites:
        where = scan.where(conds, base)
        if where == "never":
            continue
        if role == LOOSE and where == "on":
            raise UserError(f"{tree.src / site.path}:{site.line}: {site.receiver}.{site.method}() is on the EAGLE-3 path, "
                            f"but the audit cannot tell whether {site.receiver} is the target or the draft model "
                            f"(the target is reached through {TARGET_ATTR}); see sglang_stack/patching/audit.py")  # fmt: skip
        records.setdefault((role, site.path, site.line, site.method), []).append((where, site))
    on: dict[str, list[CallSite]] = {}
    outside: dict[str, list[CallSite]] = {}
    draft: dict[str, list[CallSite]] = {}
    for (role, *_), found in sorted(records.items(), key=lambda kv: kv[0][1:]):
        hits = [s for w, s in found if w == "on"]
        unguarded = [s for s in hits if not s.guard]
        site = (unguarded or hits or [found[0][1]])[0]
        group = (draft if role == DRAFT else on) if hits else outside if role == MODEL else None
        if group is not None:
            group.setdefault(site.method, []).append(site)
    required = {m: tuple(s for s in ss if not s.guard) for m, ss in on.items() if any(not s.guard for s in ss)}
    optional = {m: tuple(ss) for m, ss in on.items() if m not in required}
    if not on:
        raise UserError(f"{tree.src}: found no call on the target model on the EAGLE-3 path; the audit no longer "
                        f"understands this SGLang layout (sglang_stack/patching/audit.py), so it cannot pass it")  # fmt: skip

    info = find_arch(tree, arch)
    providers, missing, undecided = {}, [], []
    for method, sites in on.items():
        p = provider(tree, info, method)
        if p.kind == "absent":
            if method in required:
                missing.append(Missing(method, required[method]))
        elif p.kind == "undecided":
            if method in required:
                undecided.append(Missing(method, required[method], p.where))
        else:
            bad = [(s, p.problem(s)) for s in sites]
            bad = [(s, why) for s, why in bad if why]
            if bad:
                missing.append(Missing(method, tuple(s for s, _ in bad), bad[0][1]))
            else:
                providers[method] = p.where
    missing.sort(key=lambda m: (m.sites[0].path, m.sites[0].line))
    return Report(
        arch=arch,
        arch_site=f"{info.path}:{info.node.lineno}",
        sglang_version=tree_version(tree.src),
        required=required,
        optional=optional,
        outside={m: tuple(ss) for m, ss in outside.items() if m not in on},
        draft={m: tuple(ss) for m, ss in draft.items()},
        providers=providers,
        missing=missing,
        undecided=undecided,
        external_bases=[b for b in tree.mro(info) if isinstance(b, str) and b not in ("object",)],
        flags=sorted(spec.flags),
        workers=[f"{c.module}.{c.name}" for c in workers],
        files_read=tree.files_read,
        seconds=time.perf_counter() - started,
    )


def confirm(report: Report, sglang_src: Path) -> Report:
    """The dynamic half, where the model's imports work (torch installed: the image's runtime stage).

    Imports the class the static half resolved and checks each method found on the
    EAGLE-3 path with ``inspect.signature(...).bind`` against every call site. It
    decides what the source could not (``__getattr__`` aside, which needs an
    instance), and catches what the source hides: decorators that change a
    signature, methods added at import time, bases outside the tree. It cannot
    find the call sites; those come from the static half.
    """
    import importlib
    import inspect
    import sys

    sys.path.insert(0, str(Path(sglang_src)))
    module = report.arch_site.split(":")[0][:-3].replace("/", ".")
    try:
        cls = getattr(importlib.import_module(module), report.arch)
    except Exception as err:  # an import that fails is the answer: say which and why
        raise UserError(f"{module}.{report.arch}: cannot import for --dynamic: {type(err).__name__}: {err}") from None
    sites = {m: report.required.get(m, ()) + report.optional.get(m, ()) for m in set(report.required) | set(report.optional)}
    missing, undecided = [], []
    for method, calls in sorted(sites.items()):
        static = inspect.getattr_static(cls, method, None)
        if static is None:
            if "attribute set in" in report.providers.get(method, ""):
                report.confirmed.append(f"{method}: an instance attribute; needs an instance to check")
            elif method in report.required:
                (undecided if "__getattr__" in str(report.undecided) else missing).append(Missing(method, report.required[method], "not on the imported class"))
            continue
        if isinstance(static, (property, type(None))) or not callable(getattr(cls, method)):
            missing.append(Missing(method, calls, f"{type(static).__name__} on the imported class, not a method"))
            continue
        sig = inspect.signature(getattr(cls, method))
        self_arg = () if isinstance(static, (staticmethod, classmethod)) else (object(),)
        bad = []
        for s in calls:
            try:
                s.star or sig.bind(*self_arg, *[None] * s.args, **{k: None for k in s.keywords})
            except TypeError as err:
                bad.append((s, str(err)))
        if bad:
            missing.append(Missing(method, tuple(s for s, _ in bad), f"{cls.__name__}.{method}{sig}: {bad[0][1]}"))
        else:
            report.confirmed.append(f"{method}{sig} binds all {len(calls)} call sites")
    report.missing = sorted({m.method: m for m in report.missing + missing}.values(), key=lambda m: (m.sites[0].path, m.sites[0].line))
    report.undecided = undecided
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

    Unpacks into ``workdir/site``. Raises ``UserError`` if a step fails; returns
    the audit report, which the caller checks with ``report.passed``.
    """
    from sglang_stack.patching.patches import apply_series, unpack_wheel

    say = log or (lambda msg: print(msg, flush=True))
    site = unpack_wheel(wheel, Path(workdir) / "site")
    say(f"unpacked {Path(wheel).name} into {site}")
    apply_series(site, patches_dir, strict=True, log=say)
    return audit(site, arch)


# --------------------------------------------------------------------------
# Command line (the image runs this right after patching)
# --------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m sglang_stack.patching.audit",
        description="Check, from the source, that a model class provides every method the EAGLE-3 path "
        "calls on the target model. Exit 0: all present (or undecided, said so); 1: some missing "
        "(one line each); 2: bad input, or a tree the audit no longer understands.",
    )
    parser.add_argument("--sglang-src", required=True, type=Path, help="directory that contains sglang/")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--arch", help=f"model class name, as in config.json 'architectures' (default {DEFAULT_ARCH})")
    which.add_argument("--model-config", type=Path, help="a model's config.json: audit its first 'architectures' entry")
    parser.add_argument("--dynamic", action="store_true", help="also import the class (needs torch and SGLang's "
                        "imports: the runtime image) and bind every call site to its real signature")  # fmt: skip
    parser.add_argument("--verbose", "-v", action="store_true", help="also list every call site and where each method comes from")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    arch = args.arch or (arch_from_config(args.model_config) if args.model_config else DEFAULT_ARCH)
    report = audit(args.sglang_src, arch)
    if args.dynamic:
        confirm(report, args.sglang_src)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print("\n".join(report.lines(verbose=args.verbose)))
    return 0 if report.passed else 1


if __name__ == "__main__":
    run_main(main)
