"""What `invoke build` does, in order: check the lock, render the Dockerfile, build, copy the SBOM out.

The task turns its flags into ``BuildFlags`` (the ``stack.*`` defaults applied) and calls ``build``; every
decision between the flags and the engine's command is made here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sglang_stack import ROOT
from sglang_stack import download
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.image import build as buildmod
from sglang_stack.image import render as rendermod
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock import releases

SBOM_IN_IMAGE = "/opt/sglang-stack/sbom.cdx.json"
STAGES_WITH_SBOM = ("sglang", "runtime", "router")


@dataclass(frozen=True)
class BuildFlags:
    """`invoke build`'s flags (its --help says what each one means)."""

    engine: Engine = Engine("docker")
    target: str = "runtime"
    tag: str | None = None
    base_image: str | None = None
    no_cache: bool = False
    ca_bundle: str | None = "auto"  # a PEM file, "auto" ($PIP_CERT, $REQUESTS_CA_BUNDLE, $SSL_CERT_FILE) or "none"
    hf_token_file: str | None = None
    build_args: tuple[str, ...] = ()
    isolation: str | None = None  # --isolation: podman and buildah only (docker refuses it)
    configured_isolation: str | None = None  # stack.isolation: applied to podman and buildah, never to docker
    flashinfer_jit_cache: bool = False
    cuda_arch_list: str | None = None
    reproducible: bool = False
    mirror: bool = False
    profile: str | None = None  # --profile: an SGLang release of profiles/ (default: $SGLANG_PROFILE, else the root's)
    platform: str | None = None  # --platform: linux/amd64 (default) or linux/arm64 where the profile's lock has it


def arch_list(text: str) -> str:
    """A FLASHINFER_CUDA_ARCH_LIST value: space-separated CUDA architectures such as 9.0a 12.0a (empty: none)."""
    archs = text.replace(",", " ").split()
    bad = [a for a in archs if not re.fullmatch(r"\d+\.\d+[af]?", a)]
    if bad:
        raise UserError(f"--cuda-arch-list {text!r}: {bad[0]!r} is not a CUDA architecture (e.g. 9.0a for H200, 12.0a for RTX PRO 6000)")
    return " ".join(archs)


def default_tag(lock_tag: str, target: str, router_tag: str = "") -> str:
    """``sglang-stack:0.5.9-cu130`` for the runtime, ``sglang-stack-router:0.5.9`` for the router;
    other stages get a suffix."""
    if target == "router" and router_tag:
        return router_tag
    return lock_tag if target == "runtime" else f"{lock_tag}-{target}"


