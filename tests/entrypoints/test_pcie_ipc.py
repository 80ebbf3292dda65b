"""PCIE_ALLREDUCE at start: the image's entrypoint turns auto/on/off into SGLANG_ENABLE_PCIE_IPC_ALLREDUCE from the GPUs
it sees and the probe's recorded verdict (sglang_stack/entrypoints/pcie_ipc.py).

The entrypoint runs as in the image: ``nvidia-smi`` on PATH answers from the topology fixtures (tests/fake_cli.py), the
verdict lives under ``$HOME/.cache``, and a stand-in server prints the environment SGLang would start with. Which
backend SGLang's own code picks is tests/entrypoints/test_allreduce.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.entrypoints import pcie_ipc, peers

import fake_cli

TOPO = Path(__file__).parents[1] / "fixtures" / "topology"
ARGV = ["--model-path", "/models/target", "--tp", "8", "--trust-remote-code"]


def site_with_sglang(tmp_path: Path, version: str, pcie: bool, *more: tuple[str, ...]) -> Path:
    """A site directory whose ``sglang`` is the shape of a release: its dist-info and, for 0.5.23 on, pcie_ipc_ar.py
    (and the modules ``more`` names, each a path under ``sglang/``)."""
    site = tmp_path / f"site-{version}"
    for module in [*([pcie_ipc.MODULE_FILE] if pcie else []), *more]:
        (site / "sglang").joinpath(*module).parent.mkdir(parents=True, exist_ok=True)
        (site / "sglang").joinpath(*module).write_text("")
    (site / "sglang").mkdir(parents=True, exist_ok=True)
    (site / "sglang" / "__init__.py").write_text("")
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return site


def serve(tmp_path: Path, smi: str | None, environ: dict, version: str = "0.5.23", pcie: bool = True,
          argv: list[str] = ARGV) -> subprocess.CompletedProcess:
    """The image's entrypoint with a server that prints what SGLang would see of the PCIe-IPC variables."""
    server = tmp_path / "server"
    server.mkdir(exist_ok=True)
    (server / "fake_server.py").write_text(
        "import json, os\nprint('SEEN ' + json.dumps({k: os.environ.get(k) for k in "
        "('SGLANG_ENABLE_PCIE_IPC_ALLREDUCE', 'SGLANG_PCIE_IPC_MAX_NUMEL')}))\n")
    fake = fake_cli.install(tmp_path / "bin", smi=smi) if smi else {"PATH": str(tmp_path / "empty")}
    env = {"HOME": str(tmp_path / "home"), "SGLANG_STACK_SERVER": "fake_server", "SGLANG_API_KEY_FILE": "",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(server), str(site_with_sglang(tmp_path, version, pcie))]),
           **fake, **environ}
    return subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.serve", *argv], capture_output=True,
                          text=True, env=env, timeout=120)


def seen(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("SEEN "))[5:])


def said(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stdout.splitlines() if "PCIe-IPC" in line or "warning:" in line]


def record(tmp_path: Path, smi: str, verdict: str = "pcie_ipc", **key) -> Path:
    """A verdict as the probe writes it, for the topology the fake nvidia-smi shows."""
    fake = fake_cli.install(tmp_path / "bin", smi=smi)
    old = os.environ["PATH"]
    os.environ["PATH"] = fake["PATH"]
    os.environ.update({k: v for k, v in fake.items() if k != "PATH"})
    try:
        topology = peers.read(8)
    finally:
        os.environ["PATH"] = old
    wanted = {**pcie_ipc.key(pcie_ipc.Service(tp=8), topology, "0.5.23"), **key}
    return pcie_ipc.write_verdict({"key": wanted, "verdict": verdict, "when": "2026-12-05T00:00:00Z",
                                   "why": "12K 5.3 us against NCCL 205.1 us"},
                                  tmp_path / "home" / ".cache" / "sglang-stack" / "allreduce-verdict.json")


def test_auto_stays_on_nccl_until_a_probe_has_confirmed_it_here(tmp_path):
    proc = serve(tmp_path, "rtxpro6000x8", {})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None, proc.stdout
    line = said(proc)[-1]
    assert "PCIE_ALLREDUCE=auto): off until a probe confirms it on this host: none recorded" in line, line
    assert "invoke probe SERVICE" in line, "the line says how to get a verdict"


