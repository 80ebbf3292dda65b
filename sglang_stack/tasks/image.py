"""The image: `invoke lock`, `bump`, `render`, `build`, `binaries` and `size`; `invoke fetch` (the mirror), `invoke verify`
(a built image against this checkout) and `invoke advisories` (known vulnerabilities of the pins)."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Exit, task

from sglang_stack import ROOT
from sglang_stack.engine import Engine, image_reference
from sglang_stack.errors import UserError
from sglang_stack.lock.profiles import HELP as PROFILE_HELP
from sglang_stack.tasks.boundary import engine_of, user_errors

DEFAULTS = {"stack": {"engine": "docker", "ca_bundle": "auto", "isolation": ""}}
"""`stack.*` keys these tasks read: override them in invoke.yaml or with INVOKE_STACK_* variables."""


def _images(engine: Engine, target: str, base_image: str | None) -> dict[str, str]:
    """ARG -> reference of every base image ``target``'s build starts from."""
    from sglang_stack.image import build as buildmod


    stages = {"all": ("runtime", "router")}.get(target, (target,))
    if base_image is not None:
        image_reference(base_image, "--base-image")
    if base_image and len(stages) > 1:
        raise UserError("--base-image: name the stage it is the base of with --target (runtime, sglang, router, ...)")
    out = {}
    for stage in stages:
        out.update(buildmod.base_images(buildmod.BuildRequest(engine=engine, tag="x", target=stage, base_image=base_image)))
    return out


@task(
    help={
        "dir": "where the mirror goes, relative to the project (default: mirror, the mirror/ that `invoke build "
        "--mirror` reads)",
        "target": "what to mirror: all (runtime and router), runtime, deps, sglang, base or router (default: all)",
        "engine": "the image store the base images are saved from, pulled into first if missing: docker, podman "
        "or buildah (default: stack.engine, 'docker')",
        "base-image": "mirror this base image instead of the pinned one (as `invoke build --base-image`; needs --target)",
        "optional": "also mirror the optional wheels (flashinfer-jit-cache, 5-8 GB) (default: off)",
        "profile": PROFILE_HELP + "; a mirror holds one profile's lock at a time",
    }
)
@user_errors
def fetch(c, dir="mirror", target="all", engine=None, base_image=None, optional=False, profile=None):
    """Mirror every artifact a build downloads, each hashed against the lock (network).

    The PyPI wheels of the requirements files (for the interpreter and platform each was
    resolved for), the URL wheels and build tools of versions.lock, and the base images as
    docker-archive files, then manifest.json. Resumes: what is already there and good stays.
    A file whose sha256 the lock does not allow is deleted and named, a re-upload upstream.
    Then `invoke build --mirror` builds with no network (docs/image.md, Offline builds).
    """
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.image import mirror as mirrormod

    from sglang_stack.lock import profiles

    engine = engine_of(c, engine)  # before the mirror's directories are made
    lock, _ = lockmod.check_all(profiles.get(profile).lock, download=False)
    path = Path(dir) if Path(dir).is_absolute() else ROOT / dir
    for line in mirrormod.fetch(lock, target, _images(engine, target, base_image), engine, path, optional):
        print(line)


