"""`invoke fetch` and `invoke build --mirror`: the exact bytes of the lock, kept locally, built from offline.

The fetch tests download from PyPI (the router's set is 37 small wheels); the build tests
build the router and sglang stages from a mirror with buildah, and the router stage with the
Docker Engine's BuildKit under ``--network none``. Each build runs in a scratch copy of the
build context, so a user's own mirror/ is never touched.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

import checkout
from sglang_stack.engine import BUILDAH, DOCKER, Engine
from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.image import build as buildmod
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image import mirror
from sglang_stack.image import store


@pytest.fixture(scope="module")
def lock():
    return lockmod.check_all(download=False)[0]


# --- what a target needs ------------------------------------------------------------------


def test_each_target_mirrors_what_its_stages_install(lock):
    router = mirror.plan(lock, "router", {"ROUTER_BASE_IMAGE": "r"})
    assert lock.router in router.urls and lock.sglang not in router.urls
    assert [p.path.name for p in router.pypi] == ["requirements.router.lock.txt"]
    assert (router.pypi[0].python, router.pypi[0].platform) == (lock.router_table["python"], lock.router_table["python_platform"])
    sglang = mirror.plan(lock, "sglang", {})
    assert lock.sglang in sglang.urls and not sglang.pypi
    assert set(lock.build_tools) <= set(sglang.urls), "the ELF reader and the SBOM generator run in the build"
    everything = mirror.plan(lock, "all", {})
    assert {p.path.name for p in everything.pypi} == {"requirements.lock.txt", "requirements.router.lock.txt"}
    assert set(lock.default_wheels) <= set(everything.urls)
    optional = [w for w in lock.wheels if w.optional]
    assert optional and not set(optional) & set(everything.urls), "flashinfer-jit-cache only with --optional"
    assert set(optional) <= set(mirror.plan(lock, "all", {}, optional=True).urls)
    assert not mirror.plan(lock, "base", {}).urls
    with pytest.raises(UserError, match="--target 'gpu'"):
        mirror.plan(lock, "gpu", {})


def test_pip_is_given_every_glibc_the_interpreter_accepts_best_first(lock):
    platforms = mirror.PyPISet(ROOT / "requirements.lock.txt", "3.12", "x86_64-manylinux_2_39").pip_platforms()
    assert platforms[0] == "manylinux_2_39_x86_64" and platforms[-1] == "manylinux1_x86_64"
    assert platforms.index("manylinux_2_17_x86_64") + 1 == platforms.index("manylinux2014_x86_64")
    assert len(platforms) == len(set(platforms)) == 35 + 3


def test_every_hash_of_the_lock_is_allowed_and_nothing_else(lock):
    ok = mirror.allowed(lock)
    assert ok[lock.sglang.sha256].startswith("sglang") and ok[lock.router.sha256].startswith("router")
    assert all(t.sha256 in ok for t in lock.build_tools)
    assert "0" * 64 not in ok


# --- fetch: resumable, never keeps a wrong file -------------------------------------------


@pytest.mark.network
def test_fetch_resumes_prunes_and_names_a_reupload(lock, tmp_path):
    dest = tmp_path / "mirror"
    first = mirror.fetch(lock, "sglang", {}, BUILDAH, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["lock"] == mirror.lock_hashes(lock) and manifest["targets"] == ["sglang"]
    names = {Path(f["path"]).name for f in manifest["files"]}
    assert lock.sglang.filename in names and len(names) == 1 + len(lock.build_tools)
    assert first[-1].startswith(f"mirror {dest}: {len(names)} wheels")

    wheel = dest / "wheels" / lock.sglang.filename
    stamp = wheel.stat().st_mtime_ns
    (dest / "wheels" / ".stale.whl.part").write_bytes(b"half")  # what a killed run leaves
    retired = dest / "wheels" / "retired-1.0-py3-none-any.whl"  # a wheel an earlier fetch recorded, unpinned since
    retired.write_bytes(b"an old pin")
    manifest["files"].append({"path": f"wheels/{retired.name}", "sha256": "1" * 64, "size": 10})
    (dest / "manifest.json").write_text(json.dumps(manifest))
    stray = dest / "wheels" / "stray-1.0-py3-none-any.whl"  # someone else's file: never deleted
    stray.write_bytes(b"not in the lock")
    tool = dest / "wheels" / lock.build_tools[0].filename
    tool.write_bytes(b"tampered")  # a file whose hash is wrong: deleted and fetched again
    again = mirror.fetch(lock, "sglang", {}, BUILDAH, dest)
    assert wheel.stat().st_mtime_ns == stamp, "a good file stays, it is not downloaded again"
    assert not (dest / "wheels" / ".stale.whl.part").exists() and not retired.exists()
    assert any(line.startswith(f"removed {retired.name}: no pin of this lock allows") for line in again)
    assert stray.read_bytes() == b"not in the lock"
    assert any(line.startswith(f"left {stray.name}: not written by invoke fetch") for line in again)
    assert stray.name not in (dest / "manifest.json").read_text()
    from sglang_stack.download import sha256_of

    assert sha256_of(tool) == lock.build_tools[0].sha256

    moved = dataclasses.replace(lock, sglang=dataclasses.replace(lock.sglang, sha256="0" * 64))
    wheel.unlink()
    with pytest.raises(UserError) as err:
        mirror.fetch(moved, "sglang", {}, BUILDAH, dest)
    assert f"sglang: {lock.sglang.filename} was re-uploaded upstream (sha256 {lock.sglang.sha256}" in str(err.value)
    assert not wheel.exists() and not list((dest / "wheels").glob(".*.part")), "the wrong bytes are not kept"


def test_a_mirror_of_another_lock_or_with_a_file_missing_is_refused(lock, tmp_path):
    dest = tmp_path / "mirror"
    with pytest.raises(UserError, match="manifest.json: missing: run `invoke fetch --target router`"):
        mirror.check(lock, "router", {}, dest)
    dest.mkdir()
    stale = {"schema": 1, "lock": {**mirror.lock_hashes(lock), "requirements.lock.txt": "0" * 64},
             "targets": ["router"], "files": [], "images": []}
    (dest / "manifest.json").write_text(json.dumps(stale))
    with pytest.raises(UserError, match="made for another requirements.lock.txt"):
        mirror.check(lock, "router", {}, dest)
    (dest / "manifest.json").write_text(json.dumps({**stale, "lock": mirror.lock_hashes(lock)}))
    with pytest.raises(UserError, match=f"{lock.router.filename} missing \\(router\\)"):
        mirror.check(lock, "router", {}, dest)
    (dest / "manifest.json").write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        mirror.check(lock, "router", {}, dest)


# --- the mirror is sealed: nothing outside it is read, written or deleted ------------------


def manifest_with(the_lock, **fields) -> str:
    return json.dumps({"schema": 1, "lock": mirror.lock_hashes(the_lock), "targets": ["base"], "files": [],
                       "images": [], **fields})


@pytest.mark.parametrize("path, says", [
    ("../outside.whl", "leaves the mirror"),
    ("/etc/passwd", "leaves the mirror"),
    ("wheels/../../outside.whl", "leaves the mirror"),
    ("", "is not a relative file name"),
    (7, "is not a relative file name"),
    ("out/x.whl", "leads outside the mirror"),  # through a symlink
])
def test_a_manifest_path_outside_the_mirror_is_refused(lock, tmp_path, path, says):
    dest = tmp_path / "mirror"
    dest.mkdir()
    (dest / "out").symlink_to(tmp_path)
    (dest / "manifest.json").write_text(manifest_with(lock, files=[{"path": path, "sha256": "a" * 64, "size": 1}]))
    with pytest.raises(UserError, match=f"files\\[0\\]: path .* {says}"):
        mirror.read_manifest(dest)


@pytest.mark.parametrize("fields, says", [
    ({"files": {}}, "'files' must be a list"),
    ({"files": [["wheels/a.whl"]]}, "files\\[0\\]: needs path, sha256, size"),
    ({"files": [{"path": "wheels/a.whl", "sha256": "A" * 64, "size": 1}]}, "sha256 'AAAA.* is not a sha256"),
    ({"files": [{"path": "wheels/a.whl", "sha256": "a" * 64, "size": True}]}, "size True is not a byte count"),
    ({"images": [{"arg": "BASE_IMAGE", "ref": "r", "path": "images/b.tar", "size": -1}]}, "size -1 is not a byte count"),
    ({"lock": []}, "'lock' and 'targets' must be a mapping and a list"),
])
def test_a_manifest_of_another_shape_is_named_not_a_traceback(lock, tmp_path, fields, says):
    (tmp_path / "manifest.json").write_text(manifest_with(lock, **fields))
    with pytest.raises(UserError, match=says):
        mirror.read_manifest(tmp_path)


def test_a_symlinked_mirror_folder_is_refused_before_anything_is_written(lock, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "someone-else-1.0-py3-none-any.whl").write_bytes(b"theirs")
    dest = tmp_path / "mirror"
    dest.mkdir()
    (dest / "wheels").symlink_to(elsewhere)
    with pytest.raises(UserError, match="wheels: is a symbolic link .*replace the link with a directory"):
        mirror.fetch(lock, "sglang", {}, BUILDAH, dest)
    assert [p.name for p in elsewhere.iterdir()] == ["someone-else-1.0-py3-none-any.whl"]


def test_a_changed_base_image_archive_is_refused_before_a_build_loads_it(lock, tmp_path):
    archive = tmp_path / "images" / "base-image.tar"
    archive.parent.mkdir()
    archive.write_bytes(b"the saved image")
    from sglang_stack.download import sha256_of

    entry = {"arg": "BASE_IMAGE", "ref": "cuda:13", "id": "sha256:" + "b" * 64, "path": "images/base-image.tar",
             "size": archive.stat().st_size, "sha256": sha256_of(archive)}
    (tmp_path / "manifest.json").write_text(manifest_with(lock, images=[entry]))
    assert mirror.check(lock, "base", {"BASE_IMAGE": "cuda:13"}, tmp_path)
    archive.write_bytes(b"the saved imagf")  # the same size, other bytes
    with pytest.raises(UserError, match="base-image.tar: its sha256 is not the one the fetch recorded"):
        mirror.check(lock, "base", {"BASE_IMAGE": "cuda:13"}, tmp_path)
    (tmp_path / "manifest.json").write_text(manifest_with(lock, images=[{**entry, "sha256": None}]))
    with pytest.raises(UserError, match="records no sha256 for it"):
        mirror.check(lock, "base", {"BASE_IMAGE": "cuda:13"}, tmp_path)


def test_a_base_archive_with_two_members_of_one_path_is_refused(tmp_path):
    """`x/layer.tar` hashes to the config's diff_id, `./x/layer.tar` is another layer: the chain check would read one
    and the engine's loader may read the other. One path twice is not what `docker save` writes: refused."""
    import hashlib
    import io
    import tarfile

    good, bad = b"the layer the config names", b"another layer"
    config = json.dumps({"rootfs": {"diff_ids": ["sha256:" + hashlib.sha256(good).hexdigest()]}}).encode()
    members = [("manifest.json", json.dumps([{"Config": "config.json", "Layers": ["x/layer.tar"]}]).encode()),
               ("config.json", config), ("x/layer.tar", good), ("./x//layer.tar", bad)]
    archive = tmp_path / "base.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UserError, match=r"members 'x/layer.tar' and './x//layer.tar' are one path"):
        mirror.archive_chain(archive)
    with tarfile.open(archive, "w") as tar:  # the same archive without the second copy is a chain
        for name, data in members[:3]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    digest, diff_ids, layers = mirror.archive_chain(archive)
    assert layers == diff_ids and digest == "sha256:" + hashlib.sha256(config).hexdigest()


