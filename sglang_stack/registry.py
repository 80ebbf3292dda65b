"""A container registry read over its HTTP API (the OCI distribution spec): a tag's digest, a manifest, a blob.

One client for `invoke lock --verify` (a base's digest and config) and for `invoke publish` / `verify --key` (a
tag's current digest, an image's labels). Anonymous, or with the credentials `docker login` stored
(~/.docker/config.json ``auths``; credential helpers are not consulted), through the bearer-token exchange a
registry asks for (Docker Hub, GHCR, distribution). Plain HTTP only for loopback, as the Docker Engine allows
it, or where the caller says ``insecure``. Every manifest and blob read by digest is hashed against it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

from sglang_stack.errors import UserError

MANIFEST_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
LIMIT = 4 << 20  # a manifest or an image config is a few KB
TIMEOUT_S = 30


class Unreachable(UserError):
    """The registry did not answer, or answered with an error status."""


def host(registry: str) -> str:
    """Where ``registry`` answers: Docker Hub's name is not its API's host."""
    return "registry-1.docker.io" if registry == "docker.io" else registry


def loopback(registry: str) -> bool:
    name = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return name in ("localhost", "::1", "[::1]") or name.startswith("127.")


def _basic(registry: str) -> tuple[str, str] | None:
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        auth = json.loads(config.read_text()).get("auths", {}).get(registry, {}).get("auth")
        user, _, password = base64.b64decode(auth).decode().partition(":") if auth else ("", "", "")
    except (OSError, ValueError, AttributeError):
        return None
    return (user, password) if user else None


def get(registry: str, repository: str, path: str, insecure: bool = False, accept: str = ", ".join(MANIFEST_TYPES)):
    """GET ``/v2/REPOSITORY/PATH``, authenticating as the registry asks; the response, whatever its status."""
    import requests

    where = host(registry)
    url = f"{'http' if insecure or loopback(where) else 'https'}://{where}/v2/{repository}/{path}"
    headers = {"Accept": accept}
    try:
        resp = requests.get(url, headers=headers, timeout=TIMEOUT_S, stream=True)
        challenge = resp.headers.get("WWW-Authenticate", "")
        if resp.status_code == 401 and challenge.lower().startswith("bearer "):
            fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            params = {k: v for k, v in fields.items() if k in ("service", "scope")}
            params.setdefault("scope", f"repository:{repository}:pull")
            token = requests.get(fields.get("realm", ""), params=params, auth=_basic(registry), timeout=TIMEOUT_S)
            token.raise_for_status()
            headers["Authorization"] = "Bearer " + (token.json().get("token") or token.json().get("access_token", ""))
            resp = requests.get(url, headers=headers, timeout=TIMEOUT_S, stream=True)
        elif resp.status_code == 401 and (basic := _basic(registry)):
            resp = requests.get(url, headers=headers, auth=basic, timeout=TIMEOUT_S, stream=True)
    except (requests.RequestException, ValueError) as err:
        raise Unreachable(f"{registry}/{repository}: the registry did not answer ({err.__class__.__name__})") from None
    return resp


def tag_digest(registry: str, repository: str, tag: str, insecure: bool = False) -> str:
    """The digest the registry serves for ``tag`` now; "" where it has no such tag."""
    resp = get(registry, repository, f"manifests/{tag}", insecure)
    if resp.status_code == 404:
        return ""
    if resp.status_code != 200:
        raise Unreachable(f"{registry}/{repository}:{tag}: the registry answered {resp.status_code}")
    return (resp.headers.get("Docker-Content-Digest")
            or "sha256:" + hashlib.sha256(_body(resp, f"{registry}/{repository}:{tag}")).hexdigest())


def by_digest(registry: str, repository: str, digest: str, blob: bool = False, insecure: bool = False) -> dict:
    """The manifest (or, with ``blob``, the JSON blob: an image config) ``digest`` names, its bytes hashed against it."""
    path = f"{'blobs' if blob else 'manifests'}/{digest}"
    resp = get(registry, repository, path, insecure, accept="*/*" if blob else ", ".join(MANIFEST_TYPES))
    if resp.status_code != 200:
        raise Unreachable(f"{registry}/{repository}@{digest}: the registry answered {resp.status_code}")
    body = _body(resp, f"{registry}/{repository}@{digest}", "blob" if blob else "manifest")
    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        raise UserError(f"{registry}/{repository}@{digest}: the registry served a {'blob' if blob else 'manifest'} of "
                        "another digest")
    return json.loads(body)


def _body(resp, name: str, what: str = "manifest") -> bytes:
    body = resp.raw.read(LIMIT + 1, decode_content=True)
    if len(body) > LIMIT:
        raise UserError(f"{name}: the registry's {what} is over {LIMIT >> 20} MB")
    return body
