"""The audit's run-time half: import the model the way SGLang's registry does and ask Python what it provides.

    python3 -I -S -B classprobe.py          (JSON on stdin, two lines; JSON on stdout, one line)

It runs in a subprocess of ``sglang_stack.audit.runtime``, on the standard library alone (the image's
``sglang`` stage has no torch). The first input line names the tree, the in-tree modules to run for real
and the registry's candidates; the probe imports them and builds the class through its ``__init__`` the
way SGLang's loader does (``cls(config=..., quant_config=None)``) while the parent reads the source. The
second line brings the call sites; the probe binds each to ``inspect.signature`` of what Python returns.

Everything else is stood in for (``standins.py``): every module outside the standard library and outside
the real set (torch, triton, sgl-kernel, flashinfer, transformers, and the rest of SGLang).

Whenever Python takes the truth of a stand-in (``if is_sm100_supported():``), the probe notes where.
A verdict that rests on such a guess, on an opaque base or on a stand-in decorator is not given: the
parent falls back to the source for it. So every verdict this script gives is Python's own.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import sys
import time

if __package__:  # imported: a module of the package
    from sglang_stack.audit.standins import NN_MODULE_METHODS, Finder, Guessed, Module, StandIn, State
else:  # run as a script with -I: its directory is not on sys.path, and no package is imported
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from standins import NN_MODULE_METHODS, Finder, Guessed, Module, StandIn, State


def registry(candidates: list, arch: str):
    """The class SGLang's registry serves for ``arch``: ``EntryClass`` (a class or a list) of each module, by
    ``__name__``; a module that fails to import is skipped, as the registry logs and skips it."""
    served, failed = {}, {}
    for name in candidates:
        try:
            module = importlib.import_module(name)
        except Exception as err:  # whatever the import raises is the answer
            failed[name] = f"{type(err).__name__}: {err}"
            continue
        entry = getattr(module, "EntryClass", None)
        for cls in entry if isinstance(entry, list) else [entry] if entry is not None else []:
            served.setdefault(getattr(cls, "__name__", None), cls)
    return served.get(arch), failed


class Config:
    """A model's config.json as attributes; a missing key raises AttributeError, as transformers' configs do."""

    def __init__(self, data: dict):
        for key, value in data.items():
            setattr(self, key, Config(value) if isinstance(value, dict) else value)


def class_body_guessed(cls: type, method: str, trees: Trees) -> str:
    """Where the creation of ``cls`` took the truth of a stand-in in a way that may change ``method``: a statement
    of its body that binds the name (``if ENABLED: def method``), a line of the class outside its body (a
    base, a keyword), a module-level statement that names it; or the stand-in decorator applied to it."""
    if cls in State.decorated:
        return f"{cls.__qualname__} is decorated by {State.decorated[cls]}, a stand-in that may add or remove methods"
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    for phase, file, qualname, line, what in State.guesses:
        if phase != "import" or file != path:
            continue
        if qualname == cls.__qualname__:
            stmt = next((s for s in class_body(cls, trees) if s.lineno <= line <= s.end_lineno), None)
            if stmt is None or method in bound(stmt):
                return f"the body of {cls.__qualname__} took the {what} ({os.path.basename(file)}:{line})"
            continue
        if qualname == "<module>":
            stmt = next((s for s in trees.body(file) if s.lineno <= line <= s.end_lineno), None)
            if stmt is not None and cls.__name__ in ast.unparse(stmt):
                return f"a module-level statement about {cls.__name__} took the {what} ({os.path.basename(file)}:{line})"
    return ""


def class_body(cls: type, trees: Trees) -> list:
    """The statements of ``cls``'s body, from the real module's source; [] where it cannot be found."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    line = getattr(cls, "__firstlineno__", None)  # 3.13 records it; before, the class is found by name
    for node in ast.walk(ast.Module(body=list(trees.body(path)) if path else [], type_ignores=[])):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__ and line in (None, node.lineno):
            return node.body
    return []


