"""Bad input, table-driven: each case is one mistake a user makes, run as the user runs it.

Every case edits a fresh copy of this checkout (the tracked files, as they stand),
runs ``invoke`` there in a subprocess with a clean home and environment, and asserts:
the exit code is the one the case names (non-zero), no traceback reaches the user,
an ``error:`` line (or, for the doctor, a ``FAIL`` line) names the file, key or
value at fault, and the command wrote nothing: every file of the copy has the
bytes and mode it had after the edit, and no file appeared or vanished.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from sglang_stack import ROOT
from sglang_stack.lock import lockfile
from pins import PIN

Edit = Callable[[Path], None]


# --- edits ---------------------------------------------------------------------------------


def write(rel: str, data: str | bytes) -> Edit:
    def edit(tree: Path) -> None:
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return edit


def append(rel: str, data: str | bytes) -> Edit:
    def edit(tree: Path) -> None:
        with open(tree / rel, "ab") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
    return edit


def replace(rel: str, old: str, new: str) -> Edit:
    def edit(tree: Path) -> None:
        path = tree / rel
        text = path.read_text()
        assert old in text, f"{rel} no longer holds {old!r}: update this case"
        path.write_text(text.replace(old, new, 1))
    return edit


def remove(rel: str) -> Edit:
    return lambda tree: (tree / rel).unlink()


def directory(rel: str) -> Edit:
    """Put an empty directory where a file was expected."""
    def edit(tree: Path) -> None:
        path = tree / rel
        if path.exists():
            path.unlink()
        path.mkdir(parents=True)
    return edit


def unreadable(rel: str) -> Edit:
    return lambda tree: (tree / rel).chmod(0)


def env_file(text: str | bytes) -> Edit:
    return write(".env", text)


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    edits: list[Edit]
    says: list[str]
    """Each must appear in one error line (or, with ``check``, in one doctor line that is a FAIL)."""
    code: int = 2
    check: str | None = None
    """For `invoke doctor`: the check whose FAIL line must carry ``says``."""
    needs: str | None = None
    """An executable the case needs on PATH (docker, for a merge done by Compose)."""
    engine: bool = False
    """The case asks a running Docker Engine: it carries the `engine` marker."""
    as_user: bool = False
    """A permission case: meaningless as root, who reads everything."""
    environ: dict[str, str] = field(default_factory=dict)


LOCK = "versions.lock"
SGLANG_WHEEL = lockfile.load()["sglang"]["url"].rsplit("/", 1)[1]  # the pinned wheel's file name
REQS = "requirements.lock.txt"
TEMPLATE = "docker/Dockerfile.j2"
VALUES = "deploy/k8s/values.yaml"
MODELS = "models.lock"
SHAREGPT = '[{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}]'

CASES = [
    # versions.lock: encoding, shape, types, unknown keys, values
    Case("lock-not-utf8", ["render"], [append(LOCK, b"\n# caf\xe9\n")], ["versions.lock:", "not UTF-8"]),
    Case("lock-directory", ["render"], [directory(LOCK)], ["versions.lock: is a directory"]),
    Case("lock-missing", ["render"], [remove(LOCK)], ["versions.lock: not found"]),
    Case("lock-unreadable", ["render"], [unreadable(LOCK)], ["versions.lock: cannot read"], as_user=True),
    Case("lock-bad-toml", ["render"], [append(LOCK, "\n[sglang\n")], ["versions.lock: invalid TOML"]),
    Case("override-alias-bomb", ["doctor", "eagle3"], [write("compose.override.yaml", "x-a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"x-{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
        + "services:\n  eagle3:\n    labels:\n      bomb: *i\n")], ["compose.override.yaml: its YAML expands to more than"],
         code=1, check="config", needs="docker"),
    Case("mirror-manifest-nested-deep", ["build", "--mirror", "--target", "router"],
         [write("mirror/manifest.json", "[" * 100_000 + "]" * 100_000)], ["mirror/manifest.json: nested deeper"]),
    Case("mirror-manifest-is-a-link", ["build", "--mirror", "--target", "router"],
         [lambda tree: (tree / "mirror" / "manifest.json").symlink_to("/etc/hostname")], ["mirror/manifest.json: a link"]),
    Case("mirror-fetch-lock-is-a-link", ["fetch", "--target", "router"],
         [lambda tree: (tree / "mirror" / ".fetch.lock").symlink_to(tree.parent / "planted")], ["mirror/.fetch.lock:"]),
    Case("lock-links-to-dev-zero", ["render"], [lambda tree: ((tree / LOCK).unlink(), (tree / LOCK).symlink_to("/dev/zero"))],
         ["versions.lock: not a regular file"]),
    Case("lock-is-a-fifo", ["render"], [lambda tree: ((tree / LOCK).unlink(), os.mkfifo(tree / LOCK))],
         ["versions.lock: not a regular file"]),
    Case("lock-duplicate-key", ["render"], [replace(LOCK, 'version = "0.5.9"', 'version = "0.5.9"\nversion = "0.5.9"')],
         ["versions.lock: invalid TOML"]),
    Case("lock-unknown-table", ["render"], [append(LOCK, "\n[sglnag]\nversion = 1\n")], ["sglnag"]),
    Case("lock-version-type", ["render"], [replace(LOCK, 'version = "0.5.9"', "version = 0.5")], ["sglang.version"]),
    Case("lock-exclude-newer", ["render"], [replace(LOCK, 'exclude_newer = "2026-02-24T00:00:00Z"', 'exclude_newer = "yesterday"')],
         ["exclude_newer", "yesterday"]),
    Case("lock-base-digest", ["render"], [replace(LOCK, 'digest = "sha256:f8ef28f5', 'digest = "sha265:f8ef28f5')],
         ["cuda.base.digest"]),
    Case("lock-wheel-version", ["render"], [replace(LOCK, f'version = "{PIN["torch"]}"', 'version = ""')], ["torch"]),
    Case("lock-arch-list", ["render"], [replace(LOCK, 'arch_list = "9.0a 12.0a"', 'arch_list = "9.0a sm_120"')],
         ["arch_list", "sm_120"]),
    Case("lock-python-version", ["render"], [replace(LOCK, 'version = "3.12"', 'version = "three"')], ["python.version"]),
    Case("lock-cuda-version-list", ["render"], [replace(LOCK, 'version = "13.0.1"', 'version = ["13.0.1"]')], ["cuda.version"]),
    # lock fields that a template interpolates cannot become instructions (render and the lock check refuse alike)
    Case("lock-newline-in-tag", ["render"],
         [replace(LOCK, 'tag = "13.0.1-base-ubuntu24.04"', 'tag = "13.0.1-base-ubuntu24.04\\nFROM busybox AS injected\\nRUN echo pwned"')],
         ["cuda.base.tag", "control character or line break"]),
    Case("lock-newline-in-tag-check", ["lock", "--check"],
         [replace(LOCK, 'tag = "13.0.1-base-ubuntu24.04"', 'tag = "13.0.1-base-ubuntu24.04\\nFROM busybox AS injected"')],
         ["cuda.base.tag", "control character or line break"]),
    Case("lock-uppercase-image-name", ["render"], [replace(LOCK, 'name = "sglang-stack"', 'name = "SGLang-Stack"')],
         ["image.name", "'SGLang-Stack' is not an image name"]),
    Case("lock-uppercase-base-image", ["render"], [replace(LOCK, 'image = "docker.io/nvidia/cuda"', 'image = "docker.io/NVIDIA/cuda"')],
         ["cuda.base.image", "is not an image name"]),
    Case("lock-version-trailing-space", ["render"], [replace(LOCK, 'version = "0.5.9"', 'version = "0.5.9 "')],
         ["sglang.version", "leading or trailing whitespace"]),
    Case("lock-url-escapes-the-cache", ["lock", "--check"],
         [replace(LOCK, "/" + SGLANG_WHEEL, "/x/..%2F..%2F..%2F" + SGLANG_WHEEL)],
         ["sglang.url", "is not one plain file name"]),
    Case("reqs-marker-the-image-skips", ["render"],
         [append(REQS, "\nwin-only==1.0 ; sys_platform == 'win32' \\\n    --hash=sha256:" + "0" * 64 + "\n")],
         [REQS, "win-only carries an environment marker"]),
    # the generated requirements file
    Case("reqs-missing", ["render"], [remove(REQS)], [REQS, "invoke lock"]),
    Case("reqs-not-utf8", ["render"], [append(REQS, b"\xff\xfe")], [REQS, "not UTF-8"]),
    Case("reqs-directory", ["render"], [directory(REQS)], [REQS]),
    Case("reqs-header", ["render"], [replace(REQS, "# GENERATED", "# edited")], [REQS, "header"]),
    Case("reqs-unpinned", ["render"], [append(REQS, "\nrequests>=2\n")], [REQS, "requests"]),
    # the patch series
    Case("series-missing", ["render"], [remove("patches/series")], ["patches/series: missing"]),
    Case("series-names-nothing", ["render"], [append("patches/series", "\n0099-nosuch.patch\n")], ["0099-nosuch.patch"]),
    Case("series-not-utf8", ["render"], [append("patches/series", b"\n# \xff\n")], ["patches/series", "not UTF-8"]),
    Case("series-directory", ["render"], [directory("patches/series")], ["patches/series"]),
    # the Dockerfile template
    Case("template-undefined", ["render"], [append(TEMPLATE, "\nLABEL x={{ lock.no_such_value }}\n")],
         ["Dockerfile.j2", "no_such_value"]),
    Case("template-syntax", ["render"], [append(TEMPLATE, "\n{% if %}\n")], ["Dockerfile.j2:"]),
    Case("template-missing", ["render"], [remove(TEMPLATE)], ["Dockerfile.j2"]),
    Case("template-not-utf8", ["render"], [append(TEMPLATE, b"\n# \xff\n")], ["Dockerfile.j2", "not UTF-8"]),
    Case("template-bad-instruction", ["render"], [append(TEMPLATE, "\nFORM scratch\n")],
         ["Dockerfile.j2: rendered line", "nothing written"]),
    Case("template-copy-one-arg", ["render"], [append(TEMPLATE, "\nCOPY onlyone\n")], ["Dockerfile.j2: rendered line"]),
    # invoke's own config files
    Case("invoke-yaml-syntax", ["render"], [write("invoke.yaml", "stack: [\n")], ["invoke.yaml:", "invalid YAML"]),
    Case("invoke-yaml-list", ["render"], [write("invoke.yaml", "- 1\n")], ["invoke.yaml: must be a mapping"]),
    Case("invoke-yaml-not-utf8", ["render"], [write("invoke.yaml", b"stack: \xff\n")], ["invoke.yaml:", "not UTF-8"]),
    Case("invoke-json", ["render"], [write("invoke.json", "{nope")], ["invoke.json: invalid JSON"]),
    # flags
    Case("flag-twice", ["bench", "--levels", "1", "--levels", "2"], [], ["--levels: given more than once"]),
    Case("flag-unknown", ["render", "--nosuch"], [], ["'--nosuch': no such task or flag"]),
    Case("task-unknown", ["rendr"], [], ["'rendr': no such task or flag"]),
    Case("flag-no-value", ["k8s", "--out"], [], ["--out: needs a value"]),
    Case("flag-required", ["k8s"], [], ["--out"]),
    Case("bench-levels-word", ["bench", "--levels", "many"], [], ["--levels", "many"]),
    Case("bench-levels-zero", ["bench", "--levels", "0"], [], ["--levels", "0"]),
    Case("bench-repeats-negative", ["bench", "--repeats", "-1"], [], ["--repeats"]),
    Case("bench-timeout-word", ["bench", "--timeout", "soon"], [], ["--timeout", "soon"]),
    Case("bench-api", ["bench", "--api", "grpc"], [], ["--api 'grpc'"]),
    Case("bench-request-rate", ["bench", "--request-rate", "fast"], [], ["--request-rate 'fast'"]),
    Case("bench-burstiness", ["bench", "--request-rate", "4", "--burstiness", "0"], [], ["--burstiness '0'"]),
    Case("bench-slo", ["bench", "--slo", "ttft"], [], ["--slo 'ttft'"]),
    Case("bench-percentiles", ["bench", "--percentiles", "50,120"], [], ["--percentiles", "'120'"]),
    Case("bench-dataset", ["bench", "--dataset", "sharegpt"], [], ["--dataset 'sharegpt'"]),
    # A prompt file is read only once an endpoint answers: these two run against a live loopback server.
    Case("bench-sharegpt-empty", ["bench", "--prompts", "s.json", "--endpoint", "live={server}"],
         [write("s.json", '[{"conversations": []}]')],
         ["s.json", "no conversation with a human turn"]),
    Case("bench-endpoint-no-url", ["bench", "--endpoint", "eagle3"], [], ["--endpoint", "NAME=URL"]),
    Case("bench-endpoint-scheme", ["bench", "--endpoint", "e=ftp://127.0.0.1:1"], [], ["--endpoint", "ftp"]),
    Case("bench-prompts-missing", ["bench", "--prompts", "nosuch.jsonl"], [], ["nosuch.jsonl"]),
    Case("bench-prompts-not-utf8", ["bench", "--prompts", "p.jsonl", "--endpoint", "live={server}"],
         [write("p.jsonl", b'{"prompt": "\xff"}\n')],
         ["p.jsonl"]),
    Case("bench-prompts-directory", ["bench", "--prompts", "pdir"], [directory("pdir")], ["pdir"]),
    Case("bench-out-under-file", ["bench", "--out", "afile/sub"], [write("afile", "x")], ["afile"]),
    Case("bench-compare-missing", ["bench-compare", "--results", "nosuch.json"], [], ["nosuch.json"]),
    Case("bench-compare-not-json", ["bench-compare", "--results", "r.json"], [write("r.json", "{")], ["r.json"]),
    Case("logs-tail", ["logs", "eagle3", "--tail", "lots"], [], ["--tail", "lots"]),
    Case("logs-service", ["logs", "eagle4"], [], ["eagle4"]),
    Case("logs-never-created", ["logs", "eagle3", "--no-follow"], [], ["eagle3: no container", "invoke up eagle3"], code=1,
         needs="docker", engine=True),
    Case("up-service", ["up", "--service", "eagle4"], [], ["eagle4"]),
    Case("doctor-service", ["doctor", "--service", "eagle4"], [], ["eagle4"]),
    Case("build-engine", ["build", "--engine", "dockr"], [], ["dockr"]),
    Case("build-target", ["build", "--target", "nosuch"], [], ["nosuch"]),
    Case("build-ca-bundle", ["build", "--ca-bundle", "nosuch.pem"], [], ["nosuch.pem"]),
    Case("build-arch-list", ["build", "--cuda-arch-list", "sm_90"], [], ["sm_90"]),
    Case("size-margin", ["size", "--margin", "lots"], [], ["--margin", "lots"]),
    Case("size-target", ["size", "--target", "nosuch"], [], ["nosuch"]),
    Case("smoke-target", ["smoke", "--target", "nosuch"], [], ["--target", "nosuch"]),
    Case("smoke-runtime-base", ["smoke", "--target", "runtime", "--base-image", "debian:12"], [], ["--target runtime", "--base-image"]),
    Case("standins-malformed", ["smoke", "--target", "runtime"], [replace("docker/standins.toml", 'suite = "bookworm"', "suite = 12")],
         ["docker/standins.toml", "base.suite"]),
    Case("audit-src-missing", ["audit", "--sglang-src", "nosuch"], [], ["nosuch"]),
    Case("audit-model-config", ["audit", "--sglang-src", ".", "--model-config", "c.json"], [write("c.json", "[1")], ["c.json"]),
    Case("patch-src-missing", ["patch", "--sglang-src", "nosuch"], [], ["nosuch"]),
    # .env, as `invoke status` and the doctor read it
    Case("env-not-utf8", ["status"], [env_file(b"SGLANG_API_KEY=\xff\n")], [".env:1", "not UTF-8"]),
    Case("env-directory", ["status"], [directory(".env")], [".env"]),
    Case("env-garbage-line", ["status"], [env_file("this is not a setting\n")], [".env:1", "key cannot contain a space"]),
    Case("env-port-range", ["status"], [env_file("EAGLE3_PORT=99999\n")], ["EAGLE3_PORT=99999", ".env:1"]),
    Case("env-port-word", ["logs", "eagle3"], [env_file("BASELINE_PORT=http\n")], ["BASELINE_PORT"]),
    Case("env-tp-size", ["status"], [env_file("TP_SIZE=eight\n")], ["TP_SIZE"]),
    Case("env-router-policy", ["status"], [env_file("ROUTER_POLICY=fastest\n")], ["ROUTER_POLICY"]),
    Case("env-router-startup", ["status"], [env_file("ROUTER_WORKER_STARTUP_TIMEOUT=1w\n")], ["ROUTER_WORKER_STARTUP_TIMEOUT"]),
    Case("env-compose-file", ["status"], [env_file("COMPOSE_FILE=nosuch.yaml\n")], ["COMPOSE_FILE", "nosuch.yaml"]),
    # Not a file Compose can read: a FIFO held `docker compose config` until its timeout (a directory, here: the
    # check that every file is unchanged would block reading a FIFO).
    Case("env-compose-file-not-a-file", ["status"], [directory("other.yaml"), env_file("COMPOSE_FILE=other.yaml\n")],
         ["COMPOSE_FILE", "other.yaml", "not a regular file"]),
    Case("shell-compose-file-not-a-file", ["status"], [directory("other.yaml")],
         ["COMPOSE_FILE=other.yaml (shell)", "not a regular file"], environ={"COMPOSE_FILE": "other.yaml"}),
    Case("env-unterminated-quote", ["status"], [env_file('SGLANG_EXTRA_ARGS="--foo\n')], [".env:1"]),
    Case("env-health-interval", ["doctor"], [env_file("HEALTH_INTERVAL=abc\n")], ["HEALTH_INTERVAL"], code=1, check="config"),
    Case("env-health-timeout", ["doctor"], [env_file("HEALTH_TIMEOUT=5s\n")], ["HEALTH_TIMEOUT"], code=1, check="config"),
    Case("env-api-key-split", ["doctor"], [write("key", "two words\n"), env_file("SGLANG_API_KEY_FILE=key\n")],
         ["SGLANG_API_KEY_FILE", "whitespace"], code=1, check="api-key"),
    Case("env-api-key-missing", ["doctor"], [env_file("SGLANG_API_KEY_FILE=secrets/nosuch\n")],
         ["SGLANG_API_KEY_FILE", "no such file"], code=1, check="api-key"),
    Case("env-api-key-legacy", ["doctor"], [env_file("SGLANG_API_KEY=left-from-before\n")],
         ["SGLANG_API_KEY", "no longer read"], code=1, check="api-key"),
    Case("env-model-dir", ["doctor"], [env_file("MODEL_DIR=/nonexistent/model\n")], ["/nonexistent/model"], code=1, check="model"),
    # compose files
    Case("compose-not-utf8", ["status"], [append("compose.yaml", b"\n# \xff\n")], ["compose.yaml", "not UTF-8"]),
    Case("compose-bad-yaml", ["status"], [append("compose.yaml", "\nservices: [\n")], ["compose.yaml:", "invalid YAML"]),
    Case("override-bad-yaml", ["doctor"], [write("compose.override.yaml", "services:\n  eagle3:\n    ports: [\n")],
         ["compose.override.yaml:", "correct compose.override.yaml"], code=1, check="config"),
    Case("override-unknown-key", ["doctor"], [write("compose.override.yaml", "services:\n  eagle3:\n    bogus: 1\n")],
         ["compose.override.yaml", "bogus", "correct compose.override.yaml"], code=1, check="config", needs="docker"),
    # Kubernetes values
    Case("k8s-values-not-utf8", ["k8s", "--out", "k8s-out", "--values", "v.yaml"], [write("v.yaml", b"replicas: \xff\n")],
         ["v.yaml:1", "not UTF-8"]),
    Case("k8s-values-directory", ["k8s", "--out", "k8s-out", "--values", "vdir"], [directory("vdir")], ["vdir"]),
    Case("k8s-values-unknown", ["k8s", "--out", "k8s-out"], [append(VALUES, "\nreplicaz: 3\n")], ["replicaz"]),
    Case("k8s-values-duplicate-key", ["k8s", "--out", "k8s-out"], [append(VALUES, "\nreplicas: 20\n")],
         ["deploy/k8s/values.yaml:", "'replicas' is given twice (lines 16 and"]),
    Case("k8s-out-holds-a-foreign-file", ["k8s", "--out", "k8s-out"],
         [write("k8s-out/sglang.yaml", b"\xff\xfe not ours\n")], ["k8s-out/sglang.yaml"]),
    Case("k8s-values-type", ["k8s", "--out", "k8s-out"], [replace(VALUES, "replicas: 2", "replicas: two")], ["replicas"]),
    Case("k8s-values-list", ["k8s", "--out", "k8s-out", "--values", "v.yaml"], [write("v.yaml", "- 1\n")], ["v.yaml"]),
    Case("k8s-out-is-file", ["k8s", "--out", "afile"], [write("afile", "x")], ["afile"]),
    # the mirror, verify, and the model pins
    Case("fetch-target", ["fetch", "--target", "gpu"], [], ["--target 'gpu'"]),
    # Refused before mirror/ gets its directories (the check that nothing was written holds it).
    Case("fetch-engine-typo", ["fetch", "--engine", "dockr"], [], ["--engine 'dockr'", "unsupported"]),
    Case("fetch-base-without-target", ["fetch", "--base-image", "x:1"], [], ["--base-image", "--target"]),
    Case("fetch-bad-manifest", ["build", "--mirror"], [write("mirror/manifest.json", "{")],
         ["mirror/manifest.json: not valid JSON"]),
    Case("build-mirror-empty", ["build", "--mirror"], [], ["mirror/manifest.json: missing", "invoke fetch"]),
    Case("verify-mirror-alone", ["verify", "--image", "x:1", "--mirror"], [], ["--mirror applies to --rebuild only"]),
    Case("models-bad-toml", ["model-revision"], [append(MODELS, "\n[[model]\n")], ["models.lock: invalid TOML"]),
    Case("models-not-utf8", ["model-revision"], [append(MODELS, b"\n# \xff\n")], ["models.lock:", "not UTF-8"]),
    Case("models-unknown-key", ["model-revision"], [replace(MODELS, 'track = "main"', 'trak = "main"')],
         ["model[target]", "'trak'"]),
    Case("models-revision", ["model-revision"], [replace(MODELS, 'revision = ""', 'revision = "main"')],
         ["model[target].revision", "'main'"]),
    Case("models-repo", ["model-revision"], [replace(MODELS, '"moonshotai/Kimi-K2.5"', '"Kimi K2.5"')],
         ["model[target].repo", "'Kimi K2.5'"]),
    Case("models-role", ["model-revision", "--role", "draftr"], [], ["--role 'draftr'"]),
    Case("models-unpinned", ["models-verify", "--dir", "."], [], ["moonshotai/Kimi-K2.5 is not pinned yet"]),
    Case("models-workers", ["models-verify", "--workers", "0"], [], ["--workers"]),
]


# --- running a case -------------------------------------------------------------------------


def _tracked(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """This checkout's files, copied once; each case works on its own copy of this copy."""
    base = tmp_path_factory.mktemp("checkout")
    for rel in _tracked(ROOT):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, base / rel)
    return base