def test_a_layer_docker_save_links_to_is_hashed_as_the_member_it_names(tmp_path):
    """`docker save` writes a layer that appears twice once, and a symlink for the second (moby's tarexport): the
    chain follows the link as the loader does, and a link to a member the archive lacks is named, not a KeyError."""
    import hashlib
    import io
    import tarfile

    layer = b"one layer, twice in the image"
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"rootfs": {"diff_ids": [diff_id, diff_id]}}).encode()

    def write(link_to: str) -> Path:
        archive = tmp_path / "base.tar"
        with tarfile.open(archive, "w") as tar:
            for name, data in [("a/layer.tar", layer), ("config.json", config), ("manifest.json", json.dumps(
                    [{"Config": "config.json", "Layers": ["a/layer.tar", "b/layer.tar"]}]).encode())]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo("b/layer.tar")
            info.type, info.linkname = tarfile.SYMTYPE, link_to
            tar.addfile(info)
        return archive

    assert mirror.archive_chain(write("../a/layer.tar"))[2] == [diff_id, diff_id]
    with pytest.raises(UserError, match=r"base.tar: b/layer.tar links to '../c/layer.tar', which the archive does "
                                        r"not hold"):
        mirror.archive_chain(write("../c/layer.tar"))


def test_two_fetches_on_one_mirror_take_turns(tmp_path, capfd):
    """A second fetch waits for the first (a real flock held by another process) and says so."""
    import sys
    import time

    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"h = open({str(tmp_path / '.fetch.lock')!r}, 'a+')\n"
        "fcntl.flock(h, fcntl.LOCK_EX); print('held', flush=True); time.sleep(1.5)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    start = time.monotonic()
    with mirror.locked(tmp_path):
        waited = time.monotonic() - start
    holder.wait()
    assert waited > 0.5, "the second fetch went ahead while the first held the mirror"
    assert f"another invoke fetch is filling {tmp_path}: waiting" in capfd.readouterr().err


