"""`invoke publish`, `invoke bundle` and `invoke verify --key`: push by digest, sign, attest, and check it all.

publish: read the image's verdicts, labels and SBOM (inventory.py in a throw-away container), refuse an image
missing any of them, push with the engine's own push, then sign ``REPOSITORY@sha256:...`` and attach two
attestations with the same key: the SBOM (``cyclonedx``) and the verdict predicate (release/predicate.py).
The digest and what was attested are recorded in build/published/.

verify --key: signature, both attestations, the verdicts, the attested pins and patches against this checkout's
lock, the attested labels against the image's config; then the image is pulled by digest and today's checks
(labels, installed, sbom, patches) run on it, and its SBOM must be the attested one.

bundle: ``cosign save`` of the signed digest (its signatures and attestations with it, an OCI layout) plus
bundle.json, written whole or not at all; ``verify --bundle`` checks it with no network.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack import oci as client
from sglang_stack.engine import Engine, image_reference
from sglang_stack.errors import UserError
from sglang_stack.release import cosign, predicate as pred, references

RECORDS = ROOT / "build" / "published"


@dataclass
class Outcome:
    """What a verify found: one (name, ok, detail) per check; ``ok`` None for a check not run.

    Fails closed: ``required`` names every check that must have run and passed, so a verify that stopped early, or
    skipped one, has failed at that check even when nothing before it said FAIL."""

    subject: str
    checks: list[tuple[str, bool | None, str]] = field(default_factory=list)
    required: tuple[str, ...] = ()

    def add(self, name: str, ok: bool | None, detail: str) -> bool:
        self.checks.append((name, ok, detail))
        return bool(ok)

    @property
    def failed(self) -> tuple[str, str] | None:
        first = next(((n, d) for n, ok, d in self.checks if ok is False), None)
        if first is not None:
            return first
        passed = {n for n, ok, _ in self.checks if ok is True}
        return next(((n, "did not run: nothing may be called verified without it") for n in self.required
                     if n not in passed and not (n.endswith("*") and any(p.startswith(n[:-1]) for p in passed))), None)

    def lines(self) -> list[str]:
        return [f"{ {True: 'ok  ', False: 'FAIL', None: 'skip'}[ok]} {name}: {detail}" for name, ok, detail in self.checks]


# --- records --------------------------------------------------------------------------------------


def record_path(tag_ref: str, records: Path = RECORDS) -> Path:
    return records / (tag_ref.replace("/", "_").replace(":", "_").replace("@", "_") + ".json")


def read_record(tag_ref: str, records: Path = RECORDS) -> dict | None:
    path = record_path(tag_ref, records)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def published_for(local_tag: str, records: Path = RECORDS) -> str:
    """The newest ``REPOSITORY@sha256:...`` that `invoke publish` recorded for a local image tag; "" for none.

    A record is a file anyone with the checkout can write, and what it names ends up in a pod spec: only a reference
    that passes the same grammar and by-digest rule as ``invoke k8s --image`` counts, and the newest is chosen by a
    timestamp that parses, never by the text it holds."""
    from datetime import datetime


    found = []
    for path in sorted(records.glob("*.json")) if records.is_dir() else ():
        try:
            data = json.loads(path.read_text())
            reference = data["reference"]
            when = datetime.strptime(data["published"], "%Y-%m-%dT%H:%M:%SZ")
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if data.get("image") != local_tag or not isinstance(reference, str):
            continue
        try:
            if "@sha256:" not in image_reference(reference, "record") or not re.fullmatch(r"[^\s@]+@sha256:[0-9a-f]{64}",
                                                                                             reference):
                continue
        except UserError:
            continue
        found.append((when, reference))
    return max(found)[1] if found else ""


# --- publish --------------------------------------------------------------------------------------


def image_facts(engine: Engine, image: str) -> tuple[dict, dict]:
    """(labels, inventory) of a local image."""
    from sglang_stack.image import store, verify as verify_image

    if not store.exists(engine, image):
        raise UserError(f"{image}: no such image in the {engine} store (build it with `invoke build`, or pass --engine)")
    return store.labels(engine, image), verify_image.inventory(engine, image, [])


def push(engine: Engine, image: str, target: references.Ref, insecure: bool) -> str:
    """Push with the engine's own push; return the digest the registry now serves for the tag."""
    from sglang_stack import shell

    if engine.daemon:
        from sglang_stack.image import store

        had = store.exists(engine, target.by_tag)
        shell.run(["docker", "tag", image, target.by_tag], capture=True, what="docker tag")
        try:
            shell.run(["docker", "push", "--quiet", target.by_tag], capture=True, what="docker push", timeout=3600)
        except BaseException:
            if not had:  # the registry-named tag exists for the push alone: a failed one takes it away again
                store.remove(engine, target.by_tag)
            raise
        digest = references.digest_of(target, insecure)
    else:
        with tempfile.TemporaryDirectory(prefix="sglang-stack-push-") as tmp:
            digestfile = Path(tmp) / "digest"
            tls = ["--tls-verify=false"] if insecure or client.loopback(target.registry) else []
            shell.run([engine.name, "push", *tls, "--digestfile", str(digestfile), image, f"docker://{target.by_tag}"],
                      capture=True, what=f"{engine} push", timeout=3600)
            digest = digestfile.read_text().strip()
    if not digest.startswith("sha256:"):
        raise UserError(f"{target}: the registry serves no digest for the tag just pushed")
    return digest


