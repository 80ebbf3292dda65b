"""Tasks for sglang-stack. Run `invoke --list`, or `invoke --help TASK`.

Each task is a thin wrapper: the logic lives in the ``sglang_stack`` package.
Defaults live in ``ns.configure`` below; override them in ``invoke.yaml`` or
with ``INVOKE_STACK_*`` environment variables.
"""

from __future__ import annotations

import sys

from invoke import Collection, Exit, task

from sglang_stack import ROOT
from sglang_stack.tasks.boundary import check_project_config, optional_positionals, quiet_interrupts, shape_parse_errors, user_errors
from sglang_stack.errors import UserError


if "invoke.main" in sys.modules:  # run by the `invoke` command (or python -m invoke), not imported by a test
    quiet_interrupts()
    # Before shape_parse_errors wraps it again: `invoke doctor eagle3`, like `invoke up eagle3`.
    optional_positionals(sys.modules["invoke.main"].program,
                         {"doctor": "service", "status": "service", "model-revision": "role", "models-verify": "role"})
    shape_parse_errors(sys.modules["invoke.main"].program)
    check_project_config(ROOT)


# --- lock, render, build -----------------------------------------------------


@task(
    help={
        "check": "validate versions.lock and requirements.lock.txt, fetching the pinned sglang wheel "
        "(hash-verified, cached) to cross-check its declared requirements, and PyPI's record of each pinned "
        "release (cached) to check that every hash belongs to that version; writes only the cache (default: off)",
        "verify": "download every artifact whose sha256 is only 'published', hash it, compare each wheel's "
        "requirements with its METADATA and the base image digest with the registry, then mark them "
        "'checked' (network, GBs; default: off)",
    }
)
@user_errors
def lock(c, check=False, verify=False):
    """Re-resolve the requirements files from versions.lock (network), or validate/verify the lock.

    Without flags: resolve every Python dependency from PyPI with `uv pip compile`,
    applying the [[override]]s of versions.lock, and write requirements.lock.txt
    (the SGLang image) and requirements.router.lock.txt (the router stage) with
    hashes. Then validate all three files, and check that each pinned name==version owns
    its hashes (PyPI's JSON API, one cached record per release: offline when warm).
    """
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import releases, resolve, artifacts as verifymod

    if check and verify:
        raise UserError("--check and --verify: choose one")
    if verify:
        lockmod.print_lines(verifymod.verify())
    elif not check:
        for path in resolve.resolve():
            print(f"wrote {path.name}")
    result, cross_checked = lockmod.check_all(download=True)
    print(lockmod.summary(result, cross_checked))
    print(releases.check_lock(result).line())


@task(help={"check": "do not write; exit 1 if docker/Dockerfile or docker/build/requirements differs from a fresh "
                     "render (default: off)"})
@user_errors
def render(c, check=False):
    """Render docker/Dockerfile from docker/Dockerfile.j2, and docker/build/requirements, from versions.lock (offline).

    Validates the lock first. The output is deterministic and carries a
    generated-file header; commit it so `docker build` works without Python.
    The requirement files (one hashed wheel a line) are written with the
    Dockerfile as one set, and the build mounts them at /build.
    """
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.image import render as rendermod

    result, cross_checked = lockmod.check_all(download=False)
    print(lockmod.summary(result, cross_checked))
    if check:
        diff = rendermod.drift(result)
        if diff:
            print("\n".join(diff[:80]))
            raise Exit("error: docker/Dockerfile or docker/build/requirements is out of date with its template or lock: "
                       "run `invoke render`", code=1)
        print("docker/Dockerfile: up to date")
    else:
        changed = rendermod.render(result)
        print(f"docker/Dockerfile: {'rendered' if changed else 'up to date'}")


