"""Build the image with Docker (BuildKit), Podman or Buildah.

The Docker SDK for Python only speaks the engine's classic ``/build`` API: no
BuildKit, so no cache or secret mounts (https://github.com/docker/docker-py/issues/2230).
Builds on the Docker engine therefore run ``docker buildx build``; the SDK checks
that the engine is reachable first and reads the built image's labels back afterwards.
"""

from __future__ import annotations

import os
import re
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack import engine as engine_mod
from sglang_stack.image import store
from sglang_stack.shell import require, run

ENGINES = ("docker", "podman", "buildah")
TARGETS = ("base", "deps", "sglang", "runtime", "router")
# The build argument --base-image replaces: the router stage has its own slim Python base.
BASE_ARG = {"router": "ROUTER_BASE_IMAGE"}
DOCKERFILE = ROOT / "docker" / "Dockerfile"
# [registry[:port]/]name[/name...][:tag], as the engines accept it.
REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::\w[\w.-]{0,127})?$"
)


def arch_list(text: str) -> str:
    """A FLASHINFER_CUDA_ARCH_LIST value: space-separated CUDA architectures such as 9.0a 12.0a (empty: none)."""
    archs = text.replace(",", " ").split()
    bad = [a for a in archs if not re.fullmatch(r"\d+\.\d+[af]?", a)]
    if bad:
        raise UserError(f"--cuda-arch-list {text!r}: {bad[0]!r} is not a CUDA architecture (e.g. 9.0a for H200, 12.0a for RTX PRO 6000)")
    return " ".join(archs)


