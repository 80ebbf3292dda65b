"""`invoke advisories`: the real pip-audit on every pin, against its PyPI service answered on
loopback (https://pypi.org through a proxy with a CA made for the test: ``/pypi/NAME/VERSION/json``
in PyPI's format) and against an OSV mirror, with advisories planted for a few pins: one the stack
can take, one versions.lock pins, one sglang's own requirement excludes, one withdrawn, one
accepted."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.lock import advisories
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock import wheels

from loopback import Handler, impersonating, serving


@pytest.fixture(scope="module")
def lock():
    return lockmod.check_all(download=False)[0]


@pytest.fixture(scope="module")
def requires(sglang_wheel):
    return wheels.wheel_requires(sglang_wheel)


def exact_requirement(lock, requires) -> Requirement:
    """A distribution sglang pins exactly (==) that requirements.lock.txt installs and versions.lock does not pin."""
    own = {canonicalize_name(a.name) for a in (lock.sglang, *lock.wheels)}
    for line in requires:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if req.marker is None and str(req.specifier).startswith("==") and name in lock.requirements and name not in own:
            return req
    raise AssertionError("sglang pins nothing exactly")


def vuln(ident: str, fixed: list[str], withdrawn: str | None = None, aliases: tuple = ()) -> dict:
    """An advisory as PyPI's release document lists it."""
    return {"id": ident, "aliases": list(aliases), "fixed_in": fixed, "withdrawn": withdrawn, "summary": "planted",
            "details": "planted for the test", "link": f"https://osv.dev/vulnerability/{ident}", "source": "osv"}


def osv(name: str, entry: dict) -> dict:
    """The same advisory as OSV's query API returns it."""
    return {"id": entry["id"], "aliases": entry["aliases"], "summary": entry["summary"], "modified": "2026-01-01T00:00:00Z",
            **({"withdrawn": entry["withdrawn"] + "T00:00:00Z"} if entry["withdrawn"] else {}),
            "affected": [{"package": {"name": name, "ecosystem": "PyPI"},
                          "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"},
                                                                      *({"fixed": f} for f in entry["fixed_in"])]}]}]}


@pytest.fixture
def planted(lock, requires):
    """Five advisories on three pins: one the stack can take (with a withdrawn one beside it), one on a pin
    versions.lock holds, one sglang's exact requirement keeps out. Returns (planted, free, exact)."""
    exact = exact_requirement(lock, requires)
    direct = {canonicalize_name(Requirement(line).name) for line in requires}
    free = next(n for n in lock.requirements if n not in direct)  # a transitive pin: nothing of sglang's constrains it
    return {
        free: [vuln("PYSEC-0000-1", ["999.0"], aliases=("CVE-0000-0001",)), vuln("PYSEC-0000-2", ["999.1"], "2026-01-01")],
        "torch": [vuln("GHSA-torch-0001", ["99.0"])],
        canonicalize_name(exact.name): [vuln("GHSA-exact-0001", ["999.0"])],
    }, free, exact


def pypi_at(planted: dict, seen: list, unknown: str | None = None):
    """PyPI's JSON API for every release; ``unknown`` answers 404, as an index without its record does."""
    class Index(Handler):
        def do_GET(self):
            seen.append(self.path)
            parts = self.path.strip("/").split("/")  # pypi NAME VERSION json
            name = canonicalize_name(parts[1])
            if name == unknown:
                self.reply(404, {"message": "Not Found"})
                return
            self.reply(200, {"info": {"name": name, "version": parts[2]}, "urls": [],
                             "vulnerabilities": planted.get(name, [])})
    return Index