def writable(records: Path) -> None:
    """The publish record can be written where it goes (a read-only checkout fails here, before the push)."""
    try:
        records.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=records, prefix=".write-check-"):
            pass
    except OSError as err:
        raise UserError(f"{records}: the publish record cannot be written ({err.strerror or err}): nothing was pushed") \
            from None


def built_by_this_checkout(engine: Engine, image: str, stage: str, profile: str, foreign: bool,
                           built_records: Path | None = None) -> dict:
    """What binds the image's verdicts to a build (the predicate's ``build``): the record `invoke build` wrote for its
    image ID, or with ``foreign`` the statement that there is none. Refuses an image no build here produced."""
    from sglang_stack.image import built, store
    from sglang_stack.lock import profiles

    image_id = built.normal(store.image_id(engine, image))
    made = built.find(image_id, built_records or built.RECORDS)
    if made is not None and made.get("stage") == stage:
        return {"image_id": image_id, "by": "invoke build", "revision": made.get("revision", ""),
                "built": made.get("built", "")}
    if not foreign:
        flag = "" if profile == next(iter(profiles.available())) else f" --profile {profile}"
        raise UserError(f"{image} ({image_id[:19]}): no `invoke build` of this checkout produced this image, so its "
                        f"verdicts are only its own claim: build it (`invoke build --target {stage}{flag}`) and publish "
                        "that, or pass --foreign to publish it saying so")
    return {"image_id": image_id, "by": "foreign", "revision": "", "built": ""}


