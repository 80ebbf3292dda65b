"""What the audit says a class provides, against Python's answer: the provider rules, the dynamic half, and
the corpus checked case by case against an import-and-call oracle (tests/audit_oracle.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglang_stack.errors import UserError
from sglang_stack.audit import eagle3 as audit, runtime
from sglang_stack.audit.source import CallSite, Tree

import test_audit_rules as rules
from audit_trees import placed, run_cli, synthetic


PROVIDERS = {
    "def": ("def get_embed_and_head(self, *args):\n    pass", "provided"),
    "function assigned": ("get_embed_and_head = _shared", "provided"),
    "lambda assigned": ("get_embed_and_head = lambda self: (None, None)", "provided"),
    "staticmethod": ("@staticmethod\ndef get_embed_and_head():\n    pass", "provided"),
    "set in __init__": ("def __init__(self, config=None, quant_config=None):\n    self.inner = _Other()\n    self.get_embed_and_head = self.inner.get_embed_and_head", "provided"),
    "set in __init__ from an attribute never set": ("def __init__(self, config=None, quant_config=None):\n    self.get_embed_and_head = self.inner.get_embed_and_head", "undecided"),
    "absent": ("pass", "missing"),
    "None": ("get_embed_and_head = None", "missing"),
    "property": ("@property\ndef get_embed_and_head(self):\n    return None, None", "missing"),
    "too few parameters": ("def set_eagle3_layers_to_capture(self):\n    pass", "missing"),
    "a required parameter": ("def get_embed_and_head(self, draft):\n    pass", "missing"),
    "None in __init__": ("def __init__(self, config=None, quant_config=None):\n    self.get_embed_and_head = None\ndef get_embed_and_head(self):\n    pass", "missing"),
    "__getattr__": ("def __getattr__(self, name):\n    return getattr(self.inner, name)", "missing"),  # it recurses
    # Python decides these at run time; the audit follows what it can and fails closed on the rest.
    "another class's function": ("get_embed_and_head = _Other.get_embed_and_head", "provided"),
    "delegation to a class that has it": ("def __init__(self, config=None, quant_config=None):\n    self.inner = _Other()\n"
                                          "def get_embed_and_head(self):\n    return self.inner.get_embed_and_head()", "provided"),
    "delegation to a class that lacks it": ("def __init__(self, config=None, quant_config=None):\n    self.inner = _Empty()\n"
                                            "def get_embed_and_head(self):\n    return self.inner.get_embed_and_head()", "missing"),
    "def under a class-body if": ("if not _is_npu:\n    def get_embed_and_head(self):\n        pass", "undecided"),
    "set in __init__ under a condition": ("def __init__(self, config=None, quant_config=None, on=False):\n    if on:\n        self.get_embed_and_head = _shared", "missing"),
    "set in __init__ by setattr": ("def __init__(self, config=None, quant_config=None):\n    for name in ('get_embed_and_head',):\n        setattr(self, name, _shared)", "missing"),  # a function set on an instance is not bound
    "a property returning a function": ("@property\ndef get_embed_and_head(self):\n    return lambda: (None, None)", "provided"),
    "a property returning a function of the wrong arity": ("@property\ndef get_embed_and_head(self):\n    return lambda x: x", "missing"),
    "classmethod": ("@classmethod\ndef get_embed_and_head(cls):\n    return None, None", "provided"),
    "keyword-only required": ("def set_eagle3_layers_to_capture(self, *, layer_ids):\n    pass", "missing"),
    "**kwargs only": ("def set_eagle3_layers_to_capture(self, **kwargs):\n    pass", "missing"),
    "*args": ("def set_eagle3_layers_to_capture(self, *args):\n    pass", "provided"),
    "lambda of the wrong arity": ("get_embed_and_head = lambda self, x: x", "missing"),
    "a later def replaces None": ("get_embed_and_head = None\ndef get_embed_and_head(self):\n    return None, None", "provided"),
    "None replaces an earlier def": ("def get_embed_and_head(self):\n    return None, None\nget_embed_and_head = None", "missing"),
    "a string, not a method": ("get_embed_and_head = 'head'", "missing"),
    "staticmethod of the wrong arity": ("@staticmethod\ndef set_eagle3_layers_to_capture():\n    pass", "missing"),
    "delegation to an attribute never set": ("def get_embed_and_head(self):\n    return self.missing_part.get_embed_and_head()", "missing"),
}


def provider_module(body: str) -> tuple[str, str]:
    """(the method at stake, a models module whose nn.Module has ``body`` and the other method right)."""
    method, other = "get_embed_and_head", "def set_eagle3_layers_to_capture(self, layer_ids=None):\n    pass"
    if "set_eagle3" in body:
        method, other = "set_eagle3_layers_to_capture", "def get_embed_and_head(self):\n    return None, None"
    return method, (
        "from torch import nn\n\n\ndef _shared(self):\n    return None, None\n\n\n"
        "class _Other:\n    def get_embed_and_head(self):\n        return None, None\n\n\nclass _Empty:\n    pass\n\n\n"
        "class Edited(nn.Module):\n"
        f"{textwrap.indent(other, '    ')}\n\n{textwrap.indent(body, '    ')}\n\n\nEntryClass = Edited\n"
    )


@pytest.mark.parametrize("body, verdict", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_rule_providers(tmp_path, body, verdict):
    """Each body is added to an nn.Module that has the other method right (a later def replaces an earlier one)."""
    method, model = provider_module(body)
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": model}), "Edited")
    found = "missing" if method in [m.method for m in report.missing] else "undecided" if report.undecided else "provided"
    assert found == verdict, f"{body!r}: {report.lines(verbose=True)}"
    assert len(report.missing) == (verdict == "missing"), f"only {method} is at stake: {report.lines()}"
    assert found != "undecided" or (not report.passed and report.exit_code == 3), "undecided fails closed"


# Where the source alone (the fallback, when the run cannot decide) says otherwise than Python: it cannot
# run __getattr__ or __init__, so it fails closed on them.
SOURCE_SAYS = {"__getattr__": "undecided", "set in __init__ under a condition": "undecided",
               "set in __init__ by setattr": "undecided", "delegation to an attribute never set": "undecided"}


@pytest.mark.parametrize("case", PROVIDERS, ids=PROVIDERS.keys())
def test_rule_providers_read_from_the_source_alone(tmp_path, case):
    """The fallback's verdict on each case: never a pass where Python says missing."""
    method, model = provider_module(PROVIDERS[case][0])
    tree = Tree(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": model}))
    p = audit.provider(tree, audit.find_arch(tree, "Edited"), method)
    site = CallSite("x.py", 1, method, "model", args=int(method == "set_eagle3_layers_to_capture"))
    said = "undecided" if p.kind == "undecided" else "missing" if p.kind != "found" or audit.binds(p, site) else "provided"
    assert said == SOURCE_SAYS.get(case, PROVIDERS[case][1]), f"{case}: {p}"


def test_rule_providers_follow_the_real_mro(tmp_path):
    """class Edited(Left, Right), both on Base: Python looks in Right before Base (C3), a depth-first walk does not."""
    model = '''
class Base:
    def get_embed_and_head(self, wrong):
        pass

    def set_eagle3_layers_to_capture(self, layer_ids):
        pass


class Left(Base):
    pass


class Right(Base):
    def get_embed_and_head(self):
        return None, None


class Edited(Left, Right):
    pass


EntryClass = [Edited]
'''
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": model}), "Edited")
    assert report.passed, report.lines()
    assert report.providers["get_embed_and_head"].startswith("Right.get_embed_and_head"), report.providers


def test_rule_a_base_outside_the_tree_is_undecided_and_fails_closed(tmp_path):
    model = "from vendor.hooks import EagleHooks\n\n\nclass Edited(EagleHooks):\n    pass\n\n\nEntryClass = [Edited]\n"
    tree = synthetic(tmp_path, extra={"sglang/srt/models/edited.py": model})
    report = audit.audit(tree, "Edited")
    assert not report.passed and not report.missing and report.exit_code == 3, report.lines()
    assert report.summary.startswith("audit undecided: Edited provides 0 of the 2 methods") and "--allow-undecided" in report.summary
    closed = run_cli("--sglang-src", str(tree), "--arch", "Edited")
    assert closed.returncode == 3 and closed.stdout.splitlines()[-1] == report.summary, closed.stdout
    allowed = run_cli("--sglang-src", str(tree), "--arch", "Edited", "--allow-undecided")
    assert allowed.returncode == 0 and allowed.stdout.splitlines()[-1].startswith("audit passed with --allow-undecided:")
    assert sorted(m.method for m in report.undecided) == ["get_embed_and_head", "set_eagle3_layers_to_capture"], report.undecided
    assert "vendor.hooks.EagleHooks is outside the tree" in report.undecided[0].reason, report.undecided[0]
    assert report.lines()[0].startswith("undecided:"), "undecided methods are said, not only in --verbose"


SETS_LAYERS = "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n"


@pytest.mark.parametrize(
    "module, verdict",
    [
        # The base at run time is the else branch's, outside the tree: TYPE_CHECKING's in-tree one does not count.
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sglang.srt.models.base import Base\nelse:\n"
         "    from vendor.hooks import Base\n\n\nclass Edited(Base):\n" + SETS_LAYERS, "undecided"),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vendor.hooks import Base\nelse:\n"
         "    from sglang.srt.models.base import Base\n\n\nclass Edited(Base):\n" + SETS_LAYERS, "provided"),
        # A try whose import is outside the tree may fall back: the base depends on what is installed.
        ("try:\n    from vendor.hooks import Base\nexcept ImportError:\n    from sglang.srt.models.base import Base\n\n\n"
         "class Edited(Base):\n" + SETS_LAYERS, "undecided"),
        ("try:\n    from sglang.srt.models.base import Base\nexcept ImportError:\n    from vendor.hooks import Base\n\n\n"
         "class Edited(Base):\n" + SETS_LAYERS, "provided"),
        # A class decorator may add what the body lacks.
        ("from vendor.hooks import add_eagle3\n\n\n@add_eagle3\nclass Edited:\n    pass\n", "undecided"),
    ],
    ids=["type-checking-outside", "type-checking-inside", "try-outside-first", "try-inside-first", "class-decorator"],
)
def test_rule_what_python_binds_at_run_time(tmp_path, module, verdict):
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module + "\n\nEntryClass = Edited\n"}), "Edited")
    found = "missing" if report.missing else "undecided" if report.undecided else "provided"
    assert found == verdict, report.lines()
    assert report.passed == (verdict == "provided") and report.exit_code == {"provided": 0, "undecided": 3, "missing": 1}[verdict]


