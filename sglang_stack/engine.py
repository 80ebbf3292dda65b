"""The Docker Engine and its CLI plugins: is it there, and if not, what to install.

The Docker SDK for Python pings the engine (it honours ``DOCKER_HOST``, as the CLI
does); ``docker buildx`` and ``docker compose`` are CLI plugins with no Python API,
so their presence is asked of the CLI itself.
"""

from __future__ import annotations

import os

from sglang_stack.errors import UserError
from sglang_stack.shell import run

# What each plugin is, and where it comes from. Debian bookworm's docker.io has neither;
# its `docker-compose` package is Compose v1, which `docker compose` does not run.
PLUGINS = {
    "buildx": ("the BuildKit CLI plugin", "docker-buildx-plugin (Docker's apt/yum repository) or docker-buildx (Debian trixie, Ubuntu 24.04)"),
    "compose": ("Compose v2", "docker-compose-plugin (Docker's apt/yum repository) or docker-compose >= 2 (Debian trixie, Ubuntu 24.04)"),
}


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