def publish(engine: Engine, image: str, to: str, signer: cosign.Signer, say=print, records: Path = RECORDS,
            foreign: bool = False) -> dict:
    """Push ``image`` to ``to``, sign its digest and attest its SBOM and verdicts; return the record written."""
    from sglang_stack.atomic import write as atomic_write

    target = references.parse(to, "--to")
    if target.digest:
        raise UserError(f"--to {to}: a digest is what the push gives; name REGISTRY/REPOSITORY[:TAG]")
    labels, found = image_facts(engine, image)
    # Everything that can fail is checked before the first push: a tag moved to an unsigned or unrecorded digest is
    # what a failure after it would leave.
    predicate = pred.make(image, labels, found)
    want_labels, want_patches = lock_facts(predicate["profile"], predicate["stage"])
    ok, why = pred.check_lock(predicate, want_labels, want_patches)
    if not ok:
        raise UserError(f"{image}: not what this checkout's lock builds ({why}): `invoke verify` would refuse it; "
                        "rebuild it with `invoke build`")
    predicate["build"] = built_by_this_checkout(engine, image, predicate["stage"], predicate["profile"], foreign)
    if foreign:
        say(f"note: --foreign: {image} ({predicate['build']['image_id'][:19]}) was not built by this checkout; its "
            "verdicts are attested as the image's own claim, and `invoke verify` will say so")
    cosign.ready(signer)
    writable(records)
    if not target.tag:
        local = image.rsplit("/", 1)[-1]
        target = references.Ref(target.registry, target.repository, local.split(":", 1)[1] if ":" in local else "latest")
    digest = push(engine, image, target, signer.insecure)
    ref = references.Ref(target.registry, target.repository, target.tag, digest)
    say(f"pushed {target.by_tag} as {ref.by_digest}")
    cosign.sign(signer, ref.by_digest)
    say(f"signed {ref.by_digest}")
    with tempfile.TemporaryDirectory(prefix="sglang-stack-attest-") as tmp:
        sbom_file, verdict_file = Path(tmp) / "sbom.cdx.json", Path(tmp) / "verdict.json"
        sbom_file.write_text(json.dumps(found["sbom"], sort_keys=True))
        verdict_file.write_text(json.dumps(predicate, sort_keys=True))
        cosign.attest(signer, ref.by_digest, "cyclonedx", sbom_file)
        cosign.attest(signer, ref.by_digest, pred.PREDICATE_TYPE, verdict_file)
    say(f"attested {ref.by_digest}: the SBOM (cyclonedx, {len(found['sbom'].get('components', []))} components) and "
        f"{pred.PREDICATE_TYPE} ({len(predicate['verdicts'])} verdicts, {len(predicate['patches'])} patches)")
    from datetime import datetime, timezone

    record = {"image": image, "tag": target.by_tag, "reference": ref.by_digest, "digest": digest,
              "stage": predicate["stage"], "profile": predicate["profile"], "revision": predicate["revision"],
              "sbom": predicate["sbom"], "verdicts": sorted(predicate["verdicts"]), "build": predicate["build"],
              "published": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    path = record_path(target.by_tag, records)
    atomic_write(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    say(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return record


# --- verify ---------------------------------------------------------------------------------------


def lock_facts(profile: str, stage: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, patches) this checkout's lock of ``profile`` expects of a ``stage`` image."""
    from sglang_stack.image import render, verify as verify_image
    from sglang_stack.lock import lockfile as lockmod, profiles
    from sglang_stack.patching.patches import read_series

    try:
        chosen = profiles.get(profile)
    except UserError:
        raise UserError(f"the predicate names profile {profile!r}, which this checkout does not have") from None
    lock, _ = lockmod.check_all(chosen.lock, download=False)
    want = verify_image.expected_labels(lock, stage)
    patches = {} if stage == "router" else {p.name: p.sha256 for p in read_series(render.patches_of(lock))}
    return want, patches


# What `invoke verify --key` cannot show, said after its verdict.
NOT_COVERED = ("the verdicts are the build's checks as the build ran them, not re-run here; that the image serves, or "
               "runs on a GPU, is `invoke smoke` and `invoke up`'s to show; a --foreign image's verdicts are its own "
               "claim (the `build` line says which)")
SIGNED = ("signature", "sbom attestation", "verdict attestation", "verdicts", "lock")  # what signed() checks, in order


def signed(out: Outcome, key: str, target: list[str], tlog: bool = False, insecure: bool = False) -> tuple[dict | None, dict | None]:
    """The checks a registry reference and a bundle share: signature, both attestations, verdicts, lock.
    Returns (verdict predicate, attested SBOM); stops at the first failure."""
    ok, detail = cosign.verify(key, target, tlog, insecure)
    if not out.add("signature", ok, detail):
        return None, None
    sboms, why = cosign.attestations(key, target, "cyclonedx", tlog, insecure)
    if not out.add("sbom attestation", bool(sboms), f"{len(sboms)} by this key" if sboms else f"no cyclonedx attestation: {why}"):
        return None, None
    verdicts, why = cosign.attestations(key, target, pred.PREDICATE_TYPE, tlog, insecure)
    if not out.add("verdict attestation", bool(verdicts),
                   f"{len(verdicts)} by this key" if verdicts else f"no {pred.PREDICATE_TYPE} attestation: {why}"):
        return None, None
    predicate = verdicts[-1]
    if not isinstance(predicate, dict):
        out.add("verdicts", False, f"the {pred.PREDICATE_TYPE} predicate is {type(predicate).__name__} "
                f"({json.dumps(predicate)[:40]}), not the object `invoke publish` attests")
        return None, None
    if not out.add("verdicts", *pred.check_verdicts(predicate)):
        return None, None
    want_labels, want_patches = lock_facts(str(predicate.get("profile")), str(predicate.get("stage")))
    if not out.add("lock", *pred.check_lock(predicate, want_labels, want_patches)):
        return None, None
    sbom = next((s for s in reversed(sboms) if isinstance(s, dict) and pred.sbom_digest(s) == predicate.get("sbom")),
                sboms[-1])
    return predicate, sbom


def verify_reference(engine: Engine, value: str, key: str, tlog: bool = False, insecure: bool = False,
                     records: Path = RECORDS) -> Outcome:
    """``invoke verify REF --key PUB``: the published image, from the registry."""
    from sglang_stack import shell
    from sglang_stack.image import verify as verify_image

    ref = references.parse(value, "IMAGE")
    out = Outcome(str(ref), required=(*SIGNED, "predicate labels", "build", "sbom attested", "image *"))
    if ref.tag:
        now = references.digest_of(ref, insecure)
        record = read_record(ref.by_tag, records)
        if not now:
            out.add("tag", False, references.missing(ref, insecure))
            return out
        if ref.digest and ref.digest != now:
            out.add("tag", False, f"{ref.by_tag} now serves {now}, not the {ref.digest} named")
            return out
        if record and record.get("digest") != now:
            out.add("tag", False, f"{ref.by_tag} was pushed again: it serves {now}, `invoke publish` recorded "
                    f"{record.get('digest')} (verify that digest, or find who re-pushed the tag)")
            return out
        out.add("tag", True, f"{ref.by_tag} serves {now}" + (", as `invoke publish` recorded" if record else
                                                              " (no publish record here to compare)"))
        ref = references.Ref(ref.registry, ref.repository, ref.tag, now)
    else:
        out.add("tag", None, "named by digest")
    predicate, sbom = signed(out, key, [ref.by_digest], tlog, insecure)
    if predicate is None:
        return out
    config, labels = references.config_of(ref, insecure)
    if not out.add("predicate labels", *pred.check_labels(predicate, labels)):
        return out
    if not out.add("build", *pred.check_build(predicate, config)):
        return out
    from sglang_stack.image import store

    pulled = ref.by_digest
    had = store.exists(engine, pulled)  # what verify pulls it removes again; an image already here stays
    try:
        if engine.daemon:
            shell.run(["docker", "pull", "--quiet", pulled], capture=True, what="docker pull", timeout=3600)
        else:
            tls = ["--tls-verify=false"] if insecure or client.loopback(ref.registry) else []
            shell.run([engine.name, "pull", *tls, f"docker://{pulled}"], capture=True, what=f"{engine} pull", timeout=3600)
        found = verify_image.inventory(engine, pulled, [])
        if not out.add("sbom attested", *pred.check_sbom(predicate, sbom, found.get("sbom"))):
            return out
        from sglang_stack.lock import profiles

        report = verify_image.verify(engine, pulled, lock_path=profiles.get(predicate["profile"]).lock)
        for check in report.checks:
            if check.name != "digest":
                out.add(f"image {check.name}", check.ok, check.detail)
    finally:
        if not had and store.exists(engine, pulled):
            store.remove(engine, pulled)
    return out


# --- bundle ---------------------------------------------------------------------------------------


def bundle(value: str, out_dir: Path, insecure: bool = False, records: Path = RECORDS, say=print) -> Path:
    """``cosign save`` of the digest ``value`` names (a tag is resolved, and must be the one published), plus
    bundle.json; the directory appears whole or not at all."""
    ref = references.parse(value, "IMAGE")
    if not ref.digest:
        ref = references.Ref(ref.registry, ref.repository, ref.tag, references.digest_of(ref, insecure))
        if not ref.digest:
            raise UserError(f"{value}: the registry has no such tag")
        record = read_record(ref.by_tag, records)
        if record and record["digest"] != ref.digest:
            raise UserError(f"{value}: the tag was pushed again since `invoke publish` ({ref.digest}, recorded "
                            f"{record['digest']}): bundle by digest")
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"--out {out_dir}: exists and is not an empty directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        cosign.save(ref.by_digest, scratch / "oci", insecure)
        (scratch / "bundle.json").write_text(json.dumps({"reference": ref.by_digest, "tag": ref.by_tag if ref.tag else "",
                                                         "digest": ref.digest, "layout": "oci"}, indent=2) + "\n")
        if out_dir.exists():
            out_dir.rmdir()
        scratch.rename(out_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    say(f"wrote {out_dir}: {ref.by_digest} with its signatures and attestations (cosign's OCI layout)")
    return out_dir


def _layout_blob(layout: Path, digest: str) -> dict:
    algo, _, hexdigest = str(digest).partition(":")
    path = layout / "blobs" / algo / hexdigest
    if algo != "sha256" or not path.is_file():
        raise UserError(f"{layout}: no blob {digest}")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != hexdigest:
        raise UserError(f"{layout}: blob {digest[:19]} does not hash to its name (changed after `invoke bundle`)")
    return json.loads(data)


def layout_config(layout: Path, digest: str) -> tuple[str, dict[str, str]]:
    """(config digest: the image ID, labels) of the image ``digest`` in an OCI layout, each blob read checked against
    its name."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        raise UserError(f"{layout}: no OCI layout (index.json)") from None
    digests = [m.get("digest") for m in index.get("manifests", [])]
    if digest not in digests:
        found = [d for m in index.get("manifests", []) for d in
                 [m.get("digest")] if "image" in (m.get("annotations") or {}).get("kind", "")]
        raise UserError(f"{layout}: holds {found or digests} and not {digest}")
    manifest = _layout_blob(layout, digest)
    config = _layout_blob(layout, manifest["config"]["digest"])
    return manifest["config"]["digest"], (config.get("config") or {}).get("Labels") or {}


def verify_bundle(directory: Path, key: str) -> Outcome:
    """``invoke verify --bundle DIR --key PUB``: everything but the registry, with no network."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "bundle.json").read_text())
        digest = meta["digest"]
    except (OSError, ValueError, KeyError):
        raise UserError(f"--bundle {directory}: no bundle.json with a digest (write one with `invoke bundle`)") from None
    out = Outcome(f"{directory} ({meta.get('reference', digest)})", required=(*SIGNED, "layers", "predicate labels",
                                                                            "build", "sbom attested"))
    config, labels = layout_config(directory / "oci", digest)
    if not out.add("layers", *layout_blobs(directory / "oci", digest)):
        return out
    predicate, sbom = signed(out, key, ["--local-image", str(directory / "oci")])
    if predicate is None:
        return out
    if out.add("predicate labels", *pred.check_labels(predicate, labels)) and \
            out.add("build", *pred.check_build(predicate, config)):
        out.add("sbom attested", *pred.check_sbom(predicate, sbom))
    return out


def layout_blobs(layout: Path, digest: str) -> tuple[bool, str]:
    """Every blob the image's manifest names (config and layers), hashed and sized against the manifest: cosign checks
    the signature over the manifest, and the manifest names each layer by digest, but only reading a layer shows it is
    still the one named."""
    manifest = _layout_blob(layout, digest)
    blobs = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
    total = 0
    for blob in blobs:
        algo, _, hexdigest = str(blob.get("digest", "")).partition(":")
        path = layout / "blobs" / algo / hexdigest
        if algo != "sha256" or not path.is_file():
            return False, f"no blob {blob.get('digest')} in the layout"
        sha, size = hashlib.sha256(), 0
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                sha.update(chunk)
                size += len(chunk)
        if sha.hexdigest() != hexdigest or size != blob.get("size"):
            return False, f"blob {blob.get('digest', '')[:19]} does not hash or size to what the manifest names"
        total += size
    return True, f"{len(blobs)} blobs, {total / 1e9:.2f} GB, each what the manifest names"
