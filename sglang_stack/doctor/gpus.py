"""The doctor's checks of the GPUs: the NVIDIA runtime, the driver, how many GPUs the service sees, their architecture,
the architectures the image's ahead-of-time kernels were built for, and that no other running server holds them.
Each judges facts ``doctor.host`` gathered."""

from __future__ import annotations

from sglang_stack.doctor.checks import FAIL, NOTE, OK, SKIP, WARN, Check
from sglang_stack.doctor.host import Facts, Gpu, version_tuple
from sglang_stack.doctor.catalog import check
from sglang_stack.entrypoints import serve
from sglang_stack.services import composefile

CUDA_NEEDED = (13, 0)  # the image's CUDA 13.0; minor-version compatibility needs driver >= 580
DRIVER_BRANCH_FOR_CUDA13 = 580
ARCH_LABEL = "io.sglang-stack.flashinfer.arch-list"


@check(needs=("gpu",))
def check_gpu_runtime(facts: Facts) -> Check:
    """The ``nvidia`` runtime is registered, or ``nvidia-container-runtime-hook`` is on PATH: compose.yaml reserves
    GPUs with driver "nvidia".

    Fix: install nvidia-container-toolkit, then ``nvidia-ctk runtime configure``.
    """
    runtimes = sorted(((facts.docker_info or {}).get("Runtimes") or {}).keys())
    fix = ("install nvidia-container-toolkit, then sudo nvidia-ctk runtime configure --runtime=docker "
           "&& sudo systemctl restart docker")
    if "nvidia" in runtimes:
        return Check("gpu-runtime", OK, f"nvidia runtime registered (runtimes: {', '.join(runtimes)})")
    if facts.nvidia_hook:
        detail = "nvidia-container-runtime-hook on PATH (Docker's GPU device requests use it)"
        return Check("gpu-runtime", OK if facts.docker_info else WARN, detail + ("" if facts.docker_info else "; Docker not reachable to confirm"),
                     "" if facts.docker_info else "start Docker and run invoke doctor again")
    if runtimes:
        known = f"runtimes: {', '.join(runtimes)}"
    else:
        known = "no docker CLI" if not facts.docker_cli else "Docker not reachable"
    return Check("gpu-runtime", FAIL, f"no NVIDIA container runtime ({known}; no nvidia-container-runtime-hook)", fix)


@check(needs=("gpu",))
def check_driver(facts: Facts) -> Check:
    """The driver supports the image's CUDA 13.0 (R580 or newer).

    Fix: upgrade the NVIDIA driver.
    """
    if not facts.gpus:
        error = facts.smi_error or "no GPU listed"
        return Check("driver", FAIL, error if error.startswith("nvidia-smi") else f"nvidia-smi: {error}",
                     f"install the NVIDIA driver {DRIVER_BRANCH_FOR_CUDA13} or newer (it provides nvidia-smi)")
    driver = facts.gpus[0].driver
    major = version_tuple(driver)[:1] or (0,)
    cuda = facts.cuda_version
    supports = version_tuple(cuda)[:2] >= CUDA_NEEDED if cuda else major[0] >= DRIVER_BRANCH_FOR_CUDA13
    shown = f"driver {driver}" + (f" (CUDA {cuda})" if cuda else "")
    if not supports:
        return Check("driver", FAIL, f"{shown}: the image needs CUDA 13.0",
                     f"install NVIDIA driver {DRIVER_BRANCH_FOR_CUDA13} or newer")
    return Check("driver", OK, f"{shown} supports the image's CUDA 13.0.1")


def visible_gpus(gpus: list[Gpu], gpu_ids: str) -> tuple[list[Gpu], str]:
    """The GPUs GPU_IDS selects, and an error when it names one the host lacks."""
    if gpu_ids == "all":
        return gpus, ""
    chosen = []
    for ident in gpu_ids.split(","):
        if ident.isdigit():
            match = [g for g in gpus if g.index == int(ident)]
            if not match:
                return chosen, f"GPU_IDS names GPU {ident}, but the host has GPUs 0-{len(gpus) - 1}"
            chosen += match
        else:  # a UUID or MIG id: nvidia-smi's query does not list it here, trust it
            chosen.append(Gpu(-1, ident, gpus[0].compute_cap if gpus else "0.0", "", 0))
    return chosen, ""