def bound(stmt: ast.stmt) -> set:
    """Every name a class-body statement may bind: defs, classes, assignment targets, imports, at any depth."""
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def on_class(cls: type, method: str, trees: Trees) -> dict:
    """What the class itself (its MRO) gives for ``method``, or why that cannot be known here."""
    for klass in cls.__mro__:
        if klass is object:
            continue
        if klass is Module:
            if method in NN_MODULE_METHODS:
                return {"kind": "found", "where": "torch.nn.Module", "owner": "torch.nn.Module"}
            continue
        if getattr(klass, "standin", False):
            return {"kind": "unknown", "why": f"its base {klass.standin_name} is outside what the probe runs"}
        guessed = class_body_guessed(klass, method, trees)
        if guessed:
            return {"kind": "unknown", "why": guessed}
        if method in klass.__dict__:
            return {"kind": "found", "where": f"{klass.__qualname__}.{method}", "owner": klass.__qualname__,
                    "value": klass.__dict__[method]}
    return {"kind": "absent"}


MISSING = object()


class Trees:
    """The real modules' source, by file: read when a rule needs it, parsed when one needs the tree."""

    def __init__(self, paths: list):
        self.paths, self._text, self._body = set(paths), {}, {}
        self._setters: dict | None = None

    def text(self, path: str) -> str:
        if path not in self._text:
            with open(path, encoding="utf-8") as fh:
                self._text[path] = fh.read()
        return self._text[path]

    def body(self, path: str) -> list:
        if path not in self.paths:
            return []
        if path not in self._body:
            self._body[path] = ast.parse(self.text(path)).body
        return self._body[path]

    def setters(self) -> dict:
        """Attribute name -> where a real module sets it on some object (``x.name = ...``, ``setattr(x, "name",
        ...)``), and "*" where a ``setattr`` takes a name it computes. Read from the text: no parse."""
        if self._setters is None:
            self._setters = {}
            for path in sorted(self.paths):
                text, base = self.text(path), os.path.basename(path)
                for m in SETS_ATTRIBUTE.finditer(text):
                    if m.group(1) not in self._setters:  # the first place only: its line is counted once
                        self._setters[m.group(1)] = f"{base}:{text.count(chr(10), 0, m.start()) + 1} sets it"
                for m in SETATTR.finditer(text):
                    if (m.group(2) or "*") not in self._setters:
                        where = f"{base}:{text.count(chr(10), 0, m.start()) + 1} sets attributes by setattr"
                        self._setters[m.group(2) or "*"] = where
        return self._setters


SETS_ATTRIBUTE = re.compile(r"\.\s*(\w+)\s*(?::[^=\n]*)?(?:[-+*/%|&^@]|//|\*\*|<<|>>)?=(?!=)")
SETATTR = re.compile(r"\bsetattr\(\s*[^,()]+,\s*(?:(['\"])(\w+)\1)?")


def sets_anywhere(method: str, trees: Trees) -> str:
    """Where the real modules may set ``method`` on an instance: ``X.method = ...`` or a ``setattr``; "" if nowhere."""
    setters = trees.setters()
    return setters.get(method) or setters.get("*", "")


