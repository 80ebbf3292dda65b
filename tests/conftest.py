"""Shared fixtures and options.

Image identity reaches the tests through options, so CI and a developer call the same thing:
  --base-image REF   use this Debian-like base (python3, venv, patch) instead of making one
  --keep-images      keep the images the container and engine tests build (for poking at them afterwards)

Tests that need buildah or the Docker Engine skip with the reason where they cannot
run, except in CI (SGLANG_STACK_CI=1, set by .ci/run), where that is a failure.
Every image and compose project a session makes is named with its run id and
removed by that name, so concurrent runs on one machine leave each other alone.

The real sglang wheel pinned in versions.lock is fetched once by URL and sha256
(cached in ~/.cache/sglang-stack, or $SGLANG_STACK_CACHE) and unpacked as
`pip install --target` lays it out: a directory holding sglang/ and its dist-info.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sglang_stack.engine import BUILDAH, DOCKER
from sglang_stack import ROOT


def pytest_addoption(parser):
    parser.addoption("--base-image", default=None, help="smoke base image to build on (default: make one with debootstrap)")
    parser.addoption("--keep-images", action="store_true", help="keep images built by container tests")


# A test that needs none of these is `fast`: `python -m pytest -n auto -m fast` (docs/development.md).
SLOW = ("container", "engine", "apt", "sglang_env", "network", "schema", "gpu", "whole_image")


# Fixtures that run SGLang's own code in a CPU Python of the pins: a test that takes one, directly or through another
# fixture, is an sglang_env test.
SGLANG_FIXTURES = ("sglang_generator", "default_python", "profile_python", "upstream_python")


def pytest_collection_modifyitems(items):
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in SGLANG_FIXTURES):
            item.add_marker(pytest.mark.sglang_env)
        if not any(item.get_closest_marker(name) for name in SLOW):
            item.add_marker(pytest.mark.fast)
        # Under xdist (`--dist loadgroup`, as .ci/test runs) the image tests of one store go to one worker: they
        # share that store's session images (the Debian base, the sglang stage), which a second worker would build
        # again. The Docker Engine's and buildah's stores are apart, so their two groups run side by side.
        if item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.xdist_group("docker"))
        elif item.get_closest_marker("container"):
            item.add_marker(pytest.mark.xdist_group("buildah"))


def load_factor() -> float:
    """How much slower than a quiet machine this one is now: its 1-minute load per core, at least 1."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def wait_until(predicate, timeout: float, interval: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass, on a quiet machine: the
    deadline stretches with the load (``load_factor``), since a busy CI runner is slow, not wrong."""
    deadline = time.monotonic() + timeout * load_factor()
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def need(reason: str):
    """Skip for want of a tool or engine; in CI (SGLANG_STACK_CI=1, set by .ci/run), fail instead."""
    if os.environ.get("SGLANG_STACK_CI") == "1":
        pytest.fail(f"CI must run this test, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def compose() -> None:
    """The docker CLI with its Compose v2 plugin, which reads every compose file (no engine needed)."""
    import shutil

    if not shutil.which("docker"):
        need("no docker CLI on PATH: Compose reads the compose files")
    proc = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        need(f"no Compose v2 plugin (docker compose): {(proc.stderr or proc.stdout).strip()[:120]}")


@pytest.fixture
def hub(monkeypatch):
    """A loopback Hugging Face Hub with one repository (tests/hub.py), HF_ENDPOINT pointing at it: the list of paths
    asked for."""
    import hub as loopback_hub

    with loopback_hub.serve(monkeypatch) as seen:
        yield seen


@pytest.fixture(scope="session")
def run_id() -> str:
    """Part of every name this session gives an image or a compose project."""
    from sglang_stack.image import store

    return store.run_id()


@pytest.fixture(scope="session")
def keep_images(request) -> bool:
    return bool(request.config.getoption("--keep-images"))


@pytest.fixture(scope="session")
def smoke_base(request, run_id, keep_images) -> str:
    """A local Debian base in buildah's store, leased for the session: the tag to build FROM."""
    from sglang_stack.smoke import container as smoke
    from sglang_stack.image import store

    if not (shutil.which("buildah") and shutil.which("debootstrap") and shutil.which("podman")):
        need("container tests need buildah, podman and debootstrap (.ci/run installs them)")
    ref = request.config.getoption("--base-image") or smoke.BASE_IMAGE
    with store.BaseLease(BUILDAH, ref, make=ref == smoke.BASE_IMAGE, keep=keep_images, run=run_id) as leased:
        yield leased


