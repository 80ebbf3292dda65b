"""`invoke build`: the exact command for each engine, clear errors, and a real buildah build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

from sglang_stack.engine import BUILDAH, DOCKER, Engine, PODMAN
from sglang_stack import ROOT
from sglang_stack.image import build as buildmod
from sglang_stack.image import workflow
from sglang_stack.errors import UserError

CA = Path("/etc/ssl/certs/ca-certificates.crt")


def request(**kwargs) -> buildmod.BuildRequest:
    base = dict(engine=DOCKER, tag="sglang-stack:0.5.9-cu130")
    base.update(kwargs)
    return buildmod.BuildRequest(**base)


def test_docker_uses_buildkit_through_buildx():
    argv = request(no_cache=True, base_image="debian:bookworm").command()
    assert argv[:4] == ["docker", "buildx", "build", "--load"], argv
    assert argv[-1] == str(ROOT), "the build context is the repository root"
    pairs = list(zip(argv, argv[1:]))
    assert ("--file", str(ROOT / "docker" / "Dockerfile")) in pairs
    assert ("--target", "runtime") in pairs and ("--tag", "sglang-stack:0.5.9-cu130") in pairs
    assert ("--build-arg", "BASE_IMAGE=debian:bookworm") in pairs and "--no-cache" in argv


@pytest.mark.parametrize("engine,head", [("podman", ["podman", "build"]), ("buildah", ["buildah", "bud"])])
def test_daemonless_engines_keep_docker_format_and_layers(engine, head):
    argv = request(engine=Engine(engine), isolation="chroot").command()
    assert argv[:2] == head, argv
    pairs = list(zip(argv, argv[1:]))
    # OCI format would silently drop HEALTHCHECK and SHELL.
    assert ("--format", "docker") in pairs and "--layers" in argv and ("--isolation", "chroot") in pairs, argv


def test_secrets_are_passed_as_files_not_values(tmp_path):
    token = tmp_path / "token"
    token.write_text("hf_secret_value")
    argv = request(engine=BUILDAH, ca_bundle=CA, hf_token_file=token).command()
    assert f"id=ca,src={CA}" in argv and f"id=hf_token,src={token}" in argv, argv
    assert not any("hf_secret_value" in a for a in argv), "a secret value must never appear on the command line"


def test_podman_and_buildah_take_chroot_isolation_where_there_is_no_unified_cgroup_tree(tmp_path):
    """crun and runc under buildah's default isolation need cgroup v2 ("cgroups in hybrid mode not supported"); chroot
    isolation needs none. docker is never given an isolation; a host with cgroup v2 keeps the engine's default."""

    said = []
    missing = tmp_path / "cgroup.controllers"
    assert workflow.default_isolation(BUILDAH, missing, said.append) == "chroot"
    assert said and "--isolation chroot" in said[0], said
    assert workflow.default_isolation(DOCKER, missing, said.append) is None
    missing.write_text("cpu io memory pids\n")
    assert workflow.default_isolation(PODMAN, missing, said.append) is None


def test_a_foreign_platform_is_asked_of_the_engine():
    argv = request(platform="linux/arm64").command()
    assert argv[argv.index("--platform") + 1] == "linux/arm64", argv
    assert "--platform" not in request().command(), "the host's platform is the engine's default"


def test_a_platform_this_builder_cannot_run_is_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setattr(buildmod, "builder_platforms", lambda engine: ["linux/amd64", "linux/386"])
    with pytest.raises(UserError) as err:
        buildmod.require_platform(DOCKER, "linux/arm64")
    assert "--platform linux/arm64: this docker builder runs linux/amd64, linux/386 only" in str(err.value)
    assert "qemu-user-static" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setattr(buildmod, "builder_platforms", lambda engine: ["linux/amd64", "linux/arm64"])
    buildmod.require_platform(DOCKER, "linux/arm64")