@check(needs=("service", "gpu"))
def check_gpus(facts: Facts, svc: composefile.Service) -> Check:
    """The GPUs visible through ``GPU_IDS`` are at least TP_SIZE (per node, with NNODES).

    Fix: more GPUs, or a smaller TP_SIZE if the model fits.
    """
    if not facts.gpus:
        return Check("gpus", SKIP, "skipped: nvidia-smi listed no GPU")
    chosen, error = visible_gpus(facts.gpus, svc.gpu_ids)
    if error:
        return Check("gpus", FAIL, error, "fix GPU_IDS in .env (or set it to all)")
    per_node = svc.tp_size // svc.nnodes
    detail = f"{len(chosen)} GPU{'s' if len(chosen) != 1 else ''} visible (GPU_IDS={svc.gpu_ids}), TP_SIZE={svc.tp_size}"
    if svc.nnodes > 1:
        detail += f" over NNODES={svc.nnodes}: {per_node} on this node"
    if len(chosen) < per_node:
        return Check("gpus", FAIL, f"{detail}: TP needs one GPU per shard",
                     f"use a host with {per_node} GPUs, or lower TP_SIZE in .env if the model fits on fewer")
    return Check("gpus", OK, detail)


@check("arch", "sm120", needs=("gpu",))
def check_arch(facts: Facts, svc: composefile.Service | None) -> list[Check]:
    """One GPU model, of compute capability 9.0, 10.x or 12.x; on SM120, notes on what the flags and patches do there.

    Fix: give the service identical GPUs (``GPU_IDS``).
    """
    if not facts.gpus:
        return [Check("arch", SKIP, "skipped: nvidia-smi listed no GPU")]
    groups: dict[tuple[str, str], list[Gpu]] = {}
    for gpu in facts.gpus:
        groups.setdefault((gpu.name, gpu.compute_cap), []).append(gpu)
    parts = [f"{len(g)}x {name} (compute capability {cc}, SM{g[0].sm}, {g[0].memory_mib} MiB)" for (name, cc), g in groups.items()]
    detail = "; ".join(parts)
    sms = {gpu.sm for gpu in facts.gpus}
    out = []
    if len(groups) > 1:
        out.append(Check("arch", WARN, detail, "give the service identical GPUs with GPU_IDS in .env"))
    elif not sms <= {90, 100, 103, 120, 121}:
        out.append(Check("arch", WARN, f"{detail}: not a target of this image (sgl-kernel ships SM90 and SM100 builds; "
                                       "other GPUs load the SM100 one)", "use Hopper (SM90) or Blackwell (SM100/SM120) GPUs"))
    else:
        out.append(Check("arch", OK, detail))
    if 120 in sms or 121 in sms:
        fusion = "--enable-flashinfer-allreduce-fusion"
        asked = svc is not None and fusion in svc.argv
        out.append(Check("sm120", WARN if asked else NOTE,
                         f"{fusion} is a no-op here: SGLang accepts it, but its own per-layer gate "
                         "(apply_flashinfer_allreduce_fusion) wants SM90 or SM100, so no layer fuses and FlashInfer's "
                         "trtllm_comm (majors 9 and 10 only) is never built or loaded (docs/settings.md, run in SGLang)",
                         f"drop {fusion} from SGLANG_EXTRA_ARGS" if asked else ""))
        out.append(Check("sm120", NOTE,
                         "patches that matter: Kimi-K2.5 EAGLE-3 methods (eagle3 dies after loading without them); "
                         "torch symm-mem SM120 entry (--enable-torch-symm-mem raises KeyError without it); "
                         "sgl-kernel runs its SM100 build; MLA attention defaults to triton"))
    return out