def test_a_mirror_outside_the_build_context_is_refused(lock, tmp_path):
    request = buildmod.BuildRequest(engine=BUILDAH, tag="t", target="router")
    with pytest.raises(UserError, match="the build reads the mirror from its context"):
        mirror.prepare(request, lock, {}, tmp_path / "elsewhere")


def test_a_mirror_build_turns_the_network_off_where_the_engine_can():
    docker = buildmod.BuildRequest(engine=DOCKER, tag="t", mirror=True).command()
    assert docker[docker.index("--network") + 1] == "none" and "MIRROR=1" in docker
    buildah = buildmod.BuildRequest(engine=BUILDAH, tag="t", mirror=True, isolation="oci").command()
    assert buildah[buildah.index("--network") + 1] == "none"
    chroot = buildmod.BuildRequest(engine=BUILDAH, tag="t", mirror=True, isolation="chroot").command()
    assert "--network" not in chroot and "MIRROR=1" in chroot, "chroot isolation refuses --network none"
    assert "MIRROR=1" not in buildmod.BuildRequest(engine=DOCKER, tag="t").command()


# --- builds from the mirror ---------------------------------------------------------------


def _request(engine: Engine, target: str, tag: str, base: str, context: Path) -> buildmod.BuildRequest:
    return buildmod.BuildRequest(engine=engine, tag=tag, target=target, base_image=base, no_cache=True,
                                 isolation="chroot" if engine == BUILDAH else None, layers=False,
                                 source_date_epoch=buildmod.commit_epoch(), oci=engine == BUILDAH,
                                 context=context, dockerfile=context / "docker" / "Dockerfile")