def settle(cls: type, obj, method: str, sites: list, built: str, trees: Trees, depth: int = 0) -> dict:
    """The verdict for one method: found (with each site's binding), absent, not a method, or unknown."""
    found = on_class(cls, method, trees)
    if found["kind"] == "unknown":
        return found
    forwarder = next((k for k in cls.__mro__ if "__getattr__" in k.__dict__ and k not in (Module, object)), None)
    setter = sets_anywhere(method, trees)
    if obj is None:  # the class alone: enough unless an instance could differ
        if forwarder is not None or setter or isinstance(found.get("value"), property):
            need = (f"{forwarder.__qualname__} defines __getattr__" if forwarder is not None else setter or
                    f"{found['where']} is a property")
            return {"kind": "unknown", "why": f"only an instance can tell ({need}), and {built}"}
        value = getattr(cls, method, MISSING) if found["kind"] == "found" else MISSING
    else:
        before = len(State.guesses)
        State.phase = "lookup"
        try:
            value = getattr(obj, method)
        except AttributeError:
            value = MISSING
        except Exception as err:  # the server's lookup would raise it too
            return {"kind": "not a method", "where": f"getting {method} raises {type(err).__name__}: {err}"}
        if len(State.guesses) > before:
            return {"kind": "unknown", "why": f"getting it took the {State.guesses[before][4]}"}
    if value is MISSING:
        mro = ", ".join(k.__qualname__ for k in cls.__mro__)
        what = "on the class" if obj is None else "on the instance its __init__ built"
        return {"kind": "absent", "where": f"Python finds it nowhere {what} (MRO: {mro})"}
    where = found.get("where") or f"{type(obj).__name__}().{method}"
    on_instance = obj is not None and method in vars(obj)
    if isinstance(value, StandIn):
        return {"kind": "unknown", "why": f"{method} is {value!r}"}
    if not callable(value):
        return {"kind": "not a method", "where": f"{where} is {type(value).__name__}, not a method"}
    try:
        sig = inspect.signature(value)
    except (TypeError, ValueError):
        return {"kind": "unknown", "why": f"{where} has no signature Python can read"}
    shown = sig
    if obj is None and inspect.isfunction(value) and not isinstance(inspect.getattr_static(cls, method), staticmethod):
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # bound to an instance: self is given
    func = inspect.unwrap(getattr(value, "__func__", value))
    if inspect.isfunction(func) and found.get("owner") != "torch.nn.Module":  # the modelled methods have no source
        if not on_instance:
            shown = inspect.signature(getattr(value, "__func__", value))  # self included, as the source writes it
        path = os.path.relpath(func.__code__.co_filename, Finder.src)
        named = f"{func.__qualname__}{shown} ({path}:{func.__code__.co_firstlineno})"
        where = f"attribute set on the instance: {named}" if on_instance else f"{where}{shown} ({path}:{func.__code__.co_firstlineno})"
    elif found.get("owner") != "torch.nn.Module":
        where = f"attribute set on the instance: {value!r}{shown}" if on_instance else f"{where}{shown}"
    bad = {}
    for site, args, keywords, star in sites:
        if star:
            continue
        try:
            sig.bind(*[None] * args, **dict.fromkeys(keywords))
        except TypeError as err:
            bad[site] = f"{where}: {err}"
    # What the function's self is: the instance, or the object a bound method came with (a part's method).
    me, me_cls = (value.__self__, type(value.__self__)) if inspect.ismethod(value) and obj is not None \
        and not isinstance(value.__self__, type) else (obj, cls)
    for fn in unwrapped(value):  # a forwarder to self.X.Y.method(...), a wrapper's too: X.Y must have it
        chain = forwarded(fn, method, trees)
        reached = reach(me_cls, me, chain, method, where, built, trees, depth) if chain else None
        if reached:
            return reached
        borrowed = reads_of_borrowed(me_cls, fn, found.get("owner"), trees)
        for read in borrowed:
            if me is None:
                return {"kind": "unknown", "why": f"{where} is borrowed from {fn.__qualname__.rpartition('.')[0] or 'a module'} "
                        f"and reads self.{'.'.join(read)}: only an instance can tell, and {built}"}
            before = len(State.guesses)
            lacking, got = walk(me, read)
            if len(State.guesses) > before:
                return {"kind": "unknown", "why": f"{where} reads self.{'.'.join(read)}, and reading it took the "
                        f"{State.guesses[before][4]}"}
            if isinstance(got, StandIn):
                continue
            if lacking:
                return {"kind": "not a method", "where": f"{where} is {fn.__qualname__}, borrowed, and reads "
                        f"self.{'.'.join(read)}, which the instance lacks (no self.{'.'.join(lacking)})"}
    return {"kind": "found", "where": where, "bad": bad}


_defs: dict = {}


def function_node(func, trees: Trees) -> ast.FunctionDef | None:
    """The def of ``func`` in the real modules' source."""
    code = func.__code__
    if code.co_filename not in _defs:  # every def of the module, by the lines its code may start at
        _defs[code.co_filename] = {(node.name, line): node
                                   for node in ast.walk(ast.Module(body=list(trees.body(code.co_filename)), type_ignores=[]))
                                   if isinstance(node, ast.FunctionDef)
                                   for line in (node.lineno, *(d.lineno for d in node.decorator_list))}
    return _defs[code.co_filename].get((code.co_name, code.co_firstlineno))  # not __name__: wraps() renames


