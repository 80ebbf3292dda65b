"""References as `invoke publish` and `invoke verify --key` take them, and what their registry serves for them
(through sglang_stack/registry.py): a tag's current digest, an image's labels."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sglang_stack import registry as client
from sglang_stack.errors import UserError


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
    from sglang_stack.image import store

    store.reference(value, flag)
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


def labels_of(ref: Ref, insecure: bool = False) -> dict[str, str]:
    """The labels of the image ``ref.digest`` names, from its config blob (each read checked against its digest)."""
    manifest = client.by_digest(ref.registry, ref.repository, ref.digest, insecure=insecure)
    if "config" not in manifest:
        raise UserError(f"{ref}: a manifest list; publish and verify one platform's image")
    config = client.by_digest(ref.registry, ref.repository, manifest["config"]["digest"], blob=True, insecure=insecure)
    return (config.get("config") or {}).get("Labels") or {}