# --------------------------------------------------------------------------
# The dynamic half, on a tree that imports without torch
# --------------------------------------------------------------------------

IMPORTABLE = {
    "vendor/__init__.py": "",
    "vendor/hooks.py": '''
class EagleHooks:
    def get_embed_and_head(self):
        return None, None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


class WrongHooks(EagleHooks):
    def set_eagle3_layers_to_capture(self):
        pass
''',
    "sglang/srt/models/base.py": "class Base:\n    def get_embed_and_head(self):\n        return None, None\n",
    "sglang/srt/models/importable.py": '''
import functools

from vendor.hooks import EagleHooks, WrongHooks
from sglang.srt.models.base import Base


def logged(fn):
    def wrapper(self):  # no functools.wraps, and one parameter fewer
        return fn(self)
    return wrapper


class External(EagleHooks):
    pass


class ExternalWrong(WrongHooks):
    pass


class Decorated(Base):
    @logged
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


EntryClass = [External, ExternalWrong, Decorated]
''',
}


@pytest.mark.parametrize(
    "arch, static_rc, dynamic_rc, dynamic_says",
    [
        ("External", 3, 0, "set_eagle3_layers_to_capture(self, layer_ids=None) binds all 3 call sites"),  # undecided, then decided
        ("ExternalWrong", 3, 1, "missing: ExternalWrong.set_eagle3_layers_to_capture()"),
        # The run catches the wrapper without torch; --dynamic agrees on the imported class.
        ("Decorated", 1, 1, "Decorated.set_eagle3_layers_to_capture(self) (imported): too many positional arguments"),
    ],
)
def test_dynamic_confirmation_binds_every_call_site_to_the_imported_class(tmp_path, arch, static_rc, dynamic_rc, dynamic_says):
    runner = "self.model.set_eagle3_layers_to_capture() if self.eagle_use_aux_hidden_state else None\nif self.eagle_use_aux_hidden_state:\n    self.model.set_eagle3_layers_to_capture(layer_ids=[3])"
    tree = synthetic(tmp_path, runner=runner, extra=IMPORTABLE)
    static = run_cli("--sglang-src", str(tree), "--arch", arch)
    assert static.returncode == static_rc, f"static: {static.stdout}{static.stderr}"
    dynamic = run_cli("--sglang-src", str(tree), "--arch", arch, "--dynamic", "--verbose")
    assert dynamic.returncode == dynamic_rc, f"dynamic: {dynamic.stdout}{dynamic.stderr}"
    assert dynamic_says in dynamic.stdout, dynamic.stdout
    assert "undecided" not in dynamic.stdout.splitlines()[-1], "the import decides what the source could not"


