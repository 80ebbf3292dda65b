"""Hash every artifact whose sha256 is only "published", and mark it "checked" (network, GBs)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_stack import oci as client
from sglang_stack.atomic import write as atomic_write
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import LOCK_PATH, Lock, LockProblems, _key, check
from sglang_stack.lock.wheels import wheel_requires
from sglang_stack.lock.schema import DIGEST


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
    recorded, configs = {}, {}
    for key, base in bases:
        digest = registry_digest(base["image"], base["tag"])
        if digest is None:
            report.append(f"{key}: could not reach the registry for {base['image']}:{base['tag']}; digest not checked")
            continue
        if base["status"] == "unverified" and not base.get("digest"):
            recorded[key] = digest  # a base named by tag alone: what the registry serves now becomes its pin
            report.append(f"{key}: {base['image']}:{base['tag']} is {digest}: recorded")
        elif digest != base.get("digest"):
            problems.append(f"{path.name}: {key}.digest: {base.get('digest', 'none recorded')} but the registry serves "
                            f"{digest} for {base['tag']}")
            continue
        else:
            report.append(f"{key}: {base['image']}:{base['tag']} is {digest}")
            checked.append(key)
        # What an offline mirror's archive of this base must lead to: its linux/amd64 config, read through the digest.
        config = registry_config(base["image"], digest)
        if config is None:
            report.append(f"{key}: the registry did not serve the manifests under {digest}; config not recorded")
        elif base.get("config") not in (None, config):
            problems.append(f"{path.name}: {key}.config: {base['config']} but {digest} leads to {config}")
        elif base.get("config") != config:
            configs[key] = config
            report.append(f"{key}: its linux/amd64 image config is {config}: recorded")
    if problems:
        raise LockProblems(problems)
    text = path.read_text()
    for name in checked:
        text = _mark_checked(text, name)
    if recorded:
        text = _record_digests(text, recorded)
    if configs:
        text = _record_keys(text, {key: {"config": config} for key, config in configs.items()})
    atomic_write(path, text)
    return report


def _record_keys(text: str, values: dict[str, dict], drop: tuple[str, ...] = ()) -> str:
    """``text`` with each table ``KEY`` (``cuda.base``) given ``values[KEY]`` and without ``drop``, comments kept."""
    import tomlkit

    doc = tomlkit.parse(text)
    for key, fields in values.items():
        table = doc
        for part in key.split("."):
            table = table[part]
        for name, value in fields.items():
            table[name] = value
        for name in drop:
            table.pop(name, None)
    return tomlkit.dumps(doc)


def _applies(line: str, lock: Lock) -> bool:
    req = Requirement(line)
    env = lock.marker_env()
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
    """``text`` with each ``KEY`` (``cuda.base``) given its ``digest`` and ``status = "checked"``, comments kept. Its
    ``note`` goes: it said why the base was named by tag alone, which it no longer is."""
    return _record_keys(text, {key: {"digest": digest, "status": "checked"} for key, digest in digests.items()},
                        drop=("note",))


def registry_digest(image: str, tag: str) -> str | None:
    """The manifest-list digest a Docker registry serves for ``image:tag`` (anonymous pull); None where it does not."""
    registry, _, repository = image.partition("/")
    try:
        return client.tag_digest(registry, repository, tag) or None
    except client.Unreachable:
        return None


def registry_config(image: str, digest: str, platform: tuple[str, str] = ("linux", "amd64")) -> str | None:
    """The config digest (the image ID) of ``platform``'s image under the index or manifest ``digest``, each step of
    the chain hashed against the digest that named it; None where the registry does not answer. A mirror's archive
    of the base must lead to it (``image.mirror``)."""
    registry, _, repository = image.partition("/")
    try:
        manifest = client.by_digest(registry, repository, digest)
        if "manifests" in manifest:  # an index: the platform's own manifest
            entry = next((m for m in manifest["manifests"] if (m.get("platform") or {}).get("os") == platform[0]
                          and (m.get("platform") or {}).get("architecture") == platform[1]), None)
            if entry is None:
                raise UserError(f"{image}@{digest}: the index has no {'/'.join(platform)} image")
            manifest = client.by_digest(registry, repository, entry["digest"])
        config = (manifest.get("config") or {}).get("digest")
    except (client.Unreachable, KeyError, ValueError, TypeError):
        return None
    return config if isinstance(config, str) and DIGEST.fullmatch(config) else None
