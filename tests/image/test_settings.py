"""What SGLang decides at our settings: the checked-in table, and SGLang's own code run again to regenerate it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import sglang_cpu_env
from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image import derive
from sglang_stack.services import decisions
from sglang_stack.entrypoints import serve
from sglang_stack.entrypoints.settings import PROFILES

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip


@pytest.fixture(scope="module")
def lock():
    result, _ = lockmod.check_all(download=False)
    return result


@pytest.fixture(scope="module")
def table():
    return decisions.load()


def run_of(table, profile, source):
    return next(r for r in table["runs"] if r["profile"] == profile and r["source"] == source)


# --- the checked-in table, against what we pass today (fast) ----------------------------------------


def test_the_table_was_derived_from_the_arguments_compose_and_k8s_pass_today(table, lock):
    assert derive.stale(table, lock) == [], "compose.yaml or the k8s render changed: run `invoke settings --write`"
    assert {(r["profile"], r["source"]) for r in table["runs"]} == {(r.profile, r.source) for r in derive.runs(lock)}, \
        "the table has runs that nothing passes any more"


def test_docs_show_the_table(table):
    assert decisions.TABLE_MD.read_text() == derive.markdown(table), "docs/settings.md: run `invoke settings --write`"


def test_each_profile_has_its_own_table_in_sync_and_its_image_reads_it():
    """A profile's table is what its own release decided (`invoke settings --profile NAME --write`), and its
    Dockerfile copies that table for the ahead-of-time step, not the default profile's."""
    from sglang_stack.lock import profiles

    for profile in profiles.available().values():
        table_json, table_md = decisions.tables(profile)
        data = decisions.load(table_json)
        lock = lockmod.load(profile.lock)
        assert data["sglang"] == lock["sglang"]["version"], f"{table_json}: derived with SGLang {data['sglang']}"
        assert table_md.read_text() == derive.markdown(data, table_json.relative_to(ROOT).as_posix()), \
            f"{table_md.relative_to(ROOT)}: run `invoke settings --profile {profile.name} --write`"
        copied = table_json.relative_to(ROOT).as_posix()
        assert f"COPY {copied} /opt/sglang-stack/settings.json" in profile.dockerfile.read_text(), \
            f"{profile.dockerfile.relative_to(ROOT)} does not copy {copied}"


def test_the_image_builds_ahead_of_time_what_sglang_chooses(table, lock):
    from sglang_stack.image.steps import aot

    modules = aot.modules_of(table)
    assert modules == [("sampling", ("9.0a", "12.0a")), ("trtllm_comm", ("9.0a",))], \
        f"SGLang's choices changed the FlashInfer modules to build: {modules}"
    assert aot.modules_for(table, lock.jit["arch_list"]) == [m for m, _ in modules], \
        "the ahead-of-time step would build other modules than the table says"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    step = dockerfile.split("python3 -m sglang_stack.image.steps.aot", 1)[1].split("\n\n")[0]
    assert "--settings /opt/sglang-stack/settings.json" in step and "COPY docker/settings.json" in dockerfile, \
        "the ahead-of-time step reads the table the build copies"
    assert aot.modules_for(table, "12.0a") == ["sampling"], "one architecture: only what SGLang takes there"
    archs = set(lock.jit["arch_list"].split())
    for module, needed in modules:
        assert set(needed) <= archs, f"{module} is needed on {needed}, outside versions.lock [jit] arch_list {archs}"


def test_the_release_with_pcie_ipc_builds_its_module_for_every_gpu_of_the_list():
    """0.5.23's SGLang has the PCIe-IPC all-reduce (its table says so, from its own import): the image builds
    FlashInfer's module for every architecture of the list, since which box is PCIe-only is known at start only."""
    from sglang_stack.image.steps import aot
    from sglang_stack.lock import profiles

    profile = profiles.get("0.5.23")
    data = decisions.load(decisions.tables(profile)[0])
    arch_list = lockmod.load(profile.lock)["jit"]["arch_list"]
    assert ("pcie_ipc_comm", tuple(arch_list.split())) in aot.modules_of(data), aot.modules_of(data)
    assert "pcie_ipc_comm" in aot.modules_for(data, arch_list)
    eagle3 = run_of(data, "rtxpro6000x8", "compose eagle3")["resolved"]["settings"]["all-reduce"]
    assert eagle3["pcie_ipc_max_numel"] == eagle3["pcie_ipc_decode_rows"] * 7168, \
        "the bound is SGLang's decode width times Kimi-K2.5's hidden size"
    assert "pcie_ipc_comm" not in [m for m, _ in aot.modules_of(decisions.load())], "0.5.9 has none to build"


