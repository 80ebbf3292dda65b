"""Ground truth for the audit's corpus: what a server does, found by import and call.

    python audit_oracle.py provider SITE ARCH CALLS_JSON    (CALLS_JSON: [[method, positional args], ...])
    python audit_oracle.py calls SITE PLACE METHOD           (PLACE: runner or worker)
    python audit_oracle.py serve SITE ARCH                   (the built class as the worker's target)

``provider`` imports every top-level module of ``sglang.srt.models`` the way SGLang's registry
does (``pkgutil.iter_modules``, packages skipped, a module that fails to import skipped), takes the
class its ``EntryClass`` serves for ARCH, builds it the way SGLang's loader does
(``cls(config=..., quant_config=None)``), and makes each call. It prints ``{"serves": bool, "why": str}``.
Where the tree has ``sglang.srt.server_args``, the global server arguments say EAGLE3 first, as in the server.

``calls`` runs the synthetic tree's ``ModelRunner.__init__`` (PLACE runner) or ``EAGLEWorker.__init__``
(PLACE worker) with a target model that has every method but METHOD, and with one that has them all;
the runner under EAGLE3 and with no speculation (and then no draft model). It prints
``{"required": bool, "why": str}``: whether the EAGLE-3 path dies for lack of METHOD (and, for the runner,
a server without speculation does not: a call it makes too is not the EAGLE-3 path's).

``serve`` builds ARCH as ``provider`` does and runs ``EAGLEWorker.__init__`` with it as the target model: the
call sites and the class decided together. It prints ``{"serves": bool, "why": str}``.
A case whose full-target run fails is broken, and says so (exit 1).

torch is stood in for by one class, ``torch.nn.Module``, whose ``__getattr__`` raises ``AttributeError``
the way torch's does for a name that is no parameter, buffer or submodule.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import io
import json
import pkgutil
import sys
import types


class Module:
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


def setup(site: str) -> None:
    torch, nn = types.ModuleType("torch"), types.ModuleType("torch.nn")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    nn.Module, torch.nn = Module, nn
    sys.modules.update({"torch": torch, "torch.nn": nn})
    sys.path.insert(0, site)


def eagle3_server_args() -> None:
    """The server's global arguments, where the tree keeps them: speculation on, EAGLE3."""
    try:
        server_args = importlib.import_module("sglang.srt.server_args")
    except ImportError:
        return
    server_args.set_global_server_args_for_scheduler(types.SimpleNamespace(speculative_algorithm="EAGLE3"))


def build(arch: str):
    """(the model SGLang's loader would build for ``arch``, None) or (None, why not)."""
    import sglang.srt.models as models

    eagle3_server_args()

    served = {}
    for info in pkgutil.iter_modules(models.__path__):
        if info.ispkg:
            continue
        try:
            module = importlib.import_module(f"sglang.srt.models.{info.name}")
        except Exception:  # the registry logs it and goes on
            continue
        entry = getattr(module, "EntryClass", None)
        for cls in entry if isinstance(entry, list) else [entry] if entry is not None else []:
            served[cls.__name__] = cls
    if arch not in served:
        return None, f"{arch}: not in the registry (its module does not import, or names no such class)"
    try:
        return served[arch](config=types.SimpleNamespace(), quant_config=None), ""
    except Exception as err:
        return None, f"{arch}(): {type(err).__name__}: {err}"


def provider(arch: str, calls: list) -> dict:
    model, why = build(arch)
    if model is None:
        return {"serves": False, "why": why}
    for method, positional in calls:
        try:
            getattr(model, method)(*[None] * positional)
        except Exception as err:  # AttributeError, TypeError, a __getattr__ that recurses: the server dies of it
            return {"serves": False, "why": f"{method}: {type(err).__name__}: {str(err)[:200]}"}
    return {"serves": True, "why": f"every call of {arch} went through"}


class Anything:
    """What a call on a model returns, or an attribute nobody set: falsy, callable, two things when unpacked."""

    def __call__(self, *args, **kwargs):
        return Anything()

    def __getattr__(self, name):
        return Anything()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter((Anything(), Anything()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Target:
    """The target model: every method but ``lacking``, which is missing the way a class without it is."""

    def __init__(self, lacking: str = ""):
        self._lacking = lacking

    def __getattr__(self, name):
        if name == self._lacking:
            raise AttributeError(f"'Target' object has no attribute '{name}'")
        return Anything()


def run(place: str, algorithm: str, lacking: str, target=None) -> str:
    """Build the runner or worker (its target model ``target``, or one lacking ``lacking``); "" if it went
    through, else what it raised."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm[algorithm]
    target = Target(lacking) if target is None else target
    if place == "runner":
        from sglang.srt.model_executor.model_runner import ModelRunner as Base
    else:
        from sglang.srt.speculative.eagle_worker import EAGLEWorker as Base
    def unset(self, name):  # an attribute set outside __init__; without speculation there is no draft model
        return None if algorithm == "NONE" and any(m in name for m in ("draft", "mtp")) else Anything()

    cls = type(Base.__name__, (Base,), {"__getattr__": unset})
    obj = cls.__new__(cls)
    server_args = type("ServerArgs", (), {"__getattr__": lambda self, name: None})()  # every option off
    server_args.speculative_algorithm = None if algorithm == "NONE" else algorithm
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if place == "runner":
                obj.model = target
                cls.__init__(obj, server_args, algo, False)
            else:
                cls.__init__(obj, types.SimpleNamespace(model_runner=types.SimpleNamespace(model=target)), algo)
    except Exception as err:  # whatever it raises, the server dies of it
        return f"{type(err).__name__}: {err}"
    return ""


def calls(place: str, method: str) -> dict:
    broken = run(place, "EAGLE3", "")
    if broken:
        print(json.dumps({"broken": f"the run with every method fails: {broken}"}))
        sys.exit(1)
    dies = run(place, "EAGLE3", method)
    if not dies:
        return {"required": False, "why": f"the EAGLE-3 {place} goes through without {method}"}
    if place == "runner" and run(place, "NONE", method) and not run(place, "NONE", ""):
        return {"required": False, "why": f"a runner without speculation dies of it too: not the EAGLE-3 path's ({dies})"}
    return {"required": True, "why": f"without {method} the EAGLE-3 {place} dies: {dies}"}


def serve(arch: str) -> dict:
    model, why = build(arch)
    if model is None:
        return {"serves": False, "why": why}
    dies = run("worker", "EAGLE3", "", target=model)
    return {"serves": not dies, "why": dies or f"the EAGLE-3 worker came up with {arch} as its target"}


if __name__ == "__main__":
    setup(sys.argv[2])
    if sys.argv[1] == "provider":
        print(json.dumps(provider(sys.argv[3], json.loads(sys.argv[4]))))
    elif sys.argv[1] == "serve":
        print(json.dumps(serve(sys.argv[3])))
    else:
        print(json.dumps(calls(sys.argv[3], sys.argv[4])))
