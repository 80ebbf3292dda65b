"""Every pinned name==version owns its hashes: checked against a loopback index that speaks PyPI's JSON API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sglang_stack.errors import UserError
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock import pins
from sglang_stack.lock import releases

H = {name: name[0] * 64 for name in ("a", "b", "c", "d", "e", "f")}  # sha256-shaped, one letter each
# What the index publishes: name -> version -> {filename: sha256}
PUBLISHED = {
    "jinja2": {
        "9.1.5": {"jinja2-9.1.5-py3-none-any.whl": H["a"], "jinja2-9.1.5.tar.gz": H["b"]},
        "9.1.6": {"jinja2-9.1.6-py3-none-any.whl": H["c"], "jinja2-9.1.6.tar.gz": H["d"]},
    },
    "filelock": {"9.24.3": {"filelock-9.24.3-py3-none-any.whl": H["e"]}},
}


class PyPI:
    """``/pypi/NAME/VERSION/json`` and ``/pypi/NAME/json`` for ``PUBLISHED``, on loopback; counts requests."""

    def __init__(self, per_version: bool = True):
        self.requests: list[str] = []
        self.per_version = per_version
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                index.requests.append(self.path)
                parts = self.path.strip("/").split("/")  # pypi NAME [VERSION] json
                body = None
                if len(parts) == 4 and index.per_version and parts[2] in PUBLISHED.get(parts[1], {}):
                    body = {"urls": index.files(parts[1], parts[2])}
                elif len(parts) == 3 and parts[1] in PUBLISHED:
                    body = {"releases": {v: index.files(parts[1], v) for v in PUBLISHED[parts[1]]}}
                data = json.dumps(body).encode() if body else b"{}"
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @staticmethod
    def files(name: str, version: str) -> list[dict]:
        return [{"filename": f, "digests": {"sha256": h, "md5": "0" * 32}} for f, h in PUBLISHED[name][version].items()]

    @property
    def index(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/simple"

    def __enter__(self) -> "PyPI":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def requirements(tmp_path: Path, jinja2: str = "9.1.6", hashes: tuple[str, ...] = (H["c"], H["d"])) -> Path:
    lines = [pins.REQUIREMENTS_HEADER, "#"]
    lines += ["filelock==9.24.3 \\", f"    --hash=sha256:{H['e']}", "    # via jinja2"]
    lines += [f"jinja2=={jinja2} \\"] + [f"    --hash=sha256:{h} \\" for h in hashes[:-1]] + [f"    --hash=sha256:{hashes[-1]}"]
    path = tmp_path / "requirements.lock.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cold_check_fetches_each_release_once_then_runs_offline(tmp_path):
    path, cache = requirements(tmp_path), tmp_path / "cache"
    with PyPI() as pypi:
        cold = releases.check(path, pypi.index, cache)
        asked = list(pypi.requests)
    assert sorted(asked) == ["/pypi/filelock/9.24.3/json", "/pypi/jinja2/9.1.6/json"], f"one request per pin: {asked}"
    assert (cold.pins, cold.hashes, cold.cached, cold.fetched) == (2, 3, 0, 2), f"cold report: {cold}"
    # The index is gone now: a warm check must not need it.
    warm = releases.check(path, pypi.index, cache)
    assert (warm.cached, warm.fetched) == (2, 0), f"warm report: {warm}"
    assert warm.line() == "requirements.lock.txt: ok: each of 2 pins owns its 3 hashes (2 release records cached)"


def test_version_edited_against_foreign_hashes_names_the_line(tmp_path):
    path, cache = requirements(tmp_path), tmp_path / "cache"
    with PyPI() as pypi:
        releases.check(path, pypi.index, cache)  # 9.1.6 is known, as after a clean `invoke lock --check`
        edited = requirements(tmp_path, jinja2="9.1.5")  # a hand edit: 9.1.6's hashes stay
        with pytest.raises(lockmod.LockProblems) as info:
            releases.check(edited, pypi.index, cache)
    problems = info.value.problems
    assert len(problems) == 1, f"one line per wrong pin, not one per hash: {problems}"
    assert problems[0].startswith(f"requirements.lock.txt:6: jinja2==9.1.5: hash sha256:{H['c']} belongs to no file of that release"), problems[0]
    assert "(it is jinja2-9.1.6-py3-none-any.whl of jinja2 9.1.6)" in problems[0], f"the owner is named: {problems[0]}"
    assert "and 1 more hash like it" in problems[0] and problems[0].endswith("run `invoke lock`"), problems[0]


def test_one_foreign_hash_among_right_ones(tmp_path):
    path = requirements(tmp_path, hashes=(H["c"], H["f"]))
    with PyPI() as pypi, pytest.raises(lockmod.LockProblems) as info:
        releases.check(path, pypi.index, tmp_path / "cache")
    assert info.value.problems == [
        f"requirements.lock.txt:6: jinja2==9.1.6: hash sha256:{H['f']} belongs to no file of that release: run `invoke lock`"
    ], info.value.problems


def test_unknown_release_is_named(tmp_path):
    path = requirements(tmp_path, jinja2="9.9.9")
    with PyPI() as pypi, pytest.raises(lockmod.LockProblems) as info:
        releases.check(path, pypi.index, tmp_path / "cache")
    [problem] = info.value.problems
    assert problem.startswith("requirements.lock.txt:6: jinja2==9.9.9: http://127.0.0.1:"), problem
    assert problem.endswith("/pypi/jinja2/9.9.9/json has no such release"), problem


def test_index_without_per_release_documents_falls_back_to_the_project(tmp_path):
    path, cache = requirements(tmp_path), tmp_path / "cache"
    with PyPI(per_version=False) as pypi:
        report = releases.check(path, pypi.index, cache)
    assert report.fetched == 2, f"both records fetched through the project documents: {pypi.requests}"
    record = json.loads((cache / "jinja2" / "9.1.6.json").read_text())
    assert record["files"] == PUBLISHED["jinja2"]["9.1.6"], f"only 9.1.6's files are recorded: {record}"
    assert record["source"].endswith("/pypi/jinja2/json"), record["source"]


def test_cold_and_offline_is_one_line_naming_the_fix(tmp_path):
    path = requirements(tmp_path)
    with PyPI() as pypi:
        index = pypi.index  # the port is closed once the server stops
    with pytest.raises(UserError) as info:
        releases.check(path, index, tmp_path / "cache")
    message = str(info.value)
    assert "\n" not in message, f"one line: {message!r}"
    assert message.startswith("requirements.lock.txt: 2 of 2 release records are not cached in "), message
    assert "run `invoke lock --check` once on a host that reaches 127.0.0.1:" in message, message
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json")), "no record from a failed fetch"


def test_broken_cached_record_is_fetched_again(tmp_path):
    path, cache = requirements(tmp_path), tmp_path / "cache"
    (cache / "jinja2").mkdir(parents=True)
    (cache / "jinja2" / "9.1.6.json").write_text('{"files": ')  # an interrupted copy of the cache
    with PyPI() as pypi:
        report = releases.check(path, pypi.index, cache)
    assert report.fetched == 2 and "/pypi/jinja2/9.1.6/json" in pypi.requests, f"the broken record was trusted: {pypi.requests}"


def test_json_url_sits_beside_the_simple_index():
    assert releases.json_url("https://pypi.org/simple", "jinja2", "9.1.6") == "https://pypi.org/pypi/jinja2/9.1.6/json"
    assert releases.json_url("https://pypi.org/simple/", "jinja2") == "https://pypi.org/pypi/jinja2/json"
