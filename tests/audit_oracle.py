"""Ground truth for the audit's provider corpus: what a server does, found by import and call.

    python audit_oracle.py SITE ARCH CALLS_JSON      (CALLS_JSON: [[method, positional args], ...])

Imports every top-level module of ``sglang.srt.models`` the way SGLang 0.5.9's registry does
(``pkgutil.iter_modules``, packages skipped, a module that fails to import skipped), takes the
class its ``EntryClass`` serves for ARCH, builds it through its own ``__init__`` the way SGLang's
loader does (``cls(config=..., quant_config=None)``), and makes each call. torch is stood in for by one class, ``torch.nn.Module``, whose ``__getattr__`` raises
``AttributeError`` the way torch's does for a name that is no parameter, buffer or submodule.
Prints ``{"serves": bool, "why": str}``: whether the EAGLE-3 calls would all go through.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import types


class Module:
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


def main(site: str, arch: str, calls: list) -> dict:
    torch, nn = types.ModuleType("torch"), types.ModuleType("torch.nn")
    nn.Module, torch.nn = Module, nn
    sys.modules.update({"torch": torch, "torch.nn": nn})
    sys.path.insert(0, site)
    import sglang.srt.models as models

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
        return {"serves": False, "why": f"{arch}: not in the registry (its module does not import, or names no such class)"}
    try:
        model = served[arch](config=types.SimpleNamespace(), quant_config=None)
    except Exception as err:
        return {"serves": False, "why": f"{arch}(): {type(err).__name__}: {err}"}
    for method, positional in calls:
        try:
            getattr(model, method)(*[None] * positional)
        except Exception as err:  # AttributeError, TypeError, a __getattr__ that recurses: the server dies of it
            return {"serves": False, "why": f"{method}: {type(err).__name__}: {str(err)[:200]}"}
    return {"serves": True, "why": f"every call of {arch} went through"}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))))
