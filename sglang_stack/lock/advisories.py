"""Known vulnerabilities of every pinned distribution, found by pip-audit (PyPA).

pip-audit asks a vulnerability service for each exact pin of the lock (requirements.lock.txt,
requirements.router.lock.txt and the URL wheels of versions.lock by their public version: torch
X+cu130 is torch X to the index): PyPI's JSON API by default, or OSV (``--service osv``, at
``--osv-url`` for a mirror of its API). It runs with ``--no-deps --disable-pip``: the pins are
the whole set, nothing is resolved or installed. Its cache lives in a temporary directory:
advisories change, so every run asks again.

What pip-audit does not say is ours: for each advisory, whether the stack can take the fix (not
where versions.lock pins the distribution itself, a stack change; not where sglang's own
requirement excludes every fixed version; else yes, re-resolve with `invoke lock`). An advisory
the project accepts is an ``[[advisory]]`` table of versions.lock (``id``, ``package``,
``reason``); one that no longer matches any advisory of the pins is stale and said. A pin
pip-audit skipped (the service has no record of it) fails the run: pip-audit itself reports
"No known vulnerabilities found" for a set it could not audit.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sglang_stack.download import ca_bundle
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import Lock

SERVICES = ("pypi", "osv")
TIMEOUT_S = 30  # each request pip-audit makes


@dataclass(frozen=True)
class Advisory:
    package: str
    version: str
    id: str
    aliases: tuple[str, ...]
    fixed_in: tuple[str, ...]
    summary: str


@dataclass
class Report:
    pins: int = 0
    open: list[tuple[Advisory, str]] = field(default_factory=list)  # (advisory, can the stack take the fix)
    accepted: list[tuple[Advisory, str]] = field(default_factory=list)  # (advisory, the reason)
    stale: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for adv, take in self.open:
            out.append(f"FAIL {adv.package} {adv.version}: {_name(adv)}: {_fixed(adv)}; can the stack take it: {take}")
        for adv, reason in self.accepted:
            out.append(f"ok   {adv.package} {adv.version}: {_name(adv)} accepted (versions.lock [[advisory]]): {reason}")
        for line in self.stale:
            out.append(f"warn {line}")
        out.append(f"advisories: {self.pins} pinned distributions asked; {len(self.open)} open, "
                   f"{len(self.accepted)} accepted, {len(self.stale)} stale exceptions")
        return out



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


def parse(document) -> tuple[dict[str, list[Advisory]], list[str]]:
    """pip-audit's JSON report: (canonical name -> its advisories, the skip reasons of pins it could not audit).
    A report of another shape is an error, as is a vulnerability without an id."""
    deps = document.get("dependencies") if isinstance(document, dict) else None
    if not isinstance(deps, list) or not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in deps):
        raise UserError("advisories: pip-audit's report is not its JSON format (a list of dependencies, each named)")
    found: dict[str, list[Advisory]] = {}
    skipped = []
    for dep in deps:
        name = canonicalize_name(dep["name"])
        if "skip_reason" in dep:
            skipped.append(str(dep["skip_reason"]))
            continue
        found[name] = []
        for vuln in dep.get("vulns") or []:
            if not isinstance(vuln, dict) or not isinstance(vuln.get("id"), str):
                raise UserError(f"advisories: {name}: a vulnerability without an id in pip-audit's report")
            found[name].append(Advisory(name, str(dep.get("version", "")), vuln["id"],
                                        tuple(map(str, vuln.get("aliases") or ())),
                                        tuple(map(str, vuln.get("fix_versions") or ())),
                                        " ".join(str(vuln.get("description") or "").split())[:160]))
    return found, skipped


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


def pip_audit(wanted: dict[str, str], service: str = "pypi", osv_url: str | None = None) -> dict[str, list[Advisory]]:
    """Run pip-audit on the pins; name -> its advisories. Every pin must have been audited."""
    if service not in SERVICES:
        raise UserError(f"--service {service!r}: pip-audit's services here are {', '.join(SERVICES)}")
    if osv_url and service != "osv":
        raise UserError(f"--osv-url {osv_url}: only with --service osv")
    with tempfile.TemporaryDirectory(prefix="sglang-stack-advisories-") as tmp:
        pins = Path(tmp) / "pins.txt"
        pins.write_text("".join(f"{name}=={version}\n" for name, version in wanted.items()))
        report = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "pip_audit", "--requirement", str(pins), "--no-deps", "--disable-pip",
                "--vulnerability-service", service, *(["--osv-url", osv_url] if osv_url else []),
                "--format", "json", "--output", str(report), "--aliases", "on", "--desc", "on",
                "--progress-spinner", "off", "--timeout", str(TIMEOUT_S), "--cache-dir", str(Path(tmp) / "cache")]
        print(f"advisories: {len(wanted)} pins, service {service}\n+ {shlex.join(['python', *argv[1:]])}",
              file=sys.stderr, flush=True)
        # pip-audit's requests trust certifi's roots unless REQUESTS_CA_BUNDLE names others: hand it the bundle the
        # host names for pip ($PIP_CERT, $SSL_CERT_FILE), as behind a TLS-inspecting proxy.
        env = dict(os.environ)
        if (ca := ca_bundle(explicit_only=True)) and "REQUESTS_CA_BUNDLE" not in env:
            env["REQUESTS_CA_BUNDLE"] = ca
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        # Exit 1 is also "vulnerabilities found": the report file tells a finished audit from a failed one.
        if proc.returncode not in (0, 1) or not report.exists():
            raise UserError(f"advisories: pip-audit (service {service}) failed, exit {proc.returncode}: "
                            f"{failure(proc.stderr)[:300]}")
        try:
            document = json.loads(report.read_text())
        except ValueError:
            raise UserError(f"advisories: pip-audit's report is not JSON ({report.name})") from None
    found, skipped = parse(document)
    if skipped:
        raise UserError(f"advisories: pip-audit could not audit {len(skipped)} of {len(wanted)} pins, so this is no "
                        f"clean report: {skipped[0]}" + (f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else "")
                        + f"; the {service} service has no record of them"
                        + ("" if service == "osv" else ", try --service osv"))
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise UserError(f"advisories: pip-audit's report leaves out {len(missing)} pins ({', '.join(missing[:3])})")
    return found


def failure(stderr: str) -> str:
    """The line of pip-audit's output that says why it failed. It ends in a traceback whose last exception is often
    a bare wrapper (``ServiceError``), so the last exception or error line that carries a message is the one."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(said):
        found = re.match(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (\S.*)$", line) or re.match(r"^ERROR:[\w.]+:(\S.*)$", line)
        if found:
            return ": ".join(found.groups())
    return said[-1] if said else "no message"


def audit(lock: Lock, sglang_requires: list[str], service: str = "pypi", osv_url: str | None = None) -> Report:
    wanted = pins(lock)
    accepted = exceptions(lock)
    report = Report(pins=len(wanted))
    used = set()
    for name, advisories in pip_audit(wanted, service, osv_url).items():
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
