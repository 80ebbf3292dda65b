"""The release pieces without a registry: the build's verdict step, the verdict predicate and its checks, references,
publish records, bundle layouts, k8s by digest, and the one-line refusals of publish / bundle / verify --key.
(tests/release/test_publish.py runs them against a real registry with real cosign.)"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.image.steps import verdict
from sglang_stack.release import cosign, predicate as pred, publish as publishmod, references

INVOKE = [sys.executable, "-m", "invoke"]

LABELS = {"io.sglang-stack.stage": "sglang", "io.sglang-stack.profile": "0.5.9",
          "org.opencontainers.image.revision": "abc123-dirty", "io.sglang-stack.dockerfile.sha256": "d" * 64,
          "io.sglang-stack.sglang.version": "0.5.9", "other.label": "x"}
SBOM = {"bomFormat": "CycloneDX", "components": [
    {"type": "file", "name": "patches/0001-a.patch", "hashes": [{"alg": "SHA-256", "content": "a" * 64}]},
    {"type": "library", "name": "example", "purl": "pkg:pypi/example@1.0"}]}
PASS = {name: {"check": name, "argv": ["true"], "result": "pass"} for name in pred.REQUIRED["sglang"]}


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*INVOKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


# --- the build's verdict step -----------------------------------------------------------------


def test_a_verdict_is_recorded_only_when_its_check_passes(tmp_path):
    assert verdict.main(["ok-check", "--", sys.executable, "-c", "pass"], tmp_path) == 0
    assert json.loads((tmp_path / "ok-check.json").read_text()) == {
        "check": "ok-check", "argv": [sys.executable, "-c", "pass"], "result": "pass"}
    assert verdict.main(["bad-check", "--", sys.executable, "-c", "raise SystemExit(3)"], tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok-check.json"], "a failed check leaves nothing"


@pytest.mark.parametrize("argv", [[], ["x"], ["x", "--"], ["Bad_Name", "--", "true"], ["x", "true"]])
def test_the_verdict_step_refuses_a_bad_command_line(argv, tmp_path, capsys):
    assert verdict.main(argv, tmp_path) == 2 and not list(tmp_path.iterdir())
    assert capsys.readouterr().err.startswith("usage: python3 -m sglang_stack.image.steps.verdict NAME -- COMMAND")


def test_every_check_of_a_published_stage_writes_its_verdict_in_the_dockerfile():
    """The names predicate.REQUIRED expects are the ones the rendered Dockerfiles record, stage by stage."""
    import re

    for dockerfile in (ROOT / "docker" / "Dockerfile", ROOT / "profiles" / "0.5.23" / "docker" / "Dockerfile"):
        text = dockerfile.read_text()
        stages = {name: parent for parent, name in re.findall(r"^FROM (\S+) AS (\S+)", text, re.M)}
        recorded = {}
        for block in re.split(r"^FROM ", text, flags=re.M)[1:]:
            name = block.split(" AS ", 1)[1].split()[0]
            recorded[name] = set(re.findall(r"sglang_stack\.image\.steps\.verdict ([a-z0-9-]+) --", block))
        inherited = {"runtime": recorded["deps"] | recorded["sglang"] | recorded["runtime"],  # COPY --from=sglang
                     "sglang": recorded["sglang"], "router": recorded["router"]}
        assert stages["runtime"] == "deps"
        for stage, names in pred.REQUIRED.items():
            assert set(names) == inherited[stage], (dockerfile, stage)


# --- the predicate ----------------------------------------------------------------------------


def test_the_predicate_is_what_the_image_holds():
    made = pred.make("img", LABELS, {"verdicts": PASS, "sbom": SBOM})
    assert made["stage"] == "sglang" and made["profile"] == "0.5.9" and made["dirty"] is True
    assert made["patches"] == {"0001-a.patch": "a" * 64} and made["sbom"] == pred.sbom_digest(SBOM)
    assert "other.label" not in made["labels"] and made["labels"]["io.sglang-stack.stage"] == "sglang"
    assert made["verdicts"] is PASS


@pytest.mark.parametrize("labels, found, message", [
    ({k: v for k, v in LABELS.items() if k != "io.sglang-stack.dockerfile.sha256"}, {"verdicts": PASS, "sbom": SBOM},
     "img: no provenance label io.sglang-stack.dockerfile.sha256"),
    ({**LABELS, "io.sglang-stack.stage": "deps"}, {"verdicts": PASS, "sbom": SBOM}, "names no stage"),
    (LABELS, {"verdicts": {**PASS, "patches": {"result": "fail"}}, "sbom": SBOM}, "no passing verdict for patches"),
    (LABELS, {"verdicts": {}, "sbom": SBOM}, "no passing verdict for patches, eagle3-audit, envaudit-sglang"),
    (LABELS, {"verdicts": PASS, "sbom": None}, "no CycloneDX SBOM"),
])
def test_an_image_missing_what_is_attested_is_refused_in_one_line(labels, found, message):
    with pytest.raises(UserError, match=message):
        pred.make("img", labels, found)


def test_the_checks_of_a_predicate_can_fail():
    made = pred.make("img", LABELS, {"verdicts": PASS, "sbom": SBOM})
    assert pred.check_verdicts(made)[0]
    assert pred.check_verdicts({**made, "verdicts": {}}) == (False, "no passing verdict for patches, eagle3-audit, envaudit-sglang")
    want = {"io.sglang-stack.sglang.version": "0.5.9"}
    assert pred.check_lock(made, want, {"0001-a.patch": "a" * 64})[0]
    ok, detail = pred.check_lock(made, {"io.sglang-stack.sglang.version": "0.5.23"}, {"0001-a.patch": "b" * 64})
    assert not ok and detail.startswith("io.sglang-stack.sglang.version: attested '0.5.9', the lock gives '0.5.23'; "
                                        "patches/0001-a.patch: attested aaaaaaaaaaaa, the checkout has bbbbbbbbbbbb")
    assert pred.check_labels(made, LABELS)[0]
    ok, detail = pred.check_labels(made, {**LABELS, "io.sglang-stack.profile": "0.5.23"})
    assert not ok and "io.sglang-stack.profile: attested '0.5.9', the image has '0.5.23'" in detail
    assert pred.check_sbom(made, SBOM, SBOM)[0]
    assert pred.check_sbom(made, {**SBOM, "components": []})[1].startswith("the attested SBOM")
    assert pred.check_sbom(made, SBOM, {**SBOM, "components": []})[1] == \
        "the attested SBOM differs from /opt/sglang-stack/sbom.cdx.json in the image"
    assert pred.check_sbom(made, None) == (False, "no CycloneDX attestation")


# --- references, cosign's words, records ------------------------------------------------------


@pytest.mark.parametrize("value, want", [
    ("127.0.0.1:5000/stack:v1", ("127.0.0.1:5000", "stack", "v1", "")),
    ("ghcr.io/acme/sglang-stack", ("ghcr.io", "acme/sglang-stack", "", "")),
    ("localhost/a/b@sha256:" + "0" * 64, ("localhost", "a/b", "", "sha256:" + "0" * 64)),
])
def test_a_registry_reference_splits(value, want):
    ref = references.parse(value, "--to")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == want and str(ref) == value


@pytest.mark.parametrize("value", ["sglang-stack:0.5.9-cu130", "acme/stack:v1", "--help", "127.0.0.1:5000"])
def test_a_reference_without_its_registry_is_one_line(value):
    with pytest.raises(UserError, match="--to"):
        references.parse(value, "--to")


def test_only_loopback_goes_over_plain_http():
    from sglang_stack import oci as client

    assert client.loopback("127.0.0.1:5000") and client.loopback("localhost:5000") and client.loopback("localhost")
    assert client.loopback("127.0.0.2") and client.loopback("[::1]:5000") and client.loopback("::1")
    assert not client.loopback("ghcr.io") and not client.loopback("10.0.0.1:5000")
    assert not client.loopback("127.registry.example") and not client.loopback("127.registry.example:5000"), \
        "a name that begins like a loopback address is still a name"


# --- the registry client against real servers on loopback ---------------------------------------


def token_server(seen: list, body=b'{"token": "t"}', host="127.0.0.1"):
    """A token realm that records the Authorization header it got; ``body`` bytes, or a callable writing forever."""
    import loopback

    class Token(loopback.Handler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if callable(body):
                self.end_headers()
                body(self.wfile)
                return
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return _serving_on(Token, host)


def _serving_on(handler, host):
    import contextlib
    import threading
    from http.server import ThreadingHTTPServer

    @contextlib.contextmanager
    def serve():
        server = ThreadingHTTPServer((host, 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://{host}:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()

    return serve()


def registry_naming(realm: str):
    """A registry on 127.0.0.1 that answers every /v2/ request 401 with a bearer challenge naming ``realm``, and 200
    to one that brings a token."""
    import loopback

    class Registry(loopback.Handler):
        def do_GET(self):
            if self.headers.get("Authorization", "").startswith("Bearer "):
                self.reply(200, {"schemaVersion": 2}, {"Docker-Content-Digest": "sha256:" + "a" * 64})
            else:
                self.reply(401, {}, {"WWW-Authenticate": f'Bearer realm="{realm}",service="test"'})

    return loopback.serving(Registry)


def logged_in(tmp_path, monkeypatch, registry: str) -> None:
    import base64

    config = tmp_path / "docker"
    config.mkdir(exist_ok=True)
    auth = base64.b64encode(b"admin:PASSWORD").decode()
    (config / "config.json").write_text(json.dumps({"auths": {registry: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))


def test_credentials_never_go_to_a_realm_on_another_host(tmp_path, monkeypatch):
    from sglang_stack import oci as client

    seen: list = []
    with token_server(seen, host="127.0.0.2") as realm, registry_naming(realm + "/token") as url:
        name = url.removeprefix("http://")
        logged_in(tmp_path, monkeypatch, name)
        assert client.tag_digest(name, "stack", "v1") == "sha256:" + "a" * 64
    assert seen == [None], f"the token request to another host carried {seen}: it must be anonymous"


def test_credentials_go_to_the_registrys_own_realm(tmp_path, monkeypatch):
    from sglang_stack import oci as client

    seen: list = []
    with token_server(seen) as realm, registry_naming(realm + "/token") as url:
        name = url.removeprefix("http://")
        port = realm.rsplit(":", 1)[1]
        logged_in(tmp_path, monkeypatch, name)
        client.tag_digest(name, "stack", "v1")
    assert seen and seen[0] and seen[0].startswith("Basic "), f"the registry's own host gets the login: {seen} ({port})"


def test_an_endless_token_is_cut_at_the_limit(monkeypatch):
    from sglang_stack import oci as client

    def endless(out):
        try:
            while True:
                out.write(b"x" * 65536)
        except OSError:
            pass

    with token_server([], body=endless) as realm, registry_naming(realm + "/token") as url:
        with pytest.raises(UserError, match="token is over 4 MB"):
            client.tag_digest(url.removeprefix("http://"), "stack", "v1")


def test_a_registry_that_drips_is_ended_at_the_calls_deadline(monkeypatch):
    import time

    from sglang_stack import oci as client

    def drip(out):
        try:
            for _ in range(40):
                out.write(b" ")
                out.flush()
                time.sleep(0.5)
        except OSError:
            pass

    monkeypatch.setattr(client, "DEADLINE_S", 2)
    with token_server([], body=drip) as realm, registry_naming(realm + "/token") as url:
        started = time.monotonic()
        with pytest.raises(UserError, match="did not arrive within 2 s"):
            client.tag_digest(url.removeprefix("http://"), "stack", "v1")
        took = time.monotonic() - started
    assert took < 20, f"one deadline for the whole call, not one per read: {took:.0f} s"


@pytest.mark.parametrize("stderr, why", [
    ("Error: no signatures found\nerror during command execution: no signatures found\n", "unsigned"),
    ("error during command execution: no matching signatures: invalid signature when validating ASN.1 encoded signature",
     "signed, but not by this key"),
    ("error during command execution: no matching attestations: \n", "none"),
    ("error during command execution: no matching attestations: accepted signatures do not match threshold, Found: 0, "
     "Expected 1", "signed, but not by this key"),
    ("error during command execution: none of the attestations matched the predicate type: spdx, found: "
     "https://cyclonedx.org/bom", "none of this type (https://cyclonedx.org/bom only)"),
])
def test_cosigns_failures_in_words(stderr, why):
    """cosign 2.5.0's own messages, as it printed them against the loopback registry."""
    assert cosign._why(stderr) == why


