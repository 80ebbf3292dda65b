"""Which sha256 belong to which release: one small record per ``name==version``, cached.

requirements.lock.txt pins ``name==version`` with the sha256 of that release's files.
pip enforces those hashes only deep inside an image build, and a version edited by hand
keeps the old release's hashes: ``jinja2==3.1.5`` carrying 3.1.6's hashes looks fine
until pip downloads 3.1.5. ``check`` compares every hash with the release's own file
list, as PyPI's JSON API publishes it (``/pypi/NAME/VERSION/json``).

Each release's list is kept as a record under ``cache_dir()/releases``: a warm check
reads local files only (milliseconds, no network), a missing record is fetched once.
Records are written atomically, only from a complete answer of the index.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlparse

from sglang_stack.atomic import write as atomic_write
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import REQUIREMENTS_PATH, LockProblems
from sglang_stack.lock.pins import Pin, read_pins

DEFAULT_INDEX = "https://pypi.org/simple"
FETCH_THREADS = 8  # a cold check asks for ~160 small records; PyPI's CDN serves them in parallel
TIMEOUT_S = (5, 20)  # connect, read: an unreachable index fails in seconds


def records_dir() -> Path:
    from sglang_stack.download import cache_dir

    return cache_dir() / "releases"


def json_url(index: str, name: str, version: str = "") -> str:
    """PyPI's JSON API beside the simple index: ``.../simple`` -> ``.../pypi/NAME/VERSION/json``.

    Without ``version``: the project's document, ``.../pypi/NAME/json``.
    """
    base = index.rstrip("/").removesuffix("/simple")
    return f"{base}/pypi/{name}/{version}/json" if version else f"{base}/pypi/{name}/json"


def record_path(directory: Path, name: str, version: str) -> Path:
    return directory / name / f"{version}.json"


class Offline(Exception):
    """The index could not be reached; the message says how it failed."""


@dataclass
class Report:
    pins: int
    hashes: int
    cached: int
    fetched: int

    def line(self, name: str = REQUIREMENTS_PATH.name) -> str:
        source = f"{self.cached} release records cached" + (f", {self.fetched} fetched" if self.fetched else "")
        return f"{name}: ok: each of {self.pins} pins owns its {self.hashes} hashes ({source})"


def load_record(path: Path) -> dict[str, str] | None:
    """``{filename: sha256}`` of a cached release record; ``None`` if absent or unreadable."""
    try:
        record = json.loads(path.read_text())
        files = record["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return files if isinstance(files, dict) else None


def get_json(session, url: str):
    """The decoded JSON answer at ``url``; ``None`` on 404."""
    import requests

    try:
        resp = session.get(url, timeout=TIMEOUT_S)
    except requests.RequestException as err:
        raise Offline(f"{err.__class__.__name__} for {url}") from err
    if resp.status_code == 404:
        return None
    if resp.status_code != 200:
        raise Offline(f"HTTP {resp.status_code} for {url}")
    try:
        return resp.json()
    except ValueError as err:
        raise Offline(f"not JSON from {url}") from err


def fetch_record(session, index: str, pin: Pin, directory: Path) -> dict[str, str] | None:
    """Ask the index for ``pin``'s files and cache them; ``None`` if it has no such release.

    The release's own document first; where that answers 404 (some mirrors serve only
    the project document), the project's ``releases[VERSION]``.
    """
    url = json_url(index, pin.name, pin.version)
    answer = get_json(session, url)
    if answer is not None:
        entries = answer.get("urls") if isinstance(answer, dict) else None
    else:
        url = json_url(index, pin.name)
        project = get_json(session, url)
        releases = project.get("releases") if isinstance(project, dict) else None
        # Keyed as uploaded, not normalized: cuda-toolkit's 13.0.3 is what requirements pin as 13.0.3.0.
        key = next((k for k in releases or {} if _same_version(k, pin.version)), None) if isinstance(releases, dict) else None
        if key is None:
            return None
        entries = releases[key]
    try:
        files = {f["filename"]: f["digests"]["sha256"] for f in entries}
        # Where each file is and how big: `invoke size` reads a wheel's zip directory from there.
        urls = {f["filename"]: [urljoin(url, f["url"]), int(f["size"])] for f in entries if "url" in f and "size" in f}
    except (KeyError, TypeError, ValueError) as err:
        raise Offline(f"not a PyPI JSON answer from {url}") from err
    save_record(directory, pin.name, pin.version, url, files, urls)
    return files


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def save_record(directory: Path, name: str, version: str, source: str, files: dict[str, str],
                urls: dict[str, list] | None = None) -> None:
    """Keep ``{filename: sha256}`` of ``name==version`` (what ``source`` listed), and where each file is, for the next run."""
    record = {"name": name, "version": version, "source": source, "files": dict(sorted(files.items())),
              "urls": dict(sorted((urls or {}).items()))}
    atomic_write(record_path(directory, name, version), json.dumps(record, indent=1) + "\n")


def load_files(directory: Path, name: str, version: str) -> list[dict] | None:
    """A cached release's files as ``{filename, sha256, url, size}``; ``None`` where the record is missing or
    predates the kept URLs."""
    try:
        record = json.loads(record_path(directory, name, version).read_text())
        files, urls = record["files"], record["urls"]
        return [{"filename": f, "sha256": h, "url": urls[f][0], "size": urls[f][1]} for f, h in files.items() if f in urls]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def fetch_all(index: str, pins: list[Pin], directory: Path, what: str = "releases") -> dict[Pin, dict[str, str] | None]:
    """The one fetcher of release records: each missing one from the index's JSON API, in threads."""
    import requests

    from sglang_stack.download import ca_bundle

    if not pins:
        return {}
    records = "release record" if len(pins) == 1 else f"{len(pins)} release records"
    print(f"{what}: fetching {records} from {json_url(index, 'NAME', 'VERSION')}", file=sys.stderr, flush=True)
    with requests.Session() as session:
        session.verify = ca_bundle() or True
        # The first one alone: an offline host fails once, not once per record and thread.
        found = {pins[0]: fetch_record(session, index, pins[0], directory)}
        pool = ThreadPoolExecutor(max_workers=FETCH_THREADS)
        try:
            found.update(zip(pins[1:], pool.map(lambda pin: fetch_record(session, index, pin, directory), pins[1:])))
        finally:
            pool.shutdown(cancel_futures=True)
    return found


