"""The stand-ins the audit's probe imports a model with: modules, objects and classes that keep Python's semantics.

Every module outside the standard library and outside the probe's real set (torch, triton, sgl-kernel,
flashinfer, transformers, and the rest of SGLang) is a module of stand-ins (``Finder``, ``StandInModule``).
A stand-in (``StandIn``) is callable, subscriptable, iterable (empty), a context manager, usable as a base
class (an opaque one: ``opaque``) and as a decorator (it keeps what it decorates). ``torch.nn.Module`` is
modelled (``Module``): its public methods exist and its ``__getattr__`` raises ``AttributeError``, as
torch's does for a name that is no parameter, buffer or submodule. ``PLATFORM_*`` and ``PREDICATES`` answer
what SGLang asks of the machine as the CUDA box the image targets would. Whenever Python takes the truth,
length, items or integer value of a stand-in, ``guess`` notes where (``State.guesses``): a verdict that
rests on it is not Python's. Standard library only; ``classprobe.py`` imports it by path.
"""

from __future__ import annotations

import abc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types

# What SGLang asks of the machine, answered for the CUDA box the image targets. Calls by dotted name,
# then in-tree platform predicates by their own name (sglang.srt.utils.is_cuda and its re-exports).
PLATFORM_CALLS = {"torch.cuda.is_available": True, "torch.cuda.device_count": 8, "torch.cuda.get_device_capability": (12, 0)}
PLATFORM_VALUES = {"torch.version.cuda": "13.0", "torch.version.hip": None}


def platform_value(dotted: str):
    """A platform attribute's stand-in value; ``torch.__version__`` is the torch the tree's SGLang pins (its
    Requires-Dist), as the CUDA 13.0 build; anything else a stand-in object."""
    if dotted == "torch.__version__":
        import importlib.metadata
        import re

        try:
            pinned = next((m.group(1) for r in importlib.metadata.requires("sglang") or ()
                           if (m := re.match(r"torch\s*==\s*([\w.]+)\s*(;|$)", r))), "")
        except importlib.metadata.PackageNotFoundError:
            pinned = ""
        return f"{pinned or '0'}+cu{PLATFORM_VALUES['torch.version.cuda'].replace('.', '')}"
    return PLATFORM_VALUES[dotted] if dotted in PLATFORM_VALUES else StandIn(dotted)
PREDICATES = {"is_cuda": True, "is_cuda_alike": True, "is_hip": False, "is_npu": False, "is_cpu": False,
              "is_xpu": False, "is_hpu": False, "is_musa": False, "is_mps": False}
NN_MODULE_METHODS = frozenset("""
add_module apply bfloat16 buffers children compile cpu cuda double eval extra_repr float forward get_buffer
get_extra_state get_parameter get_submodule half ipu load_state_dict modules mtia named_buffers named_children
named_modules named_parameters parameters register_backward_hook register_buffer register_forward_hook
register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
register_load_state_dict_post_hook register_load_state_dict_pre_hook register_module register_parameter
register_state_dict_post_hook register_state_dict_pre_hook requires_grad_ set_extra_state set_submodule
share_memory state_dict to to_empty train type xpu zero_grad""".split())
# What the server's arguments say wherever a stand-in of them is read, by attribute name: the audit asks about
# the EAGLE-3 service (compose.yaml's eagle3: --speculative-algorithm EAGLE3), so a model that binds its hooks
# under `get_global_server_args().speculative_algorithm == "EAGLE3"` is decided, not guessed.
SERVER_ARGS = {"speculative_algorithm": "EAGLE3"}
GUESS_LIMIT = 20000  # guesses before the probe gives up: a `while stand_in:` loop would never end


class Guessed(Exception):
    """The stand-ins ran away: too many guesses."""


class State:
    guesses: list = []  # (phase, file, qualname, line, what)
    phase = "import"
    decorated: dict = {}  # class -> the stand-in that decorated it
    made = 0


def guess(what: str, value):
    """Note that Python took ``what`` of a stand-in, and where; return the value guessed."""
    frame = sys._getframe(2)
    code = frame.f_code
    State.guesses.append((State.phase, code.co_filename, getattr(code, "co_qualname", code.co_name), frame.f_lineno, what))
    if len(State.guesses) > GUESS_LIMIT:
        raise Guessed(f"more than {GUESS_LIMIT} guesses about stand-ins")
    return value


