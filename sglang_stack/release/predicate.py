"""The verdict predicate: what `invoke publish` attests beside the SBOM, and how `invoke verify --key` judges it.

It is read out of the image, never recomputed: the verdict files the build's checks wrote
(sglang_stack/image/steps/verdict.py), the provenance and pin labels of the final stage, each patch's
sha256 as the image's SBOM records it, and the SBOM's own digest. Pure functions of what was read.
"""

from __future__ import annotations

import hashlib
import json

from sglang_stack.errors import UserError

PREDICATE_TYPE = "urn:sglang-stack:verdict:v1"
# Every check a final stage runs, by the name its verdict file has (docker/Dockerfile.j2, m.verdict).
REQUIRED = {
    "router": ("pip-check",),
    "sglang": ("patches", "eagle3-audit", "envaudit-sglang"),
    "runtime": ("depcheck", "envaudit-site", "binaries", "aot", "patches", "eagle3-audit", "envaudit-sglang",
                "depcheck-runtime"),
}
PROVENANCE = ("io.sglang-stack.stage", "io.sglang-stack.profile", "org.opencontainers.image.revision",
              "io.sglang-stack.dockerfile.sha256")
ATTESTED_LABELS = ("io.sglang-stack.", "org.opencontainers.image.")


def canonical(data) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sbom_digest(sbom: dict) -> str:
    return "sha256:" + hashlib.sha256(canonical(sbom)).hexdigest()


def patches_of(sbom: dict) -> dict[str, str]:
    """Each patch the SBOM records (``patches/NAME``) -> its sha256, in the series' order."""
    return {c["name"].removeprefix("patches/"): (c.get("hashes") or [{}])[0].get("content", "")
            for c in sbom.get("components", []) if c.get("type") == "file" and c.get("name", "").startswith("patches/")}


def make(image: str, labels: dict[str, str], found: dict) -> dict:
    """The predicate of ``image`` from its labels and what inventory.py read in it; one line naming what is missing."""
    missing = [k for k in PROVENANCE if not labels.get(k)]
    if missing:
        raise UserError(f"{image}: no provenance label {', '.join(missing)}: build it with `invoke build` (it passes "
                        "SOURCE_REVISION and DOCKERFILE_SHA256), then publish it")
    stage = labels["io.sglang-stack.stage"]
    if stage not in REQUIRED:
        raise UserError(f"{image}: label io.sglang-stack.stage={stage!r} names no stage this project publishes")
    verdicts = found.get("verdicts") or {}
    absent = [name for name in REQUIRED[stage] if not _passed(verdicts.get(name))]
    if absent:
        raise UserError(f"{image}: the build recorded no passing verdict for {', '.join(absent)} "
                        f"(/opt/sglang-stack/verdicts): not published")
    sbom = found.get("sbom")
    if not isinstance(sbom, dict) or sbom.get("bomFormat") != "CycloneDX":
        raise UserError(f"{image}: no CycloneDX SBOM at /opt/sglang-stack/sbom.cdx.json: not published")
    return {
        "stage": stage,
        "profile": labels["io.sglang-stack.profile"],
        "revision": labels["org.opencontainers.image.revision"],
        "dirty": labels["org.opencontainers.image.revision"].endswith("-dirty"),
        "dockerfile_sha256": labels["io.sglang-stack.dockerfile.sha256"],
        "base": {"name": labels.get("org.opencontainers.image.base.name", ""),
                 "digest": labels.get("org.opencontainers.image.base.digest", "")},
        "aot_arch_list": labels.get("io.sglang-stack.flashinfer.arch-list"),
        "patches": patches_of(sbom),
        "sbom": sbom_digest(sbom),
        "verdicts": verdicts,
        "labels": {k: v for k, v in sorted(labels.items()) if k.startswith(ATTESTED_LABELS)},
    }


def _passed(verdict) -> bool:
    return isinstance(verdict, dict) and verdict.get("result") == "pass"


# --- the checks of `invoke verify --key`: (ok, detail) each ----------------------------------------