@pytest.mark.container
def test_buildah_builds_router_and_sglang_from_the_mirror_and_they_verify(smoke_base, run_id, lock, tmp_path, capfd):
    """The base image too comes from the mirror: the test's own name for it is gone before the build."""
    from sglang_stack.image import verify as verify_image

    context = checkout.context(tmp_path / "context")
    base = f"localhost/sglang-stack-test-{run_id}/mirror-base:bookworm"
    store.tag(BUILDAH, smoke_base, base)
    made, ids = [], {}
    try:
        for target in ("router", "sglang"):
            request = _request(BUILDAH, target, f"localhost/sglang-stack-test-{run_id}:mirror-{target}", base, context)
            mirror.fetch(lock, target, buildmod.base_images(request), BUILDAH, context / "mirror")
        for target in ("router", "sglang"):
            store.remove(BUILDAH, base)  # loading an archive names the image as it was saved, too
            request = _request(BUILDAH, target, f"localhost/sglang-stack-test-{run_id}:mirror-{target}", base, context)
            lines = mirror.prepare(request, lock, buildmod.base_images(request), context / "mirror")
            loaded = mirror.local_name(buildmod.BASE_ARG.get(target, "BASE_IMAGE"), base)
            made.append(loaded)
            assert request.base_image == loaded and any(f"from the mirror, as {loaded}" in line for line in lines)
            capfd.readouterr()
            tag, _ = buildmod.build(request)
            made.append(tag)
            out = capfd.readouterr()
            assert "installing from the mirror: no index, no URL" in out.out + out.err
            assert "Looking in indexes" not in out.out + out.err, "pip never looked at an index"
            report = verify_image.verify(BUILDAH, tag)
            assert report.ok, report.lines()
            ids[target] = report.image_id
        store.remove(BUILDAH, base)  # FROM the same name as the first build: its label records the name
        again = _request(BUILDAH, "router", f"localhost/sglang-stack-test-{run_id}:mirror-router-2", base, context)
        mirror.prepare(again, lock, buildmod.base_images(again), context / "mirror")
        made.append(again.tag)
        assert buildmod.build(again)[1] == ids["router"], "a mirror build is reproducible too"
        impostor = mirror.local_name(buildmod.BASE_ARG.get("router", "BASE_IMAGE"), base)
        store.remove(BUILDAH, impostor)
        store.tag(BUILDAH, again.tag, impostor)  # another image under the mirror's name
        with pytest.raises(UserError, match=f"{impostor} in the buildah store is not the image the mirror's archive"):
            impostor_request = _request(BUILDAH, "router", again.tag, base, context)
            mirror.prepare(impostor_request, lock, buildmod.base_images(impostor_request), context / "mirror")
    finally:
        store.remove(BUILDAH, base, *made)


