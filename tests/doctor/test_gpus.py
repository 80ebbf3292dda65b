"""The doctor's GPU checks (doctor/gpus.py) on recorded and constructed nvidia-smi output: parsing it, the driver, the
count against TP_SIZE, the architecture, the container runtime, the image's kernels, and two servers on one box."""

from __future__ import annotations

import pytest

from sglang_stack.engine import DOCKER
from sglang_stack.doctor import checklist as doctor
from sglang_stack.doctor import gpus as gpu_checks
from sglang_stack.doctor import host
from sglang_stack.doctor.checks import FAIL, NOTE, OK, SKIP, WARN
from sglang_stack.doctor.host import Facts, Gpu

import fake_cli
from doctor_facts import H200_QUERY, H200_SMI, H200_XML, RTX_QUERY, RTX_SMI, by_name, env_of, facts_for, svc_of

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip


def test_parse_h200_recording():
    gpus = host.parse_query_csv(H200_QUERY)
    assert gpus == [Gpu(0, "NVIDIA H200", "9.0", "580.159.04", 143771)], f"parsed {gpus}"
    assert gpus[0].sm == 90, f"compute capability 9.0 is SM90, got {gpus[0].sm}"
    assert host.parse_cuda_version(H200_SMI) == "13.0", "CUDA version from the nvidia-smi banner"
    assert host.parse_cuda_version(H200_XML) == "13.0", "CUDA version from nvidia-smi -q -x"


def test_parse_h200_csv_with_header_and_units():
    """The recording's --format=csv block (header, MiB units, an extra pci.bus_id column)."""
    lines = H200_SMI.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("index, name"))
    gpus = host.parse_query_csv("\n".join(lines[start : start + 2]))
    assert gpus == [Gpu(0, "NVIDIA H200", "9.0", "580.159.04", 143771)], f"parsed {gpus}"


def test_parse_rtx_pro_6000_fixture():
    gpus = host.parse_query_csv(RTX_QUERY)
    assert [g.index for g in gpus] == list(range(8)), f"eight GPUs expected: {gpus}"
    assert {g.sm for g in gpus} == {120}, f"RTX PRO 6000 Blackwell is SM120: {gpus}"
    assert {g.memory_mib for g in gpus} == {97887}, f"memory per card: {gpus}"
    assert host.parse_cuda_version(RTX_SMI) == "13.0", "CUDA version from the banner"


def test_parse_garbage_is_one_line_error():
    with pytest.raises(doctor.UserError, match="unexpected line .NVIDIA-SMI has failed"):
        host.parse_query_csv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")


def test_h200_single_gpu_fails_tp8_with_a_fix():
    checks = doctor.evaluate(facts_for(H200_QUERY, H200_SMI), DOCKER, svc_of("baseline"), env=env_of())
    gpus = by_name(checks, "gpus")[0]
    assert gpus.status == FAIL, f"1 GPU for TP 8 must fail: {gpus.line()}"
    assert "1 GPU visible" in gpus.detail and "TP_SIZE=8" in gpus.detail, gpus.line()
    assert "lower TP_SIZE" in gpus.fix, f"the fix must say what to change: {gpus.fix}"
    assert by_name(checks, "driver")[0].status == OK, by_name(checks, "driver")[0].line()
    arch = by_name(checks, "arch")[0]
    assert arch.status == OK and "SM90" in arch.detail and "NVIDIA H200" in arch.detail, arch.line()
    assert not by_name(checks, "sm120"), "no SM120 notes on Hopper"
    single = gpu_checks.check_gpus(facts_for(H200_QUERY, H200_SMI), svc_of("baseline", TP_SIZE="1"))
    assert single.status == OK, f"TP_SIZE=1 fits one H200: {single.line()}"


def test_rtx_pro_6000_x8_passes_with_sm120_notes():
    checks = doctor.evaluate(facts_for(RTX_QUERY, RTX_SMI), DOCKER, svc_of(), env=env_of())
    assert by_name(checks, "gpus")[0].status == OK, by_name(checks, "gpus")[0].line()
    arch = by_name(checks, "arch")[0]
    assert arch.status == OK and "8x NVIDIA RTX PRO 6000 Blackwell Server Edition" in arch.detail and "SM120" in arch.detail, arch.line()
    notes = by_name(checks, "sm120")
    assert [n.status for n in notes] == [NOTE, NOTE], f"two SM120 notes expected: {[n.line() for n in notes]}"
    assert "no-op" in notes[0].detail and "flashinfer" in notes[0].detail.lower(), notes[0].line()
    assert "EAGLE-3" in notes[1].detail and "symm-mem" in notes[1].detail, notes[1].line()


