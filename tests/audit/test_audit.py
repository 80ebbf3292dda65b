"""The EAGLE-3 audit on real SGLang trees (0.5.9 unpatched and patched, 0.5.10, the latest
release) and on small synthetic trees that pin down each rule. Realistic edits of the 0.5.9
tree are in tests/audit/test_audit_edits.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.audit import eagle3 as audit

from audit_trees import run_cli, sites

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


def unpacked(wheel: tuple[str, str], tmp_path: Path) -> Path:
    from sglang_stack import download
    from sglang_stack.patching.patches import unpack_wheel

    return unpack_wheel(download.fetch(*wheel), tmp_path / "site")


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
