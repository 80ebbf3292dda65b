"""DRAFTER=mha|mla: the MLA EAGLE-3 drafter (lightseekorg/kimi-k2.5-eagle3-mla) where SGLang can load it.

SGLang's own model registry and loader run on a drafter directory made from deploy/models' MLA config, shrunk to a
few kilobytes of stand-in weights (entrypoints/drafter.py, in the profiles' CPU Pythons); the image's entrypoint
refuses what it cannot serve before the target loads; the doctor says the same from the settings table's record of
each release's registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pins import PIN
from sglang_stack import ROOT
from sglang_stack.doctor import inputs
from sglang_stack.doctor.checks import FAIL, OK
from sglang_stack.entrypoints import drafter
from sglang_stack.errors import UserError
from sglang_stack.services import composefile, models, variables
from test_pcie_ipc import site_with_sglang

MLA_CONFIG = ROOT / "deploy" / "models" / "Kimi-K2.5-eagle3-mla" / "config.json"
MLA, MHA = drafter.ARCHITECTURES["mla"], drafter.ARCHITECTURES["mha"]
# The published layout's sizes shrunk: hidden 64, 4 heads, the MLA ranks and head sizes in proportion.
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
            kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, vocab_size=100,
            draft_vocab_size=50, torch_dtype="float32")


def tiny_mla(directory: Path, python: str, drop: str | None = None, extra: bool = False) -> Path:
    """The MLA drafter's published layout with tiny weights, named as its checkpoint names them (the names
    ``load_weights`` of SGLang's kimi_k25_eagle3.py maps: ``layers.0.*``, ``fc``, ``d2t`` ...), written by safetensors
    in the profile's Python."""
    directory.mkdir(parents=True)
    config = {**json.loads(MLA_CONFIG.read_text()), **TINY}
    (directory / "config.json").write_text(json.dumps(config))
    script = f"""
import torch
from safetensors.torch import save_file
h, ql, kl, r, nope, v, heads, inter = 64, 32, 16, 8, 16, 16, 4, 128
w = {{"embed_tokens.weight": torch.randn(100, h), "fc.weight": torch.randn(h, 3 * h), "norm.weight": torch.ones(h),
     "lm_head.weight": torch.randn(50, h), "d2t": torch.zeros(50, dtype=torch.int64),
     "t2d": torch.ones(100, dtype=torch.bool),
     "layers.0.hidden_norm.weight": torch.ones(h), "layers.0.input_layernorm.weight": torch.ones(h),
     "layers.0.post_attention_layernorm.weight": torch.ones(h),
     "layers.0.mlp.gate_proj.weight": torch.randn(inter, h), "layers.0.mlp.up_proj.weight": torch.randn(inter, h),
     "layers.0.mlp.down_proj.weight": torch.randn(h, inter),
     "layers.0.self_attn.q_a_proj.weight": torch.randn(ql, 2 * h),
     "layers.0.self_attn.kv_a_proj_with_mqa.weight": torch.randn(kl + r, 2 * h),
     "layers.0.self_attn.q_a_layernorm.weight": torch.ones(ql), "layers.0.self_attn.kv_a_layernorm.weight": torch.ones(kl),
     "layers.0.self_attn.q_b_proj.weight": torch.randn(heads * (nope + r), ql),
     "layers.0.self_attn.kv_b_proj.weight": torch.randn(heads * (nope + v), kl),
     "layers.0.self_attn.o_proj.weight": torch.randn(h, heads * v)}}
w.pop({drop!r}, None)
if {extra!r}:
    w["layers.0.not_in_the_model.weight"] = torch.ones(3)
save_file(w, {str(directory / "model.safetensors")!r})
"""
    subprocess.run([python, "-c", script], check=True, timeout=300)
    return directory