def test_the_newest_publish_record_of_a_tag_is_the_digest_k8s_takes(tmp_path):
    for when, digest in (("2026-01-01T00:00:00Z", "1"), ("2026-02-01T00:00:00Z", "2")):
        ref = f"r.io/s@sha256:{digest * 64}"
        (tmp_path / f"{digest}.json").write_text(json.dumps({"image": "sglang-stack:0.5.9-cu130", "reference": ref,
                                                             "published": when}))
    (tmp_path / "junk.json").write_text("{")
    assert publishmod.published_for("sglang-stack:0.5.9-cu130", tmp_path) == "r.io/s@sha256:" + "2" * 64
    assert publishmod.published_for("other:tag", tmp_path) == ""


@pytest.mark.parametrize("reference, published", [
    ("r.io/s@sha256:" + "3" * 64 + "\n        command: [sh, -c, evil]", "2026-03-01T00:00:00Z"),
    ("r.io/s:v1", "2026-03-01T00:00:00Z"),
    ("r.io/s@sha256:" + "3" * 64, "zzzz-later-than-any-date"),
    (["r.io/s@sha256:" + "3" * 64], "2026-03-01T00:00:00Z"),
])
def test_a_record_k8s_cannot_trust_is_passed_over(tmp_path, reference, published):
    """A reference with a newline (it would become YAML of its own), a tag (refused on the command line too), or a
    `published` that is not a timestamp (it would win by sorting): the valid older record is what k8s takes."""
    good = "r.io/s@sha256:" + "2" * 64
    (tmp_path / "good.json").write_text(json.dumps({"image": "sglang-stack:0.5.9-cu130", "reference": good,
                                                    "published": "2026-02-01T00:00:00Z"}))
    (tmp_path / "bad.json").write_text(json.dumps({"image": "sglang-stack:0.5.9-cu130", "reference": reference,
                                                   "published": published}))
    assert publishmod.published_for("sglang-stack:0.5.9-cu130", tmp_path) == good


