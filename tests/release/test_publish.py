"""invoke publish / verify --key / bundle against a real registry on loopback, with real cosign and throw-away keys.

The registry is distribution's own (`docker-registry`, from .ci/install), on a free loopback port, stopped by its
PID. The image is the Dockerfile's ``sglang`` stage as `invoke build` made it on the Docker Engine (conftest's
``sglang_stage``). Every tag and publish record a test makes is removed by name; the registry's storage is a
temporary directory.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import engine
from conftest import need
from sglang_stack.engine import DOCKER
from sglang_stack import ROOT
from sglang_stack.patching.patches import read_series
from sglang_stack.release import predicate as pred, publish as publishmod

pytestmark = pytest.mark.engine


def invoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSIGN_PASSWORD": ""}
    return subprocess.run([*engine.INVOKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def cosign(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSIGN_PASSWORD": ""}
    return subprocess.run(["cosign", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def registry(tmp_path_factory, docker_engine):
    """distribution on 127.0.0.1:PORT, its storage in a temporary directory; yields 127.0.0.1:PORT."""
    for tool in ("docker-registry", "cosign"):
        if not shutil.which(tool):
            need(f"needs {tool} (.ci/install brings it from Debian trixie)")
    root = tmp_path_factory.mktemp("registry")
    port = engine.free_port()
    (root / "config.yml").write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                                     f"http:\n  addr: 127.0.0.1:{port}\nlog:\n  level: error\n")
    proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")], stdout=subprocess.DEVNULL,
                            stderr=open(root / "log", "w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (root / "log").read_text()[-2000:]
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two cosign key pairs, no password: (first, second) directories with cosign.key and cosign.pub."""
    out = []
    for name in ("first", "second"):
        where = tmp_path_factory.mktemp(name)
        proc = cosign("generate-key-pair", cwd=where)
        assert proc.returncode == 0, proc.stderr
        out.append(where)
    return out


