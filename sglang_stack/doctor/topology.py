"""How the service's GPUs talk to each other: peer-to-peer per pair, the links, ACS and the IOMMU, and the NCCL
settings the containers really get. On a PCIe-only box (8x RTX PRO 6000) broken P2P shows as a server that loads
for 8 minutes and then hangs on its first all-reduce (vllm-project/vllm#42063, #31936, #51513); here it is a line.

``gather`` asks ``nvidia-smi topo`` (``-p2p r``, ``-p2p w``, ``-m``), ``lspci -vvv`` and the kernel, each with a
timeout; the parsers read the formats ``nvidia-smi topo -h`` and ``lspci`` document, and the check is a pure
function of what they read (tests/fixtures/topology holds the outputs it is tested on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack.doctor.checks import FAIL, NOTE, OK, SKIP, WARN, Check
from sglang_stack.engine import Engine
from sglang_stack.entrypoints.peers import P2P_OK, linked, pairs as _pairs, parse_matrix
from sglang_stack.doctor import host
from sglang_stack.doctor.catalog import check
from sglang_stack.services import composefile

# nvidia-smi topo -p2p's legend: what a pair's cell means when it is not OK.
P2P_MEANING = {"CNS": "chipset not supported", "GNS": "GPU not supported", "TNS": "topology not supported",
               "NS": "not supported", "U": "unknown"}
# nvidia-smi topo -m's legend, from the closest link to the farthest: NV# (NVLink), PIX (one PCIe switch), PXB
# (several switches), PHB (a host bridge), NODE (host bridges within a NUMA node), SYS (across NUMA nodes: SMP);
# anything but NV# is PCIe.
NCCL_VARIABLES = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE",
                  "NCCL_CUMEM_ENABLE", "NCCL_ALGO", "NCCL_PROTO")
TIMEOUT_S = 20


@dataclass
class Topology:
    """What was read; a field is None where it could not be read (``errors`` says why)."""

    p2p_read: dict[tuple[int, int], str] | None = None
    p2p_write: dict[tuple[int, int], str] | None = None
    links: dict[tuple[int, int], str] | None = None
    acs: list[str] | None = None  # PCI bridges whose ACS redirects peer requests upstream ("BDF name: ReqRedir+ ...")
    iommu: str | None = None  # "off", "passthrough" or "translated"
    errors: list[str] = field(default_factory=list)


def parse_acs(text: str) -> list[str]:
    """The PCI bridges of ``lspci -vvv`` whose ACS control redirects peer-to-peer requests or completions (or checks
    the source) up to the root complex: P2P through them takes the long way, or fails where the IOMMU blocks it."""
    found = []
    device = ""
    for line in text.splitlines():
        if line and not line[0].isspace():
            device = line.strip()
        m = re.search(r"ACSCtl:\s*(.*)", line)
        if m and "bridge" in device.lower():
            on = [flag[:-1] for flag in m.group(1).split() if flag.endswith("+") and flag[:-1] in
                  ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")]
            if any(flag in on for flag in ("ReqRedir", "CmpltRedir")):
                found.append(f"{device.split(' ', 1)[0]} ({'+ '.join(on)}+)")
    return found


def parse_iommu(groups: list[str], cmdline: str) -> str:
    """``off``: no IOMMU groups; ``passthrough``: ``iommu=pt`` (DMA is not translated, P2P unaffected);
    ``translated``: the IOMMU remaps every DMA, peer-to-peer included (NCCL's troubleshooting: disable it or use pt)."""
    if not groups:
        return "off"
    if re.search(r"(^|\s)(iommu=pt|iommu\.passthrough=1)(\s|$)", cmdline):
        return "passthrough"
    return "translated"


def gather(gpus: int, run) -> Topology:
    """Ask the host, each command under a timeout; ``run(argv, timeout) -> (exit code or None, stdout, stderr)``."""
    topo = Topology()
    if gpus < 2:
        return topo
    for attr, argv in (("p2p_read", ["nvidia-smi", "topo", "-p2p", "r"]), ("p2p_write", ["nvidia-smi", "topo", "-p2p", "w"]),
                       ("links", ["nvidia-smi", "topo", "-m"])):
        code, out, err = run(argv, TIMEOUT_S)
        if code != 0:
            said = (err or out).strip().splitlines()
            topo.errors.append(f"{' '.join(argv)}: {said[-1] if said else f'exit {code}'}")
            continue
        try:
            setattr(topo, attr, parse_matrix(out, " ".join(argv)))
        except ValueError as bad:
            topo.errors.append(str(bad))
    code, out, _ = run(["lspci", "-vvv"], TIMEOUT_S)
    if code == 0 and "ACSCtl" in out:
        topo.acs = parse_acs(out)
    else:
        topo.errors.append("lspci -vvv: no ACS capability readable (not installed, or not root)" if code == 0 or code is None
                           else f"lspci -vvv: exit {code}")
    try:
        groups = [p.name for p in Path("/sys/kernel/iommu_groups").iterdir()] if Path("/sys/kernel/iommu_groups").is_dir() else []
        topo.iommu = parse_iommu(groups, Path("/proc/cmdline").read_text())
    except OSError as unread:
        topo.errors.append(f"IOMMU: {unread.strerror}")
    return topo


def service_gpus(facts, svc: composefile.Service) -> list[int]:
    """The GPUs one node of the service uses: its GPU_IDS (or every GPU), as many as TP_SIZE / NNODES."""
    gpus = [g.index for g in facts.gpus]
    if svc.gpu_ids != "all":
        gpus = [int(i) for i in svc.gpu_ids.split(",") if i.isdigit()]
    return gpus[:svc.tp_size // max(svc.nnodes, 1)]


def hardware(topo: Topology, gpus: list[int]) -> tuple[bool, bool]:
    """(NVLink between every pair, P2P read and write OK between every pair), as nvidia-smi topo reported them."""
    return linked(topo.links, [topo.p2p_read, topo.p2p_write], gpus)


ALLREDUCE_TIMEOUT_S = 240


def gather_allreduce(facts, engine: Engine, svc: composefile.Service, run) -> None:
    """Run SGLang's own all-reduce start-up in the service's image (entrypoints/allreduce.py) with the hardware
    answers nvidia-smi gave; ``facts.allreduce`` = (exit code, output), or ``facts.allreduce_skip`` says why not."""
    gpus = service_gpus(facts, svc)
    topo = getattr(facts, "topology", None)
    if len(gpus) < 2:
        facts.allreduce_skip = f"{len(gpus)} GPU: no all-reduce"
    elif topo is None or topo.p2p_read is None or topo.links is None:
        facts.allreduce_skip = "skipped: nvidia-smi topo not read"
    elif not facts.docker_info:
        facts.allreduce_skip = "skipped: no Docker engine to run the image"
    elif not facts.image:
        facts.allreduce_skip = "skipped: image not built (invoke build)"
    else:
        nvlink, p2p = hardware(topo, gpus)
        deterministic = "yes" if "--enable-deterministic-inference" in svc.argv else "no"
        argv = [engine.runner, "run", "--rm", "--network", "none", "--entrypoint", "python3", svc.image, "-m",
                "sglang_stack.entrypoints.allreduce", "--tp", str(len(gpus)), "--nvlink", "yes" if nvlink else "no",
                "--p2p", "yes" if p2p else "no", *(["--deterministic", "yes"] if deterministic == "yes" else [])]
        code, out, err = run(argv, ALLREDUCE_TIMEOUT_S)
        facts.allreduce = (code, (out + err).strip())


@check("all-reduce", needs=("service", "gpu"))
def check_all_reduce(facts, svc: composefile.Service) -> Check:
    """A note, never a failure: which all-reduce SGLang itself will use for the tensor-parallel group at this TP
    size on these GPUs (custom all-reduce, its PCIe-IPC all-reduce, or NCCL), found by running its own start-up and
    dispatch code in the service's image with the answers ``nvidia-smi topo`` gave (NVLink and P2P on every pair),
    with SGLang's reason where it said no; for PCIe-IPC, what ``PCIE_ALLREDUCE`` makes of it and the workspace bound.

    Fix: nothing to fix; it says what to expect. SGLang's own kernel needs NVLink on every pair beyond two GPUs,
    and P2P; on a PCIe box at TP 4 or 8 the 0.5.23 profile's PCIe-IPC all-reduce takes the decode reductions once
    ``invoke probe SERVICE`` has confirmed it (``PCIE_ALLREDUCE=auto``), and NCCL carries the rest.
    """
    import json

    answer = getattr(facts, "allreduce", None)
    if answer is None:
        skip = getattr(facts, "allreduce_skip", "") or "skipped: not asked"
        return Check("all-reduce", SKIP if skip.startswith("skipped") else OK, skip)
    code, out = answer
    try:
        decided = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        decided = None
    if code != 0 or not isinstance(decided, dict):
        return Check("all-reduce", NOTE, f"SGLang's all-reduce start-up did not run in {svc.image}: "
                     f"{(out.strip().splitlines() or [f'exit {code}'])[-1][:200]}")
    p2p_off = str(svc.environment.get("NCCL_P2P_DISABLE") or "") == "1"
    nccl = ("through host memory (NCCL_P2P_DISABLE=1)" if p2p_off else "over P2P" if decided.get("p2p")
            else "through host memory")
    head = f"SGLang {decided.get('sglang')} at TP {decided.get('tp')}: custom all-reduce {decided.get('custom_all_reduce')}"
    if decided.get("custom_all_reduce") == "on":
        link = "NVLink" if decided.get("full_nvlink") else "PCIe P2P"
        return Check("all-reduce", NOTE, f"{head} over {link} for small tensors; NCCL's for the rest, {nccl}")
    why = f" (SGLang: {decided['why']})" if decided.get("why") else ""
    if decided.get("backend") == "pcie_ipc":
        return Check("all-reduce", NOTE, f"{head}{why}; {_pcie_ipc(decided, svc)}; NCCL's for the rest, {nccl}")
    return Check("all-reduce", NOTE, f"{head}{why}: every all-reduce is NCCL's, {nccl}")


def _pcie_ipc(decided: dict, svc: composefile.Service) -> str:
    """What PCIE_ALLREDUCE makes of SGLang's PCIe-IPC all-reduce, which its dispatch would give the decode reductions."""
    from sglang_stack.entrypoints import pcie_ipc

    value, _ = pcie_ipc.setting(svc.environment)
    bound = (decided.get("pcie_ipc") or {}).get("max_numel")
    override = svc.environment.get(pcie_ipc.MAX_NUMEL)
    sized = (f"{pcie_ipc.MAX_NUMEL}={override}" if override and not pcie_ipc.max_numel_problem(svc.environment) else
             f"workspace {bound} elements: SGLang's fallback decode width x hidden {decided.get('hidden')}, the "
             "server sizes it from its captured batches")
    what = f"its PCIe-IPC all-reduce takes the decode reductions ({sized})"
    if value == "on":
        return f"{what}, PCIE_ALLREDUCE=on"
    if value == "auto":
        return (f"{what} once `invoke probe {svc.name}` has confirmed it on this host (PCIE_ALLREDUCE=auto; "
                "`invoke up` runs it first)")
    return f"PCIE_ALLREDUCE=off keeps it off: {what.replace('takes', 'would take')}"


@check("topology", needs=("service", "gpu"))
def check_topology(facts, svc: composefile.Service) -> Check:
    """Every pair of the service's GPUs has peer-to-peer reads and writes, or ``NCCL_P2P_DISABLE=1`` routes the
    traffic through host memory; no PCIe bridge between them redirects P2P upstream (ACS) unless P2P is off; the
    IOMMU does not translate P2P. The NCCL variables are the service's own (compose), not the shell's.

    Fix: ``NCCL_P2P_DISABLE=1`` in .env, or ACS off on the bridges named (BIOS, or ``setpci``) and ``iommu=pt``.
    """
    topo: Topology | None = getattr(facts, "topology", None)
    if not facts.gpus:
        return Check("topology", SKIP, "skipped: nvidia-smi listed no GPU")
    gpus = service_gpus(facts, svc)
    nccl = {k: str(svc.environment.get(k) or "") for k in NCCL_VARIABLES if svc.environment.get(k) not in (None, "")}
    shown = ", ".join(f"{k}={v}" for k, v in nccl.items()) or "no NCCL_* setting"
    if len(gpus) < 2:
        return Check("topology", OK, f"{len(gpus)} GPU: no peer traffic ({shown})")
    if topo is None or topo.p2p_read is None:
        why = "; ".join(topo.errors) if topo and topo.errors else "nvidia-smi topo not asked"
        return Check("topology", SKIP, f"skipped: {why}")
    p2p_off = nccl.get("NCCL_P2P_DISABLE") == "1" or nccl.get("NCCL_P2P_LEVEL", "").upper() in ("LOC", "0")
    broken = []
    for a, b in _pairs(gpus):
        cells = [m.get((a, b)) for m in (topo.p2p_read, topo.p2p_write or {}) if m is not None]
        bad = [c for c in cells if c and c != P2P_OK]
        if bad or not cells or None in cells:
            broken.append(f"GPU{a}-GPU{b} {bad[0] if bad else '?'}")
    links = sorted({(topo.links or {}).get(p, "?") for p in _pairs(gpus)})
    kind = "NVLink" if links and all(link.startswith("NV") for link in links) else f"PCIe ({'/'.join(links)})"
    detail = f"{len(gpus)} GPUs over {kind}; {shown}"
    if broken:
        meaning = P2P_MEANING.get(broken[0].rsplit(" ", 1)[1], "not OK")
        pairs = ", ".join(broken[:6]) + (f" and {len(broken) - 6} more" if len(broken) > 6 else "")
        if p2p_off:
            return Check("topology", NOTE, f"{detail}: P2P is {meaning} for {pairs}; NCCL_P2P_DISABLE keeps NCCL off it")
        acs = f"; ACS redirects on {', '.join(topo.acs[:4])}" if topo.acs else ""
        return Check("topology", FAIL, f"{detail}: P2P {meaning} for {pairs}{acs}: NCCL would try P2P and hang or fail "
                     "on the first all-reduce", "set NCCL_P2P_DISABLE=1 in .env (or turn ACS off on those bridges and boot "
                     "with iommu=pt), then `invoke probe SERVICE`")
    if topo.acs and kind != "NVLink" and not p2p_off:
        return Check("topology", WARN, f"{detail}: P2P reports OK, but ACS redirects peer requests upstream on "
                     f"{', '.join(topo.acs[:4])}: the transfers go through the root complex, slower, or hang where the "
                     "IOMMU blocks them", "turn ACS off on those bridges (BIOS, or setpci), or set NCCL_P2P_DISABLE=1; "
                     "then `invoke probe SERVICE`")
    if topo.iommu == "translated" and kind != "NVLink" and not p2p_off:
        return Check("topology", WARN, f"{detail}: the IOMMU translates DMA, peer-to-peer included (NCCL's "
                     "troubleshooting guide: a hang or slow P2P)", "boot with iommu=pt, or set NCCL_P2P_DISABLE=1")
    unread = f" ({'; '.join(topo.errors)})" if topo.errors else ""
    return Check("topology", OK, f"{detail}: P2P read and write OK for every pair{unread}")


@check("pcie-allreduce", needs=("service",))
def check_pcie_allreduce(facts, svc: composefile.Service) -> Check:
    """``PCIE_ALLREDUCE`` is auto, on or off, ``on`` names an image whose SGLang has the PCIe-IPC all-reduce (the
    0.5.23 profile) at a TP size its kernels serve (2, 4, 8), and ``SGLANG_PCIE_IPC_MAX_NUMEL`` is unset or a whole
    number of 16-byte packs. The entrypoint would start anyway, on NCCL, with a warning: this says it first.

    Fix: ``PCIE_ALLREDUCE=auto`` (or off), ``SGLANG_PROFILE=0.5.23`` for a release that has it, or a multiple of 8
    for the bound.
    """
    from sglang_stack.entrypoints import pcie_ipc

    value, warning = pcie_ipc.setting(svc.environment)
    where = svc.env.where(pcie_ipc.SETTING) if pcie_ipc.SETTING in svc.env.values else f"{pcie_ipc.SETTING}={value}"
    if warning:
        return Check("pcie-allreduce", FAIL, f"{svc.env.where(pcie_ipc.SETTING)}: not one of auto, on, off",
                     "set PCIE_ALLREDUCE to auto, on or off in .env")
    if problem := pcie_ipc.max_numel_problem(svc.environment):
        return Check("pcie-allreduce", FAIL, problem, "unset SGLANG_PCIE_IPC_MAX_NUMEL, or give a multiple of 8")
    release = host.release(facts, svc)
    has_it = host.release_has(release, pcie_ipc.PROFILE)
    if value == "on" and has_it is False:
        return Check("pcie-allreduce", FAIL, f"{where}: SGLang {release} has no PCIe-IPC all-reduce; profile "
                     f"{pcie_ipc.PROFILE} has it", f"set SGLANG_PROFILE={pcie_ipc.PROFILE} and build it "
                     f"(invoke build --profile {pcie_ipc.PROFILE}), or PCIE_ALLREDUCE=auto")
    if value == "on" and svc.tp_size not in pcie_ipc.SIZES:
        return Check("pcie-allreduce", WARN, f"{where} at TP {svc.tp_size}: SGLang keeps TP {svc.tp_size} on NCCL "
                     "(its kernels serve 2, 4 and 8 ranks)", "PCIE_ALLREDUCE=auto")
    if not has_it:
        return Check("pcie-allreduce", OK, f"{where}: SGLang {release} has no PCIe-IPC all-reduce (profile "
                     f"{pcie_ipc.PROFILE} has it): NCCL and custom all-reduce as SGLang picks them")
    return Check("pcie-allreduce", OK, f"{where}: the `all-reduce` line says what SGLang picks on these GPUs")