def test_sm120_fusion_flag_is_a_warning():
    svc = svc_of(SGLANG_EXTRA_ARGS="--enable-flashinfer-allreduce-fusion")
    notes = by_name(doctor.evaluate(facts_for(RTX_QUERY, RTX_SMI), DOCKER, svc, env=env_of()), "sm120")
    assert notes[0].status == WARN, f"asking for fusion on SM120 should warn: {notes[0].line()}"
    assert "drop --enable-flashinfer-allreduce-fusion" in notes[0].fix, notes[0].fix


@pytest.mark.parametrize(
    "gpu_ids, status, text",
    [("0,1,2,3,4,5,6,7", OK, "8 GPUs visible"), ("0,1,2,3", FAIL, "4 GPUs visible"), ("0,9", FAIL, "names GPU 9")],
)
def test_gpu_ids_against_tp(gpu_ids, status, text):
    check = gpu_checks.check_gpus(facts_for(RTX_QUERY, RTX_SMI), svc_of(GPU_IDS=gpu_ids))
    assert check.status == status and text in check.detail, f"GPU_IDS={gpu_ids}: {check.line()}"


@pytest.mark.parametrize(
    "driver, banner, status",
    [
        ("580.159.04", "CUDA Version: 13.0", OK),
        ("590.10.01", "CUDA Version: 13.1", OK),
        ("570.86.15", "CUDA Version: 12.8", FAIL),
        ("580.65.06", "", OK),  # no banner: R580 is the CUDA 13 branch
        ("575.51.03", "", FAIL),
    ],
)
def test_driver_supports_cuda_13(driver, banner, status):
    query = f"0, NVIDIA H200, 9.0, {driver}, 143771\n"
    check = gpu_checks.check_driver(facts_for(query, banner))
    assert check.status == status, f"driver {driver} {banner!r}: {check.line()}"
    if status == FAIL:
        assert "580 or newer" in check.fix, f"the fix must name the driver branch: {check.fix}"


def test_no_nvidia_smi():
    facts = facts_for("", "", gpus=[], smi_error="nvidia-smi: not found on PATH")
    check = gpu_checks.check_driver(facts)
    assert check.status == FAIL and "not found" in check.detail and "install the NVIDIA driver" in check.fix, check.line()
    assert gpu_checks.check_gpus(facts, svc_of()).status == SKIP, "no GPU data: the count is skipped, not failed twice"


def test_mixed_and_old_gpus_warn():
    mixed = facts_for(RTX_QUERY.splitlines()[0] + "\n" + "1, NVIDIA H200, 9.0, 580.159.04, 143771\n", RTX_SMI)
    assert gpu_checks.check_arch(mixed, None)[0].status == WARN, "mixed GPU models should warn"
    ampere = facts_for("0, NVIDIA A100-SXM4-80GB, 8.0, 580.159.04, 81920\n", "")
    check = gpu_checks.check_arch(ampere, None)[0]
    assert check.status == WARN and "not a target" in check.detail, check.line()


def test_gpu_runtime():
    assert gpu_checks.check_gpu_runtime(facts_for(RTX_QUERY, RTX_SMI)).status == OK, "nvidia runtime registered"
    plain = facts_for(RTX_QUERY, RTX_SMI, docker_info=fake_cli.PLAIN_INFO)
    missing = gpu_checks.check_gpu_runtime(plain)
    assert missing.status == FAIL and "nvidia-ctk runtime configure" in missing.fix, missing.line()
    hooked = facts_for(RTX_QUERY, RTX_SMI, docker_info=fake_cli.PLAIN_INFO, nvidia_hook=True)
    assert gpu_checks.check_gpu_runtime(hooked).status == OK, "the runtime hook alone serves device requests"


def test_exclusive_and_port_with_running_containers():
    baseline_up = [{"Service": "baseline", "State": "running", "Health": "healthy"}]
    eight = facts_for(RTX_QUERY, RTX_SMI)
    check = gpu_checks.check_exclusive(svc_of(), baseline_up, eight)
    assert check.status == FAIL and check.detail == ("baseline is running (its GPUs unknown) and holds GPUs eagle3 "
                                                      "reserves (GPU_IDS=all)"), check.line()
    assert "invoke down" in check.fix, check.line()
    assert gpu_checks.check_exclusive(svc_of(), None, eight).status == SKIP, "no Docker: skip, not fail"
    own = [{"Service": "eagle3", "State": "running"}]
    assert gpu_checks.check_exclusive(svc_of(), own, eight).status == OK, "its own container is not a conflict"


