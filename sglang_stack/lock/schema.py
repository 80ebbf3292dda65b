"""The shape of versions.lock: every table and key, their types and formats, each problem one line.

``lock.check`` runs this first; what the values refer to (pins, files, overrides) it checks after.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
STATUSES = ("checked", "published")
# The image reference grammar (distribution/reference): a registry host, then lower-case path components, and a tag.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_NAME = re.compile(rf"(?:[A-Za-z0-9.-]+(?::\d+)?/)?{_COMPONENT}(?:/{_COMPONENT})*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# Any C0 or C1 control character, a line or paragraph separator: none belongs in a lock value, and a newline in one
# that a template interpolates would become Dockerfile instructions.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_structure(data: dict, bad) -> None:
    def need(table: dict, key: str, kind: type, prefix: str) -> None:
        if key not in table:
            bad(f"{prefix}{key}", "missing")
        elif not isinstance(table[key], kind):
            bad(f"{prefix}{key}", f"{table[key]!r} should be a {kind.__name__}")

    if data.get("schema") != 1:
        bad("schema", f"{data.get('schema')!r} is not a supported schema (expected 1)")
    for key in sorted(set(data) - KNOWN_KEYS):
        bad(key, f"unknown key (known: {', '.join(sorted(KNOWN_KEYS))})")
    tables = ("image", "cuda", "python", "sglang", "resolve", "router", "jit")
    for table in tables:
        need(data, table, dict, "")
    if any(not isinstance(data.get(t), dict) for t in tables):
        return
    need(data["image"], "name", str, "image.")
    need(data["image"], "audit_arch", str, "image.")
    need(data["cuda"], "version", str, "cuda.")
    need(data["cuda"], "tag", str, "cuda.")
    need(data["cuda"], "base", dict, "cuda.")
    need(data["cuda"], "devel", dict, "cuda.")
    if isinstance(data["cuda"].get("devel"), dict):
        need(data["cuda"]["devel"], "stub", str, "cuda.devel.")
    _check_jit(data, need, bad)
    router = data["router"]
    for key in ("name", "version", "url", "sha256", "status", "python", "python_platform"):
        need(router, key, str, "router.")
    need(router, "requires", list, "router.")
    need(router, "base", dict, "router.")
    if isinstance(router.get("python"), str) and not re.fullmatch(r"3\.\d+", router["python"]):
        bad("router.python", f"{router['python']!r} is not 3.MINOR")
    for req in router.get("requires", []) if isinstance(router.get("requires"), list) else []:
        try:
            Requirement(req)
        except (InvalidRequirement, TypeError):
            bad("router.requires", f"{req!r} is not a valid requirement")
    bases = (("cuda.base.", data["cuda"].get("base")), ("cuda.devel.", data["cuda"].get("devel")), ("router.base.", router.get("base")))
    for prefix, base in bases:
        if not isinstance(base, dict):
            continue
        # "unverified": a base whose digest no project machine could read (no registry reaches them); the build
        # then names it by tag, and the lock's summary says so until `invoke lock --verify` records the digest.
        unverified = base.get("status") == "unverified"
        for key in ("image", "tag", "status") if unverified else ("image", "tag", "digest", "status"):
            need(base, key, str, prefix)
        if isinstance(base.get("digest"), str) and not DIGEST.fullmatch(base["digest"]):
            bad(f"{prefix}digest", f"{base['digest']!r} is not sha256:<64 hex>")
        # The linux/amd64 image's config digest (its image ID), which `invoke lock --verify` reads through the
        # digest: what a mirror's archive of this base must lead to.
        if "config" in base and not (isinstance(base["config"], str) and DIGEST.fullmatch(base["config"])):
            bad(f"{prefix}config", f"{base['config']!r} is not sha256:<64 hex>")
        if isinstance(base.get("status"), str) and base["status"] not in (*STATUSES, "unverified"):
            bad(f"{prefix}status", f"{base['status']!r} is not one of {', '.join(STATUSES)}, unverified")
    if isinstance(data["cuda"].get("version"), str) and not re.fullmatch(r"\d+\.\d+\.\d+", data["cuda"]["version"]):
        bad("cuda.version", f"{data['cuda']['version']!r} is not MAJOR.MINOR.PATCH")
    need(data["python"], "version", str, "python.")
    if isinstance(data["python"].get("version"), str) and not re.fullmatch(r"3\.\d+", data["python"]["version"]):
        bad("python.version", f"{data['python']['version']!r} is not 3.MINOR")
    for key in ("index", "python_platform", "exclude_newer", "resolver"):
        need(data["resolve"], key, str, "resolve.")
    if isinstance(data["resolve"].get("resolver"), str) and not re.fullmatch(r"uv==\d+(\.\d+)*", data["resolve"]["resolver"]):
        bad("resolve.resolver", f"{data['resolve']['resolver']!r} is not uv==VERSION")
    for key in ("version", "url", "sha256", "status"):
        need(data["sglang"], key, str, "sglang.")
    for i, tool in enumerate(data.get("build_tool", []) if isinstance(data.get("build_tool"), list) else []):
        for key in ("name", "version", "url", "sha256", "status"):
            need(tool, key, str, f"build_tool[{tool.get('name', i)}].")
    wheels = data.get("wheel", [])
    if not isinstance(wheels, list):
        bad("wheel", "should be an array of tables ([[wheel]])")
        wheels = []
    for i, wheel in enumerate(wheels):
        prefix = f"wheel[{wheel.get('name', i)}]."
        for key in ("name", "version", "url", "sha256", "status"):
            need(wheel, key, str, prefix)
        need(wheel, "requires", list, prefix)
        if "optional" in wheel and not isinstance(wheel["optional"], bool):
            bad(f"{prefix}optional", f"{wheel['optional']!r} should be true or false")
        for req in wheel.get("requires", []) if isinstance(wheel.get("requires"), list) else []:
            try:
                Requirement(req)
            except (InvalidRequirement, TypeError):
                bad(f"{prefix}requires", f"{req!r} is not a valid requirement")
    for i, override in enumerate(data.get("override", [])):
        prefix = f"override[{override.get('package', i)}]."
        for key in ("package", "of", "declared", "reason"):
            need(override, key, str, prefix)
        if bool(override.get("omit")) == ("version" in override):
            bad(f"{prefix}version", "give exactly one of version = \"X\" or omit = true")
        if isinstance(override.get("declared"), str):
            try:
                SpecifierSet(override["declared"])
            except Exception:
                bad(f"{prefix}declared", f"{override['declared']!r} is not a version specifier")
        if isinstance(override.get("reason"), str) and len(override["reason"].strip()) < 10:
            bad(f"{prefix}reason", f"{override['reason']!r} does not explain the override")
    advisories = data.get("advisory", [])
    for i, entry in enumerate(advisories if isinstance(advisories, list) else [advisories]):
        # invoke advisories: a known advisory the stack accepts
        if not isinstance(entry, dict):
            bad(f"advisory[{i}]", "each [[advisory]] is a table of id, package and reason")
            continue
        prefix = f"advisory[{entry.get('id', i)}]."
        for key in ("id", "package", "reason"):
            need(entry, key, str, prefix)
        if isinstance(entry.get("reason"), str) and len(entry["reason"].strip()) < 20:
            bad(f"{prefix}reason", f"{entry['reason']!r} does not say why the stack accepts it")
    _check_formats(data, bad)
    _check_text(data, bad)
    _check_references(data, bad)


def _strings(value, path: str = ""):
    """Every string of the lock with its key path (``cuda.base.tag``, ``wheel[0].url``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


def _check_text(data: dict, bad) -> None:
    """No control character and no padding in any value: what a template interpolates stays one token on one line."""
    for path, text in _strings(data):
        if CONTROL.search(text):
            bad(path, f"{text[:60]!r}: holds a control character or line break")
        elif text != text.strip():
            bad(path, f"{text[:60]!r}: leading or trailing whitespace")


def _check_references(data: dict, bad) -> None:
    """Image names and tags as the reference grammar has them: a template makes FROM and --tag lines of them."""
    name = data["image"].get("name")
    if isinstance(name, str) and not CONTROL.search(name) and not IMAGE_NAME.fullmatch(name):
        bad("image.name", f"{name!r} is not an image name (lower case, such as sglang-stack)")
    bases = (("cuda.base", data["cuda"].get("base")), ("cuda.devel", data["cuda"].get("devel")),
             ("router.base", data["router"].get("base")))
    for prefix, base in bases:
        if not isinstance(base, dict):
            continue
        image, tag = base.get("image"), base.get("tag")
        if isinstance(image, str) and not CONTROL.search(image) and not IMAGE_NAME.fullmatch(image):
            bad(f"{prefix}.image", f"{image!r} is not an image name (lower case, such as docker.io/nvidia/cuda)")
        if isinstance(tag, str) and not CONTROL.search(tag) and not TAG.fullmatch(tag):
            bad(f"{prefix}.tag", f"{tag!r} is not an image tag (letters, digits, '_', '.', '-'; at most 128)")


def _check_formats(data: dict, bad) -> None:
    """Values whose type is right but whose text a later step would choke on: versions and the resolver's cutoff."""
    def version(prefix: str, value) -> None:
        if isinstance(value, str):
            try:
                Version(value)
            except InvalidVersion:
                bad(prefix, f"{value!r} is not a version (PEP 440), such as 1.2.3 or 2.0.1+cu130")

    version("sglang.version", data["sglang"].get("version"))
    version("router.version", data["router"].get("version"))
    for kind, name in (("wheel", "name"), ("build_tool", "name"), ("override", "package")):
        entries = data.get(kind)
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and "version" in entry:
                version(f"{kind}[{entry.get(name, i)}].version", entry["version"])
    cutoff = data["resolve"].get("exclude_newer")
    when = None
    if isinstance(cutoff, str):
        try:
            when = datetime.fromisoformat(cutoff.replace("Z", "+00:00"))
        except ValueError:
            bad("resolve.exclude_newer", f"{cutoff!r} is not a date or RFC 3339 time, such as 2026-02-24T00:00:00Z")
    moved = data["resolve"].get("exclude_newer_package", {})
    if not isinstance(moved, dict):
        bad("resolve.exclude_newer_package", "should be a table of NAME = \"RFC 3339 time\" (`invoke bump` writes it)")
        moved = {}
    for name, instant in moved.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            bad(f"resolve.exclude_newer_package.{name}", "is not a distribution name")
        try:
            if not (isinstance(instant, str) and datetime.fromisoformat(instant.replace("Z", "+00:00")).tzinfo):
                raise ValueError
        except ValueError:
            bad(f"resolve.exclude_newer_package.{name}", f"{instant!r} is not an RFC 3339 time, such as 2026-03-01T12:00:01Z")
    snapshot = data["resolve"].get("apt_snapshot")
    if not isinstance(snapshot, str) or not re.fullmatch(r"\d{8}T\d{6}Z", snapshot):
        bad("resolve.apt_snapshot", f"{snapshot!r} is not an Ubuntu snapshot id (YYYYMMDDTHHMMSSZ, such as 20260224T000000Z)")
    elif when is not None and when.tzinfo is not None and when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ") != snapshot:
        bad("resolve.apt_snapshot", f"{snapshot!r} is not the instant of resolve.exclude_newer ({cutoff}): the apt packages and "
            "the wheels would come from different days")


KNOWN_KEYS = {"schema", "image", "cuda", "python", "sglang", "resolve", "router", "jit", "wheel", "override",
              "constraint", "binary_exception", "build_tool", "size", "advisory"}


def _check_jit(data: dict, need, bad) -> None:
    """[jit], [[constraint]] and [[binary_exception]]: their shape (what they refer to is checked later)."""
    jit = data["jit"]
    need(jit, "toolchain", list, "jit.")
    need(jit, "arch_list", str, "jit.")
    for req in jit.get("toolchain", []) if isinstance(jit.get("toolchain"), list) else []:
        try:
            pinned = [s for s in Requirement(req).specifier if s.operator == "=="]
        except (InvalidRequirement, TypeError):
            bad("jit.toolchain", f"{req!r} is not a valid requirement")
            continue
        if len(pinned) != 1:
            bad("jit.toolchain", f"{req!r} is not pinned with == (the compiler is part of the image's identity)")
    if isinstance(jit.get("arch_list"), str):
        for arch in jit["arch_list"].split() or [""]:
            if not re.fullmatch(r"\d+\.\d+[af]?", arch):
                bad("jit.arch_list", f"{arch!r} is not a CUDA architecture such as 9.0a or 12.0a")
    for kind, keys in (("constraint", ("requirement", "reason")), ("binary_exception", ("package", "reason", "breaks"))):
        entries = data.get(kind, [])
        if not isinstance(entries, list):
            bad(kind, f"should be an array of tables ([[{kind}]])")
            continue
        for i, entry in enumerate(entries):
            prefix = f"{kind}[{entry.get(keys[0], i) if isinstance(entry, dict) else i}]."
            if not isinstance(entry, dict):
                bad(prefix[:-1], "should be a table")
                continue
            for key in keys:
                need(entry, key, str, prefix)
            if isinstance(entry.get("reason"), str) and len(entry["reason"].strip()) < 10:
                bad(f"{prefix}reason", f"{entry['reason']!r} does not explain it")
            if kind == "constraint" and isinstance(entry.get("requirement"), str):
                try:
                    Requirement(entry["requirement"])
                except InvalidRequirement:
                    bad(f"{prefix}requirement", f"{entry['requirement']!r} is not a valid requirement")
            # What the constraint keeps importable: the image build imports each, so a bump that drops one fails there.
            if kind == "constraint" and "imports" in entry and not (
                    isinstance(entry["imports"], list) and entry["imports"]
                    and all(isinstance(m, str) and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", m) for m in entry["imports"])):
                bad(f"{prefix}imports", f"{entry['imports']!r} is not a list of module names such as pkg_resources")
            if kind == "binary_exception":
                need(entry, "needs", list, prefix)
                if isinstance(entry.get("needs"), list) and (not entry["needs"] or not all(
                        isinstance(n, str) and re.fullmatch(r"lib[\w.+-]+\.so(\.\d+)*", n) for n in entry["needs"])):
                    bad(f"{prefix}needs", f"{entry['needs']!r} is not a list of library sonames such as libcudart.so.12")