@check()
def check_kernels(facts: Facts) -> Check:
    """The image's ahead-of-time FlashInfer modules (its arch-list label) are built for these GPUs.

    Fix: the ``invoke build --cuda-arch-list`` for these GPUs.
    """
    if not facts.image:
        return Check("kernels", SKIP, "skipped: no image to read the label of")
    labels = (facts.image.get("Config") or {}).get("Labels") or {}
    if ARCH_LABEL not in labels:
        return Check("kernels", NOTE, f"the image has no {ARCH_LABEL} label (built before it was recorded)")
    arch_list = labels[ARCH_LABEL].strip()
    if not arch_list:
        return Check("kernels", WARN, "the image has no ahead-of-time FlashInfer modules (built with --cuda-arch-list ''): "
                     "FlashInfer compiles them at first use, for minutes", "invoke build (with the default arch list)")
    if not facts.gpus:
        return Check("kernels", SKIP, f"FlashInfer modules built for {arch_list}; skipped: nvidia-smi listed no GPU")
    missing = serve.unsupported_gpus(arch_list, [gpu.compute_cap for gpu in facts.gpus])
    if missing:
        return Check("kernels", FAIL, f"the image's FlashInfer modules are built for {arch_list}, not for compute "
                     f"capability {', '.join(missing)}: the entrypoint refuses this GPU (a sampled request would fail "
                     "with 'no kernel image')", serve.rebuild_hint(missing))
    return Check("kernels", OK, f"FlashInfer modules built for {arch_list} cover these GPUs")


@check(needs=("service",))
def check_exclusive(svc: composefile.Service, rows: list | None, facts: Facts) -> Check:
    """No other running server of compose.yaml holds a GPU this one reserves (GPU_IDS): two servers on one GPU
    run out of memory once the second has loaded. Servers on disjoint GPUs run side by side.

    Fix: ``invoke down`` first, or start it on GPUs the other does not hold (``GPU_IDS=4,5,6,7 TP_SIZE=4``).
    """
    if rows is None:
        return Check("exclusive", SKIP, "skipped: cannot ask Docker which services run")
    servers = composefile.project(svc.env).names(composefile.SERVER)
    others = [r.get("Service") for r in rows if r.get("Service") in servers and r.get("Service") != svc.name
              and r.get("State") in ("running", "restarting")]
    mine = gpu_set(svc.gpu_ids, facts.gpus) if svc.gpus else set()  # a CPU stand-in's override reserves none
    beside = []
    for other in others:
        held = facts.held.get(other)
        theirs = gpu_set(held, facts.gpus) if held is not None else None
        if mine == set() or theirs == set():
            shared = []
        else:
            shared = sorted(mine & theirs, key=_gpu_order) if mine is not None and theirs is not None else None
        if shared == []:
            beside.append(f"{other} on GPUs {held or 'none'}")
            continue
        where = (f"on GPUs {held}" if held not in (None, "all") else "on every GPU" if held == "all"
                 else "(its GPUs unknown)")
        free = [str(g.index) for g in facts.gpus if theirs is not None and str(g.index) not in theirs]
        hint = (f"invoke down first, or start {svc.name} on GPUs {other} does not hold "
                + (f"(GPU_IDS={','.join(free)} invoke up {svc.name}, with a TP_SIZE that fits them)" if free
                   else "(GPU_IDS in .env)"))
        holds = (f"GPU{'s' if len(shared) > 1 else ''} {','.join(shared)} of {svc.name}'s GPU_IDS={svc.gpu_ids}"
                 if shared else f"GPUs {svc.name} reserves (GPU_IDS={svc.gpu_ids})")
        return Check("exclusive", FAIL, f"{other} is running {where} and holds {holds}", hint)
    if beside:
        mine_said = f"{svc.name}'s GPU_IDS={svc.gpu_ids}" if svc.gpus else f"{svc.name}, which reserves no GPU"
        return Check("exclusive", OK, f"{'; '.join(beside)}: disjoint from {mine_said}")
    return Check("exclusive", OK, "no other sglang-stack service is running")


def _gpu_order(ident: str):
    return (0, int(ident), "") if ident.isdigit() else (1, 0, ident)


def gpu_set(ids: str | None, gpus: list) -> set[str] | None:
    """GPU_IDS (or what a container holds) as a set of indices; ``all`` is every GPU nvidia-smi lists, None where
    that is unknown. A UUID stays itself: it matches only the same UUID."""
    if ids is None:
        return None
    if not ids.strip():
        return set()
    if ids.strip() == "all":
        return {str(g.index) for g in gpus} or None
    return {i.strip() for i in ids.split(",") if i.strip()}
