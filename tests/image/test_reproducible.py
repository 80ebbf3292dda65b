"""Same commit, same lock, same base: the same image bytes.

Two no-cache builds of the ``sglang`` and ``router`` stages with buildah, layer by layer as
`invoke build` makes them, on the session's local Debian base, give the same image ID:
``--timestamp`` (the commit's time) stamps every file and the image's dates, and the Dockerfile
removes what would still differ (no pip-written .pyc, hash-checked ones per layer, useradd's
account date from the lock's, a sorted installed.txt). Where two builds differ, the failure
names the first differing layer and the first file in it.
The builds download from PyPI through the host's CA bundle, as `invoke build` does.

The whole ``runtime`` target, with the stand-ins of ``invoke smoke --target runtime``, is built
twice the same way by a test asked for by name (``-m whole_image``): about 25 minutes on 2 cores.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from sglang_stack.engine import BUILDAH, DOCKER, PODMAN
from sglang_stack.download import ca_bundle
from sglang_stack.image import build as buildmod
from sglang_stack.image import store
from sglang_stack.shell import run




def request(target: str, tag: str, base: str, epoch: int | None, oci: bool = True, **more) -> buildmod.BuildRequest:
    """What `invoke build --engine buildah --no-cache --reproducible` runs: with layers, as users get them (one
    squashed layer would hide a step whose files a later step rewrites)."""
    ca = ca_bundle()
    return buildmod.BuildRequest(engine=BUILDAH, tag=tag, target=target, base_image=base, no_cache=True,
                                 ca_bundle=Path(ca) if ca else None, isolation="chroot", layers=True,
                                 source_date_epoch=epoch, oci=oci, **more)


def layers(tag: str, out: Path) -> list[Path]:
    """The image's layer blobs, oldest first, from an OCI layout that buildah writes."""
    run(["buildah", "push", "--quiet", tag, f"oci:{out}"], quiet=True)
    index = json.loads((out / "index.json").read_text())
    blob = lambda digest: out / "blobs" / digest.replace(":", "/")  # noqa: E731
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    return [blob(layer["digest"]) for layer in manifest["layers"]]


def members(path: Path) -> dict:
    """path -> (sha256 of the content, mode, uid, gid, mtime) of a layer tarball, compressed or not."""
    out = {}
    with tarfile.open(path, "r:*") as tar:
        for m in tar:
            data = tar.extractfile(m).read() if m.isfile() else m.linkname.encode()
            out[m.name] = (hashlib.sha256(data).hexdigest(), m.mode, m.uid, m.gid, m.mtime)
    return out


def first_difference(tags: list[str], tmp: Path) -> str:
    """Where two images first differ: the layer (its number and history line) and the first file in it."""
    a, b = (layers(tag, tmp / f"oci-{i}") for i, tag in enumerate(tags))
    history = run(["buildah", "inspect", "--format", "{{range .Docker.History}}{{.CreatedBy}}\n{{end}}", tags[0]],
                  capture=True, quiet=True).stdout.splitlines()
    steps = [h for h in history if "#(nop)" not in h or "COPY" in h or "ADD" in h]
    for i, (x, y) in enumerate(zip(a, b)):
        if x.name == y.name:
            continue
        mx, my = members(x), members(y)
        for name in sorted(set(mx) | set(my)):
            if mx.get(name) != my.get(name):
                step = steps[i][:160] if i < len(steps) else "?"
                return f"layer {i + 1} of {len(a)} ({step}) first differs at {name}: {mx.get(name)} vs {my.get(name)}"
        return f"layer {i + 1} of {len(a)} differs in its tar headers only"
    return "no layer differs: the configs do" if len(a) == len(b) else f"{len(a)} layers vs {len(b)}"


def diff_ids(tag: str) -> str:
    return run(["buildah", "inspect", "--format", "{{.OCIv1.RootFS.DiffIDs}}", tag], capture=True, quiet=True).stdout.strip()


@pytest.mark.container
@pytest.mark.parametrize("target", ["sglang", "router"])
def test_two_no_cache_builds_give_the_same_image_id(smoke_base, run_id, target, tmp_path):
    if not shutil.which("git"):
        pytest.skip("the build's clock is the commit's time: needs git")
    epoch = buildmod.commit_epoch()
    assert epoch is not None, "this checkout has a commit"
    tags = [f"localhost/sglang-stack-test-{run_id}:repro-{target}-{i}" for i in (1, 2)]
    try:
        ids = [buildmod.build(request(target, tag, smoke_base, epoch))[1] for tag in tags]
        if ids[0] != ids[1]:
            pytest.fail(f"{target}: two builds of one commit gave {ids[0]} and {ids[1]}: {first_difference(tags, tmp_path)}")
        assert store.image_id(BUILDAH, tags[0]) == store.image_id(BUILDAH, tags[1])
        print(f"{target}: both builds {ids[0]}")
    finally:
        store.remove(BUILDAH, *tags)


