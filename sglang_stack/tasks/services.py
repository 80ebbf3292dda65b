"""The services and what they serve: `invoke up`, `down`, `logs`, `status` and `doctor` (compose.yaml on this
host), `invoke k8s` (the same on Kubernetes), `invoke models-lock`, `models-verify` and `model-revision` (the
weights, pinned by commit), `invoke acceptance` (EAGLE-3's accept length here) and `invoke settings` (what
SGLang decides at our settings)."""

from __future__ import annotations

from pathlib import Path

from invoke import Exit, task

from sglang_stack.entrypoints.prompts import PROFILE as ADAPTER_PROFILE
from sglang_stack.lock.profiles import HELP as PROFILE_HELP
from sglang_stack.tasks.boundary import engine_of, user_errors
from sglang_stack.errors import UserError
from sglang_stack.engine import image_reference


def _pinned(role: str):
    """models.lock's entry for ``role``, which must carry a commit."""
    from sglang_stack.services import models

    if role not in models.ROLES:
        raise UserError(f"--role {role!r}: choose one of {', '.join(models.ROLES)}")
    pins = models.load()
    if role not in pins:
        raise UserError(f"{models.MODELS_LOCK.name}: no [[model]] with role {role!r}")
    if not pins[role].pinned:
        raise UserError(f"{models.MODELS_LOCK.name}: {pins[role].repo} is not pinned yet: run `invoke models-lock` "
                        "where the Hub is reachable")
    return pins[role]


@task(help={
    "token-file": "file holding a Hugging Face token, for gated repositories (default: $HF_TOKEN, if set)",
    "accept-baseline": "instead of the Hub: record the drafter's expected accept length from this file, an "
    "`invoke acceptance --out` report or an `invoke bench` bench.json you accept (offline; default: none)",
    "accept-tolerance": "with --accept-baseline: how far below it still passes (default: 0.15 for an acceptance "
    "report, 0.3 for a bench.json)",
    "role": "with --accept-baseline: the drafter it is for, drafter (DRAFTER=mha) or drafter-mla (default: drafter)",
})
@user_errors
def models_lock(c, token_file=None, accept_baseline=None, accept_tolerance=None, role=None):
    """Pin each model repository of models.lock by commit, with every file's size and hash (network: the Hub).

    Resolves each [[model]]'s `track` (a branch or tag, `main` by default) to the commit
    it names now, and records the files as the Hub lists them: the LFS sha256 of each weight
    file, the git blob id of each small one. Writes models.lock atomically; commit it.
    With --accept-baseline, records instead what `invoke acceptance` expects of the drafter.
    """
    import os

    from sglang_stack.errors import read_text
    from sglang_stack.services import models
    from sglang_stack.bench import acceptance

    if accept_baseline:
        if token_file:
            raise UserError("--accept-baseline records an expectation offline: it takes no --token-file")
        tolerance = None
        if accept_tolerance is not None:
            try:
                tolerance = float(str(accept_tolerance).strip())
            except ValueError:
                raise UserError(f"--accept-tolerance {accept_tolerance!r}: not a number") from None
        if (role or "drafter") not in models.DRAFTERS:
            raise UserError(f"--role {role!r}: one of {', '.join(models.DRAFTERS)}")
        print(models.record_acceptance(acceptance.baseline_from(Path(accept_baseline), tolerance),
                                       role=role or "drafter"))
        print(f"wrote {models.MODELS_LOCK.name}")
        return
    if accept_tolerance is not None or role is not None:
        raise UserError(f"{'--accept-tolerance' if accept_tolerance is not None else '--role'} goes with --accept-baseline")
    token = read_text(Path(token_file)).strip() if token_file else os.environ.get("HF_TOKEN") or None
    for line in models.lock_models(token=token):
        print(line)
    print(f"wrote {models.MODELS_LOCK.name}")