def run_module(python: str, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([python, "-m", "sglang_stack.entrypoints.drafter", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


# --- SGLang's own registry and loader ---------------------------------------------------------


@pytest.mark.sglang_env
def test_sglang_0_5_23_loads_the_mla_drafter_with_its_own_registry_and_loader(tmp_path, profile_python):
    python = str(profile_python("0.5.23"))
    code, out = run_module(python, str(tiny_mla(tmp_path / "mla", python)), "--load")
    assert code == 0, out
    assert out["class"] == f"sglang.srt.models.kimi_k25_eagle3.{MLA}" and out["sglang"] == "0.5.23", out
    assert out["unwritten"] == [] and out["written"] == out["parameters"] >= 10, out


@pytest.mark.sglang_env
def test_a_weight_the_checkpoint_lacks_is_named_and_fails(tmp_path, profile_python):
    python = str(profile_python("0.5.23"))
    directory = tiny_mla(tmp_path / "mla", python, drop="layers.0.mlp.down_proj.weight", extra=True)
    code, out = run_module(python, str(directory), "--load")
    assert code == 1 and out["unwritten"] == ["model.midlayer.mlp.down_proj.weight"], out
    assert any("layers.0.not_in_the_model.weight" in w for w in out["warnings"]), out


@pytest.mark.sglang_env
def test_sglang_0_5_9_has_no_class_for_it_and_says_so(tmp_path, default_python):
    python = default_python
    directory = tmp_path / "mla"
    directory.mkdir()
    (directory / "config.json").write_text(MLA_CONFIG.read_text())
    code, out = run_module(python, str(directory))
    assert code == 1 and out["sglang"] == PIN["sglang"], out
    assert out["error"].startswith(f"SGLang {PIN['sglang']} has no model class for {MLA}"), out
    code, registry = run_module(python, "--registry")
    assert code == 0 and MLA not in registry["drafter_architectures"] and MHA in registry["drafter_architectures"]


# --- at start, in the image ---------------------------------------------------------------------


def serve(tmp_path: Path, value: str | None, arch: str, version: str, has_mla: bool) -> subprocess.CompletedProcess:
    server = tmp_path / "server"
    server.mkdir(exist_ok=True)
    (server / "fake_server.py").write_text("import json, sys\nprint('ARGV ' + json.dumps(sys.argv[1:]))\n")
    draft = tmp_path / "draft"
    draft.mkdir(exist_ok=True)
    (draft / "config.json").write_text(json.dumps({"architectures": [arch]}))
    site = site_with_sglang(tmp_path, version, False, *([drafter.MODULE_FILE] if has_mla else []))
    env = {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "empty"), "SGLANG_STACK_SERVER": "fake_server",
           "SGLANG_API_KEY_FILE": "", "PCIE_ALLREDUCE": "off",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(server), str(site)]),
           **({"DRAFTER": value} if value is not None else {})}
    argv = ["--model-path", "/models/target", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft)]
    proc = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.serve", *argv], capture_output=True,
                          text=True, env=env, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_mla_starts_where_the_image_has_sglangs_mla_drafter(tmp_path):
    proc = serve(tmp_path, "mla", MLA, "0.5.23", has_mla=True)
    assert proc.returncode == 0 and "ARGV " in proc.stdout, proc.stdout + proc.stderr
    assert f"serve: DRAFTER=mla: {MLA} from" in proc.stdout


def test_mla_is_refused_on_a_release_without_it_before_anything_loads(tmp_path):
    proc = serve(tmp_path, "mla", MLA, PIN["sglang"], has_mla=False)
    assert proc.returncode == 2 and "ARGV " not in proc.stdout, proc.stdout
    assert proc.stderr.strip() == (
        f"error: DRAFTER=mla: SGLang {PIN['sglang']} cannot load the MLA drafter (no sglang/srt/models/"
        "kimi_k25_eagle3.py); profile 0.5.23 can (SGLANG_PROFILE=0.5.23), or set DRAFTER=mha with the MHA drafter")


@pytest.mark.parametrize("value, arch, says", [
    (None, MLA, f"DRAFTER=mha, but the drafter's config.json names {MLA}, the mla drafter: set DRAFTER=mla"),
    ("mla", MHA, f"DRAFTER=mla, but the drafter's config.json names {MHA}, the mha drafter: set DRAFTER=mha"),
    ("mla", "SomethingElseEagle3", f"DRAFTER=mla, but the drafter's config.json names SomethingElseEagle3, not {MLA}"),
    ("MLB", MLA, "DRAFTER='mlb': not one of mha, mla"),
])
def test_a_drafter_that_is_not_the_one_named_is_refused(tmp_path, value, arch, says):
    proc = serve(tmp_path, value, arch, "0.5.23", has_mla=True)
    assert proc.returncode == 2 and "ARGV " not in proc.stdout, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


