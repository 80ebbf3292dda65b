"""Stand-ins for the `docker` and `nvidia-smi` commands, for states a real engine here cannot be put in.

The tests run the real Docker Engine wherever it can show the behaviour
(tests/services/test_engine.py). These stand-ins remain for what it cannot: a GPU host
(an NVIDIA runtime, nvidia-smi), a docker CLI without the compose or buildx
plugin, and a host with no engine at all. They are real executables put first on PATH, so
the code under test runs its real subprocess path. Each call appends its argv to a log, which lets a test
prove that nothing was started. `nvidia-smi` prints the fixture files under
tests/fixtures/nvidia-smi/ (recorded for H200, constructed for RTX PRO 6000).
The `docker info` and `docker compose ps` answers are built by each test from
the keys the code reads; they are not recordings. `docker compose config` is the real
Compose (the docker CLI found when the fake is installed): the files are read as a user's are.
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"

DOCKER = r'''#!PYTHON
import json, os, sys
cfg = json.load(open(os.environ["FAKE_CLI_CONFIG"]))
args = sys.argv[1:]
with open(os.environ["FAKE_CLI_LOG"], "a") as log:
    log.write(json.dumps(["docker"] + args) + "\n")
def out(text): sys.stdout.write(text); sys.stdout.flush()
if args[:1] == ["info"]:
    if cfg.get("info") is None:
        sys.stderr.write("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n")
        sys.exit(1)
    out(json.dumps(cfg["info"]) + "\n"); sys.exit(0)
if args[:2] == ["image", "inspect"]:
    if cfg.get("image") is None:
        out("[]\n"); sys.stderr.write("Error response from daemon: No such image: %s\n" % args[-1]); sys.exit(1)
    out(json.dumps([cfg["image"]]) + "\n"); sys.exit(0)
if args[:1] == ["run"] and "stat" in args:
    owner = cfg.get("cache_owner", "10001:755")
    if owner is None:
        sys.stderr.write("stat: cannot statx '/home/sglang/.cache': No such file or directory\n"); sys.exit(1)
    out(owner + "\n"); sys.exit(0)
if args[:1] == ["run"] and "sglang_stack.entrypoints.allreduce" in args:  # SGLang's all-reduce start-up, recorded
    out(cfg.get("allreduce_output", "") + "\n"); sys.exit(cfg.get("allreduce_exit", 0))
if args[:1] == ["run"]:
    out(cfg.get("audit_output", "") + "\n"); sys.exit(cfg.get("audit_exit", 0))
if args[:1] == ["buildx"]:
    if not cfg.get("buildx_version"):
        sys.stderr.write("docker: 'buildx' is not a docker command.\nSee 'docker --help'\n"); sys.exit(1)
    out(cfg["buildx_version"] + "\n"); sys.exit(0)
if args[:1] == ["compose"]:
    if not cfg.get("compose_version"):
        sys.stderr.write("docker: 'compose' is not a docker command.\n"); sys.exit(1)
    if "version" in args:
        out(cfg["compose_version"] + "\n"); sys.exit(0)
    if "ps" in args:
        out("".join(json.dumps(r) + "\n" for r in cfg.get("ps_rows", []))); sys.exit(0)
    if "config" in args:  # Compose itself reads the files: the real plugin, through the real CLI
        if not cfg.get("real_docker"):
            sys.stderr.write("fake_cli: no real docker CLI with the compose plugin to read the compose files\n"); sys.exit(1)
        os.execv(cfg["real_docker"], [cfg["real_docker"]] + args)
    sys.exit(0)
sys.exit(0)
'''

NVIDIA_SMI = r'''#!PYTHON
import json, os, sys
cfg = json.load(open(os.environ["FAKE_CLI_CONFIG"]))
with open(os.environ["FAKE_CLI_LOG"], "a") as log:
    log.write(json.dumps(["nvidia-smi"] + sys.argv[1:]) + "\n")
name = cfg["smi"]
if sys.argv[1:2] == ["topo"]:  # tests/fixtures/topology: -m, or -p2p r|w (every pair OK)
    path = os.path.join(os.path.dirname(FIXTURES), "topology", name + ("-topo-m.txt" if "-m" in sys.argv else "-p2p-ok.txt"))
    if not os.path.exists(path):
        sys.stderr.write("fake nvidia-smi: no topology fixture " + path + "\n"); sys.exit(1)
    sys.stdout.write(open(path).read()); sys.exit(0)
query = any(a.startswith("--query-gpu") for a in sys.argv[1:])
path = os.path.join(FIXTURES, name + ("-query.csv" if query else "-nvidia-smi.txt"))
if "--query-gpu=uuid" in sys.argv:  # one made-up UUID per GPU of the fixture (the recordings hold zeros)
    rows = [r for r in open(path).read().splitlines() if r.strip() and not r.startswith("index")]
    sys.stdout.write("".join("GPU-%s-%08d\n" % (name, i) for i in range(len(rows)))); sys.exit(0)
sys.stdout.write(open(path).read())
'''


def install(bin_dir: Path, *, smi: str | None = None, **config) -> dict:
    """Write fake `docker` (and `nvidia-smi` when ``smi`` names a fixture prefix) into ``bin_dir``.

    Returns the environment to run the code under: PATH with ``bin_dir`` first,
    and the config and log files the fakes read and write.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    scripts = {"docker": DOCKER}
    if smi:
        scripts["nvidia-smi"] = NVIDIA_SMI.replace("FIXTURES", repr(str(FIXTURES)))
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(body.replace("#!PYTHON", "#!" + python, 1))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    cfg_path = bin_dir / "fake-cli.json"
    real = shutil.which("docker")
    cfg_path.write_text(json.dumps({"smi": smi, "real_docker": real if config.get("compose_version") else None, **config}))
    log = bin_dir / "fake-cli.log"
    log.write_text("")
    # PATH is this directory alone: a real docker, nvidia-smi or nvidia-container-runtime-hook
    # on a developer's machine must not answer instead. The fakes run by absolute shebang.
    return {"PATH": str(bin_dir), "FAKE_CLI_CONFIG": str(cfg_path), "FAKE_CLI_LOG": str(log)}


def calls(env: dict) -> list[list[str]]:
    """Every command the fakes ran, in order."""
    text = Path(env["FAKE_CLI_LOG"]).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


NVIDIA_INFO = {
    "ServerVersion": "28.2.2",
    "DockerRootDir": "/var/lib/docker",
    "Runtimes": {"io.containerd.runc.v2": {}, "nvidia": {"path": "nvidia-container-runtime"}, "runc": {}},
    "DefaultRuntime": "runc",
    "SecurityOptions": ["name=apparmor", "name=seccomp,profile=builtin", "name=cgroupns"],
}

PLAIN_INFO = {**NVIDIA_INFO, "Runtimes": {"io.containerd.runc.v2": {}, "runc": {}}}