def test_dynamic_confirmation_of_a_class_that_does_not_import_is_one_line(tmp_path):
    broken = "import vendor_not_installed\n\nfrom sglang.srt.models.wrapped import Wrapped\n\n\nclass Broken(Wrapped):\n    pass\n\n\nEntryClass = Broken\n"
    tree = synthetic(tmp_path, extra={"sglang/srt/models/broken.py": broken})
    proc = run_cli("--sglang-src", str(tree), "--arch", "Broken", "--dynamic")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cannot import for --dynamic" in proc.stderr, proc.stderr


# --- the provider corpus against an import-and-call oracle -------------------------------------------

# The calls the synthetic tree's EAGLE-3 path makes on the target (RUNNER and WORKER above).
ORACLE_CALLS = [["set_eagle3_layers_to_capture", 1], ["get_embed_and_head", 0]]
RUN_TIME_CASES = [module for module, _ in test_rule_what_python_binds_at_run_time.pytestmark[0].args[1]]
NN = "from torch import nn\n\n\n"
SETS = "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n"
EMBEDS = "    def get_embed_and_head(self):\n        return None, None\n"
INIT = "    def __init__(self, config=None, quant_config=None):\n        super().__init__()\n"
MIXINS = "sglang/srt/models/mixins.py"
UTILS = {"sglang/srt/utils.py": "def is_npu():\n    return False\n"}
WRAPS = ("import functools\n\n" + NN + "def logged(fn):\n    @functools.wraps(fn)\n    def wrapper(*args, **kwargs):\n"
         "        return fn(*args, **kwargs)\n    return wrapper\n\n\nclass Edited(nn.Module):\n    @logged\n" + EMBEDS + "\n    @logged\n")
