"""SPECULATIVE_ADAPTIVE at start: the image's entrypoint adds --speculative-adaptive to a server that speculates where
the image's SGLang has it, and refuses 1 on a release without it (sglang_stack/entrypoints/adaptive.py). Whether
SGLang keeps it at the service's settings is SGLang's own `adaptive_unsupported_reason`, run by `invoke settings`
(tests/image/test_settings.py holds the table to it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pins import PIN
from sglang_stack import ROOT
from sglang_stack.entrypoints import adaptive as adaptive_mod
from test_pcie_ipc import site_with_sglang

BASE = ["--model-path", "/models/target", "--tp", "8"]
EAGLE = [*BASE, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/draft"]


def serve(tmp_path: Path, argv: list[str], value: str | None, version: str = "0.5.23", adaptive: bool = True):
    """The image's entrypoint with a server that prints the arguments SGLang would get."""
    server = tmp_path / "server"
    server.mkdir(exist_ok=True)
    (server / "fake_server.py").write_text("import json, sys\nprint('ARGV ' + json.dumps(sys.argv[1:]))\n")
    env = {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "empty"), "SGLANG_STACK_SERVER": "fake_server",
           "SGLANG_API_KEY_FILE": "", "PCIE_ALLREDUCE": "off",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(server), str(site_with_sglang(
               tmp_path, version, False, *([adaptive_mod.MODULE_FILE] if adaptive else [])))]),
           **({"SPECULATIVE_ADAPTIVE": value} if value is not None else {})}
    proc = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.serve", *argv], capture_output=True,
                          text=True, env=env, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def argv_of(proc) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("ARGV "))[5:])


def test_one_adds_the_flag_to_a_server_that_speculates_on_a_release_that_has_it(tmp_path):
    proc = serve(tmp_path, EAGLE, "1")
    assert argv_of(proc) == [*EAGLE, "--speculative-adaptive"]
    assert "serve: SPECULATIVE_ADAPTIVE=1: --speculative-adaptive (SGLang keeps it where its rules allow" in proc.stdout


@pytest.mark.parametrize("value", [None, "0"])
def test_unset_or_zero_changes_nothing(tmp_path, value):
    assert argv_of(serve(tmp_path, EAGLE, value)) == EAGLE


def test_a_server_that_does_not_speculate_is_left_alone_and_told(tmp_path):
    proc = serve(tmp_path, BASE, "1")
    assert argv_of(proc) == BASE and "this server does not speculate" in proc.stdout


def test_one_on_a_release_without_it_is_refused_naming_the_profile_that_has_it(tmp_path):
    old = PIN["sglang"]  # the default profile's release, which has none
    proc = serve(tmp_path, EAGLE, "1", version=old, adaptive=False)
    assert proc.returncode == 2 and "ARGV" not in proc.stdout, "SGLang must not start"
    assert proc.stderr.strip() == (f"error: SPECULATIVE_ADAPTIVE=1: SGLang {old} has no adaptive speculation "
                                   "(--speculative-adaptive); profile 0.5.23 has it (SGLANG_PROFILE=0.5.23), or set "
                                   "SPECULATIVE_ADAPTIVE=0"), proc.stderr


@pytest.mark.parametrize("value", ["yes", "2", "on"])
def test_another_value_is_one_line(tmp_path, value):
    proc = serve(tmp_path, EAGLE, value)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: SPECULATIVE_ADAPTIVE={value!r}: not 0 or 1", \
        proc.stderr


def test_sglang_keeps_it_at_compose_settings_and_drops_it_where_its_own_rules_say(profile_python):
    """SGLang 0.5.23's own `adaptive_unsupported_reason`, run by the settings module at the eagle3 service's arguments
    (what the 0.5.23 table records: kept), and at top-k 2, which its rules refuse."""
    table = json.loads((ROOT / "profiles" / "0.5.23" / "docker" / "settings.json").read_text())
    run = next(r for r in table["runs"] if r["profile"] == "rtxpro6000x8" and r["source"] == "compose eagle3")
    assert run["resolved"]["settings"]["speculative"]["adaptive"] == "kept"
    python = profile_python("0.5.23")

    def resolved(*extra: str) -> str:
        """SGLang's own parsing and resolution of the eagle3 service's arguments plus ``extra``, as the entrypoint
        hands them over (with the flag it adds)."""
        proc = subprocess.run([str(python), "-m", "sglang_stack.entrypoints.settings", "--profile", "rtxpro6000x8",
                               "--model-dir", str(ROOT / "deploy" / "models" / "Kimi-K2.5"),
                               "--draft-dir", str(ROOT / "deploy" / "models" / "Kimi-K2.5-eagle3"), "--",
                               *run["argv"], *extra, "--speculative-adaptive"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout)["settings"]["speculative"]["adaptive"]

    assert resolved() == "kept"
    assert resolved("--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6") == \
        "dropped: speculative_eagle_topk=2 (only topk=1 is supported)"