@task(
    help={
        "image": "the image to check: a local reference or ID; with --key, a registry reference "
        "(REGISTRY/REPOSITORY:TAG or @sha256:...)",
        "engine": "docker, podman or buildah: the store that holds it (default: stack.engine, 'docker')",
        "rebuild": "also build this checkout's stage afresh, reproducibly, and compare image IDs "
        "(needs the base image; default: off)",
        "base-image": "with --rebuild: the base to build on (as `invoke build --base-image`)",
        "mirror": "with --rebuild: build from the project's mirror/, as an image made by `invoke build --mirror` "
        "was (default: off)",
        "profile": PROFILE_HELP,
        "key": "the public key (or key reference) `invoke publish` signed with: check the published image's "
        "signature, its SBOM and verdict attestations, and the verdicts against this checkout's lock",
        "bundle": "with --key: check a directory `invoke bundle` wrote, with no network, instead of IMAGE",
        "tlog": "with --key: also require the transparency log entries (needs Sigstore's network; default: off)",
        "insecure": "with --key: the registry speaks plain HTTP though it is not on loopback (default: off)",
    }
)
@user_errors
def verify(c, image=None, engine=None, rebuild=False, base_image=None, mirror=False, profile=None, key=None,
           bundle=None, tlog=False, insecure=False):
    """Check an image against this checkout: labels, installed set, SBOM, patched files (and digest).

    One line per check, then the verdict; exit 1 naming the label, package or file that
    differs. The image's own Python lists what is installed and hashes the patched files,
    with this checkout's inventory script mounted read-only (no code of the image's decides).
    With --key, IMAGE is a registry reference that `invoke publish` pushed: its signature, both
    attestations, the build's verdicts and the attested pins against this checkout are checked, then
    the image pulled by digest as above. With --key and --bundle DIR, the same from an offline bundle.
    See docs/publish.md.
    """
    if key is not None or bundle is not None:
        return _verify_signed(c, image, engine, key, bundle, tlog, insecure, (rebuild, base_image, mirror, profile))
    from sglang_stack.image import verify as verify_image


    if image is None:
        raise UserError("IMAGE: name the image to check (a local reference or ID)")
    image_reference(image, "--image")
    if base_image is not None:
        image_reference(base_image, "--base-image")
    engine = engine_of(c, engine)
    if mirror and not rebuild:
        raise UserError("--mirror applies to --rebuild only")
    from sglang_stack.lock import profiles

    report = verify_image.verify(engine, image, rebuild=rebuild, base_image=base_image, mirror=mirror,
                                 lock_path=profiles.get(profile).lock)
    for line in report.lines():
        print(line)
    print(f"wrote {verify_image.write_record(report).relative_to(verify_image.ROOT)} (`invoke bench` cites it)")
    if not report.ok:
        name, detail = next((c.name, c.detail) for c in report.checks if c.ok is False)
        raise Exit(f"error: {image}: {name}: {detail}", code=1)


def _verify_signed(c, image, engine, key, bundle, tlog, insecure, others) -> None:
    """`invoke verify --key`: a published image or an offline bundle (sglang_stack/release/publish.py)."""
    from sglang_stack.release import cosign, publish

    if key is None:
        raise UserError("--bundle: give the public key too (--key PUB)")
    if any(others[:3]) or others[3] is not None:
        raise UserError("--key: --rebuild, --base-image, --mirror and --profile apply to a local image (the verdict "
                        "names its own profile)")
    key = cosign.key_ref(key, "--key")
    if bundle is not None:
        if image is not None:
            raise UserError("--bundle: the bundle names its image; give IMAGE or --bundle, not both")
        if not Path(bundle).is_dir():
            raise UserError(f"--bundle {bundle}: no such directory")
        outcome = publish.verify_bundle(Path(bundle), key)
    else:
        if image is None:
            raise UserError("IMAGE: name the published image (REGISTRY/REPOSITORY:TAG or @sha256:...)")
        outcome = publish.verify_reference(engine_of(c, engine), image, key, tlog, insecure)
    for line in outcome.lines():
        print(line)
    if outcome.failed:
        name, detail = outcome.failed
        raise Exit(f"error: {outcome.subject}: {name}: {detail}", code=1)
    print(f"verified: {outcome.subject}, signed by that key, against this checkout")
    # What none of the checks above can show; a reader of "verified" should know where it ends.
    print(f"not covered: {publish.NOT_COVERED}")


@task(
    help={
        "service": "the vulnerability service pip-audit asks: pypi (PyPI's JSON API, the default) or osv",
        "osv_url": "with --service osv: the OSV query API to ask, for a mirror (default: pip-audit's, "
        "https://api.osv.dev/v1/query)",
    }
)
@user_errors
def advisories(c, service="pypi", osv_url=None):
    """Known vulnerabilities of every pinned distribution, found by pip-audit (network).

    pip-audit asks the service about each release the lock installs (requirements.lock.txt,
    the router's, and versions.lock's wheels by their public version) without resolving or
    installing anything. Each advisory is printed with its id and aliases, the versions that
    fix it, and whether the stack can take the fix (not where versions.lock pins the
    distribution, nor where sglang's own requirement excludes every fixed version). An
    advisory the project accepts is a [[advisory]] table of versions.lock with its reason.
    A pin the service has no record of fails the run. Exit 1 while any advisory is neither
    fixed nor accepted.
    """
    from sglang_stack.lock import advisories as advisories_mod
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import wheels

    lock, cross_checked = lockmod.check_all(download=False)
    requires = wheels.sglang_requires(lock, download=True)
    report = advisories_mod.audit(lock, requires, service, osv_url)
    for line in report.lines():
        print(line)
    if report.open:
        raise Exit(f"error: {len(report.open)} advisories affect pinned distributions: take the fix, or accept each "
                   "with its reason in versions.lock ([[advisory]])", code=1)


