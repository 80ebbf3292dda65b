"""Hash every artifact whose sha256 is only "published", and mark it "checked" (network, GBs)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_stack.atomic import write as atomic_write
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import LOCK_PATH, TARGET_ENV, Lock, LockProblems, _key, check, wheel_requires


def verify(path: Path = LOCK_PATH) -> list[str]:
    """Download every artifact whose status is "published", hash it, and mark it "checked".

    Also compares each [[wheel]]'s ``requires`` with the wheel's own METADATA.
    Returns one line per artifact; raises ``LockProblems`` on any mismatch.
    """
    from sglang_stack.download import fetch, sha256_of

    lock = check(path)
    report, problems, checked = [], [], []
    for art in (lock.sglang, *lock.wheels, lock.router):
        key = _key(lock, art)
        try:
            local = fetch(art.url, art.sha256)
        except UserError as err:
            actual = str(err).rsplit("got ", 1)[-1]
            hint = " (an earlier upload under the same file name, listed in superseded)" if actual in art.superseded else ""
            problems.append(f"{path.name}: {key}.sha256: {err}{hint}")
            continue
        if art.requires and art is not lock.sglang:  # a [[wheel]] or the router
            published = sorted(_normalized(r) for r in wheel_requires(local) if _applies(r, lock))
            recorded = sorted(_normalized(r) for r in art.requires)
            if published != recorded:
                problems.append(f"{path.name}: {key}.requires: differs from the wheel's METADATA: {published}")
        report.append(f"{key}: {art.filename} sha256 {sha256_of(local)} matches")
        if art.status == "published":
            checked.append("router" if art is lock.router else art.name)
    bases = [("cuda.base", lock.cuda["base"]), ("router.base", lock.router_table["base"])]
    if lock.cuda["devel"]["status"] == "unverified":
        bases.insert(1, ("cuda.devel", lock.cuda["devel"]))
    recorded = {}
    for key, base in bases:
        digest = registry_digest(base["image"], base["tag"])
        if digest is None:
            report.append(f"{key}: could not reach the registry for {base['image']}:{base['tag']}; digest not checked")
        elif base["status"] == "unverified" and not base.get("digest"):
            recorded[key] = digest  # a base named by tag alone: what the registry serves now becomes its pin
            report.append(f"{key}: {base['image']}:{base['tag']} is {digest}: recorded")
        elif digest != base.get("digest"):
            problems.append(f"{path.name}: {key}.digest: {base.get('digest', 'none recorded')} but the registry serves "
                            f"{digest} for {base['tag']}")
        else:
            report.append(f"{key}: {base['image']}:{base['tag']} is {digest}")
            checked.append(key)
    if problems:
        raise LockProblems(problems)
    text = path.read_text()
    for name in checked:
        text = _mark_checked(text, name)
    if recorded:
        text = _record_digests(text, recorded)
    atomic_write(path, text)
    return report


def _applies(line: str, lock: Lock) -> bool:
    req = Requirement(line)
    env = dict(TARGET_ENV, python_version=lock.python["version"], python_full_version=lock.python["version"] + ".0")
    return req.marker is None or req.marker.evaluate(env)


def _normalized(line: str) -> str:
    req = Requirement(line)
    return f"{canonicalize_name(req.name)}{req.specifier}"


def _mark_checked(text: str, name: str) -> str:
    """Set ``status = "checked"`` in the table for ``name`` (a wheel, "sglang", "router", "cuda.base" or "router.base")."""
    lines = text.splitlines(keepends=True)
    header = {"sglang": "[sglang]", "cuda.base": "[cuda.base]", "router": "[router]", "router.base": "[router.base]"}.get(name)
    inside = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped == header
            continue
        if header is None and re.fullmatch(rf'name\s*=\s*"{re.escape(name)}"', stripped):
            inside = True
        if inside and re.match(r'status\s*=\s*"published"', stripped):
            lines[i] = line.replace('"published"', '"checked"', 1)
            inside = False
    return "".join(lines)


def _record_digests(text: str, digests: dict[str, str]) -> str:
    """``text`` with each ``KEY`` (``cuda.base``) given its ``digest`` and ``status = "checked"``, comments kept."""
    import tomlkit

    doc = tomlkit.parse(text)
    for key, digest in digests.items():
        table = doc
        for part in key.split("."):
            table = table[part]
        table["digest"] = digest
        table["status"] = "checked"
        table.pop("note", None)  # it said why the base was named by tag alone, which it no longer is
    return tomlkit.dumps(doc)


def registry_digest(image: str, tag: str) -> str | None:
    """The manifest-list digest a Docker registry serves for ``image:tag`` (anonymous pull)."""
    import requests

    host, _, repo = image.partition("/")
    if host == "docker.io":
        host = "registry-1.docker.io"
    accept = ", ".join(
        [
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.docker.distribution.manifest.v2+json",
        ]
    )
    try:
        token = requests.get(
            "https://auth.docker.io/token",
            params={"service": "registry.docker.io", "scope": f"repository:{repo}:pull"},
            timeout=20,
        ).json()["token"]
        resp = requests.head(
            f"https://{host}/v2/{repo}/manifests/{tag}",
            headers={"Authorization": f"Bearer {token}", "Accept": accept},
            timeout=20,
        )
    except (requests.RequestException, KeyError, ValueError):
        return None
    if resp.status_code != 200:
        return None
    return resp.headers.get("Docker-Content-Digest")