@pytest.mark.engine
@pytest.mark.parametrize("target", ["router", "sglang"])
def test_docker_builds_from_the_mirror_with_the_network_off(docker_base, run_id, lock, tmp_path, capfd, target):
    context = checkout.context(tmp_path / "context")
    tag = f"sglang-stack-test-{run_id}:mirror-{target}"
    request = _request(DOCKER, target, tag, docker_base, context)
    mirror.fetch(lock, target, buildmod.base_images(request), DOCKER, context / "mirror")
    arg = buildmod.BASE_ARG.get(target, "BASE_IMAGE")
    assert (context / "mirror" / "images" / mirror.image_file(arg)).is_file()
    mirror.prepare(request, lock, buildmod.base_images(request), context / "mirror")
    argv = request.command()
    assert argv[argv.index("--network") + 1] == "none"
    try:
        capfd.readouterr()
        buildmod.build(request)
        out = capfd.readouterr()
        assert "installing from the mirror: no index, no URL" in out.out + out.err
        dist = "sglang-router" if target == "router" else "sglang"
        probe = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c",
                                "import json, importlib.metadata as m; "
                                f"print(m.version('{dist}'), json.load(open('/opt/sglang-stack/sbom.cdx.json'))['bomFormat'])"],
                               capture_output=True, text=True, timeout=120)
        want = lock.router.version if target == "router" else lock.sglang.version
        assert probe.returncode == 0 and probe.stdout.split() == [want, "CycloneDX"], probe.stderr
    finally:
        store.remove(DOCKER, tag)


# --- the mirror is anchored to the lock ------------------------------------------------------------


def _imported(tmp_path: Path, tag: str, files: dict[str, str]) -> str:
    """A tiny image in the Docker Engine's store, made with `docker import`; its ID (its config digest)."""
    import tarfile

    root = tmp_path / f"rootfs-{len(files)}"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    tar = tmp_path / f"{root.name}.tar"
    with tarfile.open(tar, "w") as out:
        for name in files:
            out.add(root / name, arcname=name)
    subprocess.run(["docker", "import", str(tar), tag], check=True, capture_output=True)
    return store.image_id(DOCKER, tag)


def _saved(tmp_path: Path, tag: str, name: str) -> Path:
    archive = tmp_path / "images" / name
    archive.parent.mkdir(exist_ok=True)
    subprocess.run(["docker", "save", "--output", str(archive), tag], check=True, capture_output=True)
    return archive