# Cases of the classes Python decides at run time, each a models module (and the files it needs).
MORE_PROVIDERS = {
    "module-level setattr": (NN + "def _embed(self):\n    return None, None\n\n\nclass Edited(nn.Module):\n" + SETS
                             + "\n\nsetattr(Edited, 'get_embed_and_head', _embed)\n", {}),
    "module-level setattr loop": (NN + "def _embed(self):\n    return None, None\n\n\nclass Edited(nn.Module):\n" + SETS
                                  + "\n\nfor _name in ('get_embed_and_head',):\n    setattr(Edited, _name, _embed)\n", {}),
    "module-level setattr of None": (NN + "class Edited(nn.Module):\n" + SETS + EMBEDS
                                     + "\n\nsetattr(Edited, 'get_embed_and_head', None)\n", {}),
    "a mixin through import *": (NN + "from sglang.srt.models.mixins import *\n\n\nclass Edited(EagleMixin, nn.Module):\n    pass\n",
                                 {MIXINS: "__all__ = ['EagleMixin']\n\n\nclass EagleMixin:\n" + SETS + EMBEDS}),
    "a mixin through import * that lacks one": (NN + "from sglang.srt.models.mixins import *\n\n\n"
                                                "class Edited(EagleMixin, nn.Module):\n    pass\n",
                                                {MIXINS: "__all__ = ['EagleMixin']\n\n\nclass EagleMixin:\n" + EMBEDS}),
    "a functools.wraps forwarder": (WRAPS + SETS, {}),
    "a functools.wraps forwarder of the wrong arity": (WRAPS + "    def set_eagle3_layers_to_capture(self):\n        pass\n", {}),
    "EntryClass built by an expression": (NN + "class Edited(nn.Module):\n" + SETS + EMBEDS
                                          + "\n\nEntryClass = [c for c in (Edited,)]\n", {}),
    "def under a class-body if on the platform": ("from sglang.srt.utils import is_npu\n" + NN + "_is_npu = is_npu()\n\n\n"
                                                  "class Edited(nn.Module):\n" + SETS + "    if not _is_npu:\n"
                                                  + EMBEDS.replace("\n    ", "\n        ").replace("    def", "        def", 1), UTILS),
    "def under a class-body if off the platform": ("from sglang.srt.utils import is_npu\n" + NN + "_is_npu = is_npu()\n\n\n"
                                                   "class Edited(nn.Module):\n" + SETS + "    if _is_npu:\n"
                                                   + EMBEDS.replace("\n    ", "\n        ").replace("    def", "        def", 1), UTILS),
    "a model in a package, which the registry skips": ("", {"sglang/srt/models/pkg/__init__.py": NN + "class Edited(nn.Module):\n"
                                                            + SETS + EMBEDS + "\n\nEntryClass = Edited\n"}),
    "an in-tree class decorator that adds it": (NN + "from sglang.srt.models.decorators import with_embed\n\n\n@with_embed\n"
                                                "class Edited(nn.Module):\n" + SETS,
                                                {"sglang/srt/models/decorators.py": "def with_embed(cls):\n"
                                                 "    cls.get_embed_and_head = lambda self: (None, None)\n    return cls\n"}),
    "a base from transformers": ("from transformers import PreTrainedModel\n\n\nclass Edited(PreTrainedModel):\n" + SETS, {}),
    "a property returning a bound method": (NN + "class Edited(nn.Module):\n" + SETS + "    @property\n"
                                            "    def get_embed_and_head(self):\n        return self._embed\n\n"
                                            "    def _embed(self):\n        return None, None\n", {}),
    "__getattr__ forwarding to a part that has it": (NN + "class _Part:\n" + EMBEDS + "\n\nclass Edited(nn.Module):\n" + INIT
                                                     + "        self.part = _Part()\n\n" + SETS + "\n    def __getattr__(self, name):\n"
                                                     "        return getattr(self.part, name)\n", {}),
    "__getattr__ forwarding to a part that lacks it": (NN + "class _Part:\n    pass\n\n\nclass Edited(nn.Module):\n" + INIT
                                                       + "        self.part = _Part()\n\n" + SETS + "\n    def __getattr__(self, name):\n"
                                                       "        return getattr(self.part, name)\n", {}),
}
CORPUS = {**{f"provider: {k}": (provider_module(b)[1], {}) for k, (b, _) in PROVIDERS.items()},
          **{f"run time: {i}": (m + "\n\nEntryClass = Edited\n", {}) for i, m in enumerate(RUN_TIME_CASES)},
          **{f"run time: {k}": (m + ("\n\nEntryClass = Edited\n" if m and "EntryClass" not in m else ""), extra)
             for k, (m, extra) in MORE_PROVIDERS.items()}}