def test_auto_turns_it_on_with_a_verdict_for_this_topology(tmp_path):
    record(tmp_path, "rtxpro6000x8")
    proc = serve(tmp_path, "rtxpro6000x8", {})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1", proc.stdout
    assert "PCIE_ALLREDUCE=auto): on: the probe of 2026-12-05T00:00:00Z on this topology" in said(proc)[-1]


@pytest.mark.parametrize("change, what", [
    ({"fingerprint": "0123456789abcdef"}, "fingerprint"),
    ({"tp": 4}, "tp"),
    ({"sglang": "0.5.22"}, "sglang"),
])
def test_a_verdict_for_another_topology_or_release_is_not_taken(tmp_path, change, what):
    record(tmp_path, "rtxpro6000x8", **change)
    proc = serve(tmp_path, "rtxpro6000x8", {})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None
    assert f"the recorded probe was for another {what}" in said(proc)[-1], said(proc)


def test_a_verdict_that_chose_nccl_keeps_nccl(tmp_path):
    record(tmp_path, "rtxpro6000x8", verdict="nccl")
    proc = serve(tmp_path, "rtxpro6000x8", {})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None
    assert "chose nccl" in said(proc)[-1]


def test_on_and_off_need_no_verdict(tmp_path):
    assert seen(serve(tmp_path, "rtxpro6000x8", {"PCIE_ALLREDUCE": "on"}))["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    record(tmp_path, "rtxpro6000x8")
    off = serve(tmp_path, "rtxpro6000x8", {"PCIE_ALLREDUCE": "OFF"})
    assert seen(off)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None and "=off): off" in said(off)[-1]


@pytest.mark.parametrize("environ, argv, words", [
    ({"PCIE_ALLREDUCE": "maybe"}, ARGV, "PCIE_ALLREDUCE=maybe is not one of auto, on, off"),
    ({"PCIE_ALLREDUCE": "on"}, ["--tp", "1"], "off: TP 1, no all-reduce"),
    ({"PCIE_ALLREDUCE": "on"}, ["--tp", "3"], "SGLang keeps TP 3 on NCCL"),
    ({"PCIE_ALLREDUCE": "auto"}, ["--tp", "8", "--nnodes", "2"], "off: 2 nodes"),
])
def test_bad_settings_are_one_line_and_the_server_still_starts(tmp_path, environ, argv, words):
    proc = serve(tmp_path, "rtxpro6000x8", environ, argv=argv)
    seen(proc)
    assert any(words in line for line in said(proc)), said(proc)


def test_on_with_a_release_without_it_names_the_profile_that_has_it(tmp_path):
    proc = serve(tmp_path, "rtxpro6000x8", {"PCIE_ALLREDUCE": "on"}, version="0.5.8", pcie=False)
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None
    assert "off: SGLang 0.5.8 has none; profile 0.5.23 has it (SGLANG_PROFILE=0.5.23)" in said(proc)[-1], said(proc)


@pytest.mark.parametrize("value, kept", [("-1", False), ("1e99", False), ("12", False), ("99999999999", False),
                                         ("458752", True)])
def test_the_workspace_bound_override_is_checked(tmp_path, value, kept):
    proc = serve(tmp_path, "rtxpro6000x8", {"PCIE_ALLREDUCE": "on", "SGLANG_PCIE_IPC_MAX_NUMEL": value})
    assert (seen(proc)["SGLANG_PCIE_IPC_MAX_NUMEL"] == value) is kept, proc.stdout
    if not kept:
        assert any(f"SGLANG_PCIE_IPC_MAX_NUMEL={value}" in line and "dropped" in line for line in said(proc)), said(proc)


def test_the_topology_unread_keeps_auto_off(tmp_path):
    record(tmp_path, "rtxpro6000x8")
    proc = serve(tmp_path, None, {})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None
    assert "the topology could not be read (nvidia-smi --query-gpu=uuid --format=csv,noheader: FileNotFoundError)" \
        in said(proc)[-1], said(proc)


@pytest.mark.parametrize("content, words", [
    ('{"_metadata": {', "was unreadable (JSONDecodeError): set aside"),
    ("\xff\xfe", "was unreadable"),
    ("[1, 2]", "holds no table of tuned entries"),
])
def test_a_broken_autotune_file_is_named_and_set_aside(tmp_path, content, words):
    tune = tmp_path / "autotune"
    tune.mkdir()
    path = tune / "pcie_ipc_all_reduce_ws8.json"
    path.write_bytes(content.encode("latin-1"))
    proc = serve(tmp_path, "rtxpro6000x8", {"PCIE_ALLREDUCE": "on", "FLASHINFER_AUTOTUNE_DIR": str(tune)})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert any(words in line for line in said(proc)), said(proc)
    assert path.exists() is (words.startswith("holds")), "a file FlashInfer would raise on is moved out of its way"


def test_the_autotune_file_is_named_at_the_first_start_and_reused_at_the_next(tmp_path):
    """FlashInfer keeps its PCIe-IPC tuning per world size in the cache volume: the start line names the file it will
    write, then the one it reuses, and ``python3 -m sglang_stack.entrypoints.pcie_ipc`` (what `invoke status` runs in
    a running server) lists what is there."""
    tune = tmp_path / "autotune"
    environ = {"PCIE_ALLREDUCE": "on", "FLASHINFER_AUTOTUNE_DIR": str(tune)}
    path = tune / "pcie_ipc_all_reduce_ws8.json"
    first = said(serve(tmp_path, "rtxpro6000x8", environ))
    assert f"serve: PCIe-IPC autotune: none yet: FlashInfer tunes at this start and keeps it in {path}" in first, first
    path.write_text(json.dumps({"(8, 1536)": [1, 2], "(8, 12288)": [2, 4]}))
    (tune / "pcie_ipc_all_reduce_ws4.json").write_text("{}")
    again = said(serve(tmp_path, "rtxpro6000x8", environ))
    assert any(line.startswith(f"serve: PCIe-IPC autotune: {path}: 2 tuned entries, written ") for line in again), again
    listed = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.pcie_ipc"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "FLASHINFER_AUTOTUNE_DIR": str(tune)})
    assert listed.returncode == 0 and [line.split(":")[0] for line in listed.stdout.splitlines()] == [
        str(tune / "pcie_ipc_all_reduce_ws4.json"), str(path)], listed
    off = said(serve(tmp_path, "rtxpro6000x8", {**environ, "PCIE_ALLREDUCE": "off"}))
    assert not any("autotune" in line for line in off), "with PCIe-IPC off no file is tuned"


def test_an_autotune_directory_that_cannot_be_written_is_named(tmp_path):
    """As on a read-only cache volume: FlashInfer could not keep what it measured. (A path under a file stands in for
    the read-only mount: it refuses root too.)"""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    proc = serve(tmp_path, "rtxpro6000x8", {"PCIE_ALLREDUCE": "on", "FLASHINFER_AUTOTUNE_DIR": str(blocked / "autotune")})
    assert seen(proc)["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1", "the server still starts, with PCIe-IPC"
    assert any(f"FLASHINFER_AUTOTUNE_DIR={blocked / 'autotune'} cannot be written (Not a directory): FlashInfer "
               "re-tunes at every start" in line for line in said(proc)), said(proc)


def test_the_fingerprint_follows_the_topology():
    eight = list(range(8))
    pcie = peers.parse_matrix((TOPO / "rtxpro6000x8-topo-m.txt").read_text(), "-m")
    nvl = peers.parse_matrix((TOPO / "h200x8-topo-m.txt").read_text(), "-m")
    ok = peers.parse_matrix((TOPO / "rtxpro6000x8-p2p-ok.txt").read_text(), "-p2p r")
    ns = peers.parse_matrix((TOPO / "rtxpro6000x8-p2p-ns.txt").read_text(), "-p2p r")
    assert peers.linked(pcie, [ok, ok], eight) == (False, True)
    assert peers.linked(nvl, [ok, ok], eight) == (True, True)
    assert peers.linked(pcie, [ns, ok], eight) == (False, False)


def test_a_topology_cell_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="is not a topology cell"):
        peers.parse_matrix("\tGPU0\tGPU1\nGPU0\t X \tOK\x07\nGPU1\tOK\t X \n", "nvidia-smi topo -p2p r")