def parse_build_args(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise UserError(f"--build-arg {item!r}: expected KEY=VALUE")
        if key in ("BASE_IMAGE", "ROUTER_BASE_IMAGE"):
            raise UserError(f"--build-arg {key}=...: use --base-image instead")
        if key in buildmod.PROVENANCE:
            # What the image's labels attest of its source: the build derives them, `invoke publish` signs them.
            raise UserError(f"--build-arg {key}=...: the build sets it from the checkout itself (provenance); it cannot "
                            "be given")
        out[key] = prefetch_refs(value) if key == "PREFETCH_MODELS" else value
    return out


def prefetch_refs(value: str, lock: Path | None = None) -> str:
    """PREFETCH_MODELS names roles of models.lock (``drafter``, ``target``); the build gets each as REPO@COMMIT, which
    its prefetch step downloads and checks file by file against models.lock. A role not pinned yet is refused."""
    from sglang_stack.services import models

    roles = value.split()
    if not roles:
        return ""
    pinned = models.load(lock)
    refs = []
    for role in roles:
        model = pinned.get(role)
        if model is None:
            raise UserError(f"--build-arg PREFETCH_MODELS={value}: {role!r} is not a role of models.lock "
                            f"({', '.join(pinned) or 'none'}); a repository is baked in by its role, once models.lock pins it")
        if not (model.pinned and model.files):
            raise UserError(f"--build-arg PREFETCH_MODELS={value}: models.lock pins no commit of {role} ({model.repo}) "
                            "yet: run `invoke models-lock` first")
        refs.append(f"{model.repo}@{model.revision}")
    return " ".join(refs)


def ca_bundle_of(value: str | None) -> Path | None:
    """The CA bundle the build mounts as the secret 'ca': a path as given, 'auto' from the environment, 'none'."""
    if value == "auto":
        value = download.ca_bundle(explicit_only=True)
    elif value == "none":
        value = None
    return Path(value) if value else None


CGROUP_V2 = Path("/sys/fs/cgroup/cgroup.controllers")


def default_isolation(engine: Engine, unified: Path = CGROUP_V2, say: Callable[[str], None] = print) -> str | None:
    """``chroot`` for podman/buildah where the host has no unified cgroup hierarchy, else None (the engine's default).

    Their default OCI isolation runs each RUN step under crun or runc, which need cgroup v2 here ("cgroups in hybrid
    mode not supported", and a working container and intermediate images left behind); chroot isolation needs none.
    """
    if engine.buildkit or unified.is_file():
        return None
    say(f"build: {engine}: no unified cgroup hierarchy here ({unified} is missing): --isolation chroot")
    return "chroot"


def request_of(flags: BuildFlags, lock: lockmod.Lock) -> buildmod.BuildRequest:
    """The engine's build request for ``flags``: the tag from the lock, the commit's clock, the build arguments."""
    request = buildmod.BuildRequest(
        engine=flags.engine,
        tag=flags.tag or default_tag(lock.tag, flags.target, lock.router_tag),
        target=flags.target,
        base_image=flags.base_image,
        no_cache=flags.no_cache,
        ca_bundle=ca_bundle_of(flags.ca_bundle),
        hf_token_file=Path(flags.hf_token_file) if flags.hf_token_file else None,
        build_args=parse_build_args(list(flags.build_args)),
        isolation=flags.isolation or (flags.configured_isolation if not flags.engine.buildkit else None)
        or default_isolation(flags.engine),
        source_date_epoch=buildmod.commit_epoch(),
        oci=flags.reproducible and not flags.engine.buildkit,
        reproducible=flags.reproducible,
    )
    if flags.flashinfer_jit_cache:
        request.build_args["FLASHINFER_JIT_CACHE"] = "1"
    if flags.cuda_arch_list is not None:
        request.build_args["FLASHINFER_CUDA_ARCH_LIST"] = arch_list(flags.cuda_arch_list)
    return request


def build(flags: BuildFlags, say: Callable[[str], None] = print) -> tuple[str, str]:
    """Check the lock, render, build; return the image's reference and ID."""
    from sglang_stack.lock import profiles

    from sglang_stack.lock import platforms

    profile = profiles.get(flags.profile)
    platform = platforms.platform_of(flags.platform)
    lock, cross_checked = lockmod.check_all(profile.lock, download=False, platform=platform)
    say(lockmod.summary(lock, cross_checked))
    say(releases.check_line(lock))
    if platform != "linux/amd64":
        buildmod.require_platform(flags.engine, platform)  # before anything is written
    dockerfile = rendermod.dockerfile_of(profile.dockerfile, platform)
    say(f"{profiles.display(dockerfile)}: {'rendered' if rendermod.render(lock, dockerfile) else 'up to date'}")
    request = request_of(flags, lock)
    request.dockerfile = dockerfile
    if platform != "linux/amd64":
        request.platform = platform
        if not flags.tag:  # one local name per platform: an aarch64 build never replaces the x86-64 image
            request.tag = f"{request.tag}-{platforms.PLATFORMS[platform]}"
    request.provenance = buildmod.provenance_args(request.dockerfile)
    if flags.mirror:
        from sglang_stack.image import mirror

        for line in mirror.prepare(request, lock, buildmod.base_images(request)):
            say(line)
    ref, image_id = buildmod.build(request)
    if flags.target in STAGES_WITH_SBOM:
        for line in records(flags.engine, ref, image_id, flags.target):
            say(line)
    return ref, image_id


def records(engine: Engine, ref: str, image_id: str, stage: str) -> list[str]:
    """Record the build's output for `invoke publish` (build/built/ID.json) and copy its SBOM out beside the checkout;
    what happened, a line each."""
    from sglang_stack.image import built, store
    from sglang_stack.image.verify import export_sbom, inventory

    try:
        found = inventory(engine, ref, [])
    except UserError as err:  # the image is built; only the records beside it are missing
        return [f"note: no record of the build beside the checkout (`invoke publish` will refuse {ref}): {err}"]
    path = built.record(image_id, ref, stage, store.labels(engine, ref), found.get("verdicts") or {})
    lines = [f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} (this build's image ID, for "
             "`invoke publish`)"]
    sbom = export_sbom(engine, ref, ref, found=found)
    if not sbom:
        return [*lines, f"note: {ref} has no SBOM at {SBOM_IN_IMAGE}"]
    return [*lines, f"wrote {sbom.relative_to(ROOT)} (the SBOM, also at {SBOM_IN_IMAGE})"]