@task(
    help={
        "check": "validate versions.lock and requirements.lock.txt, fetching the pinned sglang wheel "
        "(hash-verified, cached) to cross-check its declared requirements, and PyPI's record of each pinned "
        "release (cached) to check that every hash belongs to that version; writes only the cache (default: off)",
        "verify": "download every artifact whose sha256 is only 'published', hash it, compare each wheel's "
        "requirements with its METADATA and the base image digest with the registry, then mark them "
        "'checked' (network, GBs; default: off)",
        "profile": PROFILE_HELP,
    }
)
@user_errors
def lock(c, check=False, verify=False, profile=None):
    """Re-resolve the requirements files from versions.lock (network), or validate/verify the lock.

    Without flags: resolve every Python dependency from PyPI with `uv pip compile`,
    applying the [[override]]s of versions.lock, and write requirements.lock.txt
    (the SGLang image) and requirements.router.lock.txt (the router stage) with
    hashes. Then validate all three files, and check that each pinned name==version owns
    its hashes (PyPI's JSON API, one cached record per release: offline when warm).
    """
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import profiles, releases, resolve, artifacts as verifymod

    if check and verify:
        raise UserError("--check and --verify: choose one")
    path = profiles.get(profile).lock
    if verify:
        print("\n".join(verifymod.verify(path)), file=sys.stderr)
    elif not check:
        for written in resolve.resolve(path):
            print(f"wrote {profiles.display(written)}")
    result, cross_checked = lockmod.check_all(path, download=True)
    print(lockmod.summary(result, cross_checked))
    print(releases.check_line(result))
    if isinstance(result.data["sglang"].get("arm64"), dict):  # the aarch64 image's lock, checked the same way
        arm, cross_checked = lockmod.check_all(path, download=True, platform="linux/arm64")
        print(lockmod.summary(arm, cross_checked).replace(": ok:", " (linux/arm64): ok:", 1))
        print(releases.check_line(arm))


@task(
    help={
        "name": "a PyPI distribution of the profile's requirement locks, or sglang with --new-profile (required)",
        "version": "the release to move it to (required)",
        "profile": PROFILE_HELP,
        "override": "why the stack may take a version that sglang or a URL wheel excludes: it becomes an "
        "[[override]] of the profile's versions.lock (default: none; such a version is refused)",
        "new-profile": "with sglang: make profiles/VERSION from that release's metadata (default: off)",
    }
)
@user_errors
def bump(c, name, version, profile=None, override=None, new_profile=False):
    """Move one PyPI distribution of a profile to VERSION, and nothing else; or make a profile for an SGLang release.

    Fetches the release's hashes from the index, moves only that distribution's resolver clock
    ([resolve] exclude_newer_package), re-locks and re-renders the profile, and prints the files that
    changed; the distribution must come out at VERSION. Any failure leaves every file as it was.
    `invoke bump sglang VERSION --new-profile` writes profiles/VERSION (docs/profiles.md). Network.
    """
    from sglang_stack.image import bump as bumpmod
    from sglang_stack.lock import profiles

    if new_profile:
        if name.lower() != "sglang":
            raise UserError(f"--new-profile makes a profile for an SGLang release: `invoke bump sglang VERSION --new-profile`, not {name}")
        if profile or override:
            raise UserError("--new-profile takes no --profile or --override: the profile is the new release's")
        changed = bumpmod.new_profile(version)
    else:
        changed = bumpmod.bump(profiles.get(profile), name, version, override)
    for path in changed:
        print(f"changed {profiles.display(path)}")