def _owner(directory: Path, pin: Pin, sha256: str) -> str:
    """`` (it is FILE of NAME VERSION)`` when a cached record of another release holds ``sha256``."""
    for path in sorted(directory.glob(f"{pin.name}/*.json")):
        files = load_record(path) or {}
        for filename, digest in files.items():
            if digest == sha256 and path.stem != pin.version:
                return f" (it is {filename} of {pin.name} {path.stem})"
    return ""


def check(requirements: Path = REQUIREMENTS_PATH, index: str = DEFAULT_INDEX, directory: Path | None = None,
          pins: tuple[Pin, ...] = ()) -> Report:
    """Every hash of every pin in ``requirements`` belongs to a file of that very release.

    ``pins``: the file's entries where a validated lock read them already. Cached records first; the missing ones
    are fetched from ``index``'s JSON API. Raises ``LockProblems`` naming each offending line, or a one-line
    ``UserError`` when records are missing and the index cannot be reached.
    """
    directory = directory or records_dir()
    problems: list[str] = []
    if not pins:
        pins = tuple(read_pins(requirements, problems))
        if problems:
            raise LockProblems(problems)
    records = {pin: load_record(record_path(directory, pin.name, pin.version)) for pin in pins}
    missing = [pin for pin, files in records.items() if files is None]
    if missing:
        try:
            records.update(fetch_all(index, missing, directory))
        except Offline as err:
            raise UserError(
                f"{requirements.name}: {len(missing)} of {len(pins)} release records are not cached in {directory} "
                f"and the index cannot be reached ({err}): run `invoke lock --check` once on a host that reaches "
                f"{urlparse(index).netloc}, or copy {directory} from one (SGLANG_STACK_CACHE moves it)"
            ) from None
    from sglang_stack.lock.profiles import display

    where = display(requirements)
    for pin in pins:
        files = records[pin]
        if files is None:
            problems.append(f"{where}:{pin.line}: {pin}: {json_url(index, pin.name, pin.version)} has no such release")
            continue
        owned = set(files.values())
        foreign = [sha256 for sha256 in pin.hashes if sha256 not in owned]
        if foreign:  # one line per pin: a wrong version carries dozens of foreign hashes
            n = len(foreign) - 1
            more = f" (and {n} more {'hash' if n == 1 else 'hashes'} like it)" if n else ""
            problems.append(
                f"{where}:{pin.line}: {pin}: hash sha256:{foreign[0]} belongs to no file of that release"
                f"{_owner(directory, pin, foreign[0])}{more}: run `invoke lock`"
            )
    if problems:
        raise LockProblems(problems)
    return Report(len(pins), sum(len(p.hashes) for p in pins), len(pins) - len(missing), len(missing))


def check_lock(lock, directory: Path | None = None) -> Report:
    """``check`` for the requirements.lock.txt beside a validated versions.lock, against its [resolve] index."""
    return check(lock.requirements_path, lock.data["resolve"]["index"], directory, lock.requirement_pins)


def check_line(lock, directory: Path | None = None) -> str:
    """``check_lock``'s one line, naming the profile's requirement lock as the user would."""
    from sglang_stack.lock.profiles import display

    return check_lock(lock, directory).line(display(lock.requirements_path))