# Whose truth depends on what is installed where the server runs: the audit must fail closed on them.
ENVIRONMENT_DEPENDENT = {m for m, _ in CORPUS.values() if m.startswith("try:\n    from vendor.")}


def oracle(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "audit_oracle.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("module, extra", CORPUS.values(), ids=CORPUS.keys())
def test_the_audit_passes_exactly_what_the_oracle_serves(tmp_path, module, extra):
    """Ground truth by import and call in a subprocess (tests/audit_oracle.py): the audit passes a case (exit 0)
    if and only if every EAGLE-3 call on the class goes through; undecided and missing both fail."""
    tree = synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module, **extra})
    truth = oracle("provider", str(tree), "Edited", json.dumps(ORACLE_CALLS))
    try:
        report = audit.audit(tree, "Edited")
    except UserError as err:  # no such class in the registry: exit 2, not a pass
        assert not truth["serves"], f"oracle: {truth['why']}; audit: {err}"
        return
    if module in ENVIRONMENT_DEPENDENT:
        # The oracle answers for its own environment (no vendor package); in another the base differs.
        assert report.exit_code == 3 and "<ambiguous>" in report.undecided[0].reason, report.lines()
        return
    assert report.passed == truth["serves"], f"oracle: {truth['why']}; audit: {report.lines(verbose=True)}"