def test_the_default_drafter_starts_as_before(tmp_path):
    proc = serve(tmp_path, None, MHA, PIN["sglang"], has_mla=False)
    assert proc.returncode == 0 and "DRAFTER" not in proc.stdout, proc.stdout + proc.stderr


# --- the doctor and models.lock -----------------------------------------------------------------


def svc_of(**values: str) -> composefile.Service:
    return composefile.service("eagle3", variables.Environment(values, {k: "shell" for k in values}))


def drafter_dir(directory: Path, arch: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"architectures": [arch]}))
    (directory / "model.safetensors").write_bytes(b"\0" * 8)
    return directory


def test_the_doctor_refuses_the_mla_drafter_on_the_default_profile(tmp_path):
    mla = drafter_dir(tmp_path / "mla", MLA)
    check = inputs.check_models(svc_of(DRAFT_MODEL_DIR=str(mla), DRAFTER="mla"))[1]
    assert check.status == FAIL, check.line()
    assert f"SGLang {PIN['sglang']} has no model class for {MLA}" in check.detail, check.line()
    assert "SGLANG_PROFILE=0.5.23" in check.fix and "DRAFTER=mha" in check.fix, check.fix


def test_the_doctor_takes_the_mla_drafter_on_the_0_5_23_profile_and_checks_its_own_pin(tmp_path):
    mla = drafter_dir(tmp_path / "mla", MLA)
    check = inputs.check_models(svc_of(DRAFT_MODEL_DIR=str(mla), DRAFTER="mla", SGLANG_PROFILE="0.5.23"))[1]
    assert check.status == OK, check.line()
    assert "lightseekorg/kimi-k2.5-eagle3-mla" in check.detail, f"the MLA drafter's own models.lock entry: {check.line()}"


def test_the_doctor_names_a_drafter_that_is_not_the_one_drafter_says(tmp_path):
    mla = drafter_dir(tmp_path / "mla", MLA)
    check = inputs.check_models(svc_of(DRAFT_MODEL_DIR=str(mla)))[1]
    assert check.status == FAIL and "the mla drafter: set DRAFTER=mla" in check.detail, check.line()


def test_models_lock_pins_both_drafters_by_role():
    pins = models.load()
    assert pins["drafter"].repo == "lightseekorg/kimi-k2.5-eagle3"
    assert pins["drafter-mla"].repo == "lightseekorg/kimi-k2.5-eagle3-mla"
    assert drafter.ROLES == {"mha": "drafter", "mla": "drafter-mla"} and set(drafter.ROLES.values()) == set(models.DRAFTERS)


@pytest.mark.sglang_env
def test_invoke_drafter_check_says_in_one_line_that_the_default_profile_cannot_load_it(tmp_path, default_python):
    import engine

    python = default_python
    directory = tmp_path / "mla"
    directory.mkdir()
    (directory / "config.json").write_text(MLA_CONFIG.read_text())
    proc = subprocess.run([*engine.INVOKE, "drafter-check", "--dir", str(directory), "--python", python], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (f"error: {directory}: SGLang {PIN['sglang']} has no model class for {MLA} (it would "
                                   "fall back to TransformersForCausalLM)"), proc.stderr


@pytest.mark.parametrize("table, says", [
    ({"runs": []}, "docker/settings.json records no drafter architectures (SGLang's model registry)"),
    ({"runs": [], "drafter_architectures": None}, "docker/settings.json records no drafter architectures"),
    (UserError("docker/settings.json:3: not JSON: Expecting value (regenerate it: invoke settings --write)"),
     "docker/settings.json:3: not JSON"),
])
def test_the_doctor_fails_closed_where_the_settings_table_cannot_say(tmp_path, monkeypatch, table, says):
    from sglang_stack.services import decisions

    def load(path):
        if isinstance(table, Exception):
            raise table
        return table

    monkeypatch.setattr(decisions, "load", load)
    check = inputs.check_models(svc_of(DRAFT_MODEL_DIR=str(drafter_dir(tmp_path / "mha", MHA))))[1]
    assert check.status == FAIL and says in check.detail, check.line()
    assert "invoke settings --write" in check.fix, check.fix