@pytest.mark.container
@pytest.mark.whole_image
def test_two_no_cache_builds_of_the_whole_runtime_give_one_image_id(run_id, tmp_path):
    """The runtime target with every stage under it (base, toolchain, deps, sglang), on the declared stand-ins, as
    `invoke smoke --target runtime` prepares them, built by `invoke build --engine buildah --no-cache --reproducible`'s
    request; FlashInfer's ahead-of-time step is left out, as in the smoke (nvcc's output is not compared here)."""
    from sglang_stack.smoke import whole_image
    from sglang_stack.smoke import substitutes

    epoch = buildmod.commit_epoch()
    assert epoch is not None, "this checkout has a commit"
    standins = substitutes.load()
    wheels = whole_image.standin_wheels(standins)
    base, devel = substitutes.make_images(BUILDAH, standins, wheels, substitutes.header_text(standins))
    context, _ = whole_image.prepare_context(tmp_path, standins, wheels)
    tags = [f"localhost/sglang-stack-test-{run_id}:repro-runtime-{i}" for i in (1, 2)]
    try:
        # The smoke's own request, as `invoke build --engine buildah --no-cache --reproducible` turns it.
        ids = [buildmod.build(dataclasses.replace(
            whole_image.request(context, tag, base, devel), engine=BUILDAH, no_cache=True, isolation="chroot",
            layers=True, oci=True, source_date_epoch=epoch))[1] for tag in tags]
        if ids[0] != ids[1]:
            pytest.fail(f"runtime: two builds of one commit gave {ids[0]} and {ids[1]}: {first_difference(tags, tmp_path)}")
        print(f"runtime: both builds {ids[0]}")
    finally:
        store.remove(BUILDAH, *tags)


@pytest.mark.container
def test_the_docker_format_keeps_the_same_layers(smoke_base, run_id):
    """buildah's Docker format (what `invoke build` makes by default, for HEALTHCHECK) records the build
    container's id and hostname in the config: the image IDs differ, every layer is the same."""
    epoch = buildmod.commit_epoch()
    tags = [f"localhost/sglang-stack-test-{run_id}:repro-docker-{i}" for i in (1, 2)]
    try:
        for tag in tags:
            buildmod.build(request("router", tag, smoke_base, epoch, oci=False))
        assert diff_ids(tags[0]) == diff_ids(tags[1]), "the layers of two builds of one commit differ"
    finally:
        store.remove(BUILDAH, *tags)


def test_the_clock_reaches_the_engines_command():
    buildah = request("router", "t", "b", 1700000000).command()
    assert buildah[buildah.index("--timestamp") + 1] == "1700000000" and "SOURCE_DATE_EPOCH=1700000000" in buildah
    docker = buildmod.BuildRequest(engine=DOCKER, tag="t", source_date_epoch=5)
    assert "--load" in docker.command() and "--timestamp" not in docker.command(), "BuildKit before 0.13 only loads"
    docker.rewrite_timestamps = True
    argv = docker.command()
    assert argv[argv.index("--output") + 1] == "type=docker,rewrite-timestamp=true" and "--load" not in argv
    assert "SOURCE_DATE_EPOCH=5" in argv
    assert "--timestamp" not in buildmod.BuildRequest(engine=BUILDAH, tag="t").command(), "no clock, no stamp"
    argv = buildmod.BuildRequest(engine=PODMAN, tag="t", oci=True).command()
    assert argv[argv.index("--format") + 1] == "oci"
    argv = buildmod.BuildRequest(engine=PODMAN, tag="t").command()
    assert argv[argv.index("--format") + 1] == "docker", "HEALTHCHECK survives by default"


@pytest.mark.container
def test_a_new_commit_rebuilds_only_from_the_clock(smoke_base, run_id, tmp_path):
    """A docs-only commit: every step of base and sglang before the SBOM's `ARG SOURCE_DATE_EPOCH` comes from the cache.
    Declared at the top of a stage, the clock enters every later step's cache key, and each commit redid every install."""
    import subprocess
    import sys

    from sglang_stack import ROOT

    if not shutil.which("git"):
        pytest.skip("the build's clock is the commit's time: needs git")
    clone = tmp_path / "clone"
    run(["git", "clone", "--quiet", str(ROOT), str(clone)], quiet=True)
    run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "--allow-empty",
         "-m", "the commit under test"], quiet=True)
    tags = [f"localhost/sglang-stack-test-{run_id}:clock-{i}" for i in (1, 2)]

    def build(tag: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "invoke", "build", "--engine", "buildah", "--isolation", "chroot",
                               "--target", "sglang", "--base-image", smoke_base, "--tag", tag],
                              cwd=clone, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.stdout + proc.stderr

    try:
        build(tags[0])
        (clone / "docs" / "image.md").write_text((clone / "docs" / "image.md").read_text() + "\nA docs-only edit.\n")
        run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-am", "docs"],
            quiet=True)
        log = build(tags[1]).splitlines()
        steps = [(i, line) for i, line in enumerate(log) if " STEP " in line]
        clock = max(n for n, (_, line) in enumerate(steps) if "ARG SOURCE_DATE_EPOCH" in line)  # the sglang stage's
        missed = [line for n, (i, line) in enumerate(steps[:clock])
                  if "FROM" not in line and not (i + 1 < len(log) and log[i + 1].startswith("--> Using cache"))]
        assert not missed, f"a docs-only commit rebuilt {len(missed)} steps before the clock, first: {missed[0][:200]}"
    finally:
        store.remove(BUILDAH, *tags)


@pytest.mark.container
def test_reproducible_on_buildah_builds_without_the_cache(smoke_base, run_id, capfd):
    """A cached buildah layer keeps the clock of the commit that made it: --reproducible must not use one."""
    tag = f"localhost/sglang-stack-test-{run_id}:repro-nocache"
    req = buildmod.BuildRequest(engine=BUILDAH, tag=tag, target="base", base_image=smoke_base, isolation="chroot",
                                source_date_epoch=buildmod.commit_epoch(), oci=True, reproducible=True)
    try:
        buildmod.build(req)
    finally:
        store.remove(BUILDAH, tag)
    said = capfd.readouterr()
    shown = next(line for line in said.err.splitlines() if line.startswith("$ buildah bud"))
    assert "--no-cache" in shown.split(), shown
    assert "note: --reproducible with buildah builds without the cache" in said.out, said.out
