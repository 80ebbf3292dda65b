"""The doctor's topology check, on nvidia-smi topo and lspci outputs: recorded (one H200) or constructed from the
documented formats (tests/fixtures/topology/README.md says which)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_stack.doctor import topology
from sglang_stack.doctor.checks import FAIL, NOTE, OK, WARN
from sglang_stack.doctor.host import Facts, Gpu
from sglang_stack.services import composefile, variables

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip

FIXTURES = Path(__file__).parents[1] / "fixtures"
TOPO = FIXTURES / "topology"
RTX = Gpu(0, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "580.159.04", 97887)
H200 = Gpu(0, "NVIDIA H200", "9.0", "580.159.04", 143771)


def svc_of(**values: str) -> composefile.Service:
    return composefile.service("eagle3", variables.Environment(values, {k: "shell" for k in values}))


def box(gpu: Gpu, n: int, topo_m: str, p2p: str, lspci: str | None = None, cmdline: str = "ro quiet",
        groups: int = 0) -> Facts:
    """Facts as ``gather`` makes them, from the fixture files (each command answered from one)."""
    answers = {"nvidia-smi topo -p2p r": p2p, "nvidia-smi topo -p2p w": p2p, "nvidia-smi topo -m": topo_m}

    def run(argv, timeout):
        key = " ".join(argv)
        if key == "lspci -vvv":
            return (0, (TOPO / lspci).read_text(), "") if lspci else (None, "", "lspci: not found on PATH")
        return 0, (TOPO / answers[key]).read_text(), ""

    topo = topology.gather(n, run)
    topo.iommu = topology.parse_iommu([str(i) for i in range(groups)], cmdline)
    return Facts(gpus=[Gpu(i, gpu.name, gpu.compute_cap, gpu.driver, gpu.memory_mib) for i in range(n)], topology=topo)


def test_eight_rtx_pro_6000_behind_two_switches_with_p2p_ok():
    facts = box(RTX, 8, "rtxpro6000x8-topo-m.txt", "rtxpro6000x8-p2p-ok.txt", "lspci-acs-off.txt")
    check = topology.check_topology(facts, svc_of())
    assert check.status == OK, check.line()
    assert check.detail.startswith("8 GPUs over PCIe (PIX/SYS); no NCCL_* setting: P2P read and write OK"), check.line()


def test_acs_on_breaks_p2p_across_the_switches_and_names_the_fix():
    facts = box(RTX, 8, "rtxpro6000x8-topo-m.txt", "rtxpro6000x8-p2p-ns.txt", "lspci-acs-on.txt")
    check = topology.check_topology(facts, svc_of())
    assert check.status == FAIL, check.line()
    assert "P2P not supported for GPU0-GPU4 NS, GPU0-GPU5 NS" in check.detail and "and 10 more" in check.detail, check.line()
    assert "ACS redirects on 15:00.0 (SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+)" in check.detail, check.line()
    assert check.fix.startswith("set NCCL_P2P_DISABLE=1 in .env"), check.fix
    off = topology.check_topology(facts, svc_of(NCCL_P2P_DISABLE="1"))
    assert off.status == NOTE and "NCCL_P2P_DISABLE=1" in off.detail, "the service's own setting answers it"
    half = topology.check_topology(facts, svc_of(GPU_IDS="0,1,2,3", TP_SIZE="4"))
    assert half.status == WARN and "ACS redirects peer requests upstream" in half.detail, \
        "one switch's GPUs talk P2P, but through bridges that redirect it"


def test_acs_on_with_p2p_reported_ok_warns():
    facts = box(RTX, 8, "rtxpro6000x8-topo-m.txt", "rtxpro6000x8-p2p-ok.txt", "lspci-acs-on.txt")
    assert topology.check_topology(facts, svc_of()).status == WARN


def test_an_iommu_that_translates_warns_and_passthrough_does_not():
    translated = box(RTX, 8, "rtxpro6000x8-topo-m.txt", "rtxpro6000x8-p2p-ok.txt", "lspci-acs-off.txt", groups=40)
    assert topology.check_topology(translated, svc_of()).status == WARN
    passthrough = box(RTX, 8, "rtxpro6000x8-topo-m.txt", "rtxpro6000x8-p2p-ok.txt", "lspci-acs-off.txt",
                      cmdline="ro iommu=pt intel_iommu=on", groups=40)
    assert topology.check_topology(passthrough, svc_of()).status == OK


def test_an_h200_nvlink_box_gives_no_alarm_even_without_lspci():
    facts = box(H200, 8, "h200x8-topo-m.txt", "h200x8-p2p-ok.txt", None, groups=40)
    check = topology.check_topology(facts, svc_of())
    assert check.status == OK and check.detail.startswith("8 GPUs over NVLink"), check.line()
    assert "lspci -vvv" in check.detail, "what could not be read is said"


def test_one_gpu_needs_no_peer():
    facts = Facts(gpus=[H200])
    check = topology.check_topology(facts, svc_of(TP_SIZE="1", GPU_IDS="0"))
    assert check.status == OK and check.detail.startswith("1 GPU: no peer traffic"), check.line()


def test_the_recorded_h200_matrix_parses_through_its_escape_codes():
    """The one real recording: nvidia-smi topo -m on one H200 underlines its header line."""
    text = (FIXTURES / "nvidia-smi" / "h200-nvidia-smi.txt").read_text()
    start = text.index("\t\x1b[4mGPU0\tCPU Affinity")
    assert topology.parse_matrix(text[start:], "topo -m") == {(0, 0): "X"}


def test_the_recorded_h100_box_parses_and_gives_no_alarm():
    """Recorded on a one-H100 host (driver 580.159.04): ``nvidia-smi topo -m`` and ``-p2p r``, header underlined, the
    P2P matrix's rows indented by one space; no lspci, no IOMMU groups. The doctor asks nothing of a lone GPU, and
    what nvidia-smi printed parses all the same."""
    h100 = Gpu(0, "NVIDIA H100 80GB HBM3", "9.0", "580.159.04", 81559)
    assert topology.parse_matrix((TOPO / "h100x1-topo-m.txt").read_text(), "topo -m") == {(0, 0): "X"}
    assert topology.parse_matrix((TOPO / "h100x1-p2p-r.txt").read_text(), "topo -p2p r") == {(0, 0): "X"}
    facts = box(h100, 1, "h100x1-topo-m.txt", "h100x1-p2p-r.txt")
    assert facts.topology.p2p_read is None and facts.topology.iommu == "off", "one GPU: nothing to ask"
    for tp in ("1", "8"):
        check = topology.check_topology(facts, svc_of(TP_SIZE=tp))
        assert check.status == OK and check.detail == "1 GPU: no peer traffic (no NCCL_* setting)", check.line()


@pytest.mark.parametrize("text", ["", "garbage\n", "\tGPU0\tGPU1\nGPU0\t X \n"])
def test_an_unreadable_matrix_is_one_line(text):
    with pytest.raises(ValueError, match="topo"):
        topology.parse_matrix(text, "nvidia-smi topo -m")


def test_what_nvidia_smi_could_not_tell_is_one_line_and_a_skip():
    def run(argv, timeout):
        return (None, "", "nvidia-smi topo did not finish within 20s") if argv[0] == "nvidia-smi" else (1, "", "")

    facts = Facts(gpus=[Gpu(i, RTX.name, RTX.compute_cap, RTX.driver, RTX.memory_mib) for i in range(8)],
                  topology=topology.gather(8, run))
    check = topology.check_topology(facts, svc_of())
    assert check.status == "skip" and check.detail.startswith(
        "skipped: nvidia-smi topo -p2p r: nvidia-smi topo did not finish within 20s;"), check.line()


def test_escape_codes_in_what_nvidia_smi_said_do_not_reach_the_terminal():
    """A cell or an error carrying an escape sequence (a title-setting OSC, a bell) is quoted, not obeyed."""
    def run(argv, timeout):
        return (None, "", "\x1b]0;owned\x07nvidia-smi \x1b[2Jfailed\r") if argv[0] == "nvidia-smi" else (1, "", "")

    facts = Facts(gpus=[Gpu(i, RTX.name, RTX.compute_cap, RTX.driver, RTX.memory_mib) for i in range(8)],
                  topology=topology.gather(8, run))
    line = topology.check_topology(facts, svc_of()).line()
    assert not any(not c.isprintable() for c in line), repr(line)
    assert "\\x1b]0;owned\\x07nvidia-smi \\x1b[2Jfailed;" in line, line