@pytest.fixture
def pypi(planted, tmp_path, monkeypatch):
    """pip-audit's default service, https://pypi.org, answered on loopback; returns the paths it was asked."""
    seen: list[str] = []
    with impersonating("pypi.org", pypi_at(planted[0], seen), tmp_path) as env:
        for key in ("NO_PROXY", "no_proxy", "https_proxy", "CURL_CA_BUNDLE"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield seen


def test_each_advisory_is_named_with_its_fix_and_whether_the_stack_can_take_it(lock, requires, planted, pypi):
    _, free, exact = planted
    report = advisories.audit(lock, requires)
    assert report.pins == len(advisories.pins(lock)) == len(pypi), "every pinned release is asked, once"
    assert f"/pypi/torch/{dict(advisories.pins(lock))['torch']}/json" in pypi, "torch by its public version (no +cu130)"
    opened = {adv.id: take for adv, take in report.open}
    assert set(opened) == {"PYSEC-0000-1", "GHSA-torch-0001", "GHSA-exact-0001"}, "the withdrawn advisory is left out"
    assert opened["PYSEC-0000-1"].startswith("yes: 999.0 is allowed by sglang's requirements"), opened
    assert opened["GHSA-torch-0001"].startswith("no: versions.lock pins torch"), opened
    assert opened["GHSA-exact-0001"] == f"no: sglang {lock.sglang.version} requires {exact.name}{exact.specifier}", opened
    lines = report.lines()
    assert any(line.startswith(f"FAIL {free} ") and "PYSEC-0000-1 (CVE-0000-0001): fixed in 999.0" in line for line in lines)
    assert lines[-1] == f"advisories: {report.pins} pinned distributions asked; 3 open, 0 accepted, 0 stale exceptions"


def test_an_accepted_advisory_needs_a_reason_and_a_stale_one_is_said(lock, requires, planted, pypi):
    _, free, _ = planted
    accepted = dataclasses.replace(lock, data={**lock.data, "advisory": [
        {"id": "GHSA-torch-0001", "package": "torch", "reason": "the affected API is never called by SGLang's serving path"},
        {"id": "CVE-0000-0001", "package": free, "reason": "accepted by its alias: only the CLI of that package is affected"},
        {"id": "GHSA-gone-0001", "package": "torch", "reason": "an old exception for an advisory no pin has any more"},
    ]})
    report = advisories.audit(accepted, requires)
    assert [adv.id for adv, _ in report.open] == ["GHSA-exact-0001"]
    assert {adv.id for adv, _ in report.accepted} == {"GHSA-torch-0001", "PYSEC-0000-1"}
    assert report.stale == [f"{lock.path.name}: [[advisory]] GHSA-gone-0001 of torch: no pinned release has it any more; "
                            "drop the exception"]
    asked = len(pypi)
    short = dataclasses.replace(lock, data={**lock.data, "advisory": [{"id": "X", "package": "torch", "reason": "ok"}]})
    with pytest.raises(UserError, match=r"advisory\[0\].reason: 'ok' does not say why"):
        advisories.audit(short, requires)
    assert len(pypi) == asked, "a bad exception is refused before the service is asked"


def test_a_pin_the_service_has_no_record_of_fails_the_run(lock, requires, planted, tmp_path, monkeypatch):
    """pip-audit skips a release its service answers 404 for and, with nothing else found, says "No known
    vulnerabilities found" and exits 0. Here that is no clean report."""
    free = planted[1]
    seen: list[str] = []
    with impersonating("pypi.org", pypi_at({}, seen, unknown=free), tmp_path) as env:
        monkeypatch.delenv("NO_PROXY", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(UserError, match=rf"pip-audit could not audit 1 of {len(advisories.pins(lock))} pins, so "
                                            rf"this is no clean report: .*{free}.*the pypi service has no record of them"):
            advisories.audit(lock, requires)


def test_the_osv_service_at_a_mirror_gives_the_same_answer(lock, requires, planted):
    asked = []

    class Osv(Handler):
        def do_POST(self):
            query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            name = query["package"]["name"]
            asked.append((name, query["version"]))
            self.reply(200, {"vulns": [osv(name, e) for e in planted[0].get(name, [])]} if name in planted[0] else {})

    with serving(Osv) as url:
        report = advisories.audit(lock, requires, "osv", f"{url}/v1/query")
    assert sorted(asked) == sorted(advisories.pins(lock).items()), "each pin asked once, by its public version"
    assert {adv.id: adv.fixed_in for adv, _ in report.open} == {
        "PYSEC-0000-1": ("999.0",), "GHSA-torch-0001": ("99.0",), "GHSA-exact-0001": ("999.0",)}


def test_a_service_that_fails_is_one_line(lock, requires):
    class Broken(Handler):
        def do_POST(self):
            self.reply(500, {"message": "internal error"})

    with serving(Broken) as url:
        proc = subprocess.run([sys.executable, "-m", "invoke", "advisories", "--service", "osv", "--osv-url",
                               f"{url}/v1/query"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("+ ")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[-1] == ("error: advisories: pip-audit (service osv) failed, exit 1: HTTPError: 500 Server Error: "
                         f"Internal Server Error for url: {url}/v1/query"), proc.stderr
    assert proc.stdout == "", "no report from a failed audit"


@pytest.mark.parametrize("service, osv_url, says", [
    ("nvd", None, "--service 'nvd': pip-audit's services here are pypi, osv"),
    ("pypi", "http://127.0.0.1:9/v1/query", "--osv-url http://127.0.0.1:9/v1/query: only with --service osv"),
])
def test_a_bad_service_is_refused_before_anything_runs(service, osv_url, says):
    with pytest.raises(UserError, match=re.escape(says)):
        advisories.pip_audit({"example": "1.0"}, service, osv_url)


@pytest.mark.parametrize("document, says", [
    ([], "not its JSON format"),
    ({"dependencies": {}}, "not its JSON format"),
    ({"dependencies": [{"version": "1"}]}, "not its JSON format"),
    ({"dependencies": [{"name": "pkg", "version": "1", "vulns": [{"fix_versions": ["2"]}]}]}, "pkg: a vulnerability "
     "without an id"),
])
def test_a_report_of_another_shape_is_named(document, says):
    with pytest.raises(UserError, match=says):
        advisories.parse(document)
