"""Build the image with Docker (BuildKit), Podman or Buildah.

The Docker SDK for Python only speaks the engine's classic ``/build`` API: no
BuildKit, so no cache or secret mounts (https://github.com/docker/docker-py/issues/2230).
Builds on the Docker engine therefore run ``docker buildx build``; the SDK checks
that the engine is reachable first and reads the built image's labels back afterwards.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack import engine as engine_mod
from sglang_stack.engine import Engine, image_reference
from sglang_stack.image import store
from sglang_stack.shell import CommandFailed, require, stream

TARGETS = ("base", "deps", "sglang", "runtime", "router")
# The build argument --base-image replaces: the router stage has its own slim Python base.
BASE_ARG = {"router": "ROUTER_BASE_IMAGE"}
DOCKERFILE = ROOT / "docker" / "Dockerfile"


@dataclass
class BuildRequest:
    """Everything one build needs; ``command()`` turns it into the engine's argv."""

    engine: Engine
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
    source_date_epoch: int | None = None
    """The build's clock (the commit's time): file stamps and the image's dates, for the same bytes every build."""
    rewrite_timestamps: bool = False
    """docker: BuildKit 0.13 or later can rewrite every file's stamp to ``source_date_epoch``."""
    reproducible: bool = False
    """Refuse a build that cannot give the same image ID twice (no commit clock, BuildKit before 0.13)."""
    oci: bool = False
    """podman/buildah: the OCI format. Their Docker format records the build container's random id and
    hostname in the image config (buildah 1.28), so only OCI gives the same image ID twice; it drops
    HEALTHCHECK and SHELL, which compose and Kubernetes set themselves."""
    mirror: bool = False
    """Wheels from the project's mirror/ only (MIRROR=1), with the build's network off."""
    provenance: dict[str, str] = field(default_factory=dict)
    """What the image was made from, for its last LABEL (``provenance_args``): the commit, marked where the
    checkout had changes, and the Dockerfile's sha256. Build arguments, not ``--label``: buildah re-runs every step of a
    multi-stage build given a --label (containers/buildah#4950)."""

    @property
    def chroot(self) -> bool:
        return not self.engine.buildkit and self.isolation == "chroot"

    def validate(self) -> None:
        if self.target not in TARGETS:
            raise UserError(f"--target {self.target!r}: not a stage of {self.dockerfile.name} (choose one of {', '.join(TARGETS)})")
        image_reference(self.tag, "--tag")
        if self.base_image:
            image_reference(self.base_image, "--base-image")
        for flag, path in (("--ca-bundle", self.ca_bundle), ("--hf-token-file", self.hf_token_file)):
            if path is not None and not Path(path).is_file():
                raise UserError(f"{flag} {path}: no such file")
        if self.ca_bundle is not None and b"BEGIN CERTIFICATE" not in Path(self.ca_bundle).read_bytes()[:1 << 20]:
            raise UserError(f"--ca-bundle {self.ca_bundle}: not a PEM certificate bundle")
        if self.isolation and self.engine.buildkit:
            raise UserError("--isolation applies to --engine podman|buildah only")
        if not self.dockerfile.is_file():
            raise UserError(f"{self.dockerfile}: missing (run `invoke render`)")

    platform: str = ""  # --platform for a foreign architecture (linux/arm64); "" builds for the host's

    def command(self) -> list[str]:
        """The exact engine command line, secrets passed as files, never as values."""
        argv = list(self.engine.build)
        if self.engine.buildkit:
            # BuildKit 0.13+ stamps every file with SOURCE_DATE_EPOCH when asked; older ones
            # (Docker 20.10's built-in) keep the build's own times in the layers.
            if self.source_date_epoch is not None and self.rewrite_timestamps:
                argv += ["--output", "type=docker,rewrite-timestamp=true"]
            else:
                argv.append("--load")
        else:
            # OCI format drops HEALTHCHECK and SHELL, hence --format docker for podman/buildah, unless
            # the build must be reproducible (``oci``).
            argv += ["--format", "oci" if self.oci else "docker", "--layers" if self.layers else "--layers=false"]
            # A failed step's working container is removed too (buildah keeps it by default); the steps before it
            # stay as the layer cache, as BuildKit's do.
            argv.append("--force-rm")
        if self.isolation:
            argv += ["--isolation", self.isolation]
        argv += ["--file", str(self.dockerfile), "--target", self.target, "--tag", self.tag]
        if self.platform:
            argv += ["--platform", self.platform]
        if self.no_cache:
            argv.append("--no-cache")
        if self.source_date_epoch is not None:
            if not self.engine.buildkit:
                argv += ["--timestamp", str(self.source_date_epoch)]  # every file and the image's created date
            argv += ["--build-arg", f"SOURCE_DATE_EPOCH={self.source_date_epoch}"]
        base_arg = BASE_ARG.get(self.target, "BASE_IMAGE")
        if self.base_image:
            argv += ["--build-arg", f"{base_arg}={self.base_image}"]
        if self.base_image or base_arg in self.build_args:
            # The OCI base.digest label follows the base this build uses: its digest, or none where not pinned by one.
            used = self.base_image or self.build_args[base_arg]
            argv += ["--build-arg", f"{base_arg.removesuffix('_IMAGE')}_DIGEST={used.partition('@')[2]}"]
        if self.mirror:
            # No network in any RUN step: what the mirror lacks fails the build instead of being fetched.
            # buildah/podman's chroot isolation runs in the host's network only (it refuses "none").
            argv += [] if self.chroot else ["--network", "none"]
            argv += ["--build-arg", "MIRROR=1"]
        for key, value in sorted({**self.provenance, **self.build_args}.items()):
            argv += ["--build-arg", f"{key}={value}"]
        if self.ca_bundle:
            argv += ["--secret", f"id=ca,src={self.ca_bundle}"]
        if self.hf_token_file:
            argv += ["--secret", f"id=hf_token,src={self.hf_token_file}"]
        if self.iidfile:
            argv += ["--iidfile", str(self.iidfile)]
        argv.append(str(self.context))
        return argv