def test_sglang_binds_the_api_port_on_every_profile(table):
    for r in table["runs"]:
        assert "SGLANG_PORT" not in r["environment"], f"{r['profile']} / {r['source']}: SGLANG_PORT is SGLang's"
        assert r["resolved"]["ports"]["api_binds"] is True, f"{r['profile']} / {r['source']}: {r['resolved']['ports']}"


def test_the_fusion_runs_where_0006_matters_and_never_on_sm120(table):
    assert run_of(table, "h200x8", "compose eagle3")["resolved"]["settings"]["all-reduce"]["fusion_runs"] is True, \
        "SGLang fuses the all-reduce on 8x H200 by default: patch 0006 is what keeps EAGLE-3's captures reduced"
    flag = run_of(table, "rtxpro6000x8", f"compose eagle3 {derive.FUSION_FLAG}")["resolved"]["settings"]["all-reduce"]
    assert flag["enable_flashinfer_allreduce_fusion"] is True and flag["fusion_runs"] is False, \
        f"on SM120 the flag is accepted and no layer fuses: {flag}"
    assert run_of(table, "h200x1", "compose eagle3")["resolved"]["settings"]["all-reduce"]["fusion_runs"] is False, \
        "one GPU: nothing to all-reduce"


def test_every_profile_maps_to_an_architecture_the_entrypoint_accepts(lock):
    for name, profile in PROFILES.items():
        cap = f"{profile.capability[0]}.{profile.capability[1]}"
        assert serve.unsupported_gpus(lock.jit["arch_list"], [cap]) == [], f"{name}: the image would refuse its GPU"


# --- SGLang's own code, run again (slow: a venv where SGLang imports) --------------------------


@pytest.fixture(scope="module")
def sglang_python() -> str:
    try:
        return str(sglang_cpu_env.python())
    except sglang_cpu_env.Unavailable as err:
        if os.environ.get("SGLANG_STACK_CI"):
            pytest.fail(f"cannot make a Python where SGLang imports: {err}")
        pytest.skip(f"cannot make a Python where SGLang imports: {err}")


@pytest.mark.sglang_env
@pytest.mark.network
def test_sglang_decides_what_the_table_records(sglang_python, table, lock):
    """The table regenerated by SGLang's own ServerArgs and PortArgs: a pin bump or a patch that flips a default shows here."""
    runner = derive.Runner(python=sglang_python)
    fresh = derive.derive(runner, lock)
    assert derive.differences(table, fresh) == [], "SGLang now decides otherwise: review, then `invoke settings --write`"


@pytest.mark.sglang_env
@pytest.mark.network
def test_with_sglang_port_set_the_tp_message_queue_takes_the_api_port(sglang_python, lock):
    """The defect, run in SGLang: compose's old SGLANG_PORT=30000 and TP 8 leave uvicorn no port."""
    run = next(r for r in derive.runs(lock, ("h200x8",)) if r.source == "compose eagle3")
    planted = derive.Run(run.profile, run.source, run.argv, {**run.env, "SGLANG_PORT": "30000"})
    ports = derive.Runner(python=sglang_python).resolve(planted)["ports"]
    assert ports["tp_message_queue"] == 30000, f"get_open_port() hands the queue $SGLANG_PORT: {ports}"
    assert str(ports["api_binds"]).startswith("no:"), f"the API port must be taken: {ports}"


@pytest.mark.sglang_env
def test_resolving_the_ports_leaves_nothing_in_the_temporary_directory(sglang_python, lock, tmp_path):
    """SGLang's PortArgs makes a file for each of its five IPC sockets and leaves it, for the server to bind: one
    resolution binds none, and the table's test runs dozens (five empty files each were left in /tmp)."""
    run = next(r for r in derive.runs(lock, ("h200x8",)) if r.source == "compose eagle3")
    # where the entrypoint's Python makes its temporary files
    run = derive.Run(run.profile, run.source, run.argv, {**run.env, "TMPDIR": str(tmp_path)})
    assert derive.Runner(python=sglang_python).resolve(run)["ports"]["ipc"] == "unix sockets"
    # torch makes its inductor cache directory there (torchinductor_USER, once per machine, reused): files are the leak
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_dir()) == [], "left in the temporary directory"


