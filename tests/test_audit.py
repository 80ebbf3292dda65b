"""The EAGLE-3 audit: on the real sglang 0.5.9 tree (unpatched, patched, edited) and on
small synthetic trees that pin down each rule of the derivation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.patching import audit
from sglang_stack.errors import UserError

KIMI = "KimiK25ForConditionalGeneration"

# Checked by hand in the 0.5.9 wheel (FACTS.md). The audit must find these from the source.
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


def sites(report_group: dict) -> dict[str, list[str]]:
    return {m: [str(s) for s in ss] for m, ss in report_group.items()}


@pytest.fixture(scope="module")
def unpatched_report(sglang_pristine) -> audit.Report:
    return audit.audit(sglang_pristine, KIMI)


# --------------------------------------------------------------------------
# The real tree
# --------------------------------------------------------------------------


def test_unpatched_tree_lacks_exactly_the_two_methods_at_the_known_call_sites(unpatched_report):
    report = unpatched_report
    assert not report.passed, "the audit passes the unpatched 0.5.9 tree"
    missing = {m.method: [str(s) for s in m.sites] for m in report.missing}
    assert missing == FACTS_0_5_9, f"missing methods and call sites differ from the hand-checked ones: {missing}"
    assert sites(report.required) == FACTS_0_5_9, f"required: {sites(report.required)}"
    assert report.sglang_version == "0.5.9", report.sglang_version
    assert report.arch_site.startswith("sglang/srt/models/kimi_k25.py:"), report.arch_site


def test_patched_tree_passes_and_names_where_each_method_comes_from(sglang_patched):
    report = audit.audit(sglang_patched, KIMI)
    assert report.passed, f"the audit fails the patched tree: {report.lines()}"
    for method in FACTS_0_5_9:
        assert report.providers[method].startswith(f"{KIMI} (sglang/srt/models/kimi_k25.py:"), report.providers
    assert report.summary.startswith("audit passed") and "7 call sites" in report.summary, report.summary


def test_calls_on_the_draft_model_are_not_the_targets_business(unpatched_report):
    report = unpatched_report
    assert "set_embed_and_head" not in report.required, "set_embed_and_head is called on the draft, not the target"
    assert "set_embed_and_head" in report.draft, f"draft calls: {sorted(report.draft)}"
    assert "sglang/srt/speculative/eagle_worker.py:166" in [str(s) for s in report.draft["set_embed_and_head"]]


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


def test_the_derivation_finds_a_new_eagle3_call_added_to_the_source(sglang_tree):
    """What a next release might add: the audit must find it with no list to update."""
    runner = sglang_tree / "sglang/srt/model_executor/model_runner.py"
    text = runner.read_text()
    anchor = "        # Initialize piecewise CUDA graph\n"
    assert anchor in text, "model_runner.py changed: pick another anchor"
    added = "        if self.eagle_use_aux_hidden_state:\n            self.model.prepare_eagle3_capture()\n"
    runner.write_text(text.replace(anchor, added + anchor, 1))
    line = text[: text.index(anchor)].count("\n") + 2
    report = audit.audit(sglang_tree, KIMI)
    assert "prepare_eagle3_capture" in report.required, f"the new call was not derived: {sorted(report.required)}"
    assert [str(s) for s in report.required["prepare_eagle3_capture"]] == [f"sglang/srt/model_executor/model_runner.py:{line}"]


def test_inheritance_is_followed_through_the_registry(sglang_pristine):
    report = audit.audit(sglang_pristine, "DeepseekV3ForCausalLM")
    assert report.passed, f"DeepseekV3ForCausalLM inherits all three methods: {report.lines()}"
    assert report.providers["get_embed_and_head"].startswith("DeepseekV2ForCausalLM ("), report.providers


def test_an_unknown_architecture_is_one_line_with_a_suggestion(sglang_pristine):
    with pytest.raises(UserError) as err:
        audit.audit(sglang_pristine, "KimiK25ForConditionalGen")
    assert "did you mean KimiK25ForConditionalGeneration" in str(err.value), str(err.value)


def test_cli_unpatched_exits_1_with_one_line_per_missing_method(sglang_pristine):
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.audit", "--sglang-src", str(sglang_pristine)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3, f"expected two missing lines and a summary: {lines}"
    for method, where in FACTS_0_5_9.items():
        line = next((ln for ln in lines if f".{method}()" in ln), "")
        assert line.startswith("missing:") and all(w in line for w in where), f"{method}: {line!r}"
    assert lines[-1].startswith("audit failed:"), lines[-1]


def test_cli_patched_exits_0_with_a_one_line_summary(sglang_patched):
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.audit", "--sglang-src", str(sglang_patched), "--arch", KIMI],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert len(proc.stdout.strip().splitlines()) == 1 and proc.stdout.startswith("audit passed:"), proc.stdout


def test_cli_reads_the_architecture_from_a_model_config(sglang_pristine, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}))
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.audit", "--sglang-src", str(sglang_pristine), "--model-config", str(config), "--json"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout}{proc.stderr}"
    data = json.loads(proc.stdout)
    assert data["arch"] == "DeepseekV3ForCausalLM" and data["passed"] is True, data


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
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.audit", "--sglang-src", str(sglang_pristine), "--model-config", str(config)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr}"
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and str(config) in errors[0] and expect in errors[0], errors


def test_cli_not_an_sglang_tree_is_one_line_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.audit", "--sglang-src", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: {tmp_path}: no sglang/ package here"), proc.stderr


@pytest.mark.network
def test_sglang_0_5_10_passes_unpatched(tmp_path):
    """The next release merged the delegation upstream: the same command, no patches, passes."""
    from sglang_stack import fetch
    from sglang_stack.patching.patches import unpack_wheel

    site = unpack_wheel(fetch.fetch(*SGLANG_0_5_10), tmp_path / "site")
    report = audit.audit(site, KIMI)
    assert report.passed, f"0.5.10 should pass without patches: {report.lines()}"
    assert set(report.required) == set(FACTS_0_5_9), f"0.5.10 EAGLE-3 path calls {sorted(report.required)}"


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

    def create_worker(self, server_args):
        if self.is_eagle():
            from sglang.srt.speculative.eagle_worker import EAGLEWorker

            return EAGLEWorker
        elif self.is_standalone():
            from sglang.srt.speculative.standalone_worker import StandaloneWorker

            return StandaloneWorker
        raise ValueError("unreachable")
'''

WORKER = '''
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
class ModelRunner:
    def __init__(self, spec_algorithm, is_draft_worker):
        self.spec_algorithm = spec_algorithm
        self.is_draft_worker = is_draft_worker
        self.eagle_use_aux_hidden_state = False
        if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:
            self.eagle_use_aux_hidden_state = True
        self.model.load_weights()
        if self.eagle_use_aux_hidden_state:
            self.model.set_eagle3_layers_to_capture()
{runner}
'''

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
    "sglang/srt/models/lacking.py": '''
from torch import nn


class Lacking(nn.Module):
    def forward(self):
        pass


EntryClass = Lacking
''',
    "sglang/srt/models/dynamic.py": '''
from sglang.srt.models.base import Base


class Dynamic(Base):
    def __getattr__(self, name):
        return getattr(self.inner, name)


EntryClass = [Dynamic]
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
        **MODELS,
        **(extra or {}),
    }
    root = tmp_path / "site"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_synthetic_baseline(tmp_path):
    tree = synthetic(tmp_path)
    wrapped = audit.audit(tree, "Wrapped")
    assert wrapped.passed, wrapped.lines()
    assert sorted(wrapped.required) == ["get_embed_and_head", "set_eagle3_layers_to_capture"], sorted(wrapped.required)
    assert wrapped.providers["get_embed_and_head"].startswith("Base (sglang/srt/models/base.py:"), wrapped.providers
    assert wrapped.workers == ["sglang.srt.speculative.eagle_worker.EAGLEWorker"], f"EAGLE-3 workers: {wrapped.workers}"
    assert wrapped.flags == ["eagle_use_aux_hidden_state"], f"flags: {wrapped.flags}"
    assert "standalone_only" in wrapped.outside and "standalone_only" not in wrapped.required, "standalone is not EAGLE-3"
    assert "load_weights" in wrapped.outside, "an unconditional runner call is outside the EAGLE-3 path"
    assert set(wrapped.draft) == {"set_embed_and_head", "own_model_is_the_draft"}, f"draft calls: {sorted(wrapped.draft)}"
    lacking = audit.audit(tree, "Lacking")
    assert [m.method for m in lacking.missing] == ["set_eagle3_layers_to_capture", "get_embed_and_head"], lacking.lines()
    assert lacking.external_bases == ["torch.nn.Module"], lacking.external_bases


@pytest.mark.parametrize(
    "runner, method, where",
    [
        ("if self.eagle_use_aux_hidden_state:\n    self.model.flagged()", "flagged", "required"),
        ("if not self.spec_algorithm.is_none():\n    self.model.any_spec()", "any_spec", "required"),
        ("if self.spec_algorithm.is_eagle():\n    self.model.eagle_family()", "eagle_family", "required"),
        ("if self.spec_algorithm == SpeculativeAlgorithm.EAGLE3:\n    self.model.compared()", "compared", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    m.aliased()", "aliased", "required"),
        ("if not self.spec_algorithm.is_eagle3():\n    return\nself.model.after_exit()", "after_exit", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    getattr(self.model, 'by_name')()", "by_name", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if not hasattr(self.model, 'loud'):\n        raise ValueError('needs loud')\n    self.model.loud()", "loud", "required"),
        ("if self.spec_algorithm.is_eagle3() and hasattr(self.model, 'guarded'):\n    self.model.guarded()", "guarded", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    if callable(getattr(self.model, 'maybe', None)):\n        self.model.maybe()", "maybe", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    getattr(self.model, 'defaulted', lambda: None)()", "defaulted", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.tried()\n    except AttributeError:\n        pass", "tried", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    pass\nelse:\n    self.model.not_eagle3()", "not_eagle3", None),
        ("if self.spec_algorithm.is_standalone():\n    self.model.standalone()", "standalone", None),
        ("if self.spec_algorithm.is_eagle3() and self.is_draft_worker:\n    self.model.draft_only()", "draft_only", None),
        ("if get_moe_a2a_backend().is_none():\n    self.model.moe_thing()", "moe_thing", "outside"),
        ("self.sometimes = True\nif self.sometimes:\n    self.model.sometimes_on()", "sometimes_on", "outside"),
        ("if self.spec_algorithm.is_eagle3():\n    self.draft_model_runner.model.drafty()", "drafty", "draft"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,
)
def test_runner_rules(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    groups = {"required": report.required, "optional": report.optional, "outside": report.outside, "draft": report.draft}
    found = [name for name, group in groups.items() if method in group]
    assert found == ([where] if where else []), f"{method}: expected in {where}, found in {found}"


@pytest.mark.parametrize(
    "worker, method, where",
    [
        ("self.target_model = self.target_worker.model_runner.model\n", "later_hook", "required"),
        ("if self.speculative_algorithm.is_eagle3():\n    pass\nelse:\n    self.target_worker.model_runner.model.eagle2_only()", "eagle2_only", None),
        ("target = self.target_worker.model_runner.model\ntarget.via_local()", "via_local", "required"),
        ("self.mtp_model_runner(0).model.mtp_thing()", "mtp_thing", "draft"),
    ],
)
def test_worker_rules(tmp_path, worker, method, where):
    extra_method = "\n    def later(self):\n        self.target_model.later_hook()\n"
    tree = synthetic(tmp_path, worker=worker)
    path = tree / "sglang/srt/speculative/eagle_worker.py"
    path.write_text(path.read_text() + extra_method)
    report = audit.audit(tree, "Wrapped")
    groups = {"required": report.required, "optional": report.optional, "outside": report.outside, "draft": report.draft}
    found = [name for name, group in groups.items() if method in group]
    assert found == ([where] if where else []), f"{method}: expected in {where}, found in {found}"


def test_a_class_with_getattr_is_noted(tmp_path):
    report = audit.audit(synthetic(tmp_path), "Dynamic")
    assert any(d.startswith("Dynamic (sglang/srt/models/dynamic.py:") for d in report.dynamic), report.dynamic
    assert any("__getattr__" in line for line in report.lines(verbose=True)), "the verbose report does not say so"


def test_a_tree_without_the_anchors_is_refused_not_passed(tmp_path):
    root = tmp_path / "site"
    (root / "sglang/srt/models").mkdir(parents=True)
    (root / "sglang/srt/models/m.py").write_text("class M:\n    pass\n\nEntryClass = [M]\n")
    with pytest.raises(UserError) as err:
        audit.audit(root, "M")
    assert "no speculative-algorithm enum" in str(err.value), str(err.value)


def test_a_tree_whose_eagle3_path_has_no_target_call_is_refused_not_passed(tmp_path):
    tree = synthetic(tmp_path)
    for rel in ("sglang/srt/speculative/eagle_worker.py", "sglang/srt/model_executor/model_runner.py"):
        path = tree / rel
        text = path.read_text()
        text = text.replace("self.target_worker.model_runner.model.get_embed_and_head()", "(None, None)")
        text = text.replace("            self.model.set_eagle3_layers_to_capture()", "            pass")
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
    assert "returns no worker class for EAGLE3" in str(err.value), str(err.value)


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


def test_self_model_in_a_model_runner_mixin_is_the_target(tmp_path):
    mixin = '''
class RunnerMixin:
    def init_extra(self):
        if self.spec_algorithm.is_eagle3():
            self.model.mixin_hook()
'''
    tree = synthetic(tmp_path, extra={"sglang/srt/model_executor/mixin.py": mixin})
    runner = tree / "sglang/srt/model_executor/model_runner.py"
    runner.write_text("from sglang.srt.model_executor.mixin import RunnerMixin\n" + runner.read_text().replace("class ModelRunner:", "class ModelRunner(RunnerMixin):"))
    report = audit.audit(tree, "Wrapped")
    assert "mixin_hook" in report.required, f"a ModelRunner mixin's self.model is the target: {sorted(report.required)}"


def test_a_flag_set_truthy_anywhere_outside_eagle3_code_is_no_flag(tmp_path):
    other = "class Elsewhere:\n    def on(self):\n        self.eagle_use_aux_hidden_state = True\n"
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/managers/elsewhere.py": other}), "Wrapped")
    assert report.flags == [], f"a flag set truthy in general code: {report.flags}"
    assert "set_eagle3_layers_to_capture" in report.outside, "its calls are no longer EAGLE-3-only"


def test_a_flag_set_under_another_flag_is_derived(tmp_path):
    runner = (
        "self.capture_on = False\n"
        "if self.eagle_use_aux_hidden_state:\n    self.capture_on = True\n"
        "if self.capture_on:\n    self.model.chained()"
    )
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert report.flags == ["capture_on", "eagle_use_aux_hidden_state"], report.flags
    assert "chained" in report.required, f"required: {sorted(report.required)}"