@task(help={"check": "exit 1 if the committed Dockerfile or its docker/build/requirements differ from a fresh "
                     "render (default: off)", "profile": PROFILE_HELP,
             "platform": "linux/amd64 (default) or linux/arm64, for a profile whose lock names the aarch64 wheel: "
             "writes docker/Dockerfile.arm64 and docker/build.arm64 from requirements.arm64.lock.txt"})
@user_errors
def render(c, check=False, profile=None, platform=None):
    """Render docker/Dockerfile from docker/Dockerfile.j2, and docker/build/requirements, from versions.lock (offline).

    Validates the lock first. The output is deterministic and carries a
    generated-file header; commit it so `docker build` works without Python.
    The requirement files (one hashed wheel a line) are written with the
    Dockerfile as one set, and the build mounts them at /build.
    """
    from sglang_stack.lock import lockfile as lockmod, platforms
    from sglang_stack.lock import profiles
    from sglang_stack.image import render as rendermod

    chosen = profiles.get(profile)
    platform = platforms.platform_of(platform)
    result, cross_checked = lockmod.check_all(chosen.lock, download=False, platform=platform)
    print(lockmod.summary(result, cross_checked))
    output = rendermod.dockerfile_of(chosen.dockerfile, platform)
    dockerfile = profiles.display(output)
    again = "`invoke render" + ("" if chosen.default else f" --profile {chosen.name}") + \
        ("" if platform == "linux/amd64" else f" --platform {platform}") + "`"
    if check:
        diff = rendermod.drift(result, output)
        if diff:
            print("\n".join(diff[:80]))
            raise Exit(f"error: {dockerfile} or its requirement files are out of date with its template or lock: "
                       f"run {again}", code=1)
        print(f"{dockerfile}: up to date")
    else:
        changed = rendermod.render(result, output)
        print(f"{dockerfile}: {'rendered' if changed else 'up to date'}")