def held_class(cls: type, attr: str, trees: Trees) -> type | None:
    """The class of ``self.attr`` where the first ``__init__`` of the MRO sets it once, at its top level, to a
    call of a name that Python resolves (in that module's globals) to a class the probe runs; else None."""
    init = next((k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__), None)
    node = function_node(init, trees) if inspect.isfunction(init) else None
    if node is None:
        return None
    sets = [n for n in ast.walk(node) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == attr and getattr(t.value, "id", "") == "self" for t in n.targets)]
    if len(sets) != 1 or sets[0] not in node.body or not isinstance(sets[0].value, ast.Call):
        return None
    chain, f = [], sets[0].value.func
    while isinstance(f, ast.Attribute):
        chain.insert(0, f.attr)
        f = f.value
    if not isinstance(f, ast.Name) or f.id not in init.__globals__:
        return None
    made = init.__globals__[f.id]
    for name in chain:
        made = getattr(made, name, None)
    return made if isinstance(made, type) and not getattr(made, "standin", False) else None


def unwrapped(value) -> list:
    """The functions a method runs through: the function itself, then each one ``functools.wraps`` wrapped."""
    out, func = [], getattr(value, "__func__", value)
    while inspect.isfunction(func) and func not in out and len(out) < 8:
        out.append(func)
        func = getattr(func, "__wrapped__", None)
    return out


def evaluate(node: ast.expr, func):
    """The value of a name the function reads: a constant, a closure variable, a global, an attribute of one."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        code = func.__code__
        if node.id in code.co_freevars and func.__closure__:
            try:
                return func.__closure__[code.co_freevars.index(node.id)].cell_contents
            except ValueError:  # an empty cell
                return MISSING
        return func.__globals__.get(node.id, MISSING)
    if isinstance(node, ast.Attribute):
        base = evaluate(node.value, func)
        return MISSING if base is MISSING or isinstance(base, StandIn) else getattr(base, node.attr, MISSING)
    return MISSING


def self_chain(node: ast.expr, me: str) -> tuple:
    """("a", "b") for ``self.a.b``; () for anything else."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.insert(0, node.attr)
        node = node.value
    return tuple(chain) if isinstance(node, ast.Name) and node.id == me else ()


def first_parameter(node) -> str:
    params = node.args.posonlyargs + node.args.args if node is not None else []
    return params[0].arg if params else ""


def forwarded(func, method: str, trees: Trees) -> tuple:
    """``(X, Y)`` where ``func``'s body calls ``self.X.Y.method(...)``, or ``getattr(self.X.Y, NAME)(...)`` with NAME
    the method's name (a constant, a closure variable, a global, ``fn.__name__``): the method forwards there."""
    node = function_node(func, trees)
    me = first_parameter(node)
    for call in ast.walk(node) if node is not None else ():
        f = call.func if isinstance(call, ast.Call) else None
        if isinstance(f, ast.Attribute) and f.attr == method:
            receiver = f.value
        elif isinstance(f, ast.Call) and getattr(f.func, "id", "") == "getattr" and len(f.args) >= 2 and evaluate(f.args[1], func) == method:
            receiver = f.args[0]
        else:
            continue
        if chain := self_chain(receiver, me):
            return chain
    return ()


def walk(obj, chain: tuple) -> tuple:
    """(the shortest prefix of ``chain`` the object lacks, or (); what the chain reaches, or the stand-in it stops at)."""
    for i, name in enumerate(chain):
        try:
            obj = getattr(obj, name)
        except Exception:  # AttributeError, or what a property raises: the server's read raises it too
            return chain[: i + 1], MISSING
        if isinstance(obj, StandIn):
            return (), obj
    return (), obj


def reach(cls: type, obj, chain: tuple, method: str, where: str, built: str, trees: Trees, depth: int) -> dict | None:
    """The verdict on a forwarder to ``self.<chain>.method``: None where what it reaches has the method."""
    path = "self." + ".".join(chain)
    if obj is None:  # no instance: the class the first __init__ of the MRO makes, for one link
        made = held_class(cls, chain[0], trees) if len(chain) == 1 else None
        if made is None:
            return {"kind": "unknown", "why": f"{where} forwards to {path}, and {built}"}
        if on_class(made, method, trees)["kind"] == "unknown":
            return {"kind": "unknown", "why": f"{where} forwards to {path}, a {made.__qualname__}, whose "
                    "classes the probe cannot all see"}
        if not callable(getattr(made, method, None)):
            return {"kind": "not a method", "where": f"{where} forwards to {path} ({made.__qualname__}), which lacks it"}
        return None
    before = len(State.guesses)
    lacking, target = walk(obj, chain)
    if len(State.guesses) > before:  # a property on the way took the truth of a stand-in: not Python's own answer
        return {"kind": "unknown", "why": f"{where} forwards to {path}, and reaching it took the {State.guesses[before][4]}"}
    if lacking:
        return {"kind": "not a method", "where": f"{where} forwards to {path}, and the instance has no self.{'.'.join(lacking)}"}
    if isinstance(target, StandIn) or on_class(type(target), method, trees)["kind"] == "unknown":
        return {"kind": "unknown", "why": f"{where} forwards to {path}, {target!r}, which the probe cannot see into"}
    if depth >= 4:
        return {"kind": "unknown", "why": f"{where} forwards through more than four objects"}
    there = settle(type(target), target, method, [], built, trees, depth + 1)
    if there["kind"] != "found":
        said = there.get("where") or there.get("why", "")
        kind = "unknown" if there["kind"] == "unknown" else "not a method"
        return {"kind": kind, "why" if kind == "unknown" else "where":
                f"{where} forwards to {path} ({type(target).__qualname__}), which lacks it" + (f": {said}" if said else "")}
    return None