@pytest.fixture(scope="module")
def published(registry, keys, sglang_stage):
    """The sglang stage published to REGISTRY/stack:v1 with the first key: (record, tags and records to remove)."""
    tag = f"{registry}/stack:v1"
    proc = invoke("publish", sglang_stage[0], "--to", tag, "--key", str(keys[0] / "cosign.key"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = publishmod.read_record(tag)
    made = {"tags": [tag], "records": [publishmod.record_path(tag)]}
    yield record, made
    # Every name under this run's registry (its port is this run's alone): the pushed tags and the references
    # `docker pull REPO@sha256:...` left, removed by name; the images themselves stay where other names hold them.
    listed = engine.docker("image", "ls", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}", check=False)
    names = set(made["tags"])
    for repo, tag, digest in (line.split() for line in listed.stdout.splitlines() if line.count(" ") == 2):
        if repo.startswith(f"{registry}/"):
            names |= {name for name, part in ((f"{repo}:{tag}", tag), (f"{repo}@{digest}", digest)) if part != "<none>"}
    for name in sorted(names):
        engine.docker("image", "rm", name, check=False)
    for path in made["records"]:
        path.unlink(missing_ok=True)


def verify(*args: str) -> subprocess.CompletedProcess:
    return invoke("verify", *args)


def last(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def test_publish_then_verify_and_plain_cosign_accepts_it(published, keys):
    record, _ = published
    assert record["reference"].endswith(record["digest"]) and record["stage"] == "sglang"
    assert record["verdicts"] == sorted(pred.REQUIRED["sglang"])
    proc = verify(record["tag"], "--key", str(keys[0] / "cosign.pub"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    names = [line[5:].split(":")[0] for line in proc.stdout.splitlines() if line[:4] in ("ok  ", "FAIL", "skip")]
    assert names == ["tag", "signature", "sbom attestation", "verdict attestation", "verdicts", "lock",
                     "predicate labels", "build", "sbom attested", "image labels", "image installed", "image sbom",
                     "image patches"], proc.stdout
    built = json.loads((ROOT / "build" / "built" / f"{record['build']['image_id'][7:]}.json").read_text())
    assert record["build"]["by"] == "invoke build" and built["stage"] == "sglang", record
    assert f"ok   build: the verdicts are those of the `invoke build` that produced this image " \
        f"({record['build']['image_id'][:19]}" in proc.stdout, proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("not covered: "), proc.stdout
    pub = str(keys[0] / "cosign.pub")
    plain = cosign("verify", "--key", pub, "--insecure-ignore-tlog=true", record["reference"])
    assert plain.returncode == 0, plain.stderr
    for kind in ("cyclonedx", pred.PREDICATE_TYPE):
        att = cosign("verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", kind, record["reference"])
        assert att.returncode == 0, att.stderr
    statement = json.loads(base64.b64decode(json.loads(att.stdout.splitlines()[0])["payload"]))
    verdict = statement["predicate"]
    assert statement["predicateType"] == pred.PREDICATE_TYPE and verdict["profile"] == "0.5.9"
    assert set(verdict["verdicts"]) == set(pred.REQUIRED["sglang"]), "the verdict files the build wrote, as they are"
    assert verdict["verdicts"]["eagle3-audit"]["argv"][:3] == ["python3", "-m", "sglang_stack.audit.eagle3"]
    assert list(verdict["patches"]) == [p.name for p in read_series(ROOT / "patches")]


def test_another_key_fails(published, keys):
    record, _ = published
    proc = verify(record["tag"], "--key", str(keys[1] / "cosign.pub"))
    assert proc.returncode == 1 and last(proc) == f"error: {record['tag']}: signature: signed, but not by this key", proc.stderr


def derived(base: str, tag: str, label: str) -> str:
    """An image FROM ``base`` with one label more (so another digest), tagged ``tag``."""
    # A context of its own: `docker build -` leaves its copy of the Dockerfile and an empty context under /tmp.
    with tempfile.TemporaryDirectory(prefix="sglang-stack-test-") as context:
        (Path(context) / "Dockerfile").write_text(f"FROM {base}\nLABEL x.test={label}\n")
        build = subprocess.run(["docker", "build", "-q", "-t", tag, context], capture_output=True, text=True,
                               timeout=300)
    assert build.returncode == 0, build.stderr
    return tag


def test_a_re_pushed_tag_fails_and_the_published_digest_still_verifies(published, keys, registry, sglang_stage, run_id):
    record, made = published
    other = derived(sglang_stage[0], f"sglang-stack-test-{run_id}:republish", "republished")
    try:
        second = f"{registry}/stack:second"
        made["records"].append(publishmod.record_path(second))
        made["tags"].append(second)
        # FROM the real build with a layer added (here a label; a sitecustomize.py would do the same): the verdict
        # files inside are the build's, the image is not. Refused, and nothing pushed; --foreign says whose claim.
        refused = invoke("publish", other, "--to", second, "--key", str(keys[1] / "cosign.key"))
        assert refused.returncode == 2 and "no `invoke build` of this checkout produced this image" in last(refused) \
            and "--foreign" in last(refused), refused.stderr
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{registry}/v2/stack/manifests/second", timeout=5)
        proc = invoke("publish", other, "--to", second, "--key", str(keys[1] / "cosign.key"), "--foreign")
        assert proc.returncode == 0 and "note: --foreign: " in proc.stdout, proc.stderr[-2000:]
        engine.docker("tag", other, record["tag"])
        engine.docker("push", "--quiet", record["tag"])  # the same tag, now another image, signed by another key
    finally:
        engine.docker("image", "rm", other, second, record["tag"], check=False)
    # Not in the local store now: verify pulls it to check it, and leaves the store as it found it.
    by_digest = publishmod.read_record(second)["reference"]
    assert engine.docker("image", "inspect", by_digest, check=False).returncode != 0, "test setup: still local"
    claim = verify(second, "--key", str(keys[1] / "cosign.pub"))
    assert claim.returncode == 0 and "ok   build: published with --foreign: " in claim.stdout, claim.stdout
    assert engine.docker("image", "inspect", by_digest, check=False).returncode != 0, "verify left the pulled image"
    proc = verify(record["tag"], "--key", str(keys[0] / "cosign.pub"))
    assert proc.returncode == 1 and last(proc).startswith(f"error: {record['tag']}: tag: {record['tag']} was pushed again"), \
        proc.stderr
    again = verify(record["reference"], "--key", str(keys[0] / "cosign.pub"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-1000:]


def test_a_missing_attestation_and_a_verdict_that_disagrees_with_the_lock_fail(published, keys, registry, sglang_stage,
                                                                              tmp_path):
    """Signed by the right key, by hand: first no attestation at all, then the SBOM and a verdict whose patch hash
    is not the checkout's."""
    record, made = published
    bare = derived(sglang_stage[0], f"{registry}/stack:bare", "bare")
    made["tags"].append(bare)
    engine.docker("push", "--quiet", bare)
    key = str(keys[0] / "cosign.key")
    assert cosign("sign", "--key", key, "--tlog-upload=false", "--yes", bare).returncode == 0
    proc = verify(bare, "--key", str(keys[0] / "cosign.pub"))
    assert proc.returncode == 1 and last(proc) == f"error: {bare}: sbom attestation: no cyclonedx attestation: none", \
        proc.stderr
    _, found = publishmod.image_facts(DOCKER, bare)
    labels = json.loads(engine.docker("image", "inspect", "--format", "{{json .Config.Labels}}", bare).stdout)
    verdict = pred.make(bare, labels, found)
    first = next(iter(verdict["patches"]))
    verdict["patches"][first] = "0" * 64
    (tmp_path / "sbom.json").write_text(json.dumps(found["sbom"]))
    (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    for kind, path in (("cyclonedx", "sbom.json"), (pred.PREDICATE_TYPE, "verdict.json")):
        att = cosign("attest", "--key", key, "--tlog-upload=false", "--yes", "--type", kind, "--predicate",
                     str(tmp_path / path), bare)
        assert att.returncode == 0, att.stderr
    proc = verify(bare, "--key", str(keys[0] / "cosign.pub"))
    assert proc.returncode == 1 and last(proc).startswith(
        f"error: {bare}: lock: patches/{first}: attested 000000000000, the checkout has "), proc.stderr


def test_a_verdict_predicate_that_is_not_the_object_fails_closed(published, keys, registry, sglang_stage, tmp_path):
    """Signed by the right key, with the SBOM attested, and a verdict attestation whose predicate is JSON null (what
    cosign accepts of the non-objects; it refuses an array): that is a FAIL naming the predicate, never `verified`
    with the rest skipped."""
    predicate = "null"
    record, made = published
    image = derived(sglang_stage[0], f"{registry}/stack:odd-{len(predicate)}", "odd")
    made["tags"].append(image)
    engine.docker("push", "--quiet", image)
    key = str(keys[0] / "cosign.key")
    assert cosign("sign", "--key", key, "--tlog-upload=false", "--yes", image).returncode == 0
    _, found = publishmod.image_facts(DOCKER, image)
    (tmp_path / "sbom.json").write_text(json.dumps(found["sbom"]))
    (tmp_path / "verdict.json").write_text(predicate)
    for kind, path in (("cyclonedx", "sbom.json"), (pred.PREDICATE_TYPE, "verdict.json")):
        att = cosign("attest", "--key", key, "--tlog-upload=false", "--yes", "--type", kind, "--predicate",
                     str(tmp_path / path), image)
        assert att.returncode == 0, att.stderr
    proc = verify(image, "--key", str(keys[0] / "cosign.pub"))
    assert proc.returncode == 1 and "verified" not in proc.stdout, proc.stdout + proc.stderr
    assert last(proc).startswith(f"error: {image}: verdicts: the {pred.PREDICATE_TYPE} predicate is "), proc.stderr


def test_a_verify_that_stops_before_its_checks_is_not_verified():
    """The rule itself: a check that never ran is a failure, named."""
    out = publishmod.Outcome("x", required=("signature", "layers", "image *"))
    out.add("signature", True, "ok")
    assert out.failed == ("layers", "did not run: nothing may be called verified without it")
    out.add("layers", True, "ok")
    assert out.failed[0] == "image *"
    out.add("image labels", True, "ok")
    assert out.failed is None


@pytest.mark.parametrize("case", ["wrong password", "public key", "read-only records"])
def test_publish_checks_everything_before_the_push(registry, keys, sglang_stage, tmp_path, monkeypatch, case):
    """A wrong COSIGN_PASSWORD, a public key given as --key, or a record that cannot be written: refused in one line,
    and the registry never saw the tag (before, the tag had moved to an unsigned digest when the error came)."""
    tag = f"{registry}/before-push:{case.replace(' ', '-')}"
    key = keys[0] / ("cosign.pub" if case == "public key" else "cosign.key")
    env = {**os.environ, "COSIGN_PASSWORD": "wrong" if case == "wrong password" else ""}
    cwd = ROOT
    if case == "read-only records":
        import checkout

        tree = checkout.copy(tmp_path / "tree")
        (tree / "build").mkdir(exist_ok=True)
        shutil.copytree(ROOT / "build" / "built", tree / "build" / "built")  # what `invoke build` recorded of the image
        (tree / "build" / "published").write_text("a file where the records' directory goes")
        cwd = tree
    proc = subprocess.run([*engine.INVOKE, "publish", sglang_stage[0], "--to", tag, "--key", str(key)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout[-1500:] + proc.stderr[-1500:]
    words = {"wrong password": "cosign cannot open it", "public key": "not a private key",
             "read-only records": "the publish record cannot be written"}[case]
    assert words in last(proc), proc.stderr
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://{registry}/v2/before-push/manifests/{case.replace(' ', '-')}", timeout=5)


def test_a_failed_push_takes_its_registry_named_tag_away(keys, sglang_stage):
    """The registry-named tag exists for the push alone: where nothing listens, publish fails in one line and the
    local store has no `127.0.0.1:PORT/...` name left."""
    target = f"127.0.0.1:{engine.free_port()}/nowhere:v1"
    proc = invoke("publish", sglang_stage[0], "--to", target, "--key", str(keys[0] / "cosign.key"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "docker push failed" in last(proc), proc.stderr
    assert engine.docker("image", "inspect", target, check=False).returncode != 0, f"{target} was left in the store"


def test_a_missing_tag_and_a_mistyped_repository_say_which(published, keys, registry):
    record, _ = published
    typo = verify(f"{registry}/stak:v1", "--key", str(keys[0] / "cosign.pub"))
    assert typo.returncode == 1 and last(typo).endswith("tag: the registry has no repository stak (check its name)"), \
        typo.stderr
    tag = verify(f"{registry}/stack:v9", "--key", str(keys[0] / "cosign.pub"))
    assert tag.returncode == 1 and f"tag: {registry}/stack has no tag v9 (it has " in last(tag) and "v1" in last(tag), \
        tag.stderr


def test_an_image_without_provenance_is_not_pushed(registry, keys, docker_base):
    proc = invoke("publish", docker_base, "--to", f"{registry}/nothing:v1", "--key", str(keys[0] / "cosign.key"))
    assert proc.returncode == 2 and "no provenance label io.sglang-stack.stage" in last(proc), proc.stderr
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{registry}/v2/nothing/tags/list", timeout=5)


def test_the_bundle_verifies_offline_and_not_with_another_key_or_a_swapped_config(published, keys, tmp_path):
    record, _ = published
    out = tmp_path / "bundle"
    proc = invoke("bundle", record["reference"], "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    if not shutil.which("unshare") or subprocess.run(["unshare", "--net", "true"]).returncode != 0:
        need("unshare --net (root) runs the offline check with no network")
    offline = subprocess.run(["unshare", "--net", *engine.INVOKE, "verify", "--bundle", str(out), "--key",
                              str(keys[0] / "cosign.pub")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert offline.returncode == 0, offline.stdout[-2000:] + offline.stderr[-2000:]
    assert "ok   predicate labels" in offline.stdout and "ok   sbom attested" in offline.stdout
    wrong = verify("--bundle", str(out), "--key", str(keys[1] / "cosign.pub"))
    assert wrong.returncode == 1 and last(wrong).endswith("signature: signed, but not by this key"), wrong.stderr
    # Swap the image's config for another blob of the layout: the name no longer matches the bytes.
    index = json.loads((out / "oci" / "index.json").read_text())
    digest = json.loads((out / "bundle.json").read_text())["digest"]
    manifest = json.loads((out / "oci" / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())
    config = out / "oci" / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]
    config.write_bytes(config.read_bytes().replace(b'"Labels":{', b'"Labels":{"io.sglang-stack.forged":"1",', 1))
    swapped = verify("--bundle", str(out), "--key", str(keys[0] / "cosign.pub"))
    assert swapped.returncode == 2 and "does not hash to its name" in last(swapped), swapped.stderr
    assert index["manifests"], "cosign save wrote a layout"


def test_a_bundle_whose_layer_was_swapped_fails_at_its_layers(published, keys, tmp_path):
    """A layer replaced under its own name: the signature over the manifest still holds; reading the layer does not."""
    record, _ = published
    out = tmp_path / "bundle"
    assert invoke("bundle", record["reference"], "--out", str(out)).returncode == 0
    good = verify("--bundle", str(out), "--key", str(keys[0] / "cosign.pub"))
    assert good.returncode == 0 and "ok   layers: " in good.stdout, good.stdout[-2000:] + good.stderr[-1000:]
    digest = json.loads((out / "bundle.json").read_text())["digest"]
    manifest = json.loads((out / "oci" / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())
    layer = out / "oci" / "blobs" / "sha256" / manifest["layers"][-1]["digest"].split(":")[1]
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of the layer's content, changed (a gzip trailer's last byte is often 0 already)
    layer.write_bytes(bytes(data))
    proc = verify("--bundle", str(out), "--key", str(keys[0] / "cosign.pub"))
    assert proc.returncode == 1 and last(proc).endswith("does not hash or size to what the manifest names"), \
        proc.stdout[-1500:] + proc.stderr