def test_a_bundle_layout_blob_must_hash_to_its_name(tmp_path):
    blobs = tmp_path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: dict) -> str:
        raw = json.dumps(data).encode()
        digest = hashlib.sha256(raw).hexdigest()
        (blobs / digest).write_bytes(raw)
        return f"sha256:{digest}"

    config = put({"config": {"Labels": {"io.sglang-stack.stage": "sglang"}}})
    manifest = put({"config": {"digest": config}})
    (tmp_path / "index.json").write_text(json.dumps({"manifests": [{"digest": manifest}]}))
    assert publishmod.layout_config(tmp_path, manifest)[1] == {"io.sglang-stack.stage": "sglang"}
    (blobs / config.split(":")[1]).write_text(json.dumps({"config": {"Labels": {"forged": "1"}}}))
    with pytest.raises(UserError, match="does not hash to its name"):
        publishmod.layout_config(tmp_path, manifest)
    with pytest.raises(UserError, match="and not sha256:0"):
        publishmod.layout_config(tmp_path, "sha256:" + "0" * 64)


# --- the tasks' one-line refusals -------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (("publish", "img:1", "--to", "127.0.0.1:5000/s"), "error: --key KEY or --keyless: exactly one says how to sign"),
    (("publish", "img:1", "--to", "127.0.0.1:5000/s", "--key", "/nonexistent.key"),
     "error: --key /nonexistent.key: no such key file (or a key reference such as awskms://...)"),
    (("publish", "--help-me", "--to", "x"), None),
    (("verify", "--bundle", "/tmp"), "error: --bundle: give the public key too (--key PUB)"),
    (("verify", "--bundle", "/nonexistent-dir", "--key", "awskms://k"), "error: --bundle /nonexistent-dir: no such directory"),
    (("verify", "127.0.0.1:5000/s:v1", "--key", "awskms://k", "--rebuild"), "error: --key: --rebuild, --base-image"),
    (("verify", "stack:v1", "--key", "awskms://k"), "error: IMAGE stack:v1: name the registry"),
    (("bundle", "stack:v1", "--out", "/tmp/x"), "error: IMAGE stack:v1: name the registry"),
    (("k8s", "--out", "/tmp/never-written", "--image", "r.io/s:v1"), "error: --image r.io/s:v1: name the image by digest"),
    (("bundle", "127.0.0.1:9/s@sha256:" + "0" * 64, "--out", "README.md"),
     "error: --out README.md: exists and is not an empty directory"),
    (("verify", "127.0.0.1:5999/stack:v1"), "error: 127.0.0.1:5999/stack:v1: no such image in the docker store"),
    (("publish", "img:1", "--to", "admin:hunter2secret@127.0.0.1:5000/s", "--key", "README.md"),
     "error: --to '***@127.0.0.1:5000/s': not an image reference"),
])
def test_bad_flags_are_one_line(args, message, tmp_path):
    proc = invoke(*args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "hunter2secret" not in proc.stdout + proc.stderr, "a password pasted into a reference is never echoed"
    if args[:2] == ("verify", "127.0.0.1:5999/stack:v1"):
        assert proc.stderr.strip().endswith("verified from its registry with its signer's key: --key PUB"), proc.stderr
    if message:
        assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr
    assert not Path("/tmp/never-written").exists()


def test_the_verdicts_are_bound_to_the_image_the_build_made():
    """The predicate's ``build`` names the config digest (the image ID) `invoke build` recorded; verify compares it with
    the image it checks. Without it, or for another image, the verdicts are not this image's."""
    image = "sha256:" + "a" * 64
    built = {"image_id": image, "by": "invoke build", "revision": "61933cb70320"}
    assert pred.check_build({"build": built}, image) == (
        True, f"the verdicts are those of the `invoke build` that produced this image ({image[:19]}, revision 61933cb70320)")
    ok, why = pred.check_build({}, image)
    assert not ok and "binds its verdicts to no image ID" in why
    ok, why = pred.check_build({"build": built}, "sha256:" + "b" * 64)
    assert not ok and why == f"the verdicts were attested for image {image[:19]}; this image is sha256:bbbbbbbbbbbb"
    ok, why = pred.check_build({"build": {**built, "by": "someone"}}, image)
    assert not ok and "built by 'someone'" in why
    ok, why = pred.check_build({"build": {"image_id": image, "by": "foreign"}}, image)
    assert ok and "published with --foreign" in why and "the image's own claim" in why


def test_a_build_record_names_its_image_id_whichever_way_the_engine_prints_it(tmp_path):
    from sglang_stack.image import built

    labels = {"io.sglang-stack.profile": "0.5.9", "org.opencontainers.image.revision": "abc"}
    verdicts = {"patches": {"result": "pass"}, "eagle3-audit": {"result": "fail"}, "odd": None}
    path = built.record("b" * 64, "sglang-stack:x", "sglang", labels, verdicts, records=tmp_path)
    found = built.find("sha256:" + "b" * 64, records=tmp_path)
    assert found["image_id"] == "sha256:" + "b" * 64 and found["verdicts"] == ["patches"] and found["profile"] == "0.5.9"
    assert built.find("c" * 64, records=tmp_path) is None
    path.write_text(path.read_text().replace("b" * 64, "c" * 64))  # a record renamed onto another ID is not its record
    assert built.find("b" * 64, records=tmp_path) is None
