"""The EAGLE-3 audit on real SGLang trees (0.5.9 unpatched and patched, 0.5.10, the latest
release) and on small synthetic trees that pin down each rule. Realistic edits of the 0.5.9
tree are in tests/test_audit_edits.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.patching import audit

KIMI = "KimiK25ForConditionalGeneration"

# Checked by hand in the 0.5.9 wheel. The audit must find these from the source.
FACTS_0_5_9 = {
    "set_eagle3_layers_to_capture": [
        "sglang/srt/model_executor/cuda_graph_runner.py:365",
        "sglang/srt/model_executor/model_runner.py:622",
        "sglang/srt/model_executor/model_runner.py:1906",
    ],
    "get_embed_and_head": [
        "sglang/srt/speculative/eagle_worker.py:157",
        "sglang/srt/speculative/eagle_worker_v2.py:194",
        "sglang/srt/speculative/multi_layer_eagle_worker.py:149",
        "sglang/srt/speculative/multi_layer_eagle_worker_v2.py:169",
    ],
}

# sglang 0.5.10 from PyPI, hashed here: it carries the three delegating methods upstream
# (https://github.com/sgl-project/sglang/pull/19689), so it must pass unpatched.
SGLANG_0_5_10 = (
    "https://files.pythonhosted.org/packages/1f/ee/f7a946162ed538f47a1c5542f93410e5bf9a0c4ca6021d4000e6f9b87f7d/"
    "sglang-0.5.10-py3-none-any.whl",
    "ac8855a5d57dac8831fee526bca5212f1ae451f378e2ab08b3baecbc4deb4076",
)
# The latest release on PyPI when this was written, hashed here (cp312 x86_64, the image's
# Python). Its EAGLE-3 calls sit in helpers the model is passed to, two calls deep.
SGLANG_LATEST = (
    "https://files.pythonhosted.org/packages/ca/5f/fb9c2417fc4c650f62ef98ddee2cc25988456c94e8a6ca8661ef0cbe0b09/"
    "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl",
    "8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6",
)


def sites(group: dict) -> dict[str, list[str]]:
    return {m: [str(s) for s in ss] for m, ss in group.items()}


def unpacked(wheel: tuple[str, str], tmp_path: Path) -> Path:
    from sglang_stack import fetch
    from sglang_stack.patching.patches import unpack_wheel

    return unpack_wheel(fetch.fetch(*wheel), tmp_path / "site")


@pytest.fixture(scope="module")
def unpatched_report(sglang_pristine) -> audit.Report:
    return audit.audit(sglang_pristine, KIMI)


# --------------------------------------------------------------------------
# Real trees
# --------------------------------------------------------------------------


def test_unpatched_tree_lacks_exactly_the_two_methods_at_the_known_call_sites(unpatched_report):
    report = unpatched_report
    assert not report.passed, "the audit passes the unpatched 0.5.9 tree"
    missing = {m.method: [str(s) for s in m.sites] for m in report.missing}
    assert missing == FACTS_0_5_9, f"missing methods and call sites differ from the hand-checked ones: {missing}"
    assert sites(report.required) == FACTS_0_5_9, f"required: {sites(report.required)}"
    assert report.undecided == [], f"nothing is undecided on 0.5.9: {report.undecided}"
    assert report.sglang_version == "0.5.9", report.sglang_version
    assert report.arch_site.startswith("sglang/srt/models/kimi_k25.py:"), report.arch_site


def test_patched_tree_passes_and_names_where_each_method_comes_from(sglang_patched):
    """Whatever else the series changes (line numbers, new guarded calls), the class must provide both."""
    report = audit.audit(sglang_patched, KIMI)
    assert report.passed and not report.undecided, f"the audit fails the patched tree: {report.lines()}"
    assert set(FACTS_0_5_9) <= set(report.required), f"required: {sites(report.required)}"
    for method in FACTS_0_5_9:
        assert report.providers[method].startswith(f"{KIMI}.{method}(self"), report.providers
        assert "(sglang/srt/models/kimi_k25.py:" in report.providers[method], report.providers
    assert report.summary.startswith("audit passed") and "call sites)" in report.summary, report.summary


def test_calls_on_the_draft_model_are_not_the_targets_business(unpatched_report):
    report = unpatched_report
    assert "set_embed_and_head" not in report.required, "set_embed_and_head is called on the draft, not the target"
    assert "sglang/srt/speculative/eagle_worker.py:166" in [str(s) for s in report.draft["set_embed_and_head"]], report.draft


def test_calls_off_the_eagle3_path_or_guarded_are_reported_apart(unpatched_report):
    """A naive `self.model.X(` scan of model_runner.py reports these as gaps; none of them is one."""
    report = unpatched_report
    for method in ("load_kv_cache_scales", "get_attention_sliding_window_size", "get_weights_by_name", "forward_split_prefill"):
        assert method not in report.required, f"{method} is not on the EAGLE-3 path but was required"
        assert method in report.outside, f"{method} should be listed apart as outside the EAGLE-3 path"
    guards = {s.guard for s in report.outside["get_attention_sliding_window_size"]}
    assert guards == {"hasattr"}, f"get_attention_sliding_window_size is guarded by hasattr: {guards}"
    # Checked with callable(getattr(..., None)), but the else branch raises: still needed there.
    guards = {s.guard for s in report.outside["load_kv_cache_scales"]}
    assert guards == {""}, f"a check whose else raises does not make load_kv_cache_scales optional: {guards}"


def test_inheritance_is_followed_through_the_registry(sglang_pristine):
    report = audit.audit(sglang_pristine, "DeepseekV3ForCausalLM")
    assert report.passed, f"DeepseekV3ForCausalLM inherits all three methods: {report.lines()}"
    assert report.providers["get_embed_and_head"].startswith("DeepseekV2ForCausalLM.get_embed_and_head(self) ("), report.providers


def test_an_unknown_architecture_is_one_line_with_a_suggestion(sglang_pristine):
    with pytest.raises(UserError) as err:
        audit.audit(sglang_pristine, "KimiK25ForConditionalGen")
    assert "did you mean KimiK25ForConditionalGeneration" in str(err.value), str(err.value)


@pytest.mark.network
def test_sglang_0_5_10_passes_unpatched(tmp_path):
    """The next release merged the delegation upstream: the same command, no patches, passes."""
    report = audit.audit(unpacked(SGLANG_0_5_10, tmp_path), KIMI)
    assert report.passed, f"0.5.10 should pass without patches: {report.lines()}"
    assert set(report.required) == set(FACTS_0_5_9), f"0.5.10 EAGLE-3 path calls {sorted(report.required)}"
    assert sum(len(s) for s in report.required.values()) == 7, sites(report.required)


@pytest.mark.network
def test_the_latest_release_gets_an_answer_with_its_call_sites(tmp_path):
    """0.5.23 calls both methods from helpers that get the model as an argument."""
    site = unpacked(SGLANG_LATEST, tmp_path)
    report = audit.audit(site, KIMI)
    assert report.sglang_version == "0.5.23", report.sglang_version
    assert report.passed, f"0.5.23's Kimi-K2.5 has the methods upstream: {report.lines()}"
    found = sites(report.required)
    assert found.get("get_embed_and_head") == ["sglang/srt/speculative/pp_draft_embedding.py:95"], found
    assert found.get("set_eagle3_layers_to_capture") == [
        "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py:61"
    ], found
    # The same tree with the methods gone fails on exactly those sites.
    kimi = site / "sglang/srt/models/kimi_k25.py"
    kimi.write_text(kimi.read_text().replace("def get_embed_and_head(", "def _gone_embed_and_head("))
    failed = audit.audit(site, KIMI)
    assert [(m.method, [str(s) for s in m.sites]) for m in failed.missing] == [
        ("get_embed_and_head", ["sglang/srt/speculative/pp_draft_embedding.py:95"])
    ], failed.lines()


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_stack.patching.audit", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_unpatched_exits_1_with_one_line_per_missing_method(sglang_pristine):
    proc = run_cli("--sglang-src", str(sglang_pristine))
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3, f"expected two missing lines and a summary: {lines}"
    for method, where in FACTS_0_5_9.items():
        line = next((ln for ln in lines if f".{method}()" in ln), "")
        assert line.startswith("missing:") and all(w in line for w in where), f"{method}: {line!r}"
    assert lines[-1].startswith("audit failed:"), lines[-1]


def test_cli_patched_exits_0_with_a_one_line_summary(sglang_patched):
    proc = run_cli("--sglang-src", str(sglang_patched), "--arch", KIMI)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert len(proc.stdout.strip().splitlines()) == 1 and proc.stdout.startswith("audit passed:"), proc.stdout


def test_cli_reads_the_architecture_from_a_model_config(sglang_pristine, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}))
    proc = run_cli("--sglang-src", str(sglang_pristine), "--model-config", str(config), "--json")
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
    data = json.loads(proc.stdout)
    assert data["arch"] == "DeepseekV3ForCausalLM" and data["passed"] is True, data
    assert data["required"]["get_embed_and_head"] == FACTS_0_5_9["get_embed_and_head"], data["required"]


@pytest.mark.parametrize(
    "content, expect",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"architectures": []}), "'architectures' must be a non-empty list"),
        (json.dumps(["x"]), "'architectures' must be a non-empty list"),
    ],
    ids=["syntax", "empty", "not-an-object"],
)
def test_cli_bad_model_config_is_one_line_exit_2(sglang_pristine, tmp_path, content, expect):
    config = tmp_path / "config.json"
    config.write_text(content)
    proc = run_cli("--sglang-src", str(sglang_pristine), "--model-config", str(config))
    assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr}"
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and str(config) in errors[0] and expect in errors[0], errors


def test_cli_not_an_sglang_tree_is_one_line_exit_2(tmp_path):
    proc = run_cli("--sglang-src", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: {tmp_path}: no sglang/ package here"), proc.stderr


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_invoke_audit(sglang_pristine, sglang_patched, tmp_path):
    failed = invoke("audit", "--sglang-src", str(sglang_pristine))
    assert failed.returncode == 1, f"{failed.returncode}: {failed.stdout}{failed.stderr}"
    assert failed.stdout.count("missing:") == 2 and "audit failed" in failed.stdout, failed.stdout
    passed = invoke("audit", "--sglang-src", str(sglang_patched), "--verbose")
    assert passed.returncode == 0, f"{passed.stdout}{passed.stderr}"
    assert "required: get_embed_and_head" in passed.stdout and passed.stdout.strip().endswith("call sites)"), passed.stdout
    both = invoke("audit", "--sglang-src", str(sglang_patched), "--arch", KIMI, "--model-config", str(tmp_path / "c.json"))
    assert both.returncode == 2 and "choose one" in both.stderr, both.stderr


# --------------------------------------------------------------------------
# Synthetic trees: one rule each
# --------------------------------------------------------------------------

SPEC_INFO = '''
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    EAGLE = auto()
    EAGLE3 = auto()
    STANDALONE = auto()
    NONE = auto()

    def is_none(self):
        return self == SpeculativeAlgorithm.NONE

    def is_eagle(self):
        # NOTE: EAGLE3 is a variant of EAGLE
        return self == SpeculativeAlgorithm.EAGLE or self == SpeculativeAlgorithm.EAGLE3

    def is_eagle3(self):
        return self == SpeculativeAlgorithm.EAGLE3

    def is_standalone(self):
        return self == SpeculativeAlgorithm.STANDALONE

    def supports_spec_v2(self):
        return self.is_eagle() or self.is_standalone()

    def create_worker(self, server_args):
        if self.is_standalone():
            from sglang.srt.speculative.standalone_worker import StandaloneWorker

            return StandaloneWorker
        if self.is_eagle():
            from sglang.srt.speculative.eagle_worker import EAGLEWorker

            return EAGLEWorker
        raise ValueError("unreachable")
'''

WORKER = '''
from sglang.srt.speculative.spec_utils import helper


class EAGLEWorker:
    def __init__(self, target_worker, speculative_algorithm):
        self.target_worker = target_worker
        self.speculative_algorithm = speculative_algorithm
        embed, head = self.target_worker.model_runner.model.get_embed_and_head()
        self.draft_model_runner.model.set_embed_and_head(embed, head)
        self.model_runner.model.own_model_is_the_draft()
{worker}
'''

STANDALONE = '''
class StandaloneWorker:
    def __init__(self, target_worker):
        self.target_worker = target_worker
        self.target_worker.model_runner.model.standalone_only()
'''

RUNNER = '''
from sglang.srt.model_executor.runner_utils import configure


class ModelRunner:
    def __init__(self, server_args, spec_algorithm, is_draft_worker):
        self.server_args = server_args
        self.spec_algorithm = spec_algorithm
        self.is_draft_worker = is_draft_worker
        self.eagle_use_aux_hidden_state = False
        if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:
            self.eagle_use_aux_hidden_state = True
        self.model.load_weights()
        if self.eagle_use_aux_hidden_state:
            self.model.set_eagle3_layers_to_capture([1, 2])
{runner}
'''

HELPERS = {
    "sglang/srt/speculative/spec_utils.py": '''
def helper(model, algo=None):
    return inner(target=model)


def inner(target):
    target.reached_two_calls_deep()
''',
    "sglang/srt/model_executor/runner_utils.py": '''
def configure(runner, enabled):
    if enabled:
        runner.model.configured_through_a_runner()
''',
}

MODELS = {
    "sglang/srt/models/base.py": '''
class Base:
    def get_embed_and_head(self):
        return None, None
''',
    "sglang/srt/models/wrapped.py": '''
from torch import nn

from sglang.srt.models.base import Base


class Wrapped(Base, nn.Module):
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


EntryClass = [Wrapped]
''',
}


def synthetic(tmp_path: Path, *, runner: str = "", worker: str = "", extra: dict | None = None) -> Path:
    files = {
        "sglang/__init__.py": "",
        "sglang/_version.py": "__version__ = version = '9.9.9'\n",
        "sglang/srt/speculative/spec_info.py": SPEC_INFO,
        "sglang/srt/speculative/eagle_worker.py": WORKER.format(worker=textwrap.indent(textwrap.dedent(worker), " " * 8)),
        "sglang/srt/speculative/standalone_worker.py": STANDALONE,
        "sglang/srt/model_executor/model_runner.py": RUNNER.format(runner=textwrap.indent(textwrap.dedent(runner), " " * 8)),
        **HELPERS,
        **MODELS,
        **(extra or {}),
    }
    root = tmp_path / "site"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def groups(report: audit.Report) -> dict[str, dict]:
    return {"required": report.required, "optional": report.optional, "outside": report.outside, "draft": report.draft}


def placed(report: audit.Report, method: str) -> list[str]:
    return [name for name, group in groups(report).items() if method in group]


def test_synthetic_baseline(tmp_path):
    report = audit.audit(synthetic(tmp_path), "Wrapped")
    assert report.passed, report.lines()
    assert sorted(report.required) == ["get_embed_and_head", "set_eagle3_layers_to_capture"], sorted(report.required)
    assert report.providers["get_embed_and_head"] == "Base.get_embed_and_head(self) (sglang/srt/models/base.py:3)", report.providers
    assert report.workers == ["sglang.srt.speculative.eagle_worker.EAGLEWorker"], f"EAGLE-3 workers: {report.workers}"
    assert report.flags == ["eagle_use_aux_hidden_state"], f"flags: {report.flags}"
    assert "standalone_only" not in report.required, "the standalone worker is not EAGLE-3"
    assert placed(report, "load_weights") == ["outside"], "an unconditional runner call is outside the EAGLE-3 path"
    assert set(report.draft) == {"set_embed_and_head", "own_model_is_the_draft"}, f"draft calls: {sorted(report.draft)}"


@pytest.mark.parametrize(
    "runner, method, where",
    [
        ("if self.eagle_use_aux_hidden_state:\n    self.model.flagged()", "flagged", "required"),
        ("if not self.spec_algorithm.is_none():\n    self.model.any_spec()", "any_spec", "required"),
        # Whatever happens without speculation, EAGLE3 can take these:
        ("if self.spec_algorithm.is_eagle3() or self.server_args.enable_lora:\n    self.model.either()", "either", "required"),
        ("if self.server_args.speculative_algorithm is not None:\n    self.model.not_none()", "not_none", "required"),
        ("if self.spec_algorithm.supports_spec_v2():\n    self.model.v2()", "v2", "required"),
        ("if self.spec_algorithm.is_none():\n    pass\nelse:\n    self.model.in_else()", "in_else", "required"),
        ("if self.spec_algorithm == SpeculativeAlgorithm.EAGLE3:\n    self.model.compared()", "compared", "required"),
        ("if self.server_args.speculative_algorithm in ('EAGLE', 'EAGLE3'):\n    self.model.by_string()", "by_string", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    m.aliased()", "aliased", "required"),
        ("if not self.spec_algorithm.is_eagle3():\n    return\nself.model.after_exit()", "after_exit", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    getattr(self.model, 'by_name')()", "by_name", "required"),
        ("self.aux = False\nif self.spec_algorithm.is_eagle3():\n    self.aux = True\nif self.aux:\n    self.model.own_flag()", "own_flag", "required"),
        # every form of alias, and a method named by a constant or read by functools.partial
        ("if self.spec_algorithm.is_eagle3():\n    if (m := self.model) is not None:\n        m.walrused()", "walrused", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    (m := self.model).walrused_inline()", "walrused_inline", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m: object = self.model\n    m.annotated()", "annotated", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m, n = self.model, None\n    m.unpacked()", "unpacked", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    for m in (self.model,):\n        m.looped()", "looped", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with nullcontext(self.model) as m:\n        m.held()", "held", None),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    m += 1\n    m.augmented()", "augmented", None),
        ("if self.spec_algorithm.is_eagle3():\n    NAME = 'by_constant'\n    getattr(self.model, NAME)()", "by_constant", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    fn = functools.partial(self.model.partialled, 1)\n    fn()", "partialled", "required"),
        # match/case on the algorithm
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE3:\n        self.model.matched()", "matched", "required"),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE | SpeculativeAlgorithm.EAGLE3:\n        self.model.either_case()", "either_case", "required"),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.STANDALONE:\n        self.model.other_case()", "other_case", None),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE3:\n        pass\n    case _:\n        self.model.fallthrough()", "fallthrough", None),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE3 if self.is_draft_worker:\n        self.model.guarded_case()", "guarded_case", None),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.NONE:\n        pass\n    case _:\n        self.model.any_spec()", "any_spec", "required"),
        # ... and these it cannot:
        ("if self.spec_algorithm.is_eagle3():\n    pass\nelse:\n    self.model.not_eagle3()", "not_eagle3", None),
        ("if self.spec_algorithm.is_standalone():\n    self.model.standalone()", "standalone", None),
        ("if self.spec_algorithm.is_eagle3() and self.is_draft_worker:\n    self.model.draft_only()", "draft_only", None),
        ("if self.server_args.speculative_algorithm is None:\n    self.model.no_spec()", "no_spec", None),
        ("if not self.spec_algorithm.is_none():\n    return\nself.model.no_spec_after_exit()", "no_spec_after_exit", None),
        # Conditions that do not mention speculation are not the EAGLE-3 path:
        ("if get_moe_a2a_backend().is_none():\n    self.model.moe_thing()", "moe_thing", "outside"),
        ("self.sometimes = True\nif self.sometimes:\n    self.model.sometimes_on()", "sometimes_on", "outside"),
        ("if importlib.util.find_spec('torch') is None:\n    self.model.no_torch()", "no_torch", "outside"),
        ("if self.server_args.enable_lora:\n    self.model.lora_only()", "lora_only", "outside"),
        ("if self.spec_aux_config.dflash_capture:\n    self.model.dflash_only()", "dflash_only", "outside"),
        ("if self.aux_config.eagle_capture:\n    self.model.eagle_flag()", "eagle_flag", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    self.draft_model_runner.model.drafty()", "drafty", "draft"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,
)
def test_rule_the_eagle3_path(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert placed(report, method) == ([where] if where else []), f"{method}: expected in {where}, found in {placed(report, method)}"


@pytest.mark.parametrize(
    "runner, method, where",
    [
        ("if self.spec_algorithm.is_eagle3() and hasattr(self.model, 'guarded'):\n    self.model.guarded()", "guarded", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    if callable(getattr(self.model, 'maybe', None)):\n        self.model.maybe()", "maybe", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    getattr(self.model, 'defaulted', lambda: None)()", "defaulted", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    if not hasattr(m, 'early'):\n        return\n    self.model.early()", "early", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.tried()\n    except AttributeError:\n        pass", "tried", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        x = self.model.bound()\n    except AttributeError:\n        x = None\n    print(x)", "bound", "optional"),
        # A broad except catches the AttributeError too, and recovers; so does contextlib.suppress.
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.broad()\n    except Exception:\n        pass", "broad", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.bare()\n    except:\n        pass", "bare", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    with contextlib.suppress(AttributeError):\n        self.model.suppressed()", "suppressed", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    with suppress(Exception):\n        self.model.suppressed_broadly()", "suppressed_broadly", "optional"),
        # Not guards: another receiver, a check that raises, a handler that does not catch it or calls again,
        # a result left unset.
        ("if self.spec_algorithm.is_eagle3() and hasattr(self.draft_model_runner.model, 'other'):\n    self.model.other()", "other", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if not hasattr(self.model, 'loud'):\n        raise ValueError('needs loud')\n    self.model.loud()", "loud", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.narrow()\n    except ValueError:\n        pass", "narrow", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with contextlib.suppress(KeyError):\n        self.model.wrong_kind()", "wrong_kind", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.again(1)\n    except Exception:\n        self.model.again()", "again", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with contextlib.suppress(AttributeError):\n        w = self.model.kept()\n    print(w)", "kept", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        y = self.model.unset()\n    except AttributeError:\n        pass\n    print(y)", "unset", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.reraised()\n    except AttributeError:\n        raise", "reraised", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if hasattr(self.model, 'half'):\n        z = self.model.half()\n    print(z)", "half", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if hasattr(self.model, 'local'):\n        z = self.model.local()\n        print(z)", "local", "optional"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,
)
def test_rule_guards(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert placed(report, method) == [where], f"{method}: expected in {where}, found in {placed(report, method)}"


@pytest.mark.parametrize(
    "worker, method, where",
    [
        # the target, however it is reached
        ("self.verifier = target_worker\nself.verifier.model_runner.model.renamed()", "renamed", "required"),
        ("runner = self.target_worker.model_runner\nrunner.model.via_runner()", "via_runner", "required"),
        ("self.target_model = self.target_worker.model_runner.model\nself.target_model.via_attribute()", "via_attribute", "required"),
        # into the functions and methods it is passed to
        ("helper(self.target_worker.model_runner.model)", "reached_two_calls_deep", "required"),
        ("self.share(model=self.target_worker.model_runner.model)", "in_a_method", "required"),
        ("if hasattr(self.target_worker.model_runner.model, 'in_a_method'):\n    self.share(self.target_worker.model_runner.model)", "in_a_method", "optional"),
        ("if self.speculative_algorithm.is_standalone():\n    helper(self.target_worker.model_runner.model)", "reached_two_calls_deep", None),
        ("self.mtp_model_runner(0).model.mtp_thing()", "mtp_thing", "draft"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,
)
def test_rule_receivers_and_calls_followed(tmp_path, worker, method, where):
    tree = synthetic(tmp_path, worker=worker)
    path = tree / "sglang/srt/speculative/eagle_worker.py"
    path.write_text(path.read_text() + "\n    def share(self, model):\n        model.in_a_method()\n")
    report = audit.audit(tree, "Wrapped")
    assert placed(report, method) == ([where] if where else []), f"{method}: expected in {where}, found in {placed(report, method)}"


def test_rule_the_target_is_followed_into_a_function_that_gets_its_runner(tmp_path):
    """ModelRunner passes itself, and the EAGLE-3 flag, to a helper in another module."""
    runner = "configure(self, self.eagle_use_aux_hidden_state)\nconfigure(runner=self, enabled=self.server_args.enable_lora)"
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert [str(s) for s in report.required["configured_through_a_runner"]] == [
        "sglang/srt/model_executor/runner_utils.py:4"
    ], sites(report.required)


def test_rule_a_speculative_base_of_a_worker_class_is_on_the_path(tmp_path):
    base = "class WorkerBase:\n    def share(self):\n        self.target_worker.model_runner.model.from_the_base()\n"
    tree = synthetic(tmp_path, extra={"sglang/srt/speculative/worker_base.py": base})
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    text = worker.read_text().replace("class EAGLEWorker:", "class EAGLEWorker(WorkerBase):")
    worker.write_text("from sglang.srt.speculative.worker_base import WorkerBase\n" + text)
    report = audit.audit(tree, "Wrapped")
    assert [str(s) for s in report.required.get("from_the_base", ())] == ["sglang/srt/speculative/worker_base.py:3"], sites(report.required)


def test_rule_a_renamed_anchor_is_an_error_not_a_draft_call(tmp_path):
    tree = synthetic(tmp_path)
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    worker.write_text(worker.read_text().replace("target_worker", "verifier"))
    with pytest.raises(UserError) as err:
        audit.audit(tree, "Wrapped")
    assert "eagle_worker.py:9" in str(err.value) and "target or the draft" in str(err.value), str(err.value)


PROVIDERS = {
    "def": ("def get_embed_and_head(self, *args):\n    pass", "provided"),
    "function assigned": ("get_embed_and_head = _shared", "provided"),
    "lambda assigned": ("get_embed_and_head = lambda self: (None, None)", "provided"),
    "staticmethod": ("@staticmethod\ndef get_embed_and_head():\n    pass", "provided"),
    "set in __init__": ("def __init__(self):\n    self.inner = _Other()\n    self.get_embed_and_head = self.inner.get_embed_and_head", "provided"),
    "set in __init__ from an attribute never set": ("def __init__(self):\n    self.get_embed_and_head = self.inner.get_embed_and_head", "undecided"),
    "absent": ("pass", "missing"),
    "None": ("get_embed_and_head = None", "missing"),
    "property": ("@property\ndef get_embed_and_head(self):\n    return None, None", "missing"),
    "too few parameters": ("def set_eagle3_layers_to_capture(self):\n    pass", "missing"),
    "a required parameter": ("def get_embed_and_head(self, draft):\n    pass", "missing"),
    "None in __init__": ("def __init__(self):\n    self.get_embed_and_head = None\ndef get_embed_and_head(self):\n    pass", "missing"),
    "__getattr__": ("def __getattr__(self, name):\n    return getattr(self.inner, name)", "undecided"),
    # Python decides these at run time; the audit follows what it can and fails closed on the rest.
    "another class's function": ("get_embed_and_head = _Other.get_embed_and_head", "provided"),
    "delegation to a class that has it": ("def __init__(self):\n    self.inner = _Other()\n"
                                          "def get_embed_and_head(self):\n    return self.inner.get_embed_and_head()", "provided"),
    "delegation to a class that lacks it": ("def __init__(self):\n    self.inner = _Empty()\n"
                                            "def get_embed_and_head(self):\n    return self.inner.get_embed_and_head()", "missing"),
    "def under a class-body if": ("if not _is_npu:\n    def get_embed_and_head(self):\n        pass", "undecided"),
    "set in __init__ under a condition": ("def __init__(self, on=False):\n    if on:\n        self.get_embed_and_head = _shared", "undecided"),
    "set in __init__ by setattr": ("def __init__(self):\n    for name in ('get_embed_and_head',):\n        setattr(self, name, _shared)", "undecided"),
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
    "delegation to an attribute never set": ("def get_embed_and_head(self):\n    return self.missing_part.get_embed_and_head()", "undecided"),
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


def test_rule_torch_module_methods_are_known(tmp_path):
    runner = "if self.eagle_use_aux_hidden_state:\n    self.model.named_modules()\n    self.model.not_in_torch()"
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert report.providers["named_modules"] == "torch.nn.Module", report.providers
    assert [m.method for m in report.missing] == ["not_in_torch"], report.lines()


def test_a_tree_without_the_anchors_is_refused_not_passed(tmp_path):
    root = tmp_path / "site"
    (root / "sglang/srt/models").mkdir(parents=True)
    (root / "sglang/srt/models/m.py").write_text("class M:\n    pass\n\nEntryClass = [M]\n")
    with pytest.raises(UserError) as err:
        audit.audit(root, "M")
    assert "sglang.srt.speculative.spec_info" in str(err.value), str(err.value)


def test_a_tree_whose_eagle3_path_has_no_target_call_is_refused_not_passed(tmp_path):
    tree = synthetic(tmp_path)
    for rel in ("sglang/srt/speculative/eagle_worker.py", "sglang/srt/model_executor/model_runner.py"):
        path = tree / rel
        text = path.read_text()
        text = text.replace("self.target_worker.model_runner.model.get_embed_and_head()", "(None, None)")
        text = text.replace("            self.model.set_eagle3_layers_to_capture([1, 2])", "            pass")
        path.write_text(text)
    with pytest.raises(UserError) as err:
        audit.audit(tree, "Wrapped")
    assert "cannot pass it" in str(err.value), str(err.value)


def test_a_factory_without_an_eagle3_worker_is_refused(tmp_path):
    tree = synthetic(tmp_path)
    spec = tree / "sglang/srt/speculative/spec_info.py"
    spec.write_text(spec.read_text().replace("if self.is_eagle():", "if self.is_standalone() and False:"))
    with pytest.raises(UserError) as err:
        audit.audit(tree, "Wrapped")
    assert "returns no in-tree worker class for EAGLE3" in str(err.value), str(err.value)


def test_self_model_in_a_model_runner_mixin_is_the_target(tmp_path):
    mixin = "class RunnerMixin:\n    def init_extra(self):\n        if self.spec_algorithm.is_eagle3():\n            self.model.mixin_hook()\n"
    tree = synthetic(tmp_path, extra={"sglang/srt/model_executor/mixin.py": mixin})
    runner = tree / "sglang/srt/model_executor/model_runner.py"
    text = runner.read_text().replace("class ModelRunner:", "class ModelRunner(RunnerMixin):")
    runner.write_text("from sglang.srt.model_executor.mixin import RunnerMixin\n" + text)
    report = audit.audit(tree, "Wrapped")
    assert "mixin_hook" in report.required, f"a ModelRunner mixin's self.model is the target: {sorted(report.required)}"


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
        ("Decorated", 0, 1, "Decorated.set_eagle3_layers_to_capture(self) (imported): too many positional arguments"),
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


# --------------------------------------------------------------------------
# Guards judged by the path's evaluator; the MRO as Python computes it
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "runner, method, where",
    [
        # Under EAGLE3 is_standalone() is false, so the call runs only where the method exists.
        ("if self.spec_algorithm.is_standalone() or hasattr(self.model, 'or_guarded'):\n    self.model.or_guarded()", "or_guarded", "optional"),
        ("if self.spec_algorithm.is_eagle3() or hasattr(self.model, 'or_eagle3'):\n    self.model.or_eagle3()", "or_eagle3", "required"),
        # A guard on the draft model guards nothing on the target, whatever the algorithm.
        ("if self.spec_algorithm.is_standalone() or hasattr(self.draft_model_runner.model, 'draft_or'):\n    self.model.draft_or()", "draft_or", "required"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,
)
def test_rule_guards_are_judged_with_the_algorithm(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert placed(report, method) == [where], f"{method}: expected in {where}, found in {placed(report, method)}"


def test_rule_providers_follow_the_real_mro_across_modules(tmp_path):
    """The same base reached through two modules, once under another name, is one class in the MRO."""
    extra = {
        "sglang/srt/models/base_two.py": "class Base:\n    def get_embed_and_head(self, wrong):\n        pass\n",
        "sglang/srt/models/left.py": "from sglang.srt.models.base_two import Base\n\n\nclass Left(Base):\n    pass\n",
        "sglang/srt/models/right.py": (
            "from sglang.srt.models.base_two import Base as SharedBase\n\n\nclass Right(SharedBase):\n"
            "    def get_embed_and_head(self):\n        return None, None\n\n"
            "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n"
        ),
        "sglang/srt/models/edited.py": (
            "from sglang.srt.models.left import Left\nfrom sglang.srt.models.right import Right\n\n\n"
            "class Edited(Left, Right):\n    pass\n\n\nEntryClass = [Edited]\n"
        ),
    }
    report = audit.audit(synthetic(tmp_path, extra=extra), "Edited")
    assert report.passed, f"Python finds Right's method before Base's: {report.lines()}"
    assert report.providers["get_embed_and_head"].startswith("Right.get_embed_and_head(self)"), report.providers


@pytest.mark.parametrize("imported", ["from sglang.srt.speculative import spec_utils", "import sglang.srt.speculative.spec_utils as spec_utils"])
def test_rule_the_target_is_followed_into_a_function_of_an_imported_module(tmp_path, imported):
    tree = synthetic(tmp_path, worker="spec_utils.helper(self.target_worker.model_runner.model)")
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    worker.write_text(f"{imported}\n" + worker.read_text())
    report = audit.audit(tree, "Wrapped")
    assert placed(report, "reached_two_calls_deep") == ["required"], f"not followed through {imported!r}: {sites(report.required)}"


# --- the provider corpus against an import-and-call oracle -------------------------------------------

# The calls the synthetic tree's EAGLE-3 path makes on the target (RUNNER and WORKER above).
ORACLE_CALLS = [["set_eagle3_layers_to_capture", 1], ["get_embed_and_head", 0]]
RUN_TIME_CASES = [module for module, _ in test_rule_what_python_binds_at_run_time.pytestmark[0].args[1]]
CORPUS = {**{f"provider: {k}": provider_module(b)[1] for k, (b, _) in PROVIDERS.items()},
          **{f"run time: {i}": m + "\n\nEntryClass = Edited\n" for i, m in enumerate(RUN_TIME_CASES)}}


# Whose truth depends on what is installed where the server runs: the audit must fail closed on them.
ENVIRONMENT_DEPENDENT = {m for m in CORPUS.values() if m.startswith("try:\n    from vendor.")}


@pytest.mark.parametrize("module", CORPUS.values(), ids=CORPUS.keys())
def test_the_audit_passes_exactly_what_the_oracle_serves(tmp_path, module):
    """Ground truth by import and call in a subprocess (tests/audit_oracle.py): the audit passes a case (exit 0)
    if and only if every EAGLE-3 call on the class goes through; undecided and missing both fail."""
    tree = synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module})
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("audit_oracle.py")), str(tree), "Edited",
                           json.dumps(ORACLE_CALLS)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(proc.stdout)
    report = audit.audit(tree, "Edited")
    if module in ENVIRONMENT_DEPENDENT:
        # The oracle answers for its own environment (no vendor package); in another the base differs.
        assert report.exit_code == 3 and "<ambiguous>" in report.undecided[0].reason, report.lines()
        return
    assert report.passed == truth["serves"], f"oracle: {truth['why']}; audit: {report.lines()}"
    assert report.exit_code != 0 or truth["serves"], "never a pass the oracle does not serve"
