"""`invoke advisories`: every pin against the index's advisory data, through a loopback index that
answers PyPI's JSON API (``/pypi/NAME/VERSION/json``) in PyPI's format, with advisories planted
for a few pins: one the stack can take, one versions.lock pins, one sglang's own requirement
excludes, one withdrawn, one accepted."""

from __future__ import annotations

import dataclasses

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_stack.errors import UserError
from sglang_stack.lock import advisories
from sglang_stack.lock import lockfile as lockmod

from loopback import Handler, serving


@pytest.fixture(scope="module")
def lock():
    return lockmod.check_all(download=False)[0]


@pytest.fixture(scope="module")
def requires(sglang_wheel):
    return lockmod.wheel_requires(sglang_wheel)


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
    return {"id": ident, "aliases": list(aliases), "fixed_in": fixed, "withdrawn": withdrawn, "summary": "planted",
            "details": "planted for the test", "link": f"https://osv.dev/vulnerability/{ident}", "source": "osv"}


@pytest.fixture
def index(lock, requires):
    """A loopback index: every pin answers, five carry advisories; returns (url, planted, seen paths)."""
    exact = exact_requirement(lock, requires)
    direct = {canonicalize_name(Requirement(line).name) for line in requires}
    free = next(n for n in lock.requirements if n not in direct)  # a transitive pin: nothing of sglang's constrains it
    planted = {
        free: [vuln("PYSEC-0000-1", ["999.0"], aliases=("CVE-0000-0001",)), vuln("PYSEC-0000-2", ["999.1"], "2026-01-01")],
        "torch": [vuln("GHSA-torch-0001", ["99.0"])],
        canonicalize_name(exact.name): [vuln("GHSA-exact-0001", ["999.0"])],
    }
    seen = []

    class Index(Handler):
        def do_GET(self):
            seen.append(self.path)
            parts = self.path.strip("/").split("/")  # pypi NAME VERSION json
            name = canonicalize_name(parts[1])
            self.reply(200, {"info": {"name": name, "version": parts[2]}, "urls": [],
                             "vulnerabilities": planted.get(name, [])})

    with serving(Index) as url:
        yield f"{url}/simple", planted, seen, free, exact


def test_each_advisory_is_named_with_its_fix_and_whether_the_stack_can_take_it(lock, requires, index):
    url, planted, seen, free, exact = index
    report = advisories.audit(lock, requires, url)
    assert report.pins == len(advisories.pins(lock)) == len(seen), "every pinned release is asked, once"
    assert f"/pypi/torch/{dict(advisories.pins(lock))['torch']}/json" in seen, "torch by its public version (no +cu130)"
    opened = {adv.id: take for adv, take in report.open}
    assert set(opened) == {"PYSEC-0000-1", "GHSA-torch-0001", "GHSA-exact-0001"}, "the withdrawn advisory is left out"
    assert opened["PYSEC-0000-1"].startswith("yes: 999.0 is allowed by sglang's requirements"), opened
    assert opened["GHSA-torch-0001"].startswith("no: versions.lock pins torch"), opened
    assert opened["GHSA-exact-0001"] == f"no: sglang {lock.sglang.version} requires {exact.name}{exact.specifier}", opened
    lines = report.lines()
    assert any(line.startswith(f"FAIL {free} ") and "PYSEC-0000-1 (CVE-0000-0001): fixed in 999.0" in line for line in lines)
    assert lines[-1] == f"advisories: {report.pins} pinned distributions asked; 3 open, 0 accepted, 0 stale exceptions"


def test_an_accepted_advisory_needs_a_reason_and_a_stale_one_is_said(lock, requires, index):
    url, planted, seen, free, exact = index
    accepted = dataclasses.replace(lock, data={**lock.data, "advisory": [
        {"id": "GHSA-torch-0001", "package": "torch", "reason": "the affected API is never called by SGLang's serving path"},
        {"id": "CVE-0000-0001", "package": free, "reason": "accepted by its alias: only the CLI of that package is affected"},
        {"id": "GHSA-gone-0001", "package": "torch", "reason": "an old exception for an advisory no pin has any more"},
    ]})
    report = advisories.audit(accepted, requires, url)
    assert [adv.id for adv, _ in report.open] == ["GHSA-exact-0001"]
    assert {adv.id for adv, _ in report.accepted} == {"GHSA-torch-0001", "PYSEC-0000-1"}
    assert report.stale == [f"{lock.path.name}: [[advisory]] GHSA-gone-0001 of torch: no pinned release has it any more; "
                            "drop the exception"]
    short = dataclasses.replace(lock, data={**lock.data, "advisory": [{"id": "X", "package": "torch", "reason": "ok"}]})
    with pytest.raises(UserError, match=r"advisory\[0\].reason: 'ok' does not say why"):
        advisories.audit(short, requires, url)


def test_an_index_without_advisory_data_is_one_line_not_a_clean_report(lock, requires, tmp_path):
    class Missing(Handler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

    with serving(Missing) as url:
        with pytest.raises(UserError, match=r"no release document \(404\), and the project's document speaks for no "
                                            r"release, not .*: the index serves no advisory data"):
            advisories.audit(lock, requires, f"{url}/simple")


def test_an_index_with_only_project_documents_answers_for_its_newest_releases(lock, requires):
    """A mirror that serves /pypi/NAME/json alone (`lock --check` falls back to it too): its advisories are the newest
    release's, so they count where that is the pin, and anything else is one line, not a clean report."""
    pins = dict(advisories.pins(lock))
    behind = sorted(pins)[0]  # one project whose newest release is not the pin

    def projects_only(newest: dict[str, str]):
        class Index(Handler):
            def do_GET(self):
                parts = self.path.strip("/").split("/")  # pypi NAME json; pypi NAME VERSION json answers 404
                if len(parts) != 3:
                    self.send_response(404)
                    self.end_headers()
                    return
                name = canonicalize_name(parts[1])
                self.reply(200, {"info": {"name": name, "version": newest[name]}, "releases": {},
                                 "vulnerabilities": [vuln("PYSEC-0000-9", ["999.0"])] if name == "torch" else []})
        return Index

    with serving(projects_only({**pins, behind: "0.0.1"})) as url:
        with pytest.raises(UserError, match=rf"/pypi/{behind}/.*no release document \(404\), and the project's "
                                            rf"document speaks for 0.0.1, not {pins[behind]}"):
            advisories.audit(lock, requires, f"{url}/simple")
    with serving(projects_only(pins)) as url:
        report = advisories.audit(lock, requires, f"{url}/simple")
    assert [adv.id for adv, _ in report.open] == ["PYSEC-0000-9"], report.lines()


@pytest.mark.parametrize("document, says", [
    ([], "not a PyPI release document"),
    ({"vulnerabilities": {}}, "not a PyPI release document"),
    ({"vulnerabilities": [{"fixed_in": ["1"]}]}, "an advisory without an id"),
])
def test_an_answer_of_another_shape_is_named(document, says):
    with pytest.raises(UserError, match=says):
        advisories.parse("pkg", "1.0", document)