@pytest.mark.sglang_env
@pytest.mark.network
def test_the_settings_module_is_one_clean_line_on_a_missing_config(sglang_python, tmp_path):
    proc = subprocess.run([sglang_python, "-m", "sglang_stack.entrypoints.settings", "--profile", "h200x8",
                           "--model-dir", str(tmp_path), "--", "--model-path", "/models/target"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {tmp_path}: no config.json", proc.stderr


def test_invoke_settings_refuses_conflicting_flags():
    proc = subprocess.run([sys.executable, "-m", "invoke", "settings", "--write", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--write and --check" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_invoke_settings_says_which_all_reduce_each_host_takes():
    """`--all-reduce` runs the all-reduce entrypoint per host, sized by the table: 8x H200 over NVLink, 8x RTX PRO 6000
    over PCIe with P2P, both at the widest decode the table's runs capture; one GPU needs none. Its answers (recorded
    from the real entrypoint; tests/entrypoints/test_allreduce.py holds them to what each release decides) read as one line."""
    table = json.loads((ROOT / "profiles" / "0.5.23" / "docker" / "settings.json").read_text())
    assert derive.all_reduce_argv("h200x8", table) == ["sglang_stack.entrypoints.allreduce", "--tp", "8", "--nvlink",
                                                       "yes", "--p2p", "yes", "--max-rows", "2048"]
    assert derive.all_reduce_argv("rtxpro6000x8", table)[3:5] == ["--nvlink", "no"]
    assert derive.all_reduce_argv("h200x1", table) is None
    fixtures = ROOT / "tests" / "fixtures" / "allreduce"
    pcie = derive.all_reduce_line("rtxpro6000x8", json.loads((fixtures / "0.5.23-tp8-pcie-p2p.json").read_text()))
    assert pcie.startswith("all-reduce, 8x RTX PRO 6000 Blackwell (SM120, PCIe): TP 8 over PCIe with P2P: custom "
                           "all-reduce off (SGLang: CustomAllreduce is disabled because it's not supported on more than "
                           "two PCIe-only GPUs."), pcie
    assert pcie.endswith("a decode reduction takes pcie_ipc with PCIE_ALLREDUCE on, workspace 458752 elements (nccl "
                         "with it off), the widest decode (64 rows) pcie_ipc, a prefill chunk nccl"), pcie
    nvlink = derive.all_reduce_line("h200x8", json.loads((fixtures / "0.5.23-tp8-nvlink.json").read_text()))
    assert "TP 8 over NVLink: custom all-reduce on; a decode reduction takes custom with PCIE_ALLREDUCE on" in nvlink, \
        nvlink
    old = derive.all_reduce_line("rtxpro6000x8", json.loads((fixtures / "0.5.9-tp8-pcie-p2p.json").read_text()))
    assert "a decode reduction takes nccl with PCIE_ALLREDUCE on (nccl with it off)" in old, old
    assert derive.all_reduce_line("h200x1", None) == "all-reduce, 1x H200 (SM90): TP 1, none"
    proc = subprocess.run([sys.executable, "-m", "invoke", "settings", "--write", "--all-reduce"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == ("error: --all-reduce: the table does not keep it (it "
                                                           "depends on the host's links); drop --write"), proc.stderr


def test_the_json_is_what_markdown_and_render_read(table):
    assert json.loads(decisions.TABLE_JSON.read_text()) == table


def test_the_module_invoke_settings_runs_in_the_image_is_one_the_image_has(lock):
    """`invoke settings` (no --python) runs `python3 -m MODULE` in the built image: the Dockerfile must copy it."""
    import image_layout

    run = derive.runs(lock)[0]
    argv, _ = derive.Runner(image="sglang-stack:test").argv(run)
    module = argv[argv.index("-m") + 1]
    path = module.replace(".", "/") + ".py"
    assert path in image_layout.modules(), f"{path}: `invoke settings` runs it in the image, which lacks it"


def test_sglangs_benchmark_runs_in_the_image_on_the_hosts_network_with_the_key_by_name(tmp_path):
    """`invoke bench --generator sglang`: the module is in the image, reaches the servers (host network, stdin
    open for its rounds), reads the tokenizer from a read-only mount, and the key never shows in the command line."""
    import image_layout
    from sglang_stack.bench import upstream

    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    argv, env = upstream.command(derive.Runner(image="sglang-stack:test"), tokenizer, "sk-secret")
    module = argv[argv.index("-m") + 1]
    assert module.replace(".", "/") + ".py" in image_layout.modules(), module
    assert argv[argv.index("--network") + 1] == "host" and "-i" in argv[:argv.index("sglang-stack:test")], argv
    assert f"{tokenizer.resolve()}:{upstream.TOKENIZER}:ro" in argv, argv
    assert argv[-2:] == ["--tokenizer", upstream.TOKENIZER] and "HF_HUB_OFFLINE=1" in argv, argv
    assert "sk-secret" not in " ".join(argv) and argv[argv.index("OPENAI_API_KEY") - 1] == "-e", argv
    assert env["OPENAI_API_KEY"] == "sk-secret"