# --- the call-site corpus against the oracle ---------------------------------------------------------

CALL_CASES = {
    **{f"path: {m}": ("runner", code, "", {}, m) for code, m, _ in rules.PATH},
    **{f"guard: {m}": ("runner", code, "", {}, m) for code, m, _ in rules.GUARDS + rules.ALGORITHM_GUARDS},
    **{f"receiver: {m}": ("worker", code, rules.SHARE, {}, m) for code, m, _ in rules.RECEIVERS},
    **{f"predicate: {m}": ("runner", code, methods, rules.SPEC_CHECKS, m) for methods, code, m, _ in rules.PREDICATES},
    **{f"reach: {m}": ("worker", code, methods, rules.HOOKS, m) for code, methods, m, _ in rules.REACH},
}
# What no run can tell, and why; the rules' tables still pin the audit's verdict on them.
UNDECIDABLE = {
    "path: eagle_flag": "a flag from configuration the tree does not show; the audit takes one named for EAGLE as set",
    "path: augmented": "no model has +=: the server dies of the operator, with or without the method",
}


@pytest.mark.parametrize("case", [c for c in CALL_CASES if c not in UNDECIDABLE])
def test_the_audit_requires_exactly_what_the_eagle3_path_dies_without(tmp_path, case):
    """Ground truth by running the tree's ModelRunner or EAGLEWorker __init__ (tests/audit_oracle.py) with a target
    that lacks the method: the audit requires it if and only if the EAGLE-3 path dies without it (and, for the
    runner, a server without speculation does not)."""
    place, code, methods, extra, method = CALL_CASES[case]
    tree = synthetic(tmp_path, extra=extra, **{place: code, f"{place}_methods": methods})
    truth = oracle("calls", str(tree), place, method)
    report = audit.audit(tree, "Wrapped")
    assert (method in report.required) == truth["required"], f"oracle: {truth['why']}; audit: {placed(report, method)}"


# --- the run's own rules ----------------------------------------------------------------------------


