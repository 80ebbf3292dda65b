"""The container engine the stack drives (``Engine``: Docker, Podman or Buildah), and for the Docker Engine, its
CLI plugins: is it there, and if not, what to install.

An ``Engine`` is made once from ``--engine`` (or ``stack.engine``) and passed on whole: it knows its command lines
and what its builds can do, so callers ask it, not its name (only where one CLI itself differs, as buildah's
lack of save, load and container run, is the name read). The Docker SDK for Python pings the Docker Engine (it
honours ``DOCKER_HOST``, as the CLI does); ``docker buildx`` and ``docker compose`` are CLI plugins with no Python
API, so their presence is asked of the CLI itself.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from sglang_stack.errors import UserError
from sglang_stack.shell import run

# What each plugin is, and where it comes from. Debian bookworm's docker.io has neither;
# its `docker-compose` package is Compose v1, which `docker compose` does not run.
PLUGINS = {
    "buildx": ("the BuildKit CLI plugin", "docker-buildx-plugin (Docker's apt/yum repository) or docker-buildx (Debian trixie, Ubuntu 24.04)"),
    "compose": ("Compose v2", "docker-compose-plugin (Docker's apt/yum repository) or docker-compose >= 2 (Debian trixie, Ubuntu 24.04)"),
}


# [registry[:port]/]name[/name...][:tag][@sha256:digest], as the engines accept it; or an image ID.
REFERENCE = re.compile(
    r"(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::\w[\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")


def image_reference(value: str, flag: str) -> str:
    """``value`` as an image reference or ID, or a one-line refusal naming ``flag``.

    Checked whole before it reaches an engine's command line, where ``--help`` or
    ``--format=...`` would be read as an option of the engine's own."""
    if not isinstance(value, str) or not (REFERENCE.fullmatch(value) or IMAGE_ID.fullmatch(value)):
        # user:password@host/... is the commonest way a secret is pasted into a reference: never echo what precedes @
        shown = re.sub(r"^[^/@]*:[^/@]*@", "***@", value) if isinstance(value, str) else value
        raise UserError(f"{flag} {shown!r}: not an image reference ([registry/]name[:tag][@sha256:digest], "
                        "lowercase) or image ID" + (" (credentials go to `docker login`, never into a reference)"
                                                    if shown != value else ""))
    return value


NAMES = ("docker", "podman", "buildah")


@dataclass(frozen=True)
class Engine:
    """One of ``NAMES``. Podman and Buildah share one image store (containers/storage): Buildah builds and tags,
    Podman runs and inspects what either made."""

    name: str

    def __post_init__(self):
        if self.name not in NAMES:
            raise UserError(f"--engine {self.name!r}: unsupported (choose one of {', '.join(NAMES)})")

    def __str__(self) -> str:
        return self.name

    @property
    def daemon(self) -> bool:
        """The Docker Engine: a daemon the Docker SDK reaches, with the compose and buildx CLI plugins."""
        return self.name == "docker"

    @property
    def buildkit(self) -> bool:
        """Builds through BuildKit (``docker buildx build``): cache and secret mounts, ``rewrite-timestamp``, the
        Docker image format only, no ``--isolation``. Otherwise buildah's builder: ``--format``, ``--layers``,
        ``--timestamp``, ``--isolation`` (chroot where the host has no unified cgroup hierarchy)."""
        return self.name == "docker"

    @property
    def build(self) -> list[str]:
        """The build command, before its options."""
        return {"docker": ["docker", "buildx", "build"], "podman": ["podman", "build"], "buildah": ["buildah", "bud"]}[self.name]

    @property
    def store(self) -> str:
        """The CLI that lists, tags and removes images of this engine's store."""
        return "docker" if self.daemon else "buildah"

    @property
    def runner(self) -> str:
        """The CLI that runs containers and inspects images (``image inspect --format``) of this engine's store."""
        return "docker" if self.daemon else "podman"


DOCKER, PODMAN, BUILDAH = Engine("docker"), Engine("podman"), Engine("buildah")


def named(name: str | None, default: str = "docker") -> Engine:
    """The engine ``--engine NAME`` (or ``stack.engine``) names; an unknown name is one line."""
    return Engine(name or default)


def reachable(hint: str = "start Docker (sudo systemctl start docker)"):
    """A Docker SDK client for a reachable engine, or a one-line ``UserError`` ending in ``hint``."""
    import docker
    from docker.errors import DockerException

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except DockerException as err:
        reason = str(err).splitlines()[0][:160]
        raise UserError(f"no Docker engine reachable at {where} ({reason}): {hint}") from None
    return client


def require_plugin(plugin: str, alternative: str = "") -> None:
    """Fail in one line, naming the package to install, when ``docker PLUGIN`` is not a docker command."""
    what, package = PLUGINS[plugin]
    proc = run(["docker", plugin, "version"], capture=True, check=False, quiet=True)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise UserError(
            f"docker {plugin} ({what}) is not installed: `docker {plugin} version` says "
            f"{said[0] if said else f'exit {proc.returncode}'!r}; install {package}{alternative}"
        )