def _git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s output, or None without git, outside a checkout, or on any failure."""
    import shutil
    import subprocess

    if not shutil.which("git"):
        return None
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def commit_epoch(root: Path = ROOT) -> int | None:
    """The time of the checkout's last commit (``git log -1 --format=%ct``): the same for everyone who builds it.

    None outside a git checkout (an unpacked tarball): then the build runs on the clock, and says so.
    """
    text = (_git(root, "log", "-1", "--format=%ct") or "").strip()
    return int(text) if text.isdigit() else None


def checkout(root: Path = ROOT) -> dict:
    """This checkout's commit (``git rev-parse HEAD``) and whether its tracked files have changes; None where unknown."""
    commit, status = _git(root, "rev-parse", "HEAD"), _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": bool(status.strip()) if status is not None else None}


PROVENANCE = ("SOURCE_REVISION", "DOCKERFILE_SHA256", "SOURCE_DATE_EPOCH")
QEMU_HINT = ("install QEMU's user-mode emulation for it (Debian/Ubuntu: `sudo apt-get install qemu-user-static "
             "binfmt-support`; or `docker run --privileged --rm tonistiigi/binfmt --install arm64`), or build on an "
             "aarch64 host")


def builder_platforms(engine: Engine) -> list[str] | None:
    """The platforms the engine's builder can run RUN steps for, or None where it cannot say."""
    import platform as host
    import subprocess

    if engine.buildkit:
        try:
            out = subprocess.run(["docker", "buildx", "inspect"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        line = next((ln for ln in out.splitlines() if ln.strip().startswith("Platforms:")), "")
        return [p.strip().rstrip("*") for p in line.split(":", 1)[1].split(",")] if line else None
    native = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(host.machine(), "")
    emulated = {"linux/arm64": "qemu-aarch64", "linux/amd64": "qemu-x86_64"}
    return [native, *[p for p, name in emulated.items() if Path("/proc/sys/fs/binfmt_misc", name).exists()]]


def require_platform(engine: Engine, platform: str) -> None:
    """A build for ``platform`` runs its RUN steps there: refused in one line where this host cannot run them."""
    have = builder_platforms(engine)
    if have is not None and platform not in have:
        raise UserError(f"--platform {platform}: this {engine} builder runs {', '.join(p for p in have if p) or 'nothing'} "
                        f"only: {QEMU_HINT}")


def provenance_args(dockerfile: Path, root: Path = ROOT) -> dict[str, str]:
    """The Dockerfile's provenance arguments: SOURCE_REVISION, the commit (``-dirty`` appended where tracked files
    have changes, as ``git describe --dirty`` marks it; empty outside a checkout), and DOCKERFILE_SHA256.

    Declared in each final stage with SOURCE_DATE_EPOCH, just before its SBOM step, so a new commit re-runs no
    earlier step; `invoke publish` attests the labels they fill.
    """
    state = checkout(root)
    revision = (state["commit"] or "") + ("-dirty" if state["commit"] and state["dirty"] else "")
    return {"SOURCE_REVISION": revision, "DOCKERFILE_SHA256": hashlib.sha256(dockerfile.read_bytes()).hexdigest()}


def buildkit_supports_rewrite() -> bool:
    """Whether ``docker buildx``'s builder runs BuildKit 0.13 or later (``rewrite-timestamp``)."""
    from sglang_stack import shell

    proc = shell.run(["docker", "buildx", "inspect"], capture=True, check=False, quiet=True, timeout=30)
    m = re.search(r"BuildKit version:\s*v(\d+)\.(\d+)", proc.stdout or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (0, 13)


def preflight(engine: Engine) -> None:
    """Fail fast, in one line, when the engine cannot build here."""
    if engine.daemon:
        require("docker", "install Docker, or build daemonless with --engine buildah|podman")
        engine_mod.require_plugin("buildx", ", or build daemonless with --engine buildah|podman")
        engine_mod.reachable("start Docker, or build daemonless with --engine buildah|podman")
    elif engine.name == "podman":
        require("podman", "install podman, or use --engine docker|buildah")
    else:
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
    defaults.update({arg: value for arg, value in request.build_args.items() if arg in defaults})  # --build-arg X=...
    if request.base_image:
        defaults[BASE_ARG.get(request.target, "BASE_IMAGE")] = request.base_image
    return {arg: defaults[arg] for arg in NEEDS.get(request.target, ()) if arg in defaults}


def missing_base_hint(request: BuildRequest, output: list[str]) -> str:
    """After a failed build: the base image the engine could not get, and what to do; "" where the failure was
    another (the engine's last lines name no base this build uses that the store lacks)."""
    said = "\n".join(output)
    missing = {arg: ref for arg, ref in base_images(request).items()
               if named(ref, said) and not store.exists(request.engine, ref)}
    if not missing:
        return ""
    base_arg = BASE_ARG.get(request.target, "BASE_IMAGE")
    # --base-image replaces only the stage's own base; another (the devel image of the AOT stage) is a --build-arg.
    own = ", ".join("--base-image YOURS" if arg == base_arg else f"--build-arg {arg}=YOURS" for arg in missing)
    return (f"; {', '.join(missing.values())} {'is' if len(missing) == 1 else 'are'} not in the {request.engine} image "
            "store: where the registry is reachable run `invoke fetch`, carry mirror/ here and build with "
            f"`invoke build --mirror` (or `docker pull`, `docker save`, `docker load`), build on a copy of your own ({own}, "
            "each by @sha256 digest), or check the stack without CUDA with `invoke smoke`")


def named(ref: str, text: str) -> bool:
    """Does ``text`` name the image ``ref``, in any of the forms engines print (with or without docker.io/,
    library/, the tag or the digest)?"""
    name = ref.split("@", 1)[0]
    short = name.removeprefix("docker.io/").removeprefix("library/")
    repo = short.rsplit(":", 1)[0] if ":" in short.rsplit("/", 1)[-1] else short
    return any(form in text for form in {ref, name, short, repo})


def build(request: BuildRequest) -> tuple[str, str]:
    """Run the build; return (image reference, image ID)."""
    request.validate()
    preflight(request.engine)
    if request.reproducible and request.source_date_epoch is None:
        raise UserError("--reproducible: no commit to take the build's clock from (not a git checkout?)")
    if request.reproducible and not request.engine.buildkit and not request.no_cache:
        # buildah and podman stamp a layer with the clock when they make it, and a cached layer keeps the stamp of
        # the commit that first built it; BuildKit's rewrite-timestamp restamps every layer at export instead.
        request.no_cache = True
        print(f"note: --reproducible with {request.engine} builds without the cache: a cached layer keeps the "
              "clock of the commit that made it")
    if request.engine.buildkit and request.source_date_epoch is not None:
        request.rewrite_timestamps = buildkit_supports_rewrite()
        if not request.rewrite_timestamps and request.reproducible:
            raise UserError("--reproducible: this engine's BuildKit is older than 0.13 (no rewrite-timestamp): "
                            "use Docker 25 or later, a docker-container builder, or --engine buildah")
        if not request.rewrite_timestamps:
            print("note: this engine's BuildKit is older than 0.13: file contents are reproducible, but layer "
                  "timestamps, and so the image ID, differ between builds (docs/image.md, Reproducible images)")
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
            stream(request.command(), what=f"{request.engine} build")
        except CommandFailed as err:
            raise UserError(f"{err}{missing_base_hint(request, err.tail)}", code=err.code) from None
        image_id = request.iidfile.read_text().strip() if request.iidfile.exists() else ""
    if not image_id:
        raise UserError(f"{request.engine} build finished but reported no image ID for {request.tag}")
    pins = [k for k in store.labels(request.engine, request.tag) if k.startswith("io.sglang-stack.")]
    if request.target in ("sglang", "runtime", "router") and not pins:
        raise UserError(f"{request.tag}: built, but its labels record no pins; was docker/Dockerfile edited by hand?")
    return request.tag, image_id