def snapshot(tree: Path) -> dict[str, tuple[int, str]]:
    """Every file and directory under ``tree`` with its mode and content hash (bytecode caches aside)."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache")]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(tree))
            st = path.lstat()
            digest = ""
            if path.is_file() and os.access(path, os.R_OK):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            seen[rel] = (st.st_mode, digest)
    return seen


def clean_environ(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The user's shell, minus anything of ours a developer may have exported."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("INVOKE", "SGLANG", "COMPOSE", "HF_", "ROUTER", "MODEL", "DRAFT", "PYTEST"))}
    # The Docker CLI finds a per-user plugin (Compose, buildx) under $DOCKER_CONFIG, else under $HOME/.docker:
    # a fresh HOME must not take the user's plugins away.
    docker_config = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    return keep | {"HOME": str(home), "DOCKER_CONFIG": docker_config, "SGLANG_STACK_CACHE": str(home / "cache"),
                   "NO_COLOR": "1"} | extra


@pytest.fixture(scope="module")
def server():
    """A loopback server in SGLang's format, for the cases that need an endpoint to answer."""
    from sglang_server import SGLangServer

    with SGLangServer() as live:
        yield live.url


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.engine] if c.engine else []) for c in CASES])
def test_bad_input(case: Case, pristine: Path, tmp_path: Path, request):
    if case.as_user and os.geteuid() == 0:
        pytest.skip("root reads every file: a permission case proves nothing")
    if case.needs and not shutil.which(case.needs):
        pytest.skip(f"needs {case.needs}")
    tree = tmp_path / "checkout"
    shutil.copytree(pristine, tree, symlinks=True)
    for edit in case.edits:
        edit(tree)
    before = snapshot(tree)
    home = tmp_path / "home"
    home.mkdir()
    argv = case.argv
    if any("{server}" in a for a in argv):
        url = request.getfixturevalue("server")
        argv = [a.replace("{server}", url) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=tree, capture_output=True, text=True,
                          env=clean_environ(home, case.environ), timeout=180, stdin=subprocess.DEVNULL)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said
    assert proc.returncode == case.code, f"exit {proc.returncode}, wanted {case.code}:\n{said}"
    if case.check:
        lines = [line for line in proc.stdout.splitlines() if line.startswith("FAIL") and f" {case.check} " in line]
    else:
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert lines, f"no {'FAIL ' + case.check if case.check else 'error:'} line:\n{said}"
    for text in case.says:
        assert any(text in line for line in lines), f"{text!r} is in no line of:\n" + "\n".join(lines)
    assert snapshot(tree) == before, "the command changed the work tree"


def test_the_table_is_large_and_distinct():
    """At least 60 bad inputs, each with an id of its own."""
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)