@task(
    help={
        "engine": "docker (BuildKit via `docker buildx`), podman or buildah (default: stack.engine, 'docker')",
        "target": "stage to build: base, deps, sglang, runtime or router (default: runtime)",
        "tag": "image reference (default: derived from versions.lock, e.g. sglang-stack:0.5.9-cu130, "
        "sglang-stack-router:0.3.2 for the router; other stages get a -STAGE suffix)",
        "base-image": "replace the pinned base image: the CUDA base (BASE_IMAGE), or with --target router "
        "the slim Python base (ROUTER_BASE_IMAGE); e.g. a local Debian image for a smoke build",
        "no-cache": "build every layer afresh (default: off)",
        "ca-bundle": "PEM CA bundle passed as the build secret 'ca' for TLS-inspecting proxies "
        "(default: stack.ca_bundle, 'auto' = $PIP_CERT/$REQUESTS_CA_BUNDLE/$SSL_CERT_FILE if set; 'none' to skip)",
        "hf-token-file": "file holding a Hugging Face token, passed as the build secret 'hf_token' "
        "(default: $HF_TOKEN if set, through a private temporary file)",
        "build-arg": "extra KEY=VALUE build argument, repeatable (e.g. PREFETCH_MODELS=org/drafter)",
        "isolation": "podman/buildah isolation, e.g. chroot where there are no cgroups (default: stack.isolation)",
        "flashinfer-jit-cache": "also install flashinfer-jit-cache (5-8 GB of prebuilt kernels for every GPU "
        "generation) for hosts that must not compile anything at start (default: off)",
        "reproducible": "the same image ID for every build of this commit: podman/buildah write the OCI format "
        "(their Docker format records a random container id; OCI drops HEALTHCHECK, which compose and Kubernetes "
        "set themselves) and build without the cache (a cached layer keeps the clock of the commit that made it); "
        "docker needs BuildKit 0.13 or later (default: off; file contents and layers are reproducible either way)",
        "mirror": "build from the project's mirror/ (`invoke fetch`): wheels and base images from there only, "
        "the network off in every RUN step (default: off)",
        "cuda-arch-list": "GPU architectures FlashInfer's kernels are built for at image build time, e.g. "
        "\"9.0a 12.0a\" (H200, RTX PRO 6000); '' skips that build (default: versions.lock [jit] arch_list)",
    },
    iterable=["build_arg"],
    auto_shortflags=False,
)
@user_errors
def build(
    c,
    engine=None,
    target="runtime",
    tag=None,
    base_image=None,
    no_cache=False,
    ca_bundle=None,
    hf_token_file=None,
    build_arg=None,
    isolation=None,
    flashinfer_jit_cache=False,
    cuda_arch_list=None,
    reproducible=False,
    mirror=False,
):
    """Validate the lock, render docker/Dockerfile, then build the image.

    The lock check includes the hash check of `invoke lock --check`, from the cached
    release records (fetched once when missing). The build's clock is the commit's time
    (SOURCE_DATE_EPOCH), so two builds of one commit write the same files; see
    docs/image.md, Reproducible images. Prints the exact engine command
    before it runs and ends with the image reference and ID. Fails fast, with a hint,
    when no engine is reachable.
    """
    from pathlib import Path

    from sglang_stack.image import build as buildmod
    from sglang_stack import fetch
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import releases
    from sglang_stack.image import render as rendermod

    cfg = c.config.stack
    engine = engine or cfg.engine
    result, cross_checked = lockmod.check_all(download=False)
    print(lockmod.summary(result, cross_checked))
    print(releases.check_lock(result).line())
    changed = rendermod.render(result)
    print(f"docker/Dockerfile: {'rendered' if changed else 'up to date'}")
    ca_bundle = ca_bundle or cfg.ca_bundle
    if ca_bundle == "auto":
        ca_bundle = fetch.ca_bundle(explicit_only=True)
    elif ca_bundle == "none":
        ca_bundle = None
    isolation = isolation or (cfg.isolation if engine != "docker" else None) or None
    request = buildmod.BuildRequest(
        engine=engine,
        tag=tag or buildmod.default_tag(result.tag, target, result.router_tag),
        target=target,
        base_image=base_image,
        no_cache=no_cache,
        ca_bundle=Path(ca_bundle) if ca_bundle else None,
        hf_token_file=Path(hf_token_file) if hf_token_file else None,
        build_args=buildmod.parse_build_args(build_arg or []),
        isolation=isolation,
        source_date_epoch=buildmod.commit_epoch(),
        oci=bool(reproducible) and engine != "docker",
        reproducible=bool(reproducible),
    )
    if flashinfer_jit_cache:
        request.build_args["FLASHINFER_JIT_CACHE"] = "1"
    if cuda_arch_list is not None:
        request.build_args["FLASHINFER_CUDA_ARCH_LIST"] = buildmod.arch_list(cuda_arch_list)
    if mirror:
        from sglang_stack.image import mirror as mirrormod

        for line in mirrormod.prepare(request, result):
            print(line)
    ref, image_id = buildmod.build(request)
    if target in ("sglang", "runtime", "router"):
        from sglang_stack.image.verify import export_sbom

        try:
            sbom = export_sbom(engine, ref, ref)
        except UserError as err:  # the image is built; only the copy beside it is missing
            print(f"note: the SBOM stays inside the image (/opt/sglang-stack/sbom.cdx.json): {err}")
        else:
            print(f"wrote {sbom.relative_to(ROOT)} (the SBOM, also at /opt/sglang-stack/sbom.cdx.json)" if sbom else
                  f"note: {ref} has no SBOM at /opt/sglang-stack/sbom.cdx.json")
    print(f"built {ref} ({image_id})")


