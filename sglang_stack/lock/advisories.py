"""Known vulnerabilities of every pinned distribution, from the package index's own advisory data.

PyPI publishes, in each release's JSON document (``/pypi/NAME/VERSION/json``), the
advisories that affect that release: their ids (PYSEC, GHSA) and aliases (CVE), the
versions that fix them, and whether they were withdrawn. It is the data pip-audit's PyPI
service reads; here it is read for the exact pins of the lock: requirements.lock.txt,
requirements.router.lock.txt and the URL wheels of versions.lock (by their public
version: torch X+cu130 is torch X to the index).

Advisories change, so nothing is cached: every run asks the index. For each advisory the
report says whether the stack can take the fix: not where versions.lock pins the
distribution itself (a stack change), not where sglang's own requirement excludes every
fixed version, else yes (re-resolve with `invoke lock`). An advisory the project accepts is
an ``[[advisory]]`` table of versions.lock (``id``, ``package``, ``reason``); one that no
longer matches any advisory of the pins is stale and said, as a stale override is.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import Lock
from sglang_stack.lock.releases import DEFAULT_INDEX, FETCH_THREADS, TIMEOUT_S, Offline, get_json, json_url


@dataclass(frozen=True)
class Advisory:
    package: str
    version: str
    id: str
    aliases: tuple[str, ...]
    fixed_in: tuple[str, ...]
    summary: str
    link: str = ""


@dataclass
class Report:
    pins: int = 0
    open: list[tuple[Advisory, str]] = field(default_factory=list)  # (advisory, can the stack take the fix)
    accepted: list[tuple[Advisory, str]] = field(default_factory=list)  # (advisory, the reason)
    stale: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for adv, take in self.open:
            out.append(f"FAIL {adv.package} {adv.version}: {_name(adv)}: {_fixed(adv)}; can the stack take it: {take}"
                       + (f" ({adv.link})" if adv.link else ""))
        for adv, reason in self.accepted:
            out.append(f"ok   {adv.package} {adv.version}: {_name(adv)} accepted (versions.lock [[advisory]]): {reason}")
        for line in self.stale:
            out.append(f"warn {line}")
        out.append(f"advisories: {self.pins} pinned distributions asked; {len(self.open)} open, "
                   f"{len(self.accepted)} accepted, {len(self.stale)} stale exceptions")
        return out



def _strings(entry: dict, key: str) -> tuple[str, ...]:
    """An advisory's list field as strings, whatever the index put in it."""
    return tuple(str(x) for x in entry.get(key) or [] if isinstance(x, (str, int, float)))

def _name(adv: Advisory) -> str:
    return adv.id + (f" ({', '.join(adv.aliases)})" if adv.aliases else "")


def _fixed(adv: Advisory) -> str:
    return f"fixed in {', '.join(adv.fixed_in)}" if adv.fixed_in else "no fixed version yet"


def pins(lock: Lock) -> dict[str, str]:
    """canonical name -> public version, for everything any image of the lock installs."""
    out = dict(lock.requirements)
    out.update(lock.router_requirements)
    for art in (lock.sglang, *lock.wheels, *([lock.router] if lock.router else [])):
        out[canonicalize_name(art.name)] = Version(art.version).public
    return dict(sorted(out.items()))


def exceptions(lock: Lock) -> dict[tuple[str, str], str]:
    """(canonical package, advisory id) -> reason, from versions.lock's ``[[advisory]]`` tables."""
    out = {}
    for i, entry in enumerate(lock.data.get("advisory", [])):
        where = f"{lock.path.name}: advisory[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"id", "package", "reason"}:
            raise UserError(f"{where}: needs exactly id, package and reason")
        if not all(isinstance(entry[k], str) and entry[k].strip() for k in entry):
            raise UserError(f"{where}: id, package and reason are non-empty strings")
        if len(entry["reason"].strip()) < 20:
            raise UserError(f"{where}.reason: {entry['reason']!r} does not say why the stack accepts it")
        out[(canonicalize_name(entry["package"]), entry["id"])] = entry["reason"].strip()
    return out


