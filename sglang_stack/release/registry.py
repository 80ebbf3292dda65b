"""What a registry serves, read over its HTTP API (OCI distribution): a tag's current digest and an image's config.

Anonymous, or with the credentials `docker login` stored (~/.docker/config.json ``auths``; credential helpers are
not consulted); the bearer-token dance of Docker Hub, GHCR and distribution itself. Plain HTTP only for loopback
(as the Docker Engine allows it) or where ``--insecure`` says so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import requests

from sglang_stack.errors import UserError

ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json",
])
TIMEOUT_S = 30


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


def loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


def _scheme(registry: str, insecure: bool) -> str:
    return "http" if insecure or loopback(registry) else "https"


def _basic(registry: str) -> tuple[str, str] | None:
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        auth = json.loads(config.read_text()).get("auths", {}).get(registry, {}).get("auth")
        user, _, password = base64.b64decode(auth).decode().partition(":") if auth else ("", "", "")
    except (OSError, ValueError, AttributeError):
        return None
    return (user, password) if user else None


def _get(ref: Ref, path: str, insecure: bool, accept: str = ACCEPT) -> requests.Response:
    url = f"{_scheme(ref.registry, insecure)}://{ref.registry}/v2/{ref.repository}/{path}"
    headers = {"Accept": accept}
    try:
        resp = requests.get(url, headers=headers, timeout=TIMEOUT_S)
        challenge = resp.headers.get("WWW-Authenticate", "")
        if resp.status_code == 401 and challenge.lower().startswith("bearer "):
            fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            params = {k: v for k, v in fields.items() if k in ("service", "scope")}
            params.setdefault("scope", f"repository:{ref.repository}:pull")
            token = requests.get(fields.get("realm", ""), params=params, auth=_basic(ref.registry), timeout=TIMEOUT_S)
            token.raise_for_status()
            headers["Authorization"] = "Bearer " + (token.json().get("token") or token.json().get("access_token", ""))
            resp = requests.get(url, headers=headers, timeout=TIMEOUT_S)
        elif resp.status_code == 401 and (basic := _basic(ref.registry)):
            resp = requests.get(url, headers=headers, auth=basic, timeout=TIMEOUT_S)
    except (requests.RequestException, ValueError) as err:
        raise UserError(f"{ref}: the registry {ref.registry} did not answer ({err.__class__.__name__})") from None
    return resp


def digest_of(ref: Ref, insecure: bool = False) -> str:
    """The digest the registry serves for ``ref``'s tag now; "" where it has no such tag."""
    resp = _get(ref, f"manifests/{ref.tag}", insecure)
    if resp.status_code == 404:
        return ""
    if resp.status_code != 200:
        raise UserError(f"{ref}: the registry answered {resp.status_code} for the tag {ref.tag}")
    return resp.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(resp.content).hexdigest()


def labels_of(ref: Ref, insecure: bool = False) -> dict[str, str]:
    """The labels of the image ``ref.digest`` names, from its config blob (each blob checked against its digest)."""
    manifest = _blob(ref, f"manifests/{ref.digest}", ref.digest, insecure)
    if "config" not in manifest:
        raise UserError(f"{ref}: a manifest list; publish and verify one platform's image")
    config = _blob(ref, f"blobs/{manifest['config']['digest']}", manifest["config"]["digest"], insecure, accept="*/*")
    return (config.get("config") or {}).get("Labels") or {}


def _blob(ref: Ref, path: str, digest: str, insecure: bool, accept: str = ACCEPT) -> dict:
    resp = _get(ref, path, insecure, accept)
    if resp.status_code != 200:
        raise UserError(f"{ref}: the registry answered {resp.status_code} for {path}")
    if "sha256:" + hashlib.sha256(resp.content).hexdigest() != digest:
        raise UserError(f"{ref}: {path} does not hash to its digest")
    return json.loads(resp.content)