def check_verdicts(predicate: dict) -> tuple[bool, str]:
    stage = predicate.get("stage")
    required = REQUIRED.get(stage)
    if required is None:
        return False, f"the predicate names stage {stage!r}, which this project does not publish"
    verdicts = predicate.get("verdicts") or {}
    absent = [name for name in required if not _passed(verdicts.get(name))]
    if absent:
        return False, f"no passing verdict for {', '.join(absent)}"
    return True, f"{len(required)} checks of the {stage} stage passed in the build: {', '.join(required)}"


def check_lock(predicate: dict, want_labels: dict[str, str], want_patches: dict[str, str]) -> tuple[bool, str]:
    """The attested pins and patches against this checkout's lock for the predicate's profile and stage."""
    have = predicate.get("labels") or {}
    bad = [f"{k}: attested {have.get(k, 'absent')!r}, the lock gives {v!r}" for k, v in want_labels.items() if have.get(k) != v]
    attested = predicate.get("patches") or {}
    for name in sorted(set(attested) | set(want_patches)):
        if attested.get(name) != want_patches.get(name):
            bad.append(f"patches/{name}: attested {str(attested.get(name, 'absent'))[:12]}, "
                       f"the checkout has {str(want_patches.get(name, 'absent'))[:12]}")
    if bad:
        return False, "; ".join(bad[:4]) + (f"; and {len(bad) - 4} more" if len(bad) > 4 else "")
    return True, (f"profile {predicate.get('profile')}: {len(want_labels)} pins and {len(want_patches)} patches "
                  "match this checkout's lock")


def check_build(predicate: dict, image_id: str) -> tuple[bool, str]:
    """The verdicts were attested for this very image: the predicate's ``build`` names its config digest (the image
    ID `invoke build` recorded, or ``--foreign`` said there was none)."""
    build = predicate.get("build")
    if not isinstance(build, dict) or not str(build.get("image_id", "")).startswith("sha256:"):
        return False, ("the predicate binds its verdicts to no image ID (attested by a publish that did not check the "
                       "build): publish the image again")
    if build["image_id"] != image_id:
        return False, f"the verdicts were attested for image {build['image_id'][:19]}; this image is {image_id[:19]}"
    if build.get("by") == "foreign":
        return True, (f"published with --foreign: no build of the publishing checkout produced {image_id[:19]}; the "
                      "verdicts are the image's own claim")
    if build.get("by") != "invoke build":
        return False, f"the predicate says the image was built by {str(build.get('by'))[:40]!r}"
    return True, (f"the verdicts are those of the `invoke build` that produced this image ({image_id[:19]}, "
                  f"revision {str(build.get('revision') or 'unknown')[:12]})")


def check_labels(predicate: dict, labels: dict[str, str]) -> tuple[bool, str]:
    """The attested labels against the image's own (its config, as the registry or the bundle serves it)."""
    attested = predicate.get("labels") or {}
    own = {k: v for k, v in labels.items() if k.startswith(ATTESTED_LABELS)}
    bad = [f"{k}: attested {attested.get(k, 'absent')!r}, the image has {own.get(k, 'absent')!r}"
           for k in sorted(set(attested) | set(own)) if attested.get(k) != own.get(k)]
    if bad:
        return False, "; ".join(bad[:4])
    return True, f"{len(own)} labels equal the image's own (revision {predicate.get('revision') or 'unknown'})"


def check_sbom(predicate: dict, attested_sbom: dict | None, image_sbom=None) -> tuple[bool, str]:
    """The attested SBOM is the one the predicate names and, where the image's own is at hand, that one too."""
    if not isinstance(attested_sbom, dict):
        return False, "no CycloneDX attestation"
    digest = sbom_digest(attested_sbom)
    if digest != predicate.get("sbom"):
        return False, f"the attested SBOM ({digest[:19]}) is not the one the verdict names ({str(predicate.get('sbom'))[:19]})"
    if image_sbom is not None and (not isinstance(image_sbom, dict) or sbom_digest(image_sbom) != digest):
        return False, "the attested SBOM differs from /opt/sglang-stack/sbom.cdx.json in the image"
    where = " and the image's own" if image_sbom is not None else ""
    return True, f"{len(attested_sbom.get('components', []))} components, the one the verdict names{where}"