def _same(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def parse(package: str, version: str, document) -> list[Advisory]:
    """The advisories a release document lists, withdrawn ones left out; a document of another shape is an error."""
    if not isinstance(document, dict) or not isinstance(document.get("vulnerabilities", []), list):
        raise UserError(f"{package} {version}: the index's answer is not a PyPI release document")
    out = []
    for entry in document.get("vulnerabilities", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise UserError(f"{package} {version}: an advisory without an id in the index's answer")
        if entry.get("withdrawn"):
            continue
        out.append(Advisory(package, version, entry["id"], _strings(entry, "aliases"), _strings(entry, "fixed_in"),
                            " ".join(str(entry.get("summary") or entry.get("details") or "").split())[:160],
                            str(entry.get("link") or "")))
    return out


def can_take(adv: Advisory, lock: Lock, sglang_requires: list[str]) -> str:
    """Whether a fixed version fits the stack: a versions.lock pin, then sglang's own requirement."""
    name = canonicalize_name(adv.package)
    pinned = [a for a in (lock.sglang, *lock.wheels) if canonicalize_name(a.name) == name]
    if pinned:
        return f"no: versions.lock pins {pinned[0].name} {pinned[0].version} (a stack change, with its own checks)"
    if not adv.fixed_in:
        return "no: no release fixes it yet"
    fixed = []
    for text in adv.fixed_in:
        try:
            fixed.append(Version(text))
        except InvalidVersion:
            continue
    for line in sglang_requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == name and req.specifier and not any(req.specifier.contains(v, prereleases=True)
                                                                               for v in fixed):
            return f"no: sglang {lock.sglang.version} requires {req.name}{req.specifier}"
    return f"yes: {min(fixed) if fixed else adv.fixed_in[0]} is allowed by sglang's requirements; re-resolve (invoke lock)"


def fetch_all(index: str, wanted: dict[str, str]) -> dict[str, list[Advisory]]:
    """name -> its advisories, asking the index for every release document (in parallel, none cached)."""
    import requests

    from sglang_stack.download import ca_bundle

    print(f"advisories: asking {json_url(index, 'NAME', 'VERSION')} for {len(wanted)} releases "
          f"(timeout {TIMEOUT_S[1]} s each)", file=sys.stderr, flush=True)

    def one(item):
        name, version = item
        try:
            document = get_json(session, json_url(index, name, version))
        except Offline as err:
            raise UserError(f"advisories: the index did not answer: {err}") from None
        if document is None:
            # As `lock --check` does: some mirrors serve only the project's document. Its advisories are those of
            # the project's newest release, so they stand in only where that is the pinned one.
            try:
                project = get_json(session, json_url(index, name))
            except Offline as err:
                raise UserError(f"advisories: the index did not answer: {err}") from None
            newest = (project.get("info") or {}).get("version") if isinstance(project, dict) else None
            if newest is None or not _same(newest, version):
                raise UserError(f"advisories: {json_url(index, name, version)}: no release document (404), and the "
                                f"project's document speaks for {newest or 'no release'}, not {version}: the index "
                                "serves no advisory data for it; point --index at PyPI or a mirror of its JSON API")
            document = project
        return name, parse(name, version, document)

    with requests.Session() as session:
        session.verify = ca_bundle() or True
        items = list(wanted.items())
        found = dict([one(items[0])])  # the first alone: an unreachable index fails once
        with ThreadPoolExecutor(max_workers=FETCH_THREADS) as pool:
            found.update(pool.map(one, items[1:]))
    return found


def audit(lock: Lock, sglang_requires: list[str], index: str = DEFAULT_INDEX) -> Report:
    wanted = pins(lock)
    accepted = exceptions(lock)
    report = Report(pins=len(wanted))
    used = set()
    for name, advisories in fetch_all(index, wanted).items():
        for adv in advisories:
            keys = {(name, adv.id), *((name, a) for a in adv.aliases)}
            hit = next((k for k in keys if k in accepted), None)
            if hit:
                used.add(hit)
                report.accepted.append((adv, accepted[hit]))
            else:
                report.open.append((adv, can_take(adv, lock, sglang_requires)))
    for package, ident in sorted(set(accepted) - used):
        report.stale.append(f"{lock.path.name}: [[advisory]] {ident} of {package}: no pinned release has it any more; "
                            "drop the exception")
    return report
