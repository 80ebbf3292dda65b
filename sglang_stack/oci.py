"""A container registry read over its HTTP API (the OCI distribution spec): a tag's digest, a manifest, a blob.

One client for `invoke lock --verify` (a base's digest and config) and for `invoke publish` / `verify --key` (a
tag's current digest, an image's labels). Anonymous, or with the credentials `docker login` stored
(~/.docker/config.json ``auths``; credential helpers are not consulted), through the bearer-token exchange a
registry asks for (Docker Hub, GHCR, distribution). Plain HTTP only for loopback, as the Docker Engine allows
it, or where the caller says ``insecure``. Every manifest and blob read by digest is hashed against it.

What keeps the credentials home: they go to a token realm only over HTTPS (or plain HTTP to a loopback
address) and only on the registry's own host; a realm elsewhere gets an anonymous request. Loopback is
decided by address (127.0.0.0/8, ::1, and ``localhost``), never by how a name begins. Each call has one
wall-clock deadline over every request and body it reads, and every body (the token's too) is capped.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

from sglang_stack.errors import UserError

MANIFEST_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
LIMIT = 4 << 20  # a manifest, an image config or a token is a few KB
TIMEOUT_S = 30  # each connection and each read
DEADLINE_S = 120  # one call, every request and body of it together: a registry that drips a byte at a time ends here


class Unreachable(UserError):
    """The registry did not answer, or answered with an error status."""


def host(registry: str) -> str:
    """Where ``registry`` answers: Docker Hub's name is not its API's host."""
    return "registry-1.docker.io" if registry == "docker.io" else registry


def _name(registry: str) -> str:
    """The host of ``registry`` (``HOST``, ``HOST:PORT``, ``[V6]:PORT``), without the port or brackets."""
    if registry.startswith("["):
        return registry[1:].split("]", 1)[0]
    return registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry


def loopback(registry: str) -> bool:
    """Whether ``registry`` is this host by address: 127.0.0.0/8, ::1 or ``localhost``; a name is not an address."""
    name = _name(registry).lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _may_send_credentials(realm: str, registry: str) -> bool:
    """A token realm gets the registry's credentials only on the registry's own host, over HTTPS or to loopback."""
    parts = urlsplit(realm)
    same_host = (parts.hostname or "").lower() == _name(registry).lower()
    return same_host and (parts.scheme == "https" or (parts.scheme == "http" and loopback(parts.netloc)))


def _basic(registry: str) -> tuple[str, str] | None:
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        auth = json.loads(config.read_text()).get("auths", {}).get(registry, {}).get("auth")
        user, _, password = base64.b64decode(auth).decode().partition(":") if auth else ("", "", "")
    except (OSError, ValueError, AttributeError):
        return None
    return (user, password) if user else None


def get(registry: str, repository: str, path: str, insecure: bool = False, accept: str = ", ".join(MANIFEST_TYPES)):
    """GET ``/v2/REPOSITORY/PATH``, authenticating as the registry asks; the response, whatever its status, carrying
    the call's ``deadline`` for reading its body (``_body``)."""
    import requests

    where = host(registry)
    url = f"{'http' if insecure or loopback(where) else 'https'}://{where}/v2/{repository}/{path}"
    headers = {"Accept": accept}
    deadline = time.monotonic() + DEADLINE_S

    def timeout() -> tuple[float, float]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Unreachable(f"{registry}/{repository}: no answer within {DEADLINE_S} s")
        return min(TIMEOUT_S, left), min(TIMEOUT_S, left)

    try:
        resp = requests.get(url, headers=headers, timeout=timeout(), stream=True)
        challenge = resp.headers.get("WWW-Authenticate", "")
        if resp.status_code == 401 and challenge.lower().startswith("bearer "):
            fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            params = {k: v for k, v in fields.items() if k in ("service", "scope")}
            params.setdefault("scope", f"repository:{repository}:pull")
            realm = fields.get("realm", "")
            auth = _basic(registry) if _may_send_credentials(realm, where) else None
            token = requests.get(realm, params=params, auth=auth, timeout=timeout(), stream=True)
            token.raise_for_status()
            token.deadline = deadline
            body = json.loads(_body(token, f"{registry}: the token from {urlsplit(realm).netloc}", "token"))
            headers["Authorization"] = "Bearer " + (body.get("token") or body.get("access_token", ""))
            resp = requests.get(url, headers=headers, timeout=timeout(), stream=True)
        elif resp.status_code == 401 and (basic := _basic(registry)) and (url.startswith("https:") or loopback(where)):
            resp = requests.get(url, headers=headers, auth=basic, timeout=timeout(), stream=True)
    except (requests.RequestException, ValueError, AttributeError) as err:
        raise Unreachable(f"{registry}/{repository}: the registry did not answer ({err.__class__.__name__})") from None
    resp.deadline = deadline
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
    """The body, at most ``LIMIT`` bytes, read before the call's deadline."""
    deadline = getattr(resp, "deadline", time.monotonic() + DEADLINE_S)
    chunks, size = [], 0
    try:
        # read1: whatever has arrived, at most 64 KiB, so the deadline is looked at as often as bytes come
        while chunk := resp.raw.read1(64 << 10, decode_content=True):
            chunks.append(chunk)
            size += len(chunk)
            if size > LIMIT:
                raise UserError(f"{name}: the registry's {what} is over {LIMIT >> 20} MB")
            if time.monotonic() > deadline:
                raise Unreachable(f"{name}: the registry's {what} did not arrive within {DEADLINE_S} s")
    except OSError as err:
        raise Unreachable(f"{name}: the registry's {what} broke off ({err.__class__.__name__})") from None
    return b"".join(chunks)