# --- the real Docker Engine -------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker Engine with Compose v2 and buildx answers here (.ci/run starts one)."""
    import engine

    reason = engine.problem()
    if reason:
        need(f"needs a Docker Engine with compose and buildx: {reason} (.ci/run starts one)")


@pytest.fixture(scope="session")
def docker_base(request, docker_engine, run_id, keep_images) -> str:
    """A local Debian bookworm base (python3, venv, pip, CA certificates) in the engine's store, leased."""
    from sglang_stack.smoke import container as smoke
    from sglang_stack.image import store

    if not shutil.which("debootstrap"):
        need("needs debootstrap to make the Debian base (.ci/run installs it)")
    ref = request.config.getoption("--base-image") or smoke.BASE_IMAGE
    with store.BaseLease(DOCKER, ref, make=ref == smoke.BASE_IMAGE, keep=keep_images, run=run_id) as leased:
        yield leased


def _invoke_build(target: str, base: str, run_id: str, keep: bool):
    """``invoke build --engine docker --target TARGET --base-image BASE``, the user's own command.

    Yields (tag, completed process, seconds); the tag is removed afterwards unless ``keep``.
    """
    import engine
    from sglang_stack.image import store

    tag = f"sglang-stack-test-{run_id}:{target}"
    argv = [*engine.INVOKE, "build", "--engine", "docker", "--target", target, "--base-image", base, "--tag", tag]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, f"invoke build --engine docker --target {target} failed:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"
    yield tag, proc, seconds
    if not keep:
        store.remove(DOCKER, tag)


@pytest.fixture(scope="session")
def sglang_stage(docker_base, run_id, keep_images):
    """The Dockerfile's ``sglang`` stage on the Debian base: (tag, completed process, seconds)."""
    yield from _invoke_build("sglang", docker_base, run_id, keep_images)


@pytest.fixture(scope="session")
def standin_image(sglang_stage, run_id, keep_images, tmp_path_factory) -> str:
    """The runtime stage's image with a CPU stand-in for the model server (tests/engine.py)."""
    import engine
    from sglang_stack.image import store

    tag = engine.build_standin(sglang_stage[0], f"sglang-stack-test-{run_id}:standin", tmp_path_factory.mktemp("standin"))
    yield tag
    if not keep_images:
        store.remove(DOCKER, tag)


@pytest.fixture(scope="session")
def router_image(docker_base, run_id, keep_images):
    """The Dockerfile's ``router`` stage on the Debian base: (tag, completed process, seconds)."""
    yield from _invoke_build("router", docker_base, run_id, keep_images)


@pytest.fixture
def compose_project(docker_engine, run_id, request, tmp_path):
    """Factory: ``compose_project(*override_files, env={...})``; every project is taken down at teardown."""
    import engine

    made = []

    def make(*overrides, env=None):
        name = f"sgs-test-{run_id}-{len(made)}-{request.node.name[:20]}".lower()
        name = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name)
        project = engine.ComposeProject(name, list(overrides), dict(env or {}))
        made.append(project)
        return project

    yield make
    for project in made:
        project.down()


@pytest.fixture
def model_dirs(tmp_path) -> dict[str, str]:
    """MODEL_DIR and DRAFT_MODEL_DIR for the stand-in: directories with a config.json, readable by uid 10001."""
    dirs = {}
    for var, arch in (("MODEL_DIR", "KimiK25ForConditionalGeneration"), ("DRAFT_MODEL_DIR", "LlamaForCausalLMEagle3")):
        path = tmp_path / var.lower()
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"architectures": [arch]}))
        path.chmod(0o755)
        dirs[var] = str(path)
    tmp_path.chmod(0o755)
    return dirs


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    """The pinned sglang wheel (versions.lock [sglang]), hash-verified and cached."""
    from sglang_stack import download
    from sglang_stack.lock import lockfile as lock

    table = lock.load()["sglang"]
    return download.fetch(table["url"], table["sha256"])


@pytest.fixture(scope="session")
def sglang_pristine(sglang_wheel, tmp_path_factory) -> Path:
    """One unpacked copy of the wheel for the whole session. Read it, never write to it."""
    from sglang_stack.patching.patches import unpack_wheel

    return unpack_wheel(sglang_wheel, tmp_path_factory.mktemp("sglang-pristine") / "site")


