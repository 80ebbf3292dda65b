"""The EAGLE-3 audit against realistic edits of the real sglang tree.

Each case is a small source change, made in a copy of the unpatched wheel, that changes what
a real EAGLE-3 server on Kimi-K2.5 does; `server` says what that is, and `expect` is the
verdict the audit must give for each method it touches:

  "fail"        the method is reported missing (the server dies on it after loading)
  "fail@FILE"   ... with a missing call site in FILE
  "pass"        the method is not reported missing
  "pass@FILE"   no missing call site of the method is in FILE (the edit made that site safe)
  "undecided"   the class may get the method in a way the source cannot show (the audit fails closed: exit 3)
  "error"       the audit stops: it can no longer tell target from draft calls

The unpatched class lacks both methods, so edits of the class add what is not at stake.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from sglang_stack.errors import UserError
from sglang_stack.audit import eagle3 as audit

KIMI_PY = "sglang/srt/models/kimi_k25.py"
RUNNER_PY = "sglang/srt/model_executor/model_runner.py"
GRAPH_PY = "sglang/srt/model_executor/cuda_graph_runner.py"
WORKER_PY = "sglang/srt/speculative/eagle_worker.py"
SPEC_UTILS_PY = "sglang/srt/speculative/spec_utils.py"

END_OF_KIMI = "\n\nEntryClass = [KimiK25ForConditionalGeneration]"
KIMI_CLASS = "class KimiK25ForConditionalGeneration(nn.Module):\n"
KIMI_INIT = "        self.language_model = DeepseekV3ForCausalLM(config.text_config, quant_config)\n"
SET_LAYERS = (
    "\n    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
    "        return self.language_model.set_eagle3_layers_to_capture(layer_ids)\n"
)
GET_EMBED = "\n    def get_embed_and_head(self):\n        return self.language_model.get_embed_and_head()\n"
RUNNER_SPOT = "        # Initialize piecewise CUDA graph\n"
TARGET_CALL = "        embed, head = self.target_worker.model_runner.model.get_embed_and_head()\n"


class Case(NamedTuple):
    name: str
    edits: list  # (path, old, new): old must occur exactly once; old=None makes a new file; old="*..." replaces all
    expect: dict  # method -> verdict (see the module doc), or {"error": text}
    server: str  # what a real EAGLE-3 server on this tree does


def in_kimi(code: str) -> tuple:
    return (KIMI_PY, END_OF_KIMI, code + END_OF_KIMI)


def in_runner(code: str) -> tuple:
    return (RUNNER_PY, RUNNER_SPOT, code + RUNNER_SPOT)


def at_target_call(code: str) -> tuple:
    return (WORKER_PY, TARGET_CALL, code)


CASES = [
    # --- providers ------------------------------------------------------------------------
    Case("provider: delegating defs", [in_kimi(SET_LAYERS + GET_EMBED)],
         {"set_eagle3_layers_to_capture": "pass", "get_embed_and_head": "pass"}, "serves"),
    Case("provider: get_embed_and_head = None", [in_kimi(SET_LAYERS + "\n    get_embed_and_head = None\n")],
         {"get_embed_and_head": "fail", "set_eagle3_layers_to_capture": "pass"},
         "TypeError: 'NoneType' object is not callable at eagle_worker.py:157"),
    Case("provider: set_eagle3_layers_to_capture(self) takes no layer ids",
         [in_kimi(GET_EMBED + "\n    def set_eagle3_layers_to_capture(self):\n        pass\n")],
         {"set_eagle3_layers_to_capture": f"fail@{RUNNER_PY}", "get_embed_and_head": "pass"},
         "TypeError: takes 1 positional argument but 2 were given at model_runner.py:622"),
    Case("provider: get_embed_and_head(self, draft_model) needs an argument",
         [in_kimi(SET_LAYERS + "\n    def get_embed_and_head(self, draft_model):\n        return None, None\n")],
         {"get_embed_and_head": "fail"}, "TypeError: missing 1 required positional argument at eagle_worker.py:157"),
    Case("provider: get_embed_and_head is a property",
         [in_kimi(SET_LAYERS + "\n    @property" + GET_EMBED)],
         {"get_embed_and_head": "fail"}, "TypeError: 'tuple' object is not callable"),
    Case("provider: bound methods set in __init__",
         [(KIMI_PY, KIMI_INIT, KIMI_INIT + "        self.get_embed_and_head = self.language_model.get_embed_and_head\n"
           "        self.set_eagle3_layers_to_capture = self.language_model.set_eagle3_layers_to_capture\n")],
         {"set_eagle3_layers_to_capture": "pass", "get_embed_and_head": "pass"}, "serves"),
    Case("provider: None set in __init__ shadows the def",
         [in_kimi(SET_LAYERS + GET_EMBED), (KIMI_PY, KIMI_INIT, KIMI_INIT + "        self.get_embed_and_head = None\n")],
         {"get_embed_and_head": "fail", "set_eagle3_layers_to_capture": "pass"}, "TypeError: 'NoneType' object is not callable"),
    Case("provider: a mixin from a package outside the tree",
         [(KIMI_PY, KIMI_CLASS, "from kimi_eagle_ext import EagleTargetMixin\n\n\n"
           "class KimiK25ForConditionalGeneration(EagleTargetMixin, nn.Module):\n")],
         {"set_eagle3_layers_to_capture": "undecided", "get_embed_and_head": "undecided"},
         "depends on kimi_eagle_ext, which this tree does not hold"),
    Case("provider: __getattr__ forwards to the language model",
         [in_kimi("\n    def __getattr__(self, name):\n        try:\n            return super().__getattr__(name)\n"
                  "        except AttributeError:\n            return getattr(super().__getattr__('language_model'), name)\n")],
         {"set_eagle3_layers_to_capture": "undecided", "get_embed_and_head": "undecided"}, "serves"),
    Case("provider: an in-tree mixin",
         [(KIMI_PY, KIMI_CLASS, "class _EagleTargetHooks:" + SET_LAYERS + GET_EMBED + "\n\n"
           "class KimiK25ForConditionalGeneration(_EagleTargetHooks, nn.Module):\n")],
         {"set_eagle3_layers_to_capture": "pass", "get_embed_and_head": "pass"}, "serves"),
    Case("provider: a module function assigned in the class body",
         [(KIMI_PY, KIMI_CLASS, "def _get_embed_and_head(self):\n    return self.language_model.get_embed_and_head()\n\n\n"
           + KIMI_CLASS + "    get_embed_and_head = _get_embed_and_head\n"), in_kimi(SET_LAYERS)],
         {"set_eagle3_layers_to_capture": "pass", "get_embed_and_head": "pass"}, "serves"),
    # --- guards: the target call in eagle_worker.py ------------------------------------------
    Case("guard: hasattr on the draft model, call on the target",
         [at_target_call("        if hasattr(self.draft_model_runner.model, 'get_embed_and_head'):\n    " + TARGET_CALL)],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "AttributeError: the draft model has the method, the target does not"),
    Case("guard: except Exception, logged",
         [at_target_call("        try:\n    " + TARGET_CALL + "        except Exception:\n"
                         "            logger.warning('the target model shares no embedding')\n")],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "UnboundLocalError: embed, at its next use"),
    Case("guard: bare except",
         [at_target_call("        try:\n    " + TARGET_CALL + "        except:\n            pass\n")],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "UnboundLocalError: embed, at its next use"),
    Case("guard: except AttributeError that leaves the result unset",
         [at_target_call("        try:\n    " + TARGET_CALL + "        except AttributeError:\n            pass\n")],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "UnboundLocalError: embed, at its next use"),
    Case("guard: except AttributeError with a fallback",
         [at_target_call("        try:\n    " + TARGET_CALL + "        except AttributeError:\n            embed, head = "
                         "self.target_worker.model_runner.model.language_model.get_embed_and_head()\n")],
         {"get_embed_and_head": f"pass@{WORKER_PY}"}, "serves past this call"),
    Case("guard: hasattr on the target with a fallback",
         [at_target_call("        target = self.target_worker.model_runner.model\n"
                         "        if hasattr(target, 'get_embed_and_head'):\n            embed, head = target.get_embed_and_head()\n"
                         "        else:\n            embed, head = target.language_model.get_embed_and_head()\n")],
         {"get_embed_and_head": f"pass@{WORKER_PY}"}, "serves past this call"),
    Case("guard: hasattr on the target, no fallback",
         [at_target_call("        if hasattr(self.target_worker.model_runner.model, 'get_embed_and_head'):\n    " + TARGET_CALL)],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "UnboundLocalError: embed, at its next use"),
    Case("guard: a hasattr check that raises",
         [at_target_call("        if not hasattr(self.target_worker.model_runner.model, 'get_embed_and_head'):\n"
                         "            raise ValueError('the target model shares no embedding')\n" + TARGET_CALL)],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "ValueError after loading"),
    # --- path conditions: a new call in ModelRunner.initialize ------------------------------
    Case("path: `if is_eagle3() or X`",
         [in_runner("        if self.spec_algorithm.is_eagle3() or self.server_args.enable_return_hidden_states:\n"
                    "            self.model.prepare_aux_capture()\n")],
         {"prepare_aux_capture": "fail"}, "AttributeError under EAGLE-3"),
    Case("path: `if server_args.speculative_algorithm is not None`",
         [in_runner("        if self.server_args.speculative_algorithm is not None:\n            self.model.on_speculative_start()\n")],
         {"on_speculative_start": "fail"}, "AttributeError under EAGLE-3"),
    Case("path: the else of `if is_none()`",
         [in_runner("        if self.spec_algorithm.is_none():\n            pass\n        else:\n            self.model.spec_hook()\n")],
         {"spec_hook": "fail"}, "AttributeError under EAGLE-3"),
    Case("path: an early return unless EAGLE",
         [in_runner("        self.init_eagle_extras()\n"),
          (RUNNER_PY, "    def init_routed_experts_capturer(self):\n",
           "    def init_eagle_extras(self):\n        if not self.spec_algorithm.is_eagle():\n            return\n"
           "        self.model.init_eagle_extras()\n\n    def init_routed_experts_capturer(self):\n")],
         {"init_eagle_extras": "fail"}, "AttributeError under EAGLE-3"),
    Case("path: the algorithm in a local",
         [in_runner("        algo = self.spec_algorithm\n        if not algo.is_none():\n            self.model.speculative_hook()\n")],
         {"speculative_hook": "fail"}, "AttributeError under EAGLE-3"),
    Case("path: standalone only",
         [in_runner("        if self.spec_algorithm.is_standalone():\n            self.model.standalone_hook()\n")],
         {"standalone_hook": "pass"}, "never calls it under EAGLE-3"),
    Case("path: a condition unrelated to speculation",
         [in_runner("        if self.server_args.enable_lora:\n            self.model.lora_hook()\n")],
         {"lora_hook": "pass"}, "calls it only with LoRA on, speculative or not"),
    Case("path: the EAGLE-3 flag renamed",
         [(RUNNER_PY, "*eagle_use_aux_hidden_state", "use_aux_hidden_state"),
          (GRAPH_PY, "*eagle_use_aux_hidden_state", "use_aux_hidden_state")],
         {"set_eagle3_layers_to_capture": f"fail@{GRAPH_PY}"}, "AttributeError under EAGLE-3"),
    # --- anchors ---------------------------------------------------------------------------
    Case("anchor: the target_worker attribute renamed",
         [(WORKER_PY, "*self.target_worker", "self.verifier")],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "AttributeError at eagle_worker.py:157"),
    Case("anchor: target_worker renamed everywhere in one worker",
         [(WORKER_PY, "*target_worker", "verifier_worker")],
         {"error": "cannot tell whether self.verifier_worker.model_runner.model is the target or the draft"},
         "AttributeError at eagle_worker.py:157 (the scheduler's keyword aside)"),
    Case("anchor: model_runner renamed throughout cuda_graph_runner.py",
         [(GRAPH_PY, "*model_runner", "runner"), (GRAPH_PY, "model_executor.runner import", "model_executor.model_runner import")],
         {"error": "cannot tell whether self.runner.model is the target or the draft"},
         "AttributeError at cuda_graph_runner.py:365"),
    Case("anchor: the target runner held in a local",
         [at_target_call("        target_runner = self.target_worker.model_runner\n"
                         "        embed, head = target_runner.model.get_embed_and_head()\n")],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "AttributeError at eagle_worker.py"),
    # --- newer SGLang: the model handed to helpers -----------------------------------------
    Case("helper: a function in spec_utils.py gets the model",
         [at_target_call("        embed, head = share_target_embedding(self.target_worker.model_runner.model)\n"),
          (WORKER_PY, "from sglang.srt.speculative.spec_utils import (\n",
           "from sglang.srt.speculative.spec_utils import (\n    share_target_embedding,\n"),
          (SPEC_UTILS_PY, "\ndef detect_nan(", "\ndef share_target_embedding(model):\n    return model.get_embed_and_head()\n\n\ndef detect_nan(")],
         {"get_embed_and_head": f"fail@{SPEC_UTILS_PY}"}, "AttributeError in spec_utils.py"),
    Case("helper: two calls deep, by keyword, in a new module",
         [at_target_call("        embed, head = resolve_embed_and_head(target_model=self.target_worker.model_runner.model)\n"),
          (WORKER_PY, "\nlogger = logging.getLogger(__name__)\n",
           "\nfrom sglang.srt.speculative.embed_share import resolve_embed_and_head\n\nlogger = logging.getLogger(__name__)\n"),
          ("sglang/srt/speculative/embed_share.py", None,
           "def resolve_embed_and_head(*, target_model):\n    return _get(target_model)\n\n\n"
           "def _get(model):\n    return model.get_embed_and_head()\n")],
         {"get_embed_and_head": "fail@sglang/srt/speculative/embed_share.py"}, "AttributeError in embed_share.py"),
    Case("helper: a worker method gets the model",
         [at_target_call("        embed, head = self._target_embed_and_head(self.target_worker.model_runner.model)\n"),
          (WORKER_PY, "    def forward_draft_extend(\n",
           "    def _target_embed_and_head(self, target):\n        return target.get_embed_and_head()\n\n"
           "    def forward_draft_extend(\n")],
         {"get_embed_and_head": f"fail@{WORKER_PY}"}, "AttributeError in eagle_worker.py"),
    Case("helper: a method of the draft worker's base class",
         [("sglang/srt/speculative/eagle_worker_v2.py", TARGET_CALL, "        embed, head = self.target_embed_and_head()\n"),
          ("sglang/srt/speculative/base_spec_worker.py", "class BaseDraftWorker(ABC):\n",
           "class BaseDraftWorker(ABC):\n    def target_embed_and_head(self):\n"
           "        return self.target_worker.model_runner.model.get_embed_and_head()\n\n")],
         {"get_embed_and_head": "fail@sglang/srt/speculative/base_spec_worker.py"}, "AttributeError in base_spec_worker.py"),
    Case("helper: ModelRunner hands itself and its flag to a capture helper",
         [(RUNNER_PY, "        if self.eagle_use_aux_hidden_state:\n            self.model.set_eagle3_layers_to_capture(\n"
           "                self.eagle_aux_hidden_state_layer_ids\n            )\n",
           "        configure_capture(self, self.eagle_use_aux_hidden_state)\n"),
          (RUNNER_PY, "\nlogger = logging.getLogger(__name__)\n",
           "\nfrom sglang.srt.model_executor.capture import configure_capture\n\nlogger = logging.getLogger(__name__)\n"),
          ("sglang/srt/model_executor/capture.py", None,
           "def configure_capture(runner, enabled):\n    if enabled:\n"
           "        runner.model.set_eagle3_layers_to_capture(runner.eagle_aux_hidden_state_layer_ids)\n")],
         {"set_eagle3_layers_to_capture": "fail@sglang/srt/model_executor/capture.py"}, "AttributeError in capture.py"),
]


def edit(site: Path, edits: list) -> None:
    for rel, old, new in edits:
        path = site / rel
        if old is None:
            path.write_text(new)
            continue
        text = path.read_text()
        if old.startswith("*"):
            assert old[1:] in text, f"{rel}: {old[1:]!r} not found: pick another anchor"
            text = text.replace(old[1:], new)
        else:
            assert text.count(old) == 1, f"{rel}: {old!r} occurs {text.count(old)} times: pick another anchor"
            text = text.replace(old, new)
        path.unlink()  # the copy is hard-linked to the session's pristine tree
        path.write_text(text)


def verdicts(report: audit.Report, expect: dict) -> dict:
    missing = {m.method: {s.path for s in m.sites} for m in report.missing}
    undecided = {m.method for m in report.undecided}
    out = {}
    for method, want in expect.items():
        verdict, _, at = want.partition("@")
        if method in undecided:
            got = "undecided"
        elif at:
            got = "fail" if at in missing.get(method, ()) else "pass"
        else:
            got = "fail" if method in missing else "pass"
        out[method] = got + (f"@{at}" if at else "")
    return out


def run(site: Path, expect: dict) -> dict:
    try:
        report = audit.audit(site, "KimiK25ForConditionalGeneration")
    except UserError as err:
        return {"error": str(err)}
    return verdicts(report, expect)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_realistic_edit_gets_the_verdict_a_real_server_gives(sglang_pristine, tmp_path, case):
    site = tmp_path / "site"
    shutil.copytree(sglang_pristine, site, copy_function=os.link)
    edit(site, case.edits)
    got = run(site, case.expect)
    if "error" in case.expect:
        assert case.expect["error"] in got.get("error", ""), f"{case.name}: expected an error, got {got}"
    else:
        assert got == case.expect, f"{case.name} (a real server: {case.server}): {got}"
