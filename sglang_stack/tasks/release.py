"""Images that leave the host: `invoke publish` (push by digest, sign, attest the SBOM and the build's verdicts)
and `invoke bundle` (the signed image for an air gap). `invoke verify --key` checks either; docs/publish.md."""

from __future__ import annotations

from pathlib import Path

from invoke import task

from sglang_stack.tasks.boundary import engine_of, user_errors
from sglang_stack.engine import image_reference


@task(
    help={
        "image": "the local image to publish, as `invoke build` tagged it (required)",
        "to": "REGISTRY/REPOSITORY[:TAG] to push to; the tag defaults to the image's own (required)",
        "key": "the cosign private key (a file, or a key reference such as awskms://...; its password from "
        "COSIGN_PASSWORD) that signs and attests",
        "keyless": "sign with Sigstore's keyless flow instead of --key (needs Sigstore's network and an OIDC identity)",
        "tlog": "upload the signature and attestations to the transparency log (default: off, as on a host without "
        "Sigstore's network; on with --keyless)",
        "insecure": "the registry speaks plain HTTP though it is not on loopback (default: off)",
        "engine": "docker, podman or buildah: the store that holds IMAGE (default: stack.engine, 'docker')",
        "foreign": "publish an image no `invoke build` of this checkout produced (its image ID is not in "
        "build/built/); the attestation then says its verdicts are the image's own claim (default: off: refused)",
    }
)
@user_errors
def publish(c, image, to, key=None, keyless=False, tlog=False, insecure=False, engine=None, foreign=False):
    """Push a built image by digest, sign it, and attest its SBOM and the build's own verdicts.

    Refuses, before anything is pushed, an image without the build's provenance labels, without a
    passing verdict for every check of its stage (/opt/sglang-stack/verdicts), or whose image ID no
    `invoke build` of this checkout recorded (build/built/; --foreign publishes it saying so). Then: the engine's own
    push; `cosign sign` on REPOSITORY@sha256:...; `cosign attest` of the image's SBOM (cyclonedx) and
    of the verdict predicate (urn:sglang-stack:verdict:v1: stage, profile, revision, Dockerfile digest,
    base, AOT arch list, each patch's sha256, every verdict, the labels, the image ID the build produced). Records the digest in
    build/published/ for `invoke verify` and `invoke k8s`, and prints the by-digest reference.
    """
    from sglang_stack.errors import UserError
    from sglang_stack.release import cosign, publish as publishmod

    image_reference(image, "IMAGE")
    if keyless == (key is not None):
        raise UserError("--key KEY or --keyless: exactly one says how to sign")
    signer = cosign.Signer(key=cosign.key_ref(key, "--key") if key else "", keyless=keyless, tlog=tlog or keyless,
                           insecure=insecure)
    record = publishmod.publish(engine_of(c, engine), image, to, signer, foreign=foreign)
    print(f"published {record['reference']}")
    print(f"  compose: SGLANG_STACK_IMAGE={record['reference']} docker compose up eagle3")
    print(f"  k8s:     invoke k8s --out DIR (takes the recorded digest), or --image {record['reference']}")
    print(f"  check:   invoke verify {record['tag']} --key cosign.pub")


@task(
    help={
        "image": "the published image: REGISTRY/REPOSITORY:TAG (must still serve the digest `invoke publish` "
        "recorded) or @sha256:... (required)",
        "out": "the directory to write, new or empty (required)",
        "insecure": "the registry speaks plain HTTP though it is not on loopback (default: off)",
    }
)
@user_errors
def bundle(c, image, out, insecure=False):
    """Write a published image with its signatures and attestations for an air gap (cosign's OCI layout).

    OUT/oci is `cosign save`'s layout, OUT/bundle.json names the digest. The directory appears whole
    or not at all. On the other side: `invoke verify --bundle OUT --key cosign.pub` (no network), then
    `cosign load --dir OUT/oci REGISTRY/REPOSITORY` into the local registry. See docs/publish.md.
    """
    from sglang_stack.atomic import out_path
    from sglang_stack.release import publish as publishmod

    publishmod.bundle(image, Path(out_path(out)), insecure)