@pytest.fixture(scope="session")
def sglang_patched(sglang_pristine, tmp_path_factory) -> Path:
    """One copy of the wheel with patches/ applied, for the whole session. Read it, never write to it."""
    from sglang_stack.patching.patches import apply_series

    dest = tmp_path_factory.mktemp("sglang-patched") / "site"
    shutil.copytree(sglang_pristine, dest, copy_function=shutil.copyfile)
    apply_series(dest, quiet=True)
    return dest


class ProfileTrees:
    """A profile's sglang wheel unpacked as released (``pristine``) and with its own series applied (``patched``),
    made once per session and profile: read them, never write to them."""

    def __init__(self, factory):
        self._factory = factory
        self._made: dict[str, tuple[Path, Path]] = {}

    def __call__(self, name: str) -> tuple[Path, Path]:
        if name not in self._made:
            from sglang_stack import download
            from sglang_stack.lock import lockfile as lock, profiles
            from sglang_stack.patching.patches import apply_series, unpack_wheel

            profile = profiles.get(name)
            table = lock.load(profile.lock)["sglang"]
            wheel = download.fetch(table["url"], table["sha256"])
            pristine = unpack_wheel(wheel, self._factory.mktemp(f"sglang-{name}-pristine") / "site")
            patched = self._factory.mktemp(f"sglang-{name}-patched") / "site"
            shutil.copytree(pristine, patched, copy_function=shutil.copyfile)
            apply_series(patched, profile.series.parent, quiet=True)
            self._made[name] = (pristine, patched)
        return self._made[name]


@pytest.fixture(scope="session")
def profile_trees(tmp_path_factory) -> ProfileTrees:
    return ProfileTrees(tmp_path_factory)


# The profile whose own code the patch and upstream tests run (tests/patching/test_patch_*.py, test_upstream_capture.py).
UPSTREAM = "0.5.23"


@pytest.fixture(scope="module")
def trees(profile_trees):
    """``UPSTREAM``'s sglang tree as released and with its series applied: (pristine, patched)."""
    return profile_trees(UPSTREAM)


@pytest.fixture(scope="module")
def upstream_python(profile_python):
    """A CPU Python with exactly ``UPSTREAM``'s distributions."""
    return profile_python(UPSTREAM)


@pytest.fixture(scope="session")
def profile_python():
    """``profile_python(NAME)``: a Python with exactly profile NAME's distributions (tests/sglang_cpu_env.py)."""
    import sglang_cpu_env

    def make(name: str) -> Path:
        try:
            return sglang_cpu_env.profile_python(name)
        except sglang_cpu_env.Unavailable as err:
            need(f"cannot make a Python of profile {name}'s pins: {err}")

    return make


@pytest.fixture(scope="session")
def sglang_generator(profile_python, tmp_path_factory) -> dict:
    """`invoke bench --generator sglang`'s flags: SGLang's benchmark run by a Python of the profile that has it, with
    one word-level tokenizer for the session, so that a worker's runs share one benchmark process (bench/upstream.py
    keeps one per Python and tokenizer)."""
    from word_tokenizer import word_tokenizer
    from sglang_stack.bench import upstream

    tokenizer = word_tokenizer(tmp_path_factory.mktemp("sglang-generator") / "tok",
                               ["[UNK]", "prompt", "number", *map(str, range(10))])
    return {"generator": "sglang", "python": str(profile_python(upstream.PROFILE)), "tokenizer": str(tokenizer)}


@pytest.fixture
def generator_flags(request):
    """``generator_flags(NAME)``: `invoke bench`'s flags for NAME: sglang (``sglang_generator``: 0.5.23's benchmark)
    or sglang-default (the default profile's, ``default_python``)."""
    def flags(name: str) -> dict:
        chosen = request.getfixturevalue("sglang_generator")
        return {**chosen, "python": request.getfixturevalue("default_python")} if name == "sglang-default" else chosen

    return flags


@pytest.fixture(scope="session")
def default_python() -> str:
    """A CPU Python with exactly the default profile's distributions, where SGLang imports."""
    import sglang_cpu_env

    try:
        return str(sglang_cpu_env.python())
    except sglang_cpu_env.Unavailable as err:
        need(f"no Python of the default profile: {err}")


@pytest.fixture
def sglang_tree(sglang_pristine, tmp_path) -> Path:
    """A fresh, writable, unpatched copy of the sglang package tree: the directory that holds sglang/."""
    dest = tmp_path / "site"
    shutil.copytree(sglang_pristine, dest, copy_function=shutil.copyfile)
    return dest
