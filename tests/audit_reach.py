"""A corpus of edits in the forms that reach a method indirectly, each in both directions (serves, crashes).

What a forwarder really reaches (a chain of parts, a borrowed function, a wrapper, a property), callables
followed (``functools.partial``, a bound method or a defaulted ``getattr`` kept in a name), fallbacks that
break the server later, and hooks Python binds at run time (class decorators, ``setattr`` loops, an
``__init__`` that binds them under the server's arguments). Each case states the direction it was written
for; the tests check that the import-and-call oracle (tests/audit_oracle.py) agrees, and that the audit
agrees with the oracle. ``python tests/audit_reach.py`` prints the audit's verdict beside the oracle's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NN = "import functools\n\nfrom torch import nn\n\n\n"
# The shape of Kimi-K2.5 and DeepSeek: a backbone without the EAGLE-3 hooks, a causal LM around it that has
# them, and the edited class around that.
PARTS = NN + '''
class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = object()


class Backbone(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        self.embed_tokens = Embedding()


class CausalLM(nn.Module):
    def __init__(self, config=None, quant_config=None):
        super().__init__()
        self.model = Backbone(config)
        self.lm_head = Embedding()

    def get_embed_and_head(self):
        return self.model.embed_tokens.weight, self.lm_head.weight

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


class Holder(nn.Module):
    def __init__(self, config=None):
        super().__init__()
        self.lm = CausalLM(config)


def _forward(name):
    def method(self, *args, **kwargs):
        return getattr(self.language_model, name)(*args, **kwargs)

    method.__name__ = name
    return method


def to_language_model(fn):
    @functools.wraps(fn)
    def forward(self, *args, **kwargs):
        return getattr(self.language_model, fn.__name__)(*args, **kwargs)

    return forward


HOOKS = ("get_embed_and_head", "set_eagle3_layers_to_capture")


def eagle3_hooks(cls):
    for name in HOOKS:
        setattr(cls, name, _forward(name))
    return cls
'''
SETS = "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        self.language_model.set_eagle3_layers_to_capture(layer_ids)\n"


def edited(part: str, body: str, *, decorator: str = "", init: str = "", after: str = "") -> str:
    """A models module: the parts, then ``Edited`` holding ``part`` as ``self.language_model``."""
    return (PARTS + f"\n\n{decorator}class Edited(nn.Module):\n    def __init__(self, config=None, quant_config=None):\n"
            f"        super().__init__()\n        self.language_model = {part}(config)\n{init}\n{body}\n\n{after}"
            "\nEntryClass = Edited\n")


SERVER_ARGS = {"sglang/srt/server_args.py": (
    "from types import SimpleNamespace\n\n_global = SimpleNamespace(speculative_algorithm=None)\n\n\n"
    "def get_global_server_args():\n    return _global\n\n\n"
    "def set_global_server_args_for_scheduler(server_args):\n    global _global\n    _global = server_args\n")}
UNDER_ARGS = ("        from sglang.srt.server_args import get_global_server_args\n\n"
              "        if get_global_server_args().speculative_algorithm == {algorithm!r}:\n"
              "            self.get_embed_and_head = self.language_model.get_embed_and_head\n")

# name -> (models module, extra files, whether the server serves: the direction the case was written for)
PROVIDERS = {
    "a forwarder two links deep to a part that lacks it": (edited("CausalLM", SETS + (
        "    def get_embed_and_head(self):\n        return self.language_model.model.get_embed_and_head()\n")), {}, False),
    "a forwarder two links deep to a part that has it": (edited("CausalLM", SETS + (
        "    def get_embed_and_head(self):\n        return self.holder.lm.get_embed_and_head()\n"),
        init="        self.holder = Holder(config)\n"), {}, True),
    "a forwarder one link deep to the backbone": (edited("Backbone", (
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n\n"
        "    def get_embed_and_head(self):\n        return self.language_model.get_embed_and_head()\n")), {}, False),
    "a borrowed function whose attributes the class lacks": (edited("CausalLM", SETS + (
        "    get_embed_and_head = CausalLM.get_embed_and_head\n")), {}, False),
    "a borrowed function whose attributes the class has": (edited("CausalLM", SETS + (
        "    get_embed_and_head = CausalLM.get_embed_and_head\n"),
        init="        self.model = Backbone(config)\n        self.lm_head = Embedding()\n"), {}, True),
    "a borrowed function reading a part the part lacks": (edited("CausalLM", SETS + (
        "    get_embed_and_head = CausalLM.get_embed_and_head\n"),
        init="        self.model = Embedding()\n        self.lm_head = Embedding()\n"), {}, False),
    "a property returning a part's bound method": (edited("CausalLM", SETS + (
        "    @property\n    def get_embed_and_head(self):\n        return self.language_model.get_embed_and_head\n")), {}, True),
    "a property returning a bound method the part lacks": (edited("CausalLM", SETS + (
        "    @property\n    def get_embed_and_head(self):\n        return self.language_model.model.get_embed_and_head\n")),
        {}, False),
    "a stub wrapped by a functools.wraps forwarder": (edited("CausalLM", SETS + (
        "    @to_language_model\n    def get_embed_and_head(self):\n        ...\n")), {}, True),
    "a stub wrapped by a forwarder to a part that lacks it": (edited("Backbone", (
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n\n"
        "    @to_language_model\n    def get_embed_and_head(self):\n        ...\n")), {}, False),
    "a class decorator that sets the hooks in a loop": (edited("CausalLM", "    pass\n", decorator="@eagle3_hooks\n"), {}, True),
    "a class decorator that forwards to a part that lacks them": (edited("Backbone", "    pass\n", decorator="@eagle3_hooks\n"),
                                                                  {}, False),
    "a module-level setattr loop": (edited("CausalLM", "    pass\n", after=(
        "for _name in HOOKS:\n    setattr(Edited, _name, _forward(_name))\n\n")), {}, True),
    "a module-level setattr loop that misses one": (edited("CausalLM", "    pass\n", after=(
        "for _name in HOOKS[1:]:\n    setattr(Edited, _name, _forward(_name))\n\n")), {}, False),
    "an __init__ setattr loop over a constant tuple": (edited("CausalLM", "    pass\n", init=(
        "        for name in HOOKS:\n            setattr(self, name, getattr(self.language_model, name))\n")), {}, True),
    "an __init__ setattr loop over a tuple that misses one": (edited("CausalLM", "    pass\n", init=(
        "        for name in HOOKS[1:]:\n            setattr(self, name, getattr(self.language_model, name))\n")), {}, False),
    "an __init__ binding under a server-args condition true for EAGLE-3": (edited("CausalLM", SETS, init=(
        UNDER_ARGS.format(algorithm="EAGLE3"))), SERVER_ARGS, True),
    "an __init__ binding under a server-args condition false for EAGLE-3": (edited("CausalLM", SETS, init=(
        UNDER_ARGS.format(algorithm="NGRAM"))), SERVER_ARGS, False),
}

HELPERS = {"sglang/srt/speculative/reach_helpers.py": (
    "def embed_of(target):\n    return target.reached_by_partial()\n\n\n"
    "def draft_embed_of(draft):\n    return draft.draft_reached_by_partial()\n")}
TARGET = "self.target_worker.model_runner.model"
# name -> (code in EAGLEWorker.__init__, extra files, the method, whether the EAGLE-3 path dies without it)
CALLS = {
    "a partial of a helper handed the target": (
        "import functools\nfrom sglang.srt.speculative.reach_helpers import embed_of\n"
        f"functools.partial(embed_of, {TARGET})()", HELPERS, "reached_by_partial", True),
    "a partial of a helper handed the draft": (
        "import functools\nfrom sglang.srt.speculative.reach_helpers import draft_embed_of\n"
        "functools.partial(draft_embed_of, self.draft_model_runner.model)()", HELPERS, "draft_reached_by_partial", False),
    "a defaulted getattr kept, a raise when it is None": (
        f"hook = getattr({TARGET}, 'hooked_or_raise', None)\nif hook is None:\n"
        "    raise ValueError('the target model has no hooked_or_raise')\nhook()", {}, "hooked_or_raise", True),
    "a defaulted getattr kept, called when it is not None": (
        f"hook = getattr({TARGET}, 'hooked_if_there', None)\nif hook is not None:\n    hook()", {}, "hooked_if_there", False),
    "a defaulted getattr kept, called when it is truthy": (
        f"hook = getattr({TARGET}, 'hooked_if_truthy', None)\nif hook:\n    hook()", {}, "hooked_if_truthy", False),
    "a defaulted getattr kept, returning early when it is None": (
        f"hook = getattr({TARGET}, 'hooked_or_return', None)\nif hook is None:\n    return\nhook()", {}, "hooked_or_return", False),
    "a defaulted getattr kept and called unchecked": (
        f"hook = getattr({TARGET}, 'hooked_unchecked', None)\nhook()", {}, "hooked_unchecked", True),
    "a defaulted getattr of None called at once": (
        f"getattr({TARGET}, 'called_none', None)()", {}, "called_none", True),
    "a bound method kept in a name and called later": (
        f"fn = {TARGET}.stored_bound\nself.ready = True\nfn()", {}, "stored_bound", True),
    "a bound method kept in a name and never called": (
        f"fn = getattr({TARGET}, 'stored_unused', None)\nself.ready = True", {}, "stored_unused", False),
    "a hasattr fallback of None dereferenced later": (
        f"m = {TARGET}\nif hasattr(m, 'fallback_breaks'):\n    head = m.fallback_breaks()\nelse:\n    head = None\n"
        "self.vocab = head.shape", {}, "fallback_breaks", True),
    "a hasattr fallback of None only passed on": (
        f"m = {TARGET}\nif hasattr(m, 'fallback_holds'):\n    head = m.fallback_holds()\nelse:\n    head = None\n"
        "print(head)", {}, "fallback_holds", False),
    "an except fallback of None dereferenced later": (
        f"try:\n    head = {TARGET}.except_breaks()\nexcept AttributeError:\n    head = None\nself.vocab = head.shape",
        {}, "except_breaks", True),
    "a suppress with the result bound before": (
        f"import contextlib\nhead = None\nwith contextlib.suppress(AttributeError):\n    head = {TARGET}.suppressed_prebound()\n"
        "print(head)", {}, "suppressed_prebound", False),
    "a suppress with the result bound before, dereferenced later": (
        f"import contextlib\nhead = None\nwith contextlib.suppress(AttributeError):\n    head = {TARGET}.suppressed_breaks()\n"
        "self.vocab = head.shape", {}, "suppressed_breaks", True),
}
LANGUAGE_MODEL = (NN + "class Part(nn.Module):\n    def lm_hook(self):\n        pass\n\n\nclass Edited(nn.Module):\n"
                  "    def __init__(self, config=None, quant_config=None):\n        super().__init__()\n{held}\n"
                  "    def get_embed_and_head(self):\n        return None, None\n\n"
                  "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n\n\nEntryClass = Edited\n")
CHOOSES = (f"m = {TARGET}\nif hasattr(m, 'language_model'):\n    m.language_model.lm_hook()\nelse:\n    m.lm_hook()")
# name -> (code in EAGLEWorker.__init__, the models module, whether the worker comes up): the call site and the
# class decided together, by the oracle's end-to-end run (the built class as the target of the tree's worker).
TOGETHER = {
    "a hasattr(target, 'language_model') choosing the receiver, the class has it": (
        CHOOSES, LANGUAGE_MODEL.format(held="        self.language_model = Part()\n"), True),
    "a hasattr(target, 'language_model') choosing the receiver, the class lacks both": (
        CHOOSES, LANGUAGE_MODEL.format(held=""), False),
}


def oracle(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("audit_oracle.py")), *args],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    return json.loads(proc.stdout)


ORACLE_CALLS = [["set_eagle3_layers_to_capture", 1], ["get_embed_and_head", 0]]


def judge(kind: str, name: str, root: Path) -> tuple[bool, bool, str]:
    """(what the oracle says, what the audit says, the audit's lines) for one case; True: serves (or, for a
    call, the method is not required)."""
    from audit_trees import synthetic
    from sglang_stack.errors import UserError
    from sglang_stack.audit import eagle3 as audit

    if kind == "provider":
        module, extra, _ = PROVIDERS[name]
        tree = synthetic(root, extra={"sglang/srt/models/edited.py": module, **extra})
        truth = oracle("provider", str(tree), "Edited", json.dumps(ORACLE_CALLS))["serves"]
    elif kind == "call":
        code, extra, method, _ = CALLS[name]
        tree = synthetic(root, worker=code, extra=extra)
        truth = not oracle("calls", str(tree), "worker", method)["required"]
        report = audit.audit(tree, "Wrapped")
        return truth, method not in report.required, "; ".join(report.lines(verbose=True))
    else:
        code, module, _ = TOGETHER[name]
        tree = synthetic(root, worker=code, extra={"sglang/srt/models/edited.py": module})
        truth = oracle("serve", str(tree), "Edited")["serves"]
    try:
        report = audit.audit(tree, "Edited")
    except UserError as err:
        return truth, False, str(err)
    return truth, report.passed, "; ".join(report.lines())


def cases() -> list[tuple[str, str, bool]]:
    """(kind, name, the direction it was written for) of every case."""
    return ([("provider", n, c[-1]) for n, c in PROVIDERS.items()] + [("call", n, not c[-1]) for n, c in CALLS.items()]
            + [("together", n, c[-1]) for n, c in TOGETHER.items()])


def main() -> int:
    """Print each case's oracle and audit verdicts, then the count of false passes and false rejects."""
    import tempfile

    sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]
    false_pass = false_reject = 0
    for kind, name, _ in cases():
        with tempfile.TemporaryDirectory() as tmp:
            truth, said, lines = judge(kind, name, Path(tmp))
        verdict = "right" if truth == said else "FALSE PASS" if said else "false reject"
        false_pass += verdict == "FALSE PASS"
        false_reject += verdict == "false reject"
        print(f"{verdict:12} {kind:8} {name}: oracle {'serves' if truth else 'dies'}")
    print(f"{len(cases())} cases: {false_pass} false passes, {false_reject} false rejects")
    return 0


if __name__ == "__main__":
    sys.exit(main())