@pytest.mark.engine
def test_invoke_build_for_arm64_on_this_engine_is_built_or_refused_before_anything_is_written(docker_engine, tmp_path):
    """The real builder's answer: where it cannot run aarch64 steps (this machine), one line and no render; the root's
    profile, which has no aarch64 set, says so first."""
    have = buildmod.builder_platforms(DOCKER) or []
    if "linux/arm64" in have:
        pytest.skip("this builder runs linux/arm64: the refusal cannot be shown here")
    proc = subprocess.run([sys.executable, "-m", "invoke", "build", "--platform", "linux/arm64", "--profile", "0.5.23",
                           "--target", "base"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --platform linux/arm64: this docker builder runs"), \
        proc.stderr
    assert "Dockerfile.arm64" not in proc.stdout, "refused before the render"
    root = subprocess.run([sys.executable, "-m", "invoke", "build", "--platform", "linux/arm64"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert root.returncode == 2 and "no linux/arm64 build: it needs [sglang.arm64]" in root.stderr, root.stderr


def test_build_args_are_sorted_and_validated():
    argv = request(build_args=workflow.parse_build_args(["SOME_ARG=a/b", "A=1"])).command()
    assert argv.index("A=1") < argv.index("SOME_ARG=a/b"), argv
    with pytest.raises(UserError, match="--build-arg 'NOVALUE'"):
        workflow.parse_build_args(["NOVALUE"])
    with pytest.raises(UserError, match="use --base-image"):
        workflow.parse_build_args(["BASE_IMAGE=x"])
    for key in ("SOURCE_REVISION", "DOCKERFILE_SHA256", "SOURCE_DATE_EPOCH"):
        with pytest.raises(UserError, match=f"--build-arg {key}=...: the build sets it from the checkout itself"):
            workflow.parse_build_args([f"{key}=forged"])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(target="devel"), "--target 'devel': not a stage"),
        (dict(tag="Sglang Stack"), "--tag 'Sglang Stack': not an image reference"),
        (dict(base_image="--help"), "--base-image '--help': not an image reference"),
        (dict(ca_bundle=Path("/nonexistent/ca.pem")), "--ca-bundle /nonexistent/ca.pem: no such file"),
        (dict(ca_bundle=ROOT / "versions.lock"), "not a PEM certificate bundle"),
        (dict(isolation="chroot"), "--isolation applies to --engine podman|buildah only"),
    ],
)
def test_bad_build_input_is_one_line(kwargs, message):
    with pytest.raises(UserError) as info:
        request(**kwargs).validate()
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_an_unknown_engine_is_refused_where_it_is_named():
    with pytest.raises(UserError, match=r"^--engine 'kaniko': unsupported \(choose one of docker, podman, buildah\)$"):
        Engine("kaniko")


def test_valid_references_pass():
    for tag in ("sglang-stack:0.5.9-cu130", "registry.example.com:5000/team/sglang-stack:v1", "localhost/x"):
        request(tag=tag).validate()
    pinned = "docker.io/nvidia/cuda:13.0.1-base-ubuntu24.04@sha256:" + "f" * 64
    for base in (pinned, "sha256:" + "a" * 64, "0123456789ab"):
        request(base_image=base).validate()


def test_default_tag_follows_the_target():
    assert workflow.default_tag("sglang-stack:0.5.9-cu130", "runtime") == "sglang-stack:0.5.9-cu130"
    assert workflow.default_tag("sglang-stack:0.5.9-cu130", "sglang") == "sglang-stack:0.5.9-cu130-sglang"


def test_no_docker_engine_fails_fast_with_a_hint(tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock", PATH=f"{tmp_path}:{os.environ['PATH']}")
    # A stand-in `docker` CLI, so the check reaches the engine probe on hosts without the CLI too.
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "build", "--engine", "docker"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no Docker engine reachable at unix://") and "--engine buildah|podman" in last, last


def test_missing_buildx_plugin_names_the_package(tmp_path):
    """A docker CLI without buildx (the engine here has it, hence a stand-in CLI): the README's first command says what to install."""
    import fake_cli

    env = {**fake_cli.install(tmp_path / "bin", info=fake_cli.PLAIN_INFO), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "invoke", "build", "--engine", "docker"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: docker buildx (the BuildKit CLI plugin) is not installed"), last
    assert "docker-buildx-plugin" in last and "--engine buildah" in last, last


def test_unknown_engine_via_cli_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "build", "--engine", "kaniko"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: --engine 'kaniko': unsupported (choose one of docker, podman, buildah)"


@pytest.mark.container
def test_buildah_builds_the_base_stage_for_real(smoke_base, run_id, keep_images):
    from sglang_stack.smoke import container as smoke
    from sglang_stack.image import store

    tag = f"localhost/sglang-stack-test-{run_id}:base"
    proc = subprocess.run(
        [
            sys.executable, "-m", "invoke", "build", "--engine", "buildah", "--isolation", "chroot",
            "--target", "base", "--base-image", smoke_base, "--tag", tag,
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "$ buildah bud --format docker --layers --force-rm --isolation chroot" in proc.stderr, "the command is shown first"
        assert f"built {tag} (sha256:" in proc.stdout, proc.stdout
        with smoke.Container(tag) as box:
            pth = box.run("sh", "-c", "cat /opt/venv/lib/python3*/site-packages/sglang-stack.pth").stdout.split()
            assert pth == ["/opt/sglang", "/opt/sglang-stack"], pth
            assert box.run("id", "-u", "sglang").stdout.strip() == "10001"
    finally:
        if not keep_images:
            store.remove(BUILDAH, tag)


@pytest.mark.container
def test_a_failed_buildah_build_leaves_no_working_container(smoke_base, run_id, tmp_path):
    """buildah keeps the container of a failed step unless told otherwise: the build's own command (BuildRequest),
    on a stage whose second step fails, leaves the containers as they were."""
    (tmp_path / "Dockerfile").write_text(f"FROM {smoke_base} AS base\nRUN echo {run_id} > /made\nRUN false\n")

    def containers() -> list[str]:
        return subprocess.run(["buildah", "containers", "--quiet"], capture_output=True, text=True).stdout.split()

    def images() -> set[str]:
        return set(subprocess.run(["buildah", "images", "--quiet", "--no-trunc"], capture_output=True,
                                  text=True).stdout.split())

    before, cached = containers(), images()
    request = buildmod.BuildRequest(engine=BUILDAH, tag=f"localhost/sglang-stack-test-{run_id}:fails", target="base",
                                    isolation="chroot", context=tmp_path, dockerfile=tmp_path / "Dockerfile")
    try:
        with pytest.raises(UserError, match="buildah build failed"):
            buildmod.build(request)
        # Only a container that was not there before, made from this build's step (its history names this run), is
        # left behind: the store is shared, and another run's build may start or end while this one runs.
        left = {c for c in set(containers()) - set(before) if run_id in subprocess.run(
            ["buildah", "inspect", "--type", "container", c], capture_output=True, text=True).stdout}
        assert not left, f"the failed step's working container was left behind: {sorted(left)}"
    finally:
        # The step that passed stays as the layer cache: this test's own (its history names this run) goes.
        for image in images() - cached:
            history = subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True,
                                     text=True).stdout
            if run_id in history:
                subprocess.run(["buildah", "rmi", image], capture_output=True)


def test_smoke_refuses_a_missing_base_image_instead_of_making_one():
    if not shutil.which("buildah"):
        need("needs buildah (.ci/run installs it)")  # in CI a missing buildah fails here rather than skipping
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "smoke", "--base-image", "localhost/no-such-base:never"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --base-image localhost/no-such-base:never: no such image"), proc.stderr


AUDIT_FAILURE = ["#21 12.3 error: /opt/venv/lib/python3.12/site-packages/x.so: links libcudart.so.12, a CUDA 12 library",
                 "ERROR: failed to solve: process \"/bin/sh -c python3 -m sglang_stack.image.steps.binaries\" did not complete "
                 "successfully: exit code: 1"]


def test_a_failure_that_is_not_about_a_base_gets_no_base_hint():
    """The binary audit failed, and --build-arg DEVEL_IMAGE=... replaced the devel image: no word of any base."""
    req = request(engine=BUILDAH, build_args={"DEVEL_IMAGE": "localhost/devel-stub:1"})
    assert buildmod.base_images(req)["DEVEL_IMAGE"] == "localhost/devel-stub:1", "a --build-arg replaces the Dockerfile's default"
    assert buildmod.missing_base_hint(req, AUDIT_FAILURE) == ""


def test_a_base_the_engine_could_not_get_is_named():
    missing = "localhost/sglang-stack-test-absent:never"
    said = [f"ERROR: failed to solve: {missing}: pull access denied, repository does not exist"]
    hint = buildmod.missing_base_hint(request(engine=BUILDAH, target="sglang", base_image=missing), said)
    assert f"{missing} is not in the buildah image store" in hint and "--base-image" in hint, hint


WRAPPER = """
import sys
from sglang_stack.shell import stream
from sglang_stack.tasks.boundary import user_errors
from invoke import Exit
try:
    user_errors(stream)([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"],
                        what="a long build")
except Exit as err:  # what Invoke does with it
    print(err.message, file=sys.stderr)
    sys.exit(err.code)
"""


def test_a_terminated_build_stops_the_engine_command_too(tmp_path):
    """SIGTERM to invoke reaches the command it runs: nothing is left building behind it."""
    import signal
    import time

    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    child = int(wrapper.stdout.readline())
    wrapper.send_signal(signal.SIGTERM)
    _, err = wrapper.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), "the command outlived a terminated invoke"
    assert wrapper.returncode == 128 + signal.SIGTERM, (wrapper.returncode, err)
    assert err.strip().splitlines()[-1] == "error: a long build: stopped by SIGTERM, and the command with it", err


@pytest.mark.parametrize("kwargs, digest", [
    (dict(base_image="localhost/base:1"), ""),
    (dict(base_image="docker.io/library/debian@sha256:" + "a" * 64), "sha256:" + "a" * 64),
    (dict(target="router", base_image="localhost/py:3.11"), ""),
    (dict(build_args={"BASE_IMAGE": "localhost/other:2"}), ""),
])
def test_a_replaced_base_replaces_the_oci_base_digest_label(kwargs, digest):
    argv = request(**kwargs).command()
    arg = "ROUTER_BASE_DIGEST" if kwargs.get("target") == "router" else "BASE_DIGEST"
    assert ("--build-arg", f"{arg}={digest}") in list(zip(argv, argv[1:])), argv
    assert not any(a.startswith(("BASE_DIGEST=", "ROUTER_BASE_DIGEST=")) for a in request().command()), \
        "the pinned base keeps the Dockerfile's own digest"


def test_a_missing_devel_image_is_replaced_by_its_build_arg_and_the_mirror_is_named():
    """The runtime build needs two bases, both absent here; --base-image replaces only one of them, and a host
    with no registry has the mirror."""
    req = request(engine=BUILDAH, target="runtime")
    bases = buildmod.base_images(req)
    said = [f"ERROR: failed to solve: {bases['DEVEL_IMAGE']}: failed to resolve source metadata"]
    hint = buildmod.missing_base_hint(req, said)
    assert "--build-arg DEVEL_IMAGE=YOURS" in hint and "--base-image YOURS" in hint, hint
    assert "invoke fetch" in hint and "invoke build --mirror" in hint, hint


def test_invoke_build_reads_each_lock_file_once_on_its_way_to_the_engine(monkeypatch):
    """versions.lock and each requirement lock are parsed once per build, and the parsed lock is passed on: the
    release-hash check and the render read what the lock check read."""
    from collections import Counter

    from sglang_stack.lock import lockfile as lockmod, pins, releases

    reads: Counter = Counter()
    parse, read_text = lockmod._parse, pins.read_text
    monkeypatch.setattr(lockmod, "_parse", lambda path: reads.update([Path(path).name]) or parse(path))
    monkeypatch.setattr(pins, "read_text", lambda path: reads.update([Path(path).name]) or read_text(path))
    # Every release record answers for its own hashes: this test counts reads, the records have tests of their own.
    monkeypatch.setattr(releases, "fetch_all", lambda index, missing, directory: {
        pin: {f"{pin.name}-{n}.whl": digest for n, digest in enumerate(pin.hashes)} for pin in missing})

    class Reached(Exception):
        pass

    def engine(request):
        raise Reached(request.command()[:3])

    monkeypatch.setattr(workflow.buildmod, "build", engine)
    with pytest.raises(Reached, match="docker.*buildx.*build"):
        workflow.build(workflow.BuildFlags(target="sglang"), say=lambda line: None)
    assert reads == {"versions.lock": 1, "requirements.lock.txt": 1, "requirements.router.lock.txt": 1}, reads