@pytest.mark.engine
def test_a_mirror_base_that_does_not_lead_to_the_locked_config_is_refused(docker_engine, lock, tmp_path, run_id):
    """Whoever writes the mirror writes the archive and the manifest's record of it: neither can vouch for the
    bytes. The lock's own base must come as an archive whose config is the lock's cuda.base.config, and whose
    layers are the config's. A FROM-scratch archive with a manifest written for it is refused."""
    from sglang_stack.download import sha256_of
    from sglang_stack.lock.lockfile import _reference

    ref = _reference(lock.cuda["base"])
    real_tag, evil_tag = f"localhost/sglang-stack-test-real:{run_id}", f"localhost/sglang-stack-test-evil:{run_id}"
    try:
        real_id = _imported(tmp_path, real_tag, {"os-release": "the locked base\n"})
        evil_id = _imported(tmp_path, evil_tag, {"os-release": "something else\n", "payload": "run me\n"})
        real, evil = _saved(tmp_path, real_tag, "real.tar"), _saved(tmp_path, evil_tag, "evil.tar")
    finally:
        subprocess.run(["docker", "rmi", real_tag, evil_tag], capture_output=True)
    anchored = dataclasses.replace(lock, data={**lock.data, "cuda": {**lock.cuda, "base": {**lock.cuda["base"], "config": real_id}}})

    def manifest_for(archive: Path, image_id: str) -> None:
        entry = {"arg": "BASE_IMAGE", "ref": ref, "id": image_id, "path": f"images/{archive.name}",
                 "size": archive.stat().st_size, "sha256": sha256_of(archive)}
        (tmp_path / "manifest.json").write_text(manifest_with(anchored, images=[entry]))

    manifest_for(real, real_id)
    assert mirror.check(anchored, "base", {"BASE_IMAGE": ref}, tmp_path), "the locked base's own archive passes"
    manifest_for(evil, evil_id)  # the tampered medium: another image, and a manifest written for it
    with pytest.raises(UserError, match=rf"evil.tar: its image config is {evil_id}, not cuda.base.config {real_id}"):
        mirror.check(anchored, "base", {"BASE_IMAGE": ref}, tmp_path)
    unanchored = dataclasses.replace(lock, data={**lock.data, "cuda": {**lock.cuda, "base": {
        k: v for k, v in lock.cuda["base"].items() if k != "config"}}})
    manifest_for(real, real_id)
    with pytest.raises(UserError, match="cuda.base.config: not recorded"):
        mirror.check(unanchored, "base", {"BASE_IMAGE": ref}, tmp_path)
    # A layer swapped under the right config: the config's diff_ids no longer match what would be loaded.
    import io
    import tarfile

    swapped = tmp_path / "images" / "swapped.tar"
    with tarfile.open(evil) as other:
        payload = next(other.extractfile(m).read() for m in other.getmembers() if m.name.endswith("layer.tar"))
    with tarfile.open(real) as src, tarfile.open(swapped, "w") as out:
        for member in src.getmembers():
            if member.isfile() and member.name.endswith("layer.tar"):
                member.size = len(payload)
                out.addfile(member, io.BytesIO(payload))
            else:
                out.addfile(member, src.extractfile(member) if member.isfile() else None)
    manifest_for(swapped, real_id)
    with pytest.raises(UserError, match="swapped.tar: its layers are not the ones its config lists"):
        mirror.check(anchored, "base", {"BASE_IMAGE": ref}, tmp_path)


def test_verify_reads_the_config_digest_through_the_digest_chain(tmp_path):
    """`invoke lock --verify` records what an archive must lead to: the index named by the lock's digest, then the
    linux/amd64 manifest, each hashed against the digest that named it, then its config. A loopback registry."""
    import hashlib
    import http.server
    import threading

    from sglang_stack.lock.artifacts import registry_config

    config = "sha256:" + "c" * 64
    manifest = json.dumps({"schemaVersion": 2, "config": {"digest": config}, "layers": []}).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"digest": "sha256:" + "a" * 64, "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": manifest_digest, "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    index_digest = "sha256:" + hashlib.sha256(index).hexdigest()
    served = {index_digest: index, manifest_digest: manifest}

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = served.get(self.path.rsplit("/", 1)[-1])
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    image = f"127.0.0.1:{server.server_address[1]}/nvidia/cuda"
    try:
        assert registry_config(image, index_digest) == config
        served[manifest_digest] = manifest.replace(b"c" * 64, b"d" * 64)  # a registry that serves other bytes
        with pytest.raises(UserError, match="served a manifest of another digest"):
            registry_config(image, index_digest)
    finally:
        server.shutdown()
