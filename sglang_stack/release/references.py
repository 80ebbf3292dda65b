"""References as `invoke publish` and `invoke verify --key` take them, and what their registry serves for them
(through sglang_stack/oci.py): a tag's current digest, an image's labels."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sglang_stack import oci as client
from sglang_stack.errors import UserError
from sglang_stack.engine import image_reference


@dataclass(frozen=True)
class Ref:
    """``registry/repository[:tag][@sha256:...]``, split."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def by_digest(self) -> str:
        return f"{self.name}@{self.digest}"

    @property
    def by_tag(self) -> str:
        return f"{self.name}:{self.tag}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse(value: str, flag: str) -> Ref:
    """A reference that names its registry (a host with a dot or a port, or localhost); one line otherwise."""

    image_reference(value, flag)
    name, _, digest = value.partition("@")
    tag = ""
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    host, _, repository = name.partition("/")
    if not repository or not (re.search(r"[.:]", host) or host == "localhost"):
        raise UserError(f"{flag} {value}: name the registry, as REGISTRY/REPOSITORY[:TAG] (for example "
                        "ghcr.io/acme/sglang-stack or 127.0.0.1:5000/sglang-stack)")
    return Ref(host, repository, tag, digest)


def digest_of(ref: Ref, insecure: bool = False) -> str:
    """The digest the registry serves for ``ref``'s tag now; "" where it has no such tag."""
    return client.tag_digest(ref.registry, ref.repository, ref.tag, insecure)


def missing(ref: Ref, insecure: bool = False) -> str:
    """Why the registry serves nothing for ``ref``'s tag, in words: no such repository (a typo), or no such tag in it."""
    resp = client.get(ref.registry, ref.repository, "tags/list", insecure, accept="application/json")
    if resp.status_code == 404:
        return f"the registry has no repository {ref.repository} (check its name)"
    try:
        tags = sorted((json.loads(client._body(resp, f"{ref.registry}/{ref.repository}", "tag list")) or {})
                      .get("tags") or [])
    except (ValueError, UserError):
        tags = []
    # cosign keeps signatures and attestations as tags sha256-HEX.sig/.att/.sbom: not what a user mistyped.
    cosign_tags = [t for t in tags if re.fullmatch(r"sha256-[0-9a-f]{64}\.(sig|att|sbom)", t)]
    tags = [t for t in tags if t not in cosign_tags]
    shown = ", ".join(tags[:8]) + (f" and {len(tags) - 8} more" if len(tags) > 8 else "")
    signed = f"; and {len(cosign_tags)} of cosign's signature and attestation tags" if cosign_tags else ""
    return f"{ref.registry}/{ref.repository} has no tag {ref.tag}" + (f" (it has {shown}{signed})" if tags else "")


def config_of(ref: Ref, insecure: bool = False) -> tuple[str, dict[str, str]]:
    """(config digest: the image ID, labels) of the image ``ref.digest`` names, from its config blob (each read
    checked against its digest)."""
    manifest = client.by_digest(ref.registry, ref.repository, ref.digest, insecure=insecure)
    if "config" not in manifest:
        raise UserError(f"{ref}: a manifest list; publish and verify one platform's image")
    digest = manifest["config"]["digest"]
    config = client.by_digest(ref.registry, ref.repository, digest, blob=True, insecure=insecure)
    return digest, (config.get("config") or {}).get("Labels") or {}