@task(
    help={
        "path": "an unpacked site-packages directory, e.g. a venv's or one copied out of an image (required)",
        "lock": "versions.lock with [cuda] version and the [[binary_exception]]s (default: this checkout's)",
    }
)
@user_errors
def binaries(c, path, lock=None):
    """Binary audit: every ELF object needs only this stack's CUDA and finds every library it needs.

    The check the image build runs after installing the Python set. Reads each x86-64 ELF
    file's dynamic section (pyelftools): a CUDA library of another major (libcudart.so.12 in a
    CUDA 13 stack) or a library found nowhere is an error, unless versions.lock declares it in
    a [[binary_exception]] with the features it breaks; a declaration that no longer matches is
    stale. The driver's libcuda.so.1 is allowed to be absent. One line per finding; exit 1 on
    any error, 0 when clean.
    """
    from sglang_stack.image.steps import binaries as binmod

    argv = ["--path", path] + (["--lock", lock] if lock else [])
    code = binmod.main(argv)
    if code:
        raise Exit(code=code)


@task(
    help={
        "target": "runtime, sglang or router (default: runtime)",
        "image": "after a build: compare the budget with this image, layer by layer (default: none)",
        "engine": "docker or podman, to read --image's history (default: stack.engine)",
        "margin": "how far a built layer may differ from its budget, as a fraction (default: 0.15)",
        "flashinfer-jit-cache": "count the optional flashinfer-jit-cache (default: off, as the build)",
        "top": "packages listed per layer, largest first (default: 12)",
    }
)
@user_errors
def size(c, target="runtime", image=None, engine=None, margin=None, flashinfer_jit_cache=False, top=None):
    """The image's size from the lock, before any build: per stage, layer and package, on disk and compressed.

    PyPI wheels are measured (PyPI's file size, and the unpacked size from each wheel's zip
    directory, read with range requests and cached); the URL wheels through PyPI's build of
    the same release; the base image and apt packages from figures versions.lock records, each
    with its status. With --image, each budgeted layer is compared with the built image's
    history and any layer off by more than --margin is named (exit 1). The last line is the total.
    """
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.image import size as sizemod

    from sglang_stack.flags import parse_count

    from sglang_stack.image import store

    if target not in ("runtime", "sglang", "router"):
        raise UserError(f"--target {target!r}: choose runtime, sglang or router")
    if image is not None:
        store.reference(image, "--image")
    top = parse_count("--top", top, 0) if top is not None else 12
    try:
        margin = 0.15 if margin is None else float(str(margin).strip())
    except ValueError:
        raise UserError(f"--margin {margin!r}: not a number (a fraction, e.g. 0.15)") from None
    if not 0 < margin < 10:
        raise UserError(f"--margin {margin!r}: must be a fraction above 0 (e.g. 0.15 for 15%)")
    lock_ = lockmod.check()
    layers = sizemod.budget(lock_, target, jit_cache=flashinfer_jit_cache)
    print("\n".join(sizemod.report(layers, target, top)))
    off = 0
    if image:
        lines, off = sizemod.compare(layers, sizemod.built_layers(engine or c.config.stack.engine, image), margin)
        print("\n".join(lines))
    print(sizemod.total_line(layers, target))
    if off:
        raise Exit(f"error: {off} layer(s) of {image} differ from the budget by more than {margin:.0%}", code=1)


