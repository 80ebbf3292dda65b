"""The real Docker Engine in tests: availability, the CPU stand-in image, compose projects, the router.

Tests marked ``engine`` run the user's own commands (``invoke build``, ``docker
compose up``, ``invoke up``...) against the engine on this machine. They skip with
the reason when no engine answers, except in CI (``SGLANG_STACK_CI=1``, set by
.ci/run, which starts an engine first), where a missing engine is a failure.

Everything a test makes carries the session's run id in its name and is removed
by that name at teardown, pass or fail: images, compose projects (containers,
networks, volumes). Two runs on one machine never touch each other's things.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from dockerfile import parse_string

from sglang_stack import ROOT
from sglang_stack.services import composefile
from sglang_stack.shell import show

TESTS = Path(__file__).resolve().parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
INVOKE = [sys.executable, "-m", "invoke"]


def port_variables() -> dict[str, str]:
    """Each service's host port variable, as compose.yaml's own ports entries name them."""
    from sglang_stack.entrypoints.router import CONTAINER_PORT as ROUTER_PORT
    from sglang_stack.services.variables import Environment

    proj = composefile.project(Environment({}), (composefile.COMPOSE_FILE,))
    return {name: proj.port_variable(name, ROUTER_PORT if proj.role(name) == composefile.ROUTER else composefile.CONTAINER_PORT)
            for name in proj.names()}


PORT_VARIABLES = port_variables()  # every project gets free ports for all


def problem() -> str | None:
    """Why the engine tests cannot run here, or None."""
    if not shutil.which("docker"):
        return "no docker CLI on PATH"
    for argv, what in (
        (["docker", "info", "--format", "{{.ServerVersion}}"], "the Docker Engine does not answer"),
        (["docker", "compose", "version"], "no Compose v2 plugin (docker compose)"),
        (["docker", "buildx", "version"], "no buildx plugin (docker buildx)"),
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip().splitlines()
            return f"{what}: {said[-1] if said else 'exit ' + str(proc.returncode)}"
    return None


def docker(*args: str, check: bool = True, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``docker ARGS``, shown first, output captured."""
    argv = ["docker", *args]
    show(argv)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc


def timed(argv: list[str]) -> float:
    """Seconds ``argv`` takes from the repository root, shown first; a failure ends the run with its output."""
    show(argv, ROOT)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return time.monotonic() - start


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the CPU stand-in for the model server ------------------------------------------


def standin_dockerfile(sglang_stage: str) -> str:
    """The runtime stage of docker/Dockerfile, on the ``sglang`` stage instead of ``deps``, serving the stand-in.

    The runtime stage's own ENV, ARG, COPY, LABEL, USER, WORKDIR, EXPOSE and
    HEALTHCHECK instructions are taken from the rendered Dockerfile, so the stand-in
    image is the real one in everything but the model server: ``deps`` (torch and
    the CUDA libraries) cannot be fetched here, and there is no GPU to serve on.
    ``COPY --from=sglang`` is already in place (the stage is the base); RUN steps
    install into ``deps`` and are left out.
    """
    commands = parse_string(DOCKERFILE.read_text())
    start = next(i for i, c in enumerate(commands) if c.cmd == "FROM" and c.value[-1] == "runtime")
    keep = ("ENV", "ARG", "COPY", "LABEL", "USER", "WORKDIR", "EXPOSE", "HEALTHCHECK")
    lines = [f"FROM {sglang_stage}"]
    for command in commands[start + 1 :]:
        if command.cmd == "FROM":
            break
        if command.cmd in keep and not any(f.startswith("--from=") for f in command.flags):
            lines.append(command.original)
    # The image's own entrypoint (serve.py: the API key from the secret file) runs the stand-in.
    lines += [
        "COPY sglang_server.py /opt/standin/sglang_server.py",
        "ENV SGLANG_STACK_SERVER=sglang_server PYTHONPATH=/opt/standin",
        'ENTRYPOINT ["python3", "-m", "sglang_stack.entrypoints.serve"]',
        'CMD ["--help"]',
    ]
    return "\n".join(lines) + "\n"


def build_standin(sglang_stage: str, tag: str, workdir: Path) -> str:
    """Build the stand-in image as ``tag`` with ``docker buildx build``; returns the tag."""
    import image_layout

    context = workdir / "standin-context"
    for rel in image_layout.modules():  # whatever the runtime stage's COPY lines take, read from the Dockerfile
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, context / rel)
    shutil.copy(TESTS / "sglang_server.py", context / "sglang_server.py")
    (context / "Dockerfile").write_text(standin_dockerfile(sglang_stage))
    docker("buildx", "build", "--load", "--tag", tag, str(context), timeout=600)
    return tag