@pytest.mark.parametrize("held, gpu_ids, status, says", [
    ("all", "all", FAIL, "baseline is running on every GPU and holds GPUs 0,1,2,3,4,5,6,7 of eagle3's GPU_IDS=all"),
    ("0,1,2,3", "all", FAIL, "baseline is running on GPUs 0,1,2,3 and holds GPUs 0,1,2,3 of eagle3's GPU_IDS=all"),
    ("0,1,2,3", "2,3,4,5", FAIL, "baseline is running on GPUs 0,1,2,3 and holds GPUs 2,3 of eagle3's GPU_IDS=2,3,4,5"),
    ("0,1,2,3", "3,4,5,6", FAIL, "holds GPU 3 of eagle3's GPU_IDS=3,4,5,6"),
    ("0,1,2,3", "4,5,6,7", OK, "baseline on GPUs 0,1,2,3: disjoint from eagle3's GPU_IDS=4,5,6,7"),
    ("", "all", OK, "baseline on GPUs none: disjoint"),
    ("", "", OK, "baseline on GPUs none: disjoint"),
])
def test_servers_on_disjoint_gpus_run_side_by_side(held, gpu_ids, status, says):
    """Two servers of a 1T model never fit one box, but smaller ones split it: what counts is the GPUs each holds."""
    facts = facts_for(RTX_QUERY, RTX_SMI) if gpu_ids else Facts()  # no nvidia-smi: "all" is unknown
    facts.held = {"baseline": held}
    gpu_ids = gpu_ids or "all"
    check = gpu_checks.check_exclusive(svc_of(GPU_IDS=gpu_ids), [{"Service": "baseline", "State": "running"}], facts)
    assert check.status == status and says in check.detail, check.line()
    if held == "0,1,2,3" and status == FAIL:
        assert "GPU_IDS=4,5,6,7 invoke up eagle3" in check.fix, check.fix


@pytest.mark.parametrize("inspected, held", [
    # compose's reservation: device_ids ["${GPU_IDS}"], one entry with commas
    ('[{"Driver":"nvidia","Count":0,"DeviceIDs":["0,1,2,3"],"Capabilities":[["gpu"]],"Options":{}}]', "0,1,2,3"),
    ('[{"Driver":"nvidia","Count":0,"DeviceIDs":["all"],"Capabilities":[["gpu"]],"Options":{}}]', "all"),
    ('[{"Driver":"","Count":-1,"DeviceIDs":null,"Capabilities":[["gpu"]],"Options":{}}]', "all"),  # --gpus all
    ('[{"Driver":"","Count":2,"DeviceIDs":null,"Capabilities":[["gpu"]],"Options":{}}]', "all"),  # --gpus 2
    ("null", ""),
    ('[{"Driver":"other","Count":1,"DeviceIDs":null,"Capabilities":[["fpga"]]}]', ""),
    ("not json", None),
    ('{"Driver":"nvidia"}', None),
])
def test_what_a_container_holds_is_read_from_its_device_requests(inspected, held):
    assert host.held_gpus(inspected) == held


def image_with_arch_label(arch_list: str | None) -> dict:
    labels = {} if arch_list is None else {gpu_checks.ARCH_LABEL: arch_list}
    return {"Config": {"Entrypoint": ["python3", "-m", "sglang_stack.entrypoints.serve"], "Labels": labels},
            "Size": 9.6e9, "Created": "2026-12-01T00:00:00Z"}


def test_kernels_fail_on_a_gpu_outside_the_image_arch_list():
    b200 = "0, NVIDIA B200, 10.0, 580.159.04, 183359\n"
    check = gpu_checks.check_kernels(facts_for(b200, "", image=image_with_arch_label("9.0a 12.0a")))
    assert check.status == FAIL and "10.0" in check.detail and "9.0a 12.0a" in check.detail, check
    assert check.fix.startswith('invoke build --cuda-arch-list "10.0a"'), check.fix


@pytest.mark.parametrize("query", [H200_QUERY, RTX_QUERY], ids=["h200", "rtxpro6000x8"])
def test_kernels_pass_on_the_gpus_it_was_built_for(query):
    check = gpu_checks.check_kernels(facts_for(query, "", image=image_with_arch_label("9.0a 12.0a")))
    assert check.status == OK, check


def test_kernels_warn_without_aot_modules_and_note_an_unlabelled_image():
    empty = gpu_checks.check_kernels(facts_for(H200_QUERY, "", image=image_with_arch_label("")))
    assert empty.status == WARN and "compiles them at first use" in empty.detail, empty
    old = gpu_checks.check_kernels(facts_for(H200_QUERY, "", image=image_with_arch_label(None)))
    assert old.status == NOTE, old
    assert gpu_checks.check_kernels(facts_for(H200_QUERY, "", image=None)).status == SKIP