# --- patches and audit --------------------------------------------------------


def _pinned_wheel():
    """The sglang wheel versions.lock pins, fetched by URL and sha256 (cached)."""
    from sglang_stack import fetch
    from sglang_stack.lock import lockfile as lockmod

    table = lockmod.load()["sglang"]
    return fetch.fetch(table["url"], table["sha256"])


def _audit_arch(arch):
    from sglang_stack.lock import lockfile as lockmod

    return arch or lockmod.load().get("image", {}).get("audit_arch") or "KimiK25ForConditionalGeneration"


@task(
    help={
        "sglang-src": "directory that contains sglang/: an unpacked wheel or a `pip install --target` tree (required)",
        "patches-dir": "the series to use (default: stack.patches_dir, 'patches')",
        "dry-run": "check every patch against the tree and write nothing (default: off)",
        "unpack": "first unpack the wheel versions.lock pins (hash-verified, cached) into --sglang-src, "
        "which must be new or empty (default: off)",
        "refresh": "regenerate each patch's diff from the edited tree at --sglang-src, keeping its header, "
        "and move the series' target to that release (default: off)",
        "pristine": "with --refresh: the unpatched tree to diff against "
        "(default: the pinned wheel, unpacked into a temporary directory)",
    }
)
@user_errors
def patch(c, sglang_src, patches_dir=None, dry_run=False, unpack=False, refresh=False, pristine=None):
    """Apply the patch series to an unpacked sglang tree, all or nothing; or --refresh the series from one.

    Every hunk of every patch is checked first, without fuzz; one that does not
    match fails the task with the patch, file and hunk named, and the tree is left
    untouched. A series that is already (or partly) applied is an error too.
    Prints each patch's name and sha256, as the image build does.
    Rebasing onto a new SGLang: docs/patches.md.
    """
    import tempfile
    from pathlib import Path

    from sglang_stack.patching import patches as patchmod
    from sglang_stack.patching import refresh as refreshmod

    pdir = Path(patches_dir or c.config.stack.patches_dir)
    src = Path(sglang_src)
    if refresh:
        if dry_run or unpack:
            raise UserError("--refresh regenerates the series from an edited tree: it takes no --dry-run or --unpack")
        if pristine:
            refreshmod.refresh(src, Path(pristine), pdir)
            return
        with tempfile.TemporaryDirectory(prefix="sglang-stack-pristine-") as tmp:
            base = patchmod.unpack_wheel(_pinned_wheel(), Path(tmp) / "site")
            refreshmod.refresh(src, base, pdir)
        return
    if pristine:
        raise UserError("--pristine goes with --refresh")
    if unpack:
        patchmod.unpack_wheel(_pinned_wheel(), src)
        print(f"unpacked the pinned sglang wheel into {src}")
    patchmod.apply_series(src, pdir, dry_run=dry_run)