@task(
    help={
        "engine": "docker (BuildKit via `docker buildx`), podman or buildah (default: stack.engine, 'docker')",
        "target": "stage to build: base, deps, sglang, runtime or router (default: runtime)",
        "tag": "image reference (default: derived from versions.lock, e.g. sglang-stack:0.5.9-cu130, "
        "sglang-stack-router:0.5.9 for the router; other stages get a -STAGE suffix)",
        "base-image": "replace the pinned base image: the CUDA base (BASE_IMAGE), or with --target router "
        "the slim Python base (ROUTER_BASE_IMAGE); e.g. a local Debian image for a smoke build",
        "no-cache": "build every layer afresh (default: off)",
        "ca-bundle": "PEM CA bundle passed as the build secret 'ca' for TLS-inspecting proxies "
        "(default: stack.ca_bundle, 'auto' = $PIP_CERT/$REQUESTS_CA_BUNDLE/$SSL_CERT_FILE if set; 'none' to skip)",
        "hf-token-file": "file holding a Hugging Face token, passed as the build secret 'hf_token' "
        "(default: $HF_TOKEN if set, through a private temporary file)",
        "build-arg": "extra KEY=VALUE build argument, repeatable (e.g. PREFETCH_MODELS=drafter: roles of models.lock, "
        "baked in at their locked commit and checked file by file)",
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
        "profile": PROFILE_HELP,
        "platform": "linux/amd64 (default) or linux/arm64, for a profile whose lock has the aarch64 set (the 0.5.23 "
        "one): builds its Dockerfile.arm64 with buildx or buildah --platform, tagged with an -arm64 suffix; a host "
        "that cannot run aarch64 steps (no QEMU binfmt) is refused in one line that says what to install",
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
    profile=None,
    platform=None,
):
    """Validate the lock, render docker/Dockerfile, then build the image.

    The lock check includes the hash check of `invoke lock --check`, from the cached
    release records (fetched once when missing). The build's clock is the commit's time
    (SOURCE_DATE_EPOCH), so two builds of one commit write the same files; see
    docs/image.md, Reproducible images. Prints the exact engine command
    before it runs and ends with the image reference and ID. Fails fast, with a hint,
    when no engine is reachable.
    """
    from sglang_stack.image import workflow

    cfg = c.config.stack
    engine = engine_of(c, engine)
    flags = workflow.BuildFlags(
        engine=engine, target=target, tag=tag, base_image=base_image, no_cache=no_cache,
        ca_bundle=ca_bundle or cfg.ca_bundle, hf_token_file=hf_token_file, build_args=tuple(build_arg or ()),
        isolation=isolation, configured_isolation=cfg.isolation, flashinfer_jit_cache=flashinfer_jit_cache, cuda_arch_list=cuda_arch_list,
        reproducible=bool(reproducible), mirror=mirror, profile=profile, platform=platform,
    )
    ref, image_id = workflow.build(flags)
    print(f"built {ref} ({image_id})")


@task(
    help={
        "path": "an unpacked site-packages directory, e.g. a venv's or one copied out of an image (required)",
        "lock": "versions.lock with [cuda] version and the [[binary_exception]]s (default: the profile's)",
        "profile": PROFILE_HELP,
    }
)
@user_errors
def binaries(c, path, lock=None, profile=None):
    """Binary audit: every ELF object needs only this stack's CUDA and finds every library it needs.

    The check the image build runs after installing the Python set. Reads each x86-64 ELF
    file's dynamic section (pyelftools): a CUDA library of another major (libcudart.so.12 in a
    CUDA 13 stack) or a library found nowhere is an error, unless versions.lock declares it in
    a [[binary_exception]] with the features it breaks; a declaration that no longer matches is
    stale. The driver's libcuda.so.1 is allowed to be absent. One line per finding; exit 1 on
    any error, 0 when clean.
    """
    from sglang_stack.image.steps import binaries as binmod

    from sglang_stack.lock import profiles

    if lock and profile:
        raise UserError("--lock and --profile: choose one")
    argv = ["--path", path, "--lock", lock or str(profiles.get(profile).lock)]
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
        "profile": PROFILE_HELP,
        "cuda-arch-list": "the image's GPU architectures, as `invoke build --cuda-arch-list` (e.g. 12.0a): what loads "
        "only on other GPUs is left out (default: versions.lock [jit] arch_list)",
        "platform": "linux/amd64 (default) or linux/arm64: the aarch64 image's budget, from its requirement lock",
    }
)
@user_errors
def size(c, target="runtime", image=None, engine=None, margin=None, flashinfer_jit_cache=False, top=None, profile=None,
         platform=None, cuda_arch_list=None):
    """The image's size from the lock, before any build: per stage, layer and package, on disk and compressed.

    PyPI wheels are measured (PyPI's file size, and the unpacked size from each wheel's zip
    directory, read with range requests and cached); the URL wheels through PyPI's build of
    the same release; the base image and apt packages from figures versions.lock records, each
    with its status. With --image, each budgeted layer is compared with the built image's
    history and any layer off by more than --margin is named (exit 1). The last line is the total.
    """
    from sglang_stack.lock import lockfile as lockmod, platforms
    from sglang_stack.image import size as sizemod

    from sglang_stack.flags import parse_count


    if target not in ("runtime", "sglang", "router"):
        raise UserError(f"--target {target!r}: choose runtime, sglang or router")
    if image is not None:
        image_reference(image, "--image")
    top = parse_count("--top", top, 0) if top is not None else 12
    try:
        margin = 0.15 if margin is None else float(str(margin).strip())
    except ValueError:
        raise UserError(f"--margin {margin!r}: not a number (a fraction, e.g. 0.15)") from None
    if not 0 < margin < 10:
        raise UserError(f"--margin {margin!r}: must be a fraction above 0 (e.g. 0.15 for 15%)")
    from sglang_stack.lock import profiles

    lock_ = lockmod.check(profiles.get(profile).lock, platform=platforms.platform_of(platform))
    archs = None
    if cuda_arch_list is not None:
        from sglang_stack.image.workflow import arch_list

        archs = arch_list(cuda_arch_list).split()
    layers = sizemod.budget(lock_, target, jit_cache=flashinfer_jit_cache, archs=archs)
    print("\n".join(sizemod.report(layers, target, top)))
    off = 0
    if image:
        lines, off = sizemod.compare(layers, sizemod.built_layers(engine_of(c, engine), image), margin)
        print("\n".join(lines))
    print(sizemod.total_line(layers, target))
    if off:
        raise Exit(f"error: {off} layer(s) of {image} differ from the budget by more than {margin:.0%}", code=1)