class StandIn:
    """Whatever a module outside the real set provides: every operation gives another stand-in."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        State.made += 1
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") or name == "_name":
            raise AttributeError(name)
        dotted = f"{self._name}.{name}"
        if name in SERVER_ARGS:
            return SERVER_ARGS[name]
        return platform_value(dotted)

    def __setattr__(self, name, value):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and (inspect.isfunction(args[0]) or isinstance(args[0], type)):
            if isinstance(args[0], type):  # a class decorator from outside: it may add or remove anything
                State.decorated[args[0]] = self._name
            return args[0]  # a decorator keeps what it decorates
        last = self._name.rpartition(".")[2]
        if self._name in PLATFORM_CALLS:
            return PLATFORM_CALLS[self._name]
        if last in PREDICATES and self._name.startswith("sglang."):
            return PREDICATES[last]
        return StandIn(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (opaque(self._name),)

    def __bool__(self):
        return guess(f"truth of {self._name}", True)

    def __iter__(self):
        return iter(guess(f"items of {self._name}", ()))

    def __len__(self):
        return guess(f"len of {self._name}", 0)

    def __index__(self):
        return guess(f"int of {self._name}", 1)

    __int__ = __index__

    def __float__(self):
        return guess(f"float of {self._name}", 1.0)

    def __contains__(self, item):
        return guess(f"membership in {self._name}", False)

    def __instancecheck__(self, obj):
        return guess(f"isinstance of {self._name}", False)

    def __subclasscheck__(self, cls):
        return guess(f"issubclass of {self._name}", False)

    def __enter__(self):
        return self

    def __fspath__(self):  # a stand-in path names no file: open() must not take __index__ for a descriptor
        return f"/nonexistent/{self._name}"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __exit__(self, *exc):
        return False

    def __getitem__(self, key):
        return StandIn(f"{self._name}[]")

    def __setitem__(self, key, value):
        pass

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other or StandIn(f"{self._name}==")

    def __ne__(self, other):
        return StandIn(f"{self._name}!=")

    def __repr__(self):
        return f"<stand-in {self._name}>"

    __str__ = __format__ = lambda self, *a: self._name


def _operator(name):
    return lambda self, *other: StandIn(f"{self._name}.{name}")


for _op in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod pow neg pos abs invert lt le gt ge "
            "and rand or ror xor lshift rshift matmul").split():
    setattr(StandIn, f"__{_op}__", _operator(_op))


class OpaqueMeta(abc.ABCMeta):  # an ABCMeta, so that a class may take an opaque base beside abc.ABC
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(f"{cls.__qualname__}.{name}")


class Opaque(metaclass=OpaqueMeta):
    """A base class from outside the real set: what it provides cannot be known here."""

    standin = True

    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(f"{type(self).__name__}().{name}")


_opaque: dict = {}


def opaque(name: str) -> type:
    if name not in _opaque:
        _opaque[name] = OpaqueMeta(name.rpartition(".")[2] or name, (Opaque,), {"__module__": name.rpartition(".")[0]})
        _opaque[name].standin_name = name
    return _opaque[name]


class Module:
    """torch.nn.Module as far as the EAGLE-3 path can tell: its public methods, and torch's AttributeError."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


def _module_method(name):
    def method(self, *args, **kwargs):
        return self if name in ("to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "double", "requires_grad_") else StandIn(f"Module.{name}()")
    method.__name__ = name
    return method


for _name in NN_MODULE_METHODS - {"forward"}:
    setattr(Module, _name, _module_method(_name))
Module.__module__ = "torch.nn.modules.module"


class ModuleList(Module):
    """The containers a model's __init__ fills: empty, whatever they are given."""

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0


ModuleDict = Sequential = ParameterList = ModuleList


MODELLED = {"torch.nn", "torch.nn.modules", "torch.nn.modules.module"}  # what `from torch import nn` must find


class StandInModule(types.ModuleType):
    """A module outside the real set: every name in it is a stand-in; a package's real submodules stay real."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        sub = f"{self.__name__}.{name}"
        if sub in sys.modules or sub in MODELLED or Finder.tree_module(sub) is not None:
            return importlib.import_module(sub)
        return platform_value(sub)


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``sglang.*`` from the tree (the real set run from source, other modules stood in for, packages
    as bare namespaces) and every module outside the standard library as stand-ins."""

    src = ""
    real: set = set()

    @classmethod
    def tree_module(cls, name: str):
        base = os.path.join(cls.src, *name.split("."))
        if os.path.isdir(base):
            return base, True
        return (base + ".py", False) if os.path.isfile(base + ".py") else None

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            return None
        if top == "sglang":
            found = self.tree_module(name)
            if found is None:
                return None  # ModuleNotFoundError, as on the server
            where, package = found
            if name in self.real and not package:
                return importlib.util.spec_from_file_location(name, where)
            spec = importlib.machinery.ModuleSpec(name, self, is_package=package or name not in self.real)
            if package:
                spec.submodule_search_locations = [where]
            return spec
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = list(spec.submodule_search_locations or [])
        if spec.name == "torch.nn":
            module.Module, module.ModuleList, module.ModuleDict = Module, ModuleList, ModuleDict
            module.Sequential, module.ParameterList = Sequential, ParameterList
        if spec.name == "torch.nn.modules.module":
            module.Module = Module
        return module

    def exec_module(self, module):
        pass