@task(
    help={
        "patches-dir": "the series to check (default: stack.patches_dir, 'patches')",
        "arch": "model class the audit checks (default: versions.lock [image] audit_arch, KimiK25ForConditionalGeneration)",
        "keep": "keep the temporary patched tree and print where it is (default: off)",
    }
)
@user_errors
def patch_check(c, patches_dir=None, arch=None, keep=False):
    """Prove the series on the pinned wheel: fetch it (hash-verified, cached), unpack, apply, audit.

    Needs only PyPI. Exits 0 only if every patch applies exactly (no fuzz, no
    offset) and the EAGLE-3 audit passes on the result; the image build runs the
    same two steps.
    """
    import shutil
    import tempfile
    from pathlib import Path

    from sglang_stack.audit import eagle3 as auditmod

    pdir = Path(patches_dir or c.config.stack.patches_dir)
    wheel = _pinned_wheel()
    tmp = Path(tempfile.mkdtemp(prefix="sglang-stack-patch-check-"))
    try:
        report = auditmod.check_wheel(wheel, pdir, _audit_arch(arch), tmp)
        for line in report.lines():
            print(line)
    finally:
        if keep:
            print(f"kept {tmp / 'site'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if not report.passed:
        raise Exit("error: patch-check failed: the audit found missing methods", code=1)
    print(f"patch-check passed in {report.seconds:.2f} s of audit")


@task(
    help={
        "sglang-src": "directory that contains sglang/ (required)",
        "arch": "model class to check, as in a config.json 'architectures' "
        "(default: versions.lock [image] audit_arch, KimiK25ForConditionalGeneration)",
        "model-config": "a model's config.json: check its first 'architectures' entry instead of --arch",
        "verbose": "also list every call site, guarded and draft calls, and which class provides each method (default: off)",
        "allow-undecided": "exit 0 when nothing is missing though some methods are undecided; the image build "
        "never passes this (default: off: undecided fails, exit 3)",
    }
)
@user_errors
def audit(c, sglang_src, arch=None, model_config=None, verbose=False, allow_undecided=False):
    """EAGLE-3 readiness check: does the model class have every method EAGLE-3 calls on the target?

    No GPU, no torch, a second: reads the SGLang source for every method the EAGLE-3
    path calls on the target model, and imports the model with stand-ins for its heavy
    dependencies to ask Python whether the class provides it (the source, where Python
    cannot tell; --model-config also builds it with that config.json). Exit 1 with one
    line per missing method and its call sites; exit 3, failing closed, when a method
    may be missing in a way the source cannot settle (one 'undecided' line each, with why);
    exit 0 with a one-line summary.
    """
    from pathlib import Path

    from sglang_stack.audit import eagle3 as auditmod

    if arch and model_config:
        raise UserError("--arch and --model-config: choose one")
    name, config = auditmod.model_config(Path(model_config)) if model_config else (_audit_arch(arch), None)
    report = auditmod.audit(Path(sglang_src), name, config)
    report.allow_undecided = allow_undecided
    for line in report.lines(verbose=verbose):
        print(line)
    if not report.passed:
        raise Exit(code=report.exit_code)

# --- services: up, down, logs, status, doctor ---------------------------------


@task(
    help={
        "service": "baseline, eagle3 or router (required)",
        "timeout": "whole seconds to wait for /health to generate a token (default 0: the healthcheck's "
        "start period plus its retries, 32 min with compose.yaml's defaults)",
        "interval": "seconds between progress lines while the model loads (default 15)",
        "skip-acceptance": "for eagle3, do not run `invoke acceptance eagle3` once it is healthy (default: off: it runs)",
    }
)
@user_errors
def up(c, service, timeout=None, interval=None, skip_acceptance=False):
    """Start SERVICE (baseline or eagle3 on every GPU, or router) and wait until it really serves.

    Runs the host preflight first (`invoke doctor` quietly) and refuses to start on the
    first failed check. Then `docker compose up --detach --wait SERVICE`, which builds the
    image if it is missing, printing progress while the model loads. Returns once the
    healthcheck passes: SGLang's /health generated one token, or for the router, at least
    one of ROUTER_WORKER_URLS is healthy. The compose files are those `docker compose`
    reads here (COMPOSE_FILE in .env for multi-node: docs/scaling.md).
    """
    from sglang_stack.flags import parse_count, parse_seconds
    from sglang_stack.services import compose
    from sglang_stack.doctor import checklist as doctor

    # Numbers arrive as text and are read here: Invoke's own int() cast would end in a traceback.
    wait = parse_count("--timeout", 0 if timeout is None else timeout, 0)
    pause = parse_seconds("--interval", 15 if interval is None else interval)
    compose.check_service_name(service)
    doctor.preflight(c.stack.engine, service)
    svc = compose.router_service() if service == compose.ROUTER else compose.service(service)
    wait = wait or compose.wait_timeout(svc)
    compose.up(c.stack.engine, service, wait_timeout=wait, interval=pause)
    if service == "eagle3" and not skip_acceptance:
        # A healthy eagle3 can still have lost its acceptance silently (docs/services.md, Acceptance).
        from sglang_stack.tasks.services import acceptance as check_acceptance

        check_acceptance(c, "eagle3")


@task(help={"volumes": "also remove the cache volume (Hugging Face and JIT kernel caches) (default: off)"})
@user_errors
def down(c, volumes=False):
    """Stop and remove the baseline, eagle3 and router containers (whichever runs)."""
    from sglang_stack.services import compose

    compose.down(c.stack.engine, volumes=volumes)


@task(
    help={
        "service": "baseline, eagle3 or router (required)",
        "follow": "keep printing new lines (default: on; --no-follow to stop at the end)",
        "tail": "lines of history to show first (default 200; 'all' for everything)",
    }
)
@user_errors
def logs(c, service, follow=True, tail="200"):
    """Show SERVICE's SGLang log (docker compose logs)."""
    from sglang_stack.services import compose

    compose.logs(c.stack.engine, service, follow=follow, tail=tail)


@task(help={"service": "only this service: baseline, eagle3 or router, also positionally (default: every one)"})
@user_errors
def status(c, service=None):
    """One line per service: state, health, published address, uptime; says when the router is down."""
    from sglang_stack.services import compose

    compose.status(c.stack.engine, only=compose.check_service_name(service) if service else None)


@task(help={"service": "which service to check for: baseline, eagle3 or router, also positionally (default: eagle3, "
                       "which also needs the drafter)"})
@user_errors
def doctor(c, service="eagle3"):
    """Check this host for SERVICE, one line per check, each FAIL with its fix.

    Docker engine and NVIDIA runtime, driver (CUDA 13.0), GPU count against TP_SIZE,
    compute capability (with SM120 notes), /dev/shm, memlock, disk, the model and
    drafter directories, the port, and the EAGLE-3 audit inside the built image.
    With NNODES > 1: the rank and rendezvous, RDMA devices (/dev/infiniband, NCCL_IB_HCA)
    and the interfaces NCCL and Gloo bind to. For the router: ROUTER_WORKER_URLS,
    the policy, the port and the engine.
    Works without Docker (those checks fail, the rest run); exits 1 if any check failed.
    """
    from sglang_stack.services import compose
    from sglang_stack.doctor import checklist as preflight_checks

    compose.check_service_name(service)
    code = preflight_checks.doctor(c.stack.engine, service)
    if code:
        raise Exit(code=code)


@task(
    help={
        "out": "directory the manifests are written to, created if missing (required)",
        "values": "values file (default: deploy/k8s/values.yaml)",
    }
)
@user_errors
def k8s(c, out, values=None):
    """Render Kubernetes manifests from versions.lock and a values file (offline).

    Writes OUT/namespace.yaml (PodSecurity level), OUT/sglang.yaml (a StatefulSet of
    single-node servers, or a LeaderWorkerSet with RDMA when nnodes > 1; a PDB) and
    OUT/router.yaml (SGLang's router, finding the servers through the Kubernetes API), plus
    OUT/monitoring.yaml with metrics.pod_monitor. QoS Guaranteed pods, cheap liveness and
    generating readiness, drains on shutdown; the API key and HF token are Secret files.
    See docs/kubernetes.md.
    """
    from pathlib import Path

    from sglang_stack.atomic import out_path
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.services import k8s as k8smod

    out = out_path(out)  # before the lock is read
    result, _ = lockmod.check_all(download=False)
    for path in k8smod.write(result, out, Path(values) if values else k8smod.VALUES):
        print(f"wrote {path}")


# --- smoke --------------------------------------------------------------------


@task(
    help={
        "keep": "keep the images and containers the smoke test creates (default: remove them)",
        "base-image": "build on this Debian-like base (python3, venv, patch) instead of the debootstrap one "
        "(default: localhost/sglang-stack-smoke-base:bookworm, made if missing)",
        "negative": "also prove that a broken patch fails the build (default: on; --no-negative skips it)",
        "gpu": "on a GPU host with Docker and the NVIDIA toolkit: build the full image, bring up baseline "
        "then eagle3 with --wait, send one completion to each, take them down (default: off; never in CI)",
        "target": "sglang (default: the sglang stage with buildah, daemonless) or runtime (the whole image on the "
        "Docker Engine, with the stand-ins docker/standins.toml declares for what no CI machine can fetch)",
    }
)
@user_errors
def smoke(c, keep=False, base_image=None, negative=True, gpu=False, target="sglang"):
    """Container smoke test: build the real Dockerfile with what this machine can reach, and check it from inside.

    --target sglang (default), daemonless: makes (or reuses) a local Debian base with
    debootstrap, builds the SGLang stage of docker/Dockerfile on it with buildah (pinned
    wheel from PyPI, patch series, audit), then checks from inside the image: sglang
    version, patched-file hashes, the Kimi-K2.5 EAGLE-3 methods, the audit, the labels,
    and that no build secret reached a layer.

    --target runtime: the whole image on the Docker Engine through `invoke build`'s own
    code, with the stand-ins of docker/standins.toml for the CUDA base and devel images and
    the three URL wheels, FlashInfer's ahead-of-time step skipped; then the imports, the
    entrypoint (launch_server --help) and compose's healthcheck as uid 10001, `invoke
    verify`, `invoke size --image` on every layer, and the SBOM (see docs/smoke.md).

    Exits 1 if any check fails. With --gpu, the real image and services on a GPU host
    instead.
    """
    from sglang_stack.smoke import container as smokemod
    from sglang_stack.image import store

    if target not in ("sglang", "runtime"):
        raise UserError(f"--target {target!r}: choose sglang or runtime")
    if base_image is not None:
        store.reference(base_image, "--base-image")
    if target == "runtime" and (base_image is not None or gpu):
        raise UserError("--target runtime makes its own stand-in base: it takes neither --base-image nor --gpu")
    if target == "runtime":
        from sglang_stack.smoke import runtime as runtime_smoke

        result = runtime_smoke.smoke(keep=keep)
    elif gpu:
        result = smokemod.gpu_smoke(engine=c.stack.engine, keep=keep)
    else:
        result = smokemod.smoke(base=base_image or smokemod.BASE_IMAGE, keep=keep, negative=negative)
    times = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    size = f"; image {result.size / 1e6:.0f} MB" if result.size else ""
    print(f"smoke: {sum(ok for _, ok, _ in result.checks)}/{len(result.checks)} checks passed; {times}{size}")
    if not result.ok:
        raise Exit("error: smoke test failed", code=1)

# --- bench --------------------------------------------------------------------
# `invoke bench` and `invoke bench-compare`: their flags and help are in sglang_stack/tasks/bench.py.

from sglang_stack.tasks.bench import bench, bench_compare  # noqa: E402,F401 (collected into ns below)

# `invoke fetch` (the mirror), `invoke verify` (an image against this checkout) and `invoke advisories` (known
# vulnerabilities of the pins): sglang_stack/tasks/image.py.
from sglang_stack.tasks.image import advisories, fetch, verify  # noqa: E402,F401 (collected into ns below)

# `invoke models-lock`, `models-verify`, `model-revision` (the weights by commit): sglang_stack/tasks/services.py.
# `invoke acceptance` (EAGLE-3 on this host) and `invoke settings` (what SGLang decides): the same file.
from sglang_stack.tasks.services import acceptance, model_revision, models_lock, models_verify, settings  # noqa: E402,F401


ns = Collection.from_module(sys.modules[__name__])
ns.configure(
    {
        "stack": {
            "engine": "docker",
            "patches_dir": "patches",
            "ca_bundle": "auto",
            "isolation": "",
            "bench": {
                "levels": "1,4,16",
                "repeats": 3,
                "warmup": 2,
                "timeout": 600,
                "results": "bench-results",
                "sweep_steps": "1,2,3,4",
                "sweep_topk": "1",
                "sweep_draft_tokens": "",
                "ready_timeout": 1800,
            },
        }
    }
)