@task(
    help={
        "role": "target, drafter or drafter-mla (default: target)",
        "dir": "the downloaded directory (default: MODEL_DIR, or DRAFT_MODEL_DIR for the drafter DRAFTER names, "
        "from .env)",
        "workers": "files hashed at once (default: the CPU count, at most 8)",
    }
)
@user_errors
def models_verify(c, role="target", dir=None, workers=None):
    """Hash a downloaded model directory against models.lock, in parallel, and name every file that differs.

    Offline. Reads every byte (about 600 GB for Kimi-K2.5: minutes on NVMe); `invoke doctor`
    checks names and sizes in seconds instead.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from sglang_stack.flags import parse_count
    from sglang_stack.services import models
    from sglang_stack.services import composefile

    count = parse_count("--workers", workers, 1) if workers is not None else None
    model = _pinned(role)
    if dir:
        directory = Path(dir)
    else:
        directory = composefile.model_dirs().get(role)
        if directory is None:
            raise UserError(f"no server of compose.yaml mounts a {role} directory: pass --dir")
    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory (pass --dir)")
    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), transient=True) as progress:
        job = progress.add_task(f"hashing {directory}", total=model.size)
        problems = models.verify_dir(directory, model, count, lambda done, total, name: progress.update(job, completed=done))
    for line in problems:
        print(f"FAIL {line}")
    if problems:
        raise Exit(f"error: {directory}: {len(problems)} of {len(model.files)} files differ from {model.repo}@{model.revision}", code=1)
    print(f"ok   {directory}: all {len(model.files)} files ({model.size / 1e9:.2f} GB) match {model.repo}@{model.revision}")


@task(
    help={
        "dir": "the drafter's directory (default: DRAFT_MODEL_DIR, as compose mounts it)",
        "load": "also build it on the CPU and load every weight with SGLang's own loader (memory: about the size of "
        "the weights) (default: off: the model registry only, seconds)",
        "image": "run SGLang in this image (default: the one the profile's versions.lock tags)",
        "python": "run SGLang with this interpreter instead of an image (default: none)",
        "engine": "docker or podman, for --image (default: stack.engine)",
        "profile": PROFILE_HELP,
    }
)
@user_errors
def drafter_check(c, dir=None, load=False, image=None, python=None, engine=None, profile=None):
    """Does the image's SGLang load this EAGLE-3 drafter? Its own model registry and loader, on the CPU.

    SGLang's model registry picks the class from the drafter's config.json (0.5.9 has none for the
    MLA drafter, DRAFTER=mla; 0.5.23 has kimi_k25_eagle3.py); with --load, SGLang's model loader builds
    it and feeds it every *.safetensors of the directory through the class's own load_weights, and
    a parameter no weight reached is named. Runs in the image with no network (the directory
    mounted read-only), or with --python. Exit 1 where SGLang would not serve it.
    """
    from sglang_stack.lock import lockfile as lockmod, profiles
    from sglang_stack.image import derive
    from sglang_stack.services import composefile, models

    if image is not None:
        image_reference(image, "--image")
    if dir:
        directory = Path(dir)
    else:
        dirs = composefile.model_dirs()
        directory = next((dirs[r] for r in models.DRAFTERS if r in dirs), None)
        if directory is None:
            raise UserError("no server of compose.yaml mounts a drafter: pass --dir")
    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory (pass --dir)")
    chosen = profiles.get(profile)
    lock, _ = lockmod.check_all(chosen.lock, download=False)
    request = derive.Request(image=image, python=python, engine=engine_of(c, engine), profile=profile)
    ok, line = models.sglang_loads(derive.runner_for(request, lock.tag, chosen.name, "drafter-check"), directory, load)
    if not ok:
        raise Exit(f"error: {line}", code=1)
    print(line)


@task(help={"role": "target, drafter or drafter-mla, also positionally (default: target)"})
@user_errors
def model_revision(c, role="target"):
    """Print the commit models.lock pins for ROLE, for `hf download REPO --revision "$(invoke model-revision ROLE)"`.

    Prints nothing but the commit, and exits non-zero with the reason on stderr when there
    is none: under `set -e` (or with `|| exit`) the download stops instead of fetching main."""
    print(_pinned(role).revision)


@task(
    help={
        "service": "a service of compose.yaml whose command speculates, also positionally (default: compose.yaml's "
        "x-sglang-stack.default; with --url, only the name the report gives the server)",
        "url": "probe this server instead, e.g. a replica on another box (default: the service's published address)",
        "accept-min": "fail below this accept length; 0 turns the check off (default: the drafter's expectation in "
        "models.lock, else 1.2)",
        "out": "also write the measurement as JSON here, for `invoke models-lock --accept-baseline` (default: none)",
        "timeout": "seconds per request (default: 300)",
        "dataset": "speed-bench: send SPEED-Bench's prompts (SGLang's own adapter, chat-templated) instead of the "
        "probe, and set the result beside the drafter's published figures (default: none: the probe)",
        "dataset-path": "with --dataset: the SPEED-Bench JSONL prepared on this host (required with --dataset)",
        "category": "with --dataset: low_entropy, mixed or high_entropy (default: every row)",
        "num-prompts": "with --dataset: how many prompts SGLang's adapter samples (default: 32)",
        "output-len": "with --dataset: tokens generated per prompt (default: 512, SGLang's)",
        "tokenizer": "with --dataset: the served model's tokenizer, a directory or a Hub repository OWNER/NAME[@REVISION] "
        "whose tokenizer files are downloaded (default: the service's MODEL_DIR)",
        "image": "with --dataset: run SGLang's adapter in this image (default: the --profile's tag)",
        "python": "with --dataset: run SGLang's adapter with this interpreter instead of an image (default: none)",
        "profile": "with --dataset: the profile whose image runs SGLang's adapter (default: "
        f"{ADAPTER_PROFILE}, the first whose SGLang has it, whichever profile the service runs)",
    }
)
@user_errors
def acceptance(c, service=None, url=None, accept_min=None, out=None, timeout=None, dataset=None, dataset_path=None,
               category=None, num_prompts=None, output_len=None, tokenizer=None, image=None, python=None,
               profile=None):
    """Speculative acceptance on this host: accept length and per-position acceptance from SGLang's own meta_info.

    Sends a short fixed probe (six prompts of the shipped set, greedy, 256 tokens each) to
    the running server's /generate and pools SGLang's meta_info: completion tokens over verify
    passes, and spec_accept_histogram per draft position. Compares the accept length with the
    drafter's expectation in models.lock (at the same speculative settings), else with a floor
    of 1.2. Every silent EAGLE-3 loss upstream showed only as a lower accept length. Exit 1 with
    one line below the threshold; a server that reports no speculative figures is an error.

    With --dataset speed-bench, SGLang's own SPEED-Bench adapter (the 0.5.23 profile's image, or
    --python) turns the JSONL prepared on this host into chat-templated prompts, which are sent
    instead of the probe; the floor is the threshold, and each accept length the drafter's
    publishers state (models.lock) is set beside the result, saying where it falls short.
    """
    from sglang_stack.bench import acceptance as acceptmod, speedbench

    extra = {"--dataset-path": dataset_path, "--category": category, "--num-prompts": num_prompts,
             "--output-len": output_len, "--tokenizer": tokenizer, "--image": image, "--python": python,
             "--profile": profile}
    request = None
    if dataset is not None:
        if dataset != speedbench.NAME:
            raise UserError(f"--dataset {dataset!r}: {speedbench.NAME} is the one dataset (without it: the probe)")
        if not dataset_path:
            raise UserError(f"--dataset {speedbench.NAME} needs --dataset-path FILE, the JSONL prepared on this host")
        if image is not None:
            image_reference(image, "--image")
        request = speedbench.Request(dataset_path, category, num_prompts or 32, output_len or 512, tokenizer, image,
                                     python, engine_of(c), profile)
    elif given := next((flag for flag, value in extra.items() if value is not None), None):
        raise UserError(f"{given} goes with --dataset {speedbench.NAME}")
    passed, line = acceptmod.check(service, url=url, accept_min=accept_min, out=out, timeout=timeout,
                                   speed_bench=request)
    if not passed:
        raise Exit(f"error: {service or 'acceptance'}: {line}", code=1)
    print(f"{service or 'acceptance'}: {line}")


@task(
    help={
        "image": "run SGLang in this image (default: the one the profile's versions.lock tags)",
        "python": "run SGLang with this interpreter instead of an image: one where sglang and its "
        "stack import (default: none)",
        "engine": "docker or podman, for --image (default: stack.engine)",
        "model-dir": "a directory holding the target's config.json (default: deploy/models/Kimi-K2.5)",
        "draft-dir": "a directory holding the drafter's config.json (default: deploy/models/Kimi-K2.5-eagle3)",
        "host": "only this host: h200x8, rtxpro6000x8 or h200x1 (default: all three)",
        "profile": PROFILE_HELP,
        "write": "write the profile's table: docker/settings.json and docs/settings.md, or a profile's "
        "profiles/NAME/docker/settings.json and docs/settings-NAME.md (default: off: print the table)",
        "check": "exit 1 if SGLang now decides otherwise than the profile's table records (default: off)",
        "all-reduce": "also run SGLang's all-reduce start-up and dispatch for each host's tensor-parallel group "
        "(its ranks on loopback, a minute or more) and print the backend it takes: custom, PCIe-IPC or NCCL "
        "(default: off)",
    }
)
@user_errors
def settings(c, image=None, python=None, engine=None, model_dir=None, draft_dir=None, host=None, profile=None,
             write=False, check=False, all_reduce=False):
    """What SGLang decides at our settings, per host: run its own ServerArgs and ports, as compose and k8s start it.

    For 8x H200, 8x RTX PRO 6000 and one GPU, and for each argument list we pass to
    sglang.launch_server (compose's baseline and eagle3, the Kubernetes render), SGLang's
    ServerArgs and PortArgs run in the image with the container's environment; only the GPU is
    stood in for. Prints the attention and sampling backends, the all-reduce fusion, the MoE runner,
    the CUDA graph sizes, the speculative settings and every port SGLang binds (docs/settings.md);
    with --all-reduce, the backend each host's all-reduces take (docs/allreduce.md).
    The image's ahead-of-time FlashInfer modules follow from the table that --write keeps.
    """
    from sglang_stack.image import derive

    if image is not None:
        image_reference(image, "--image")
    request = derive.Request(image=image, python=python, engine=engine_of(c, engine), model_dir=model_dir,
                             draft_dir=draft_dir, host=host, profile=profile, write=write, check=check,
                             all_reduce=all_reduce)
    changed = derive.settings(request)
    if changed:
        raise Exit(f"error: SGLang now decides otherwise than docker/settings.json records ({len(changed)} "
                   "values): review them, then run `invoke settings --write`", code=1)


@task(
    help={
        "service": "a service of compose.yaml (`invoke status` lists them) (required)",
        "timeout": "whole seconds to wait for /health to generate a token (default 0: the healthcheck's "
        "start period plus its retries, 32 min with compose.yaml's defaults)",
        "interval": "seconds between progress lines while the model loads (default 15)",
        "skip-acceptance": "for a service that speculates, do not run `invoke acceptance SERVICE` once it is healthy "
        "(default: off: it runs)",
        "probe": "after the preflight, always run `invoke probe SERVICE` (an all-reduce across its GPUs, 60 s at most) "
        "and start nothing if it fails (default: off: it runs only where PCIE_ALLREDUCE=auto needs a verdict and none "
        "is recorded)",
    }
)
@user_errors
def up(c, service, timeout=None, interval=None, skip_acceptance=False, probe=False):
    """Start SERVICE (a server of compose.yaml on its GPUs, or a router) and wait until it really serves.

    Runs the host preflight first (`invoke doctor` quietly) and refuses to start on the
    first failed check. Where PCIE_ALLREDUCE=auto needs a verdict on this host and none is
    recorded, `invoke probe SERVICE` runs next (with --probe: always). Then `docker compose up
    --detach --wait SERVICE`, which builds the image if it is missing (from the Dockerfile of
    the profile SGLANG_PROFILE names), printing progress while the model loads. Returns once the
    healthcheck passes: SGLang's /health generated one token, or for a router, at least
    one of ROUTER_WORKER_URLS is healthy. A server whose command speculates then has its
    acceptance measured (`invoke acceptance SERVICE`). The compose files are those `docker compose`
    reads here (COMPOSE_FILE in .env for multi-node: docs/scaling.md).
    """
    from sglang_stack.flags import parse_count, parse_seconds
    from sglang_stack.doctor import checklist as doctor
    from sglang_stack.services import compose, composefile, variables

    # Numbers arrive as text and are read here: Invoke's own int() cast would end in a traceback.
    wait = parse_count("--timeout", 0 if timeout is None else timeout, 0)
    pause = parse_seconds("--interval", 15 if interval is None else interval)
    env = variables.environment()
    composefile.project(env).check(service)
    # The service is resolved once here and handed on; a setting it cannot resolve is the preflight's FAIL, with its fix.
    try:
        svc = composefile.resolve(service, env)
    except UserError:
        svc = None
    doctor.preflight(engine_of(c), service, env=env, svc=svc)
    if isinstance(svc, composefile.Service) and svc.gpus and (probe or svc.environment.get("PCIE_ALLREDUCE", "auto")
                                                                == "auto"):
        # Minutes before the load, not after it: a PCIe box whose GPUs cannot all-reduce hangs here (docs/services.md).
        # Without --probe it runs only where PCIE_ALLREDUCE=auto needs a verdict and none is recorded (seconds).
        code = compose.probe(engine_of(c), svc, if_needed=not probe)
        if code:
            raise Exit(f"error: {service}: the all-reduce probe failed (exit {code}): nothing was started", code=code)
    compose.up(engine_of(c), svc, wait_timeout=wait or composefile.wait_timeout(svc), interval=pause)
    if getattr(svc, "speculative", "") and not skip_acceptance:
        # A healthy server can still have lost its acceptance silently (docs/services.md, Acceptance).
        from sglang_stack.tasks.services import acceptance as check_acceptance

        check_acceptance(c, service)


@task(
    help={
        "service": "a server of compose.yaml (`invoke status` lists them) (required)",
        "deadline": "seconds the whole all-reduce set may take before it counts as hung (default 60, at most 3600)",
        "sizes": "all-reduce sizes in bytes, K/M/G, comma-separated (default 12K,96K,384K,64M: SGLang's decode "
        "reductions and one prefill size)",
        "record": "record the verdict in the cache volume for PCIE_ALLREDUCE=auto (default: on; --no-record to only "
        "measure)",
    }
)
@user_errors
def probe(c, service, deadline=None, sizes=None, record=True):
    """All-reduce across SERVICE's GPUs, in its image with its NCCL settings, under a hard deadline.

    One process per GPU of the node (TP_SIZE / NNODES), joined over loopback, all-reduces each size as
    tensor parallelism does, through NCCL and, where SGLang's own code would pick it on this topology
    (SGLang 0.5.23 on a PCIe-only box), through its PCIe-IPC all-reduce; prints the microseconds of each,
    the ratio, and whether every sum was exact. Then one line: which backend the service will use,
    recorded in the cache volume, where PCIE_ALLREDUCE=auto reads it at the next start. A set that does
    not finish within the deadline is killed whole and reported as "hung at size S (backend)" (exit 1):
    on a PCIe box, what broken peer-to-peer looks like, in a minute instead of after an 8-minute model
    load. `invoke doctor` names the likely cause (topology). The service must not be running: the probe
    takes its GPUs.
    """
    from sglang_stack.services import compose, composefile, variables

    wait, sizes = probe_limits(deadline, sizes)
    env = variables.environment()
    proj = composefile.project(env)
    proj.check(service, composefile.SERVER)
    code = compose.probe(engine_of(c), composefile.service(service, env), wait, sizes, record=record)
    if code:
        raise Exit(code=code)


def probe_limits(deadline, sizes) -> tuple[float, str]:
    """``--deadline`` and ``--sizes`` checked here, by the probe's own rules, before a container starts."""
    from sglang_stack.entrypoints import probe as probe_module

    try:
        wait = probe_module.parse_deadline(60 if deadline is None else deadline)
        if sizes is not None:
            probe_module.parse_sizes(sizes)
    except SystemExit as said:
        raise UserError(str(said).removeprefix("error: ")) from None
    return wait, sizes or ""


@task(help={"volumes": "also remove the cache volume (Hugging Face and JIT kernel caches) (default: off)"})
@user_errors
def down(c, volumes=False):
    """Stop and remove the containers of every service of compose.yaml (whichever runs)."""
    from sglang_stack.services import compose

    compose.down(engine_of(c), volumes=volumes)


@task(
    help={
        "service": "a service of compose.yaml (`invoke status` lists them) (required)",
        "follow": "keep printing new lines (default: on; --no-follow to stop at the end)",
        "tail": "lines of history to show first (default 200; 'all' for everything)",
    }
)
@user_errors
def logs(c, service, follow=True, tail="200"):
    """Show SERVICE's SGLang log (docker compose logs)."""
    from sglang_stack.services import compose

    compose.logs(engine_of(c), service, follow=follow, tail=tail)


@task(help={"service": "only this service of compose.yaml, also positionally (default: every one)"})
@user_errors
def status(c, service=None):
    """One line per service of compose.yaml: state, health, published address, uptime; says when a router is down."""
    from sglang_stack.services import compose

    compose.status(engine_of(c), only=service)


@task(help={"service": "which service of compose.yaml to check for, also positionally (default: compose.yaml's "
                       "x-sglang-stack.default)"})
@user_errors
def doctor(c, service=None):
    """Check this host for SERVICE, one line per check, each FAIL with its fix.

    Docker engine and NVIDIA runtime, driver (CUDA 13.0), GPU count against TP_SIZE,
    compute capability (with SM120 notes), /dev/shm, memlock, disk, the model and
    drafter directories, the port, and the EAGLE-3 audit inside the built image.
    With NNODES > 1: the rank and rendezvous, RDMA devices (/dev/infiniband, NCCL_IB_HCA)
    and the interfaces NCCL and Gloo bind to. For a router: ROUTER_WORKER_URLS,
    the policy, the port and the engine. docs/services.md lists every check.
    Reads compose.yaml through `docker compose config`; without Docker the engine checks fail and the rest
    run. Exits 1 if any check failed.
    """
    from sglang_stack.doctor import checklist as preflight_checks

    code = preflight_checks.doctor(engine_of(c), service)
    if code:
        raise Exit(code=code)


@task(
    help={
        "out": "directory the manifests are written to, created if missing (required)",
        "values": "values file (default: deploy/k8s/values.yaml)",
        "profile": PROFILE_HELP + ": its image and router image",
        "image": "the server image by digest (REPOSITORY@sha256:...), over the values file and what `invoke publish` "
        "recorded",
        "router-image": "the router image by digest (REPOSITORY@sha256:...), as --image",
    }
)
@user_errors
def k8s(c, out, values=None, profile=None, image=None, router_image=None):
    """Render Kubernetes manifests from versions.lock and a values file (offline).

    Writes OUT/namespace.yaml (PodSecurity level), OUT/sglang.yaml (a StatefulSet of
    single-node servers, or a LeaderWorkerSet with RDMA when nnodes > 1; a PDB) and
    OUT/router.yaml (SGLang's router, finding the servers through the Kubernetes API), plus
    OUT/monitoring.yaml with metrics.pod_monitor. QoS Guaranteed pods, cheap liveness and
    generating readiness, drains on shutdown; the API key and HF token are Secret files.
    The pods run an image by digest where one is known: --image/--router-image, else the values
    file, else what `invoke publish` recorded for the profile's tag, else the store's registry digest.
    See docs/kubernetes.md.
    """
    from pathlib import Path

    from sglang_stack.atomic import out_path
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.services import k8s as k8smod

    from sglang_stack.lock import profiles

    from sglang_stack.image import store

    from sglang_stack.release.publish import published_for

    out = out_path(out)  # before the lock is read
    images = {}
    for flag, key, value in (("--image", "image", image), ("--router-image", "router_image", router_image)):
        if value is not None:
            if "@sha256:" not in image_reference(value, flag):
                raise UserError(f"{flag} {value}: name the image by digest (REPOSITORY@sha256:...): a tag can be pushed again")
            images[key] = value
    result, _ = lockmod.check_all(profiles.get(profile).lock, download=False)
    # A tag can be pushed again; the digest `invoke publish` recorded, or the store's (a push or pull), cannot.
    pinned = {}
    for tag in (result.tag, result.router_tag):
        if (tag == result.tag and "image" in images) or (tag == result.router_tag and "router_image" in images):
            continue
        if digest := published_for(tag):
            pinned[tag] = digest
            print(f"image {tag}: as `invoke publish` recorded it, {digest}")
        elif digest := store.repo_digest(engine_of(c), tag):
            pinned[tag] = digest
            print(f"image {tag}: by its registry digest {digest}")
        else:
            print(f"note: image {tag} by tag: no registry digest is known here (push it, or set image/router_image "
                  "in the values to REPOSITORY@sha256:...)")
    for path in k8smod.write(result, out, Path(values) if values else k8smod.VALUES, pinned, images):
        print(f"wrote {path}")