def reads_of_borrowed(cls: type, func, owner, trees: Trees) -> list:
    """The chains a function read from another class (or a module) reads on ``self``: ``[("model", "embed_tokens")]``.
    A method of the class's own MRO, and torch's, are not borrowed."""
    if owner == "torch.nn.Module" or func.__qualname__.rpartition(".")[0] in {k.__qualname__ for k in cls.__mro__}:
        return []
    node = function_node(func, trees)
    me = first_parameter(node)
    if node is None or not me:
        return []
    written = {chain[0] for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
               for chain in [self_chain(n, me)] if chain}
    inner = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    reads = {chain for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and id(n) not in inner
             for chain in [self_chain(n, me)] if chain and chain[0] not in written}
    return sorted(reads)


def present(obj, name: str) -> bool | None:
    """Does the instance have ``name``: True, False, or None where the answer would rest on a guess."""
    before = len(State.guesses)
    State.phase = "lookup"
    found = walk(obj, (name,))[0] == ()
    return None if len(State.guesses) > before else found


def main() -> None:
    started = time.perf_counter()
    # The answer goes out on a descriptor of its own: what the model's code prints goes to stderr.
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    setup = json.loads(sys.stdin.readline())
    Finder.src, Finder.real = setup["src"], set(setup["real"])
    sys.meta_path.insert(0, Finder())
    sys.path.insert(0, setup["src"])
    sys.dont_write_bytecode = True
    out: dict = {"real": sorted(Finder.real)}
    try:
        cls, failed = registry(setup["candidates"], setup["arch"])
    except Guessed as err:
        cls, failed = None, {"*": str(err)}
    out["failed"] = failed
    obj, built = None, ""
    if cls is not None:
        out["class"] = f"{cls.__module__}.{cls.__qualname__}"
        State.phase = "construct"
        config = Config(setup["config"]) if isinstance(setup.get("config"), dict) else StandIn("config")
        before = len(State.guesses)
        try:
            obj = cls(config=config, quant_config=None)
        except Exception as err:  # the instance is then unknown; the class still answers
            built = f"{cls.__name__}(config=..., quant_config=None) raised {type(err).__name__}: {str(err)[:200]}"
        else:
            took = State.guesses[before:]
            built = f"built {cls.__name__}(config=..., quant_config=None)"
            if took:
                built += f", guessing {len(took)} times (first: the {took[0][4]})"
                out["construct_guessed"] = True
        out["built"] = built
    trees = Trees([path for name in Finder.real if (path := getattr(sys.modules.get(name), "__file__", None))])
    busy = time.perf_counter() - started
    calls = json.loads(sys.stdin.readline() or "{}")  # the parent is still reading the source: not our time
    started = time.perf_counter()
    verdicts = {}
    for method, spec in calls.items():
        if cls is None:
            continue
        instance = None if out.get("construct_guessed") else obj  # what rests on the guesses is not Python's answer
        verdicts[method] = settle(cls, instance, method, spec["sites"], built, trees)
        verdicts[method].pop("value", None)
        if instance is not None and spec.get("unless"):
            verdicts[method]["present"] = {name: present(instance, name) for name in spec["unless"]}
    out.update(verdicts=verdicts, guesses=len(State.guesses), stand_ins=State.made, seconds=round(busy + time.perf_counter() - started, 3))
    channel.write(json.dumps(out, default=str) + "\n")
    channel.flush()


if __name__ == "__main__":
    main()