def test_a_guess_about_a_stand_in_leaves_the_method_to_the_source(tmp_path):
    """A def under a class-body `if` on a value from outside the tree: Python's answer would rest on a guess."""
    module = (NN + "from vendor_flags import ENABLED\n\n\nclass Edited(nn.Module):\n" + SETS + "    if ENABLED:\n"
              "        def get_embed_and_head(self):\n            return None, None\n\n\nEntryClass = Edited\n")
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module}), "Edited")
    # only what the guessed statement binds rests on the guess: the unconditional def is Python's answer
    assert report.decided["set_eagle3_layers_to_capture"] == "run", report.decided
    assert "took the truth of vendor_flags.ENABLED" in report.decided["get_embed_and_head"], report.decided
    assert report.exit_code == 3 and [m.method for m in report.undecided] == ["get_embed_and_head"], report.lines()


def test_the_model_config_builds_the_class(tmp_path):
    """With the model's config.json the run builds the class and decides what __init__ sets; without it, it cannot."""
    module = (NN + "def _embed(self):\n    return None, None\n\n\nclass Edited(nn.Module):\n"
              "    def __init__(self, config, quant_config=None):\n        super().__init__()\n        if config.tie_word_embeddings:\n"
              "            self.get_embed_and_head = lambda: (None, None)\n\n" + SETS + "\n\nEntryClass = Edited\n")
    tree = synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module})
    for tie, code in ((True, 0), (False, 1)):
        config = tmp_path / f"config-{tie}.json"
        config.write_text(json.dumps({"architectures": ["Edited"], "tie_word_embeddings": tie}))
        proc = run_cli("--sglang-src", str(tree), "--model-config", str(config), "--verbose")
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert "decided by the run: get_embed_and_head" in proc.stdout, proc.stdout
    bare = audit.audit(tree, "Edited")
    assert bare.exit_code == 3 and bare.decided["get_embed_and_head"].startswith("source"), bare.lines(verbose=True)


def test_a_probe_that_cannot_run_leaves_everything_to_the_source(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "COMMAND", [sys.executable, "-c", "import sys; sys.exit('no probe here')"])
    report = audit.audit(synthetic(tmp_path), "Wrapped")
    assert report.passed, report.lines()
    assert report.run == "run: the probe failed (exit 1): no probe here", report.run
    assert all(how.startswith("source") for how in report.decided.values()), report.decided


@pytest.mark.parametrize("case", ["module-level setattr", "module-level setattr loop"])
def test_a_method_set_on_the_class_at_module_level_is_never_called_missing(tmp_path, monkeypatch, case):
    """The class object has it once its module ran (the oracle serves it): the source alone cannot read the loop, so it
    says undecided (exit 3, which --dynamic settles from the imported class), never missing (exit 1)."""
    monkeypatch.setattr(runtime, "COMMAND", [sys.executable, "-c", "import sys; sys.exit('no probe here')"])
    module, extra = MORE_PROVIDERS[case]
    tree = synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module + "\n\nEntryClass = Edited\n", **extra})
    assert oracle("provider", str(tree), "Edited", json.dumps(ORACLE_CALLS))["serves"]
    report = audit.audit(tree, "Edited")
    assert report.exit_code == 3 and "set on the class after its body" in report.undecided[0].reason, \
        report.lines(verbose=True)


def test_what_the_model_prints_or_opens_does_not_disturb_the_run(tmp_path):
    """Model code that prints, and opens a path that is a stand-in (it names no file, never a descriptor)."""
    module = (NN + "from vendor_io import checkpoint_path\n\nprint('loading the model module')\n\n\nclass Edited(nn.Module):\n"
              "    def __init__(self, config=None, quant_config=None):\n        super().__init__()\n        print('building')\n"
              "        try:\n            with open(checkpoint_path) as fh:\n                fh.read()\n        except OSError:\n"
              "            pass\n\n" + SETS + EMBEDS + "\n\nEntryClass = Edited\n")
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module}), "Edited")
    assert report.passed and set(report.decided.values()) == {"run"}, report.lines(verbose=True)
    assert "built Edited(config=..., quant_config=None)" in report.run, report.run