@dataclass
class BuildRequest:
    """Everything one build needs; ``command()`` turns it into the engine's argv."""

    engine: str
    tag: str
    target: str = "runtime"
    base_image: str | None = None
    no_cache: bool = False
    ca_bundle: Path | None = None
    hf_token_file: Path | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    isolation: str | None = None
    # podman/buildah keep an intermediate image per step with --layers (their build cache);
    # a throwaway build turns it off so that it leaves only the image it names.
    layers: bool = True
    iidfile: Path | None = None
    context: Path = ROOT
    dockerfile: Path = DOCKERFILE

    def validate(self) -> None:
        if self.engine not in ENGINES:
            raise UserError(f"--engine {self.engine!r}: unsupported (choose one of {', '.join(ENGINES)})")
        if self.target not in TARGETS:
            raise UserError(f"--target {self.target!r}: not a stage of {self.dockerfile.name} (choose one of {', '.join(TARGETS)})")
        if not REFERENCE.match(self.tag):
            raise UserError(f"--tag {self.tag!r}: not a valid image reference (lowercase name[:tag])")
        for flag, path in (("--ca-bundle", self.ca_bundle), ("--hf-token-file", self.hf_token_file)):
            if path is not None and not Path(path).is_file():
                raise UserError(f"{flag} {path}: no such file")
        if self.ca_bundle is not None and b"BEGIN CERTIFICATE" not in Path(self.ca_bundle).read_bytes()[:1 << 20]:
            raise UserError(f"--ca-bundle {self.ca_bundle}: not a PEM certificate bundle")
        if self.isolation and self.engine == "docker":
            raise UserError("--isolation applies to --engine podman|buildah only")
        if not self.dockerfile.is_file():
            raise UserError(f"{self.dockerfile}: missing (run `invoke render`)")

    def command(self) -> list[str]:
        """The exact engine command line, secrets passed as files, never as values."""
        if self.engine == "docker":
            argv = ["docker", "buildx", "build", "--load"]
        elif self.engine == "podman":
            argv = ["podman", "build", "--format", "docker", "--layers" if self.layers else "--layers=false"]
        else:
            argv = ["buildah", "bud", "--format", "docker", "--layers" if self.layers else "--layers=false"]
        # OCI format drops HEALTHCHECK and SHELL, hence --format docker for podman/buildah.
        if self.isolation:
            argv += ["--isolation", self.isolation]
        argv += ["--file", str(self.dockerfile), "--target", self.target, "--tag", self.tag]
        if self.no_cache:
            argv.append("--no-cache")
        if self.base_image:
            argv += ["--build-arg", f"{BASE_ARG.get(self.target, 'BASE_IMAGE')}={self.base_image}"]
        for key, value in sorted(self.build_args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        if self.ca_bundle:
            argv += ["--secret", f"id=ca,src={self.ca_bundle}"]
        if self.hf_token_file:
            argv += ["--secret", f"id=hf_token,src={self.hf_token_file}"]
        if self.iidfile:
            argv += ["--iidfile", str(self.iidfile)]
        argv.append(str(self.context))
        return argv


def default_tag(lock_tag: str, target: str, router_tag: str = "") -> str:
    """``sglang-stack:0.5.9-cu130`` for the runtime, ``sglang-stack-router:0.3.2`` for the router;
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
        out[key] = value
    return out


def preflight(engine: str) -> None:
    """Fail fast, in one line, when the engine cannot build here."""
    if engine == "docker":
        require("docker", "install Docker, or build daemonless with --engine buildah|podman")
        engine_mod.require_plugin("buildx", ", or build daemonless with --engine buildah|podman")
        engine_mod.reachable("start Docker, or build daemonless with --engine buildah|podman")
    elif engine == "podman":
        require("podman", "install podman, or use --engine docker|buildah")
    elif engine == "buildah":
        require("buildah", "install buildah (Debian/Ubuntu: apt-get install buildah), or use --engine docker|podman")


# The base images each target is built FROM (by the Dockerfile's ARG names).
NEEDS = {"router": ("ROUTER_BASE_IMAGE",), "sglang": ("BASE_IMAGE",), "base": ("BASE_IMAGE",),
         "deps": ("BASE_IMAGE", "DEVEL_IMAGE"), "runtime": ("BASE_IMAGE", "DEVEL_IMAGE")}


def base_images(request: BuildRequest) -> dict[str, str]:
    """ARG name -> the image reference this build starts from (the Dockerfile's defaults, or --base-image)."""
    defaults = {}
    for line in request.dockerfile.read_text().splitlines():
        m = re.match(r"^ARG (\w+)=(\S+)$", line)
        if m and m.group(1) in ("BASE_IMAGE", "DEVEL_IMAGE", "ROUTER_BASE_IMAGE"):
            defaults.setdefault(m.group(1), m.group(2))
    if request.base_image:
        defaults[BASE_ARG.get(request.target, "BASE_IMAGE")] = request.base_image
    return {arg: defaults[arg] for arg in NEEDS.get(request.target, ()) if arg in defaults}


def missing_base_hint(request: BuildRequest) -> str:
    """After a failed build: which base image is neither in the local store nor pulled, and what to do."""
    missing = [ref for ref in base_images(request).values() if not store.exists(request.engine, ref)]
    if not missing:
        return ""
    return (f"; {', '.join(missing)} is not in the {request.engine} image store: pull it where the registry is "
            "reachable (`docker pull REF`, then `docker save`/`docker load` to carry it), mirror it and pass "
            "--base-image YOUR.REGISTRY/IMAGE@sha256:..., or check the stack without CUDA with `invoke smoke`")


def build(request: BuildRequest) -> tuple[str, str]:
    """Run the build; return (image reference, image ID)."""
    request.validate()
    preflight(request.engine)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sglang-stack-build-")))
        request.iidfile = tmp / "iid"
        if request.hf_token_file is None and os.environ.get("HF_TOKEN"):
            # Pass the token as a file-backed secret: it never appears on a command line.
            token = tmp / "hf_token"
            token.touch(mode=0o600)
            token.write_text(os.environ["HF_TOKEN"])
            request.hf_token_file = token
        try:
            run(request.command(), what=f"{request.engine} build")
        except UserError as err:
            raise UserError(f"{err}{missing_base_hint(request)}", code=err.code) from None
        image_id = request.iidfile.read_text().strip() if request.iidfile.exists() else ""
    if not image_id:
        raise UserError(f"{request.engine} build finished but reported no image ID for {request.tag}")
    pins = [k for k in store.labels(request.engine, request.tag) if k.startswith("io.sglang-stack.")]
    if request.target in ("sglang", "runtime", "router") and not pins:
        raise UserError(f"{request.tag}: built, but its labels record no pins; was docker/Dockerfile edited by hand?")
    return request.tag, image_id