def served(log: str) -> int:
    """How many ``/generate`` requests a stand-in answered, from its log (one line each).

    Counted by the line's text, not its start: Compose prefixes every line it prints with
    an erase-line sequence, even with --no-color.
    """
    return log.count("stand-in: /generate req-")


# --- SGLang's router in front of stand-in workers -----------------------------------

ROUTER_OVERRIDE = TESTS / "compose.router.yaml"
WORKERS = ("worker-a", "worker-b")  # the stand-in services of ROUTER_OVERRIDE
# Their names resolve on the project network; the router reaches them there, not on the host.
WORKER_URLS = ",".join(f"http://{worker}:30000" for worker in WORKERS)


def unrelated_prompt(i: int) -> str:
    """Prompt ``i`` of a set that share no prefix.

    Cache-aware routing sends a prompt to the worker that already holds its prefix; only a
    prompt that matches nothing goes to the least loaded worker, so only these spread.
    """
    return f"{hashlib.sha256(str(i).encode()).hexdigest()[:16]} tell me how a router spreads requests"


def generate(url: str, text: str, max_new_tokens: int = 64) -> dict:
    """One plain ``/generate`` at ``url``: the answer, or ``{"error": ...}`` when it failed."""
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": max_new_tokens}}).encode()
    request = urllib.request.Request(f"{url}/generate", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        return {"error": f"HTTP {err.code}: {err.read()[:200]!r}"}
    except OSError as err:
        return {"error": f"{type(err).__name__}: {err}"}


def worker_health(router_url: str) -> dict[str, bool]:
    """The router's own view of its workers (``GET /workers``): URL -> healthy."""
    with urllib.request.urlopen(f"{router_url}/workers", timeout=10) as response:
        return {w["url"]: bool(w["is_healthy"]) for w in json.loads(response.read())["workers"]}


# --- compose projects ---------------------------------------------------------------


class ComposeProject:
    """The shipped compose.yaml plus test overrides, as one uniquely named Compose project.

    ``env`` holds the variables a user would put in .env; the project name, the
    compose files (``COMPOSE_FILE``) and free host ports are added here. Every
    command runs from the repository root, as a user's would. ``down()`` removes
    the project's containers, networks and volumes, and nothing else.
    """

    def __init__(self, name: str, overrides: list[Path], env: dict[str, str]):
        self.name = name
        files = ["compose.yaml"] + [str(Path(o).relative_to(ROOT)) if Path(o).is_relative_to(ROOT) else str(o) for o in overrides]
        # No secret of the developer's shell: a project has a key or a token only when a test gives it one.
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("SGLANG_API_KEY", "HF_TOKEN", "SGLANG_API_KEY_FILE", "HF_TOKEN_FILE")}
        self.env = {
            **inherited,
            "COMPOSE_PROJECT_NAME": name,
            "COMPOSE_FILE": os.pathsep.join(files),
            **{var: str(free_port()) for var in PORT_VARIABLES.values()},
            **env,
        }

    def url(self, service: str) -> str:
        """The service's published loopback address."""
        return f"http://127.0.0.1:{self.env[PORT_VARIABLES[service]]}"

    def run(self, argv: list[str], timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command in the project's environment from the repository root, shown first."""
        show(argv, ROOT)
        proc = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        return proc

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(["docker", "compose", *args], timeout=timeout, check=check)

    def invoke(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return self.run([*INVOKE, *args], timeout=timeout, check=check)

    def containers(self) -> list[dict]:
        """Every container of this project, running or not (``docker ps -a`` by the project label)."""
        proc = docker("ps", "--all", "--filter", f"label=com.docker.compose.project={self.name}", "--format", "{{json .}}")
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    def networks(self) -> list[str]:
        proc = docker("network", "ls", "--filter", f"label=com.docker.compose.project={self.name}", "--format", "{{.Name}}")
        return proc.stdout.split()

    def logs(self, service: str) -> str:
        """Everything ``service`` printed, without Compose's prefixes."""
        return self.compose("logs", "--no-color", "--no-log-prefix", service, timeout=60).stdout

    def health(self, service: str) -> str:
        """The container's health status (starting, healthy, unhealthy), or its state when it has none."""
        rows = [c for c in self.containers() if f"{self.name}-{service}-" in c.get("Names", "")]
        if not rows:
            return "absent"
        proc = docker("inspect", "--format", "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}", rows[0]["ID"])
        return proc.stdout.strip()

    def down(self) -> None:
        # Every profile: a service of an inactive profile is invisible to `down`, and its
        # container would keep the project network alive.
        self.compose("--profile", "*", "down", "--volumes", "--remove-orphans", "--timeout", "5", check=False, timeout=120)
