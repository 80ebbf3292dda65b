"""The image's size budget, from the lock, before any build; and, after one, how the built image compares.

Every figure has a source and a status:

- **measured**: a PyPI wheel's compressed size (PyPI's JSON API) and its unpacked size (the
  sum of the file sizes in the wheel's own zip central directory, read with HTTP range
  requests, a few KB per wheel). Which of a release's files counts is the one pip installs on
  the image (cp312, manylinux up to glibc 2.39, x86-64), chosen by packaging's tag order.
- **proxy**: a URL wheel measured through the PyPI build of the same release (the pinned torch's release on
  PyPI is the CUDA 12.8 build of the same code; its CUDA libraries are separate wheels either way).
- **published** / **estimate**: a figure recorded in versions.lock ([cuda.base], [size], [[wheel]]).

pip compiles every ``.py`` it installs; the ``.pyc`` it writes add ``PYC_FACTOR`` of the source
bytes (measured on transformers, sympy, numpy, pydantic and fastapi: 1.38). Compressed layer
sizes are the wheels' own deflate sizes plus the ``.pyc`` at ``PYC_COMPRESSED``.

Figures are cached per file hash in ``~/.cache/sglang-stack/sizes`` (``$SGLANG_STACK_CACHE``).
"""

from __future__ import annotations

import io
import json
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from sglang_stack.atomic import write as atomic_write
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.download import fetch
from sglang_stack.lock.lockfile import Lock
from sglang_stack.lock.pins import Pin, read_pins

PYC_FACTOR = 1.38
PYC_COMPRESSED = 0.30
GB = 1e9


@dataclass
class Item:
    """One package (or other piece) of a layer."""

    name: str
    unpacked: int
    compressed: int
    status: str


@dataclass
class Layer:
    stage: str
    what: str  # a short description; `compare` matches it against the built image's history
    match: str  # a path or word of the layer's instruction in the built image's history
    items: list[Item] = field(default_factory=list)

    @property
    def unpacked(self) -> int:
        return sum(i.unpacked for i in self.items)

    @property
    def compressed(self) -> int:
        return sum(i.compressed for i in self.items)

    @property
    def status(self) -> str:
        kinds = sorted({i.status for i in self.items})
        return "/".join(kinds) if kinds else "-"


# --- where the figures come from --------------------------------------------------------------


def image_tags(python: str, glibc: tuple[int, int] = (2, 39), machine: str = "x86_64") -> list[Tag]:
    """The wheel tags the image's pip accepts, best first (cp312, manylinux <= glibc, x86-64 or aarch64)."""
    major, minor = (int(x) for x in python.split("."))
    platforms = [f"manylinux_{glibc[0]}_{m}_{machine}" for m in range(glibc[1], 4, -1)]
    platforms += [f"manylinux2014_{machine}"]
    if machine == "x86_64":
        platforms += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    platforms += [f"linux_{machine}"]
    return list(cpython_tags((major, minor), platforms=platforms)) + list(compatible_tags((major, minor), platforms=platforms))


def pick(files: list[dict], tags: list[Tag]) -> dict | None:
    """The file pip would install among a release's files (each with ``filename``)."""
    rank = {tag: i for i, tag in enumerate(tags)}
    best = None
    for entry in files:
        if not entry["filename"].endswith(".whl"):
            continue
        _, _, _, file_tags = parse_wheel_filename(entry["filename"])
        score = min((rank[t] for t in file_tags if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, entry)
    return best[1] if best else None


class RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests: enough for zipfile to read a central directory."""

    def __init__(self, session, url: str, size: int):
        self.session, self.url, self.size, self.pos = session, url, size, 0
        self.requests = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        resp = self.session.get(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"}, timeout=(5, 60))
        self.requests += 1
        if resp.status_code != 206:
            raise OSError(f"HTTP {resp.status_code} for a range of {self.url} (the server must answer range requests)")
        self.pos += len(resp.content)
        return resp.content


def cache_dir() -> Path:
    from sglang_stack.download import cache_dir as base

    return base() / "sizes"


def measure(session, url: str, size: int, sha256: str) -> dict:
    """{compressed, unpacked, py} of a wheel: from the cache, or from its central directory."""
    cached = cache_dir() / f"{sha256}.json"
    try:
        record = json.loads(cached.read_text())
        if "files" in record:
            return record
    except (OSError, ValueError):
        pass
    with zipfile.ZipFile(RangeFile(session, url, size)) as zf:
        infos = zf.infolist()
    record = {"url": url, "compressed": size, "unpacked": sum(i.file_size for i in infos),
              "py": sum(i.file_size for i in infos if i.filename.endswith(".py")),
              # Every file and its size: what the build's slim step removes is subtracted without asking again.
              "files": [[i.filename, i.file_size] for i in infos if not i.is_dir()]}
    atomic_write(cached, json.dumps(record) + "\n")
    return record


def _glob_regex(glob: str) -> re.Pattern:
    """A pathlib-style glob (``*`` within a name, ``**`` any number of directories) as a regex over posix paths."""
    out = ""
    for part in glob.split("/"):
        out += "(?:[^/]+/)*" if part == "**" else re.escape(part).replace(r"\*", "[^/]*") + "/"
    return re.compile(out.rstrip("/"))


def slim_entries(path: Path | None = None, archs: list[str] | None = None) -> list[dict]:
    """docker/slim.toml's removals: what the image's install steps delete after pip installs, for an image of the
    GPU architectures ``archs`` (its ``arch:`` entries apply only to a list that leaves their GPUs out)."""
    import tomllib

    from sglang_stack import ROOT
    from sglang_stack.image.steps.slim import ARCH, unused_here

    entries = tomllib.loads((path or ROOT / "docker" / "slim.toml").read_text()).get("remove", [])
    return [e for e in entries if not ARCH.fullmatch(e["evidence"]) or unused_here(e["evidence"], archs or [])]


def slimmed(files: list[list], entries: list[dict]) -> tuple[int, int]:
    """(bytes, .py bytes) of ``files`` that a slim entry removes: the path, or a directory above it, matches."""
    rules = [(_glob_regex(e["glob"]), set(e.get("keep", ()))) for e in entries]
    gone = py = 0
    for name, size in files:
        parts = name.split("/")
        prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
        if any(any(rx.fullmatch(p) and p not in keep and not any(p2 in keep for p2 in prefixes[:k]) for k, p in enumerate(prefixes))
               for rx, keep in rules):
            gone += size
            py += size if name.endswith(".py") else 0
    return gone, py


def _pin(name: str, version: str) -> Pin:
    from packaging.utils import canonicalize_name

    return Pin(0, canonicalize_name(name), version, ())


def cached_entry(name: str, version: str, hashes: tuple[str, ...] | None, tags: list[Tag]) -> dict | None:
    """The file pip would pick for ``name==version`` (``{filename, sha256, url, size}``), from its cached release
    record; None where the record is not cached yet."""
    from sglang_stack.lock import releases

    files = releases.load_files(releases.records_dir(), name, version)
    if files is None:
        return None
    entry = pick([f for f in files if not hashes or f["sha256"] in hashes], tags)
    if entry is None:
        raise UserError(f"{name} {version}: no wheel for the image's platform among the files of that release")
    return entry


def locate(index: str, name: str, version: str, hashes: tuple[str, ...] | None, tags: list[Tag]) -> dict:
    """:func:`cached_entry`, fetching the release's record once (the one fetcher, ``releases.fetch_all``) if needed."""
    from sglang_stack.lock import releases

    entry = cached_entry(name, version, hashes, tags)
    if entry is None:
        try:
            releases.fetch_all(index, [_pin(name, version)], releases.records_dir(), what="size")
        except releases.Offline as err:
            raise UserError(f"{name} {version}: the index cannot be reached ({err}): `invoke size` needs PyPI once, "
                            "then it is cached") from None
        entry = cached_entry(name, version, hashes, tags)
    if entry is None:
        raise UserError(f"{name} {version}: {index} has no such release")
    return entry


def _cached_figures(entry: dict) -> dict | None:
    try:
        record = json.loads((cache_dir() / f"{entry['sha256']}.json").read_text())
    except (OSError, ValueError):
        return None
    return record if "files" in record else None


def prefetch(session, index: str, wanted: list[tuple[str, str, tuple[str, ...] | None]], tags: list[Tag]) -> None:
    """Make a cold budget warm in one go: every missing release record, then every missing wheel's figures,
    each in threads, with a progress line; a warm budget passes through without a request."""
    from concurrent.futures import ThreadPoolExecutor

    from sglang_stack.lock import releases

    missing = [_pin(n, v) for n, v, _ in wanted if releases.load_files(releases.records_dir(), n, v) is None]
    try:
        releases.fetch_all(index, missing, releases.records_dir(), what="size")
    except releases.Offline as err:
        raise UserError(f"{len(missing)} release records are not cached and the index cannot be reached ({err}): "
                        "`invoke size` needs PyPI once, then it is cached") from None
    entries = [e for n, v, h in wanted if (e := cached_entry(n, v, h, tags)) is not None]
    todo = [e for e in entries if _cached_figures(e) is None]
    if not todo:
        return
    print(f"size: reading the zip directories of {len(todo)} wheels (range requests, a few KB each; cached after)",
          file=sys.stderr, flush=True)
    done = 0
    with ThreadPoolExecutor(max_workers=releases.FETCH_THREADS) as pool:
        for _ in pool.map(lambda e: measure(session, e["url"], e["size"], e["sha256"]), todo):
            done += 1
            if done % 25 == 0 or done == len(todo):
                print(f"size: {done}/{len(todo)} wheels measured", file=sys.stderr, flush=True)


def wheel_item(session, index: str, name: str, version: str, hashes: tuple[str, ...] | None, tags: list[Tag], status: str,
               slim: list[dict] | None = None) -> Item:
    """One wheel's budget: its files unpacked, less what ``slim`` (docker/slim.toml) removes, plus its .pyc."""
    entry = locate(index, name, version, hashes, tags)
    record = _cached_figures(entry) or measure(session, entry["url"], entry["size"], entry["sha256"])
    gone, gone_py = slimmed(record["files"], slim) if slim else (0, 0)
    pyc = int((record["py"] - gone_py) * PYC_FACTOR)
    return Item(name, record["unpacked"] - gone + pyc, record["compressed"] + int(pyc * PYC_COMPRESSED), status)


def recorded(name: str, table: dict) -> Item:
    return Item(name, int(table["unpacked"]), int(table["size"]), table.get("size_status", "estimate"))


# --- the budget -----------------------------------------------------------------------------------


def budget(lock: Lock, target: str = "runtime", *, jit_cache: bool = False, aot: bool = True, apt: bool = True,
           archs: list[str] | None = None) -> list[Layer]:
    """The layers of ``target`` (runtime, sglang or router) with their items.

    ``aot=False``: a build with an empty FLASHINFER_CUDA_ARCH_LIST, which builds no module ahead of time.
    ``apt=False``: leave out the apt layers, budgeted from Ubuntu 24.04's packages, for a build on another distribution.
    ``archs``: the image's GPU architectures (``invoke build --cuda-arch-list``); what loads only on others is left out.
    """
    import requests

    session = requests.Session()
    index = lock.data["resolve"]["index"]
    sizes = lock.data.get("size", {})
    if target == "router":
        tags = image_tags(lock.router_table["python"], (2, 36))
        prefetch(session, index, [(lock.router.name, lock.router.version, (lock.router.sha256,))]
                 + [(p.name, p.version, p.hashes) for p in read_pins(lock.path.with_name("requirements.router.lock.txt"), [])], tags)
        base = Layer("router", f"base {lock.router_table['base']['tag']}", "", [recorded("base image", lock.router_table["base"])])
        router = Layer("router", "sglang-router and requirements.router.lock.txt", "requirements.router.lock.txt")
        router.items.append(wheel_item(session, index, lock.router.name, lock.router.version, (lock.router.sha256,), tags, "measured"))
        for pin in read_pins(lock.path.with_name("requirements.router.lock.txt"), []):
            router.items.append(wheel_item(session, index, pin.name, pin.version, pin.hashes, tags, "measured"))
        return [base, router]
    tags = image_tags(lock.python["version"], machine=lock.marker_env()["platform_machine"])
    slim = slim_entries(archs=archs if archs is not None else lock.jit["arch_list"].split())
    proxies = sizes.get("proxy", {})
    prefetch(session, index, [("sglang", lock.sglang.version, (lock.sglang.sha256,))]
             + [(w.name, proxies[w.name], None) for w in lock.default_wheels if w.name in proxies]
             + [(pin.name, pin.version, pin.hashes) for pin in read_pins(lock.requirements_path, [])], tags)
    sglang = Layer("sglang", f"sglang {lock.sglang.version} (patched, compiled)", "/opt/sglang",
                   [wheel_item(session, index, "sglang", lock.sglang.version, (lock.sglang.sha256,), tags, "measured")])
    if target == "sglang":
        return [sglang]
    layers = [Layer("base", f"base {lock.cuda['base']['tag']}", "", [recorded("base image", lock.cuda["base"])])]
    if apt:
        layers.append(Layer("base", "apt: python3, python3-dev, build-essential, patch, libnuma1", "apt-get install",
                            [recorded("apt packages", sizes["apt_base"])]))
        layers.append(Layer("deps", "apt: RDMA userspace", "ibverbs-providers", [recorded("rdma", sizes["apt_rdma"])]))
    url_wheels = Layer("deps", "URL wheels (torch, torchvision, sgl-kernel)", "/tmp/url-wheels.txt")
    for wheel in lock.default_wheels:
        proxy = sizes.get("proxy", {}).get(wheel.name)
        if proxy:
            item = wheel_item(session, index, wheel.name, proxy, None, tags, "proxy", slim)
            item.name = f"{wheel.name} (as PyPI's {proxy})"
            url_wheels.items.append(item)
        else:
            url_wheels.items.append(recorded(wheel.name, sizes["wheel"][wheel.name]))
    if url_wheels.items:
        layers.append(url_wheels)
    if jit_cache:
        layers.append(Layer("deps", "flashinfer-jit-cache (--flashinfer-jit-cache)", "/tmp/flashinfer-jit-cache.txt",
                            [recorded("flashinfer-jit-cache", sizes["wheel"]["flashinfer-jit-cache"])]))
    pypi = Layer("deps", lock.requirements_path.name, "requirements.lock.txt")
    for pin in read_pins(lock.requirements_path, []):
        pypi.items.append(wheel_item(session, index, pin.name, pin.version, pin.hashes, tags, "measured", slim))
    layers.append(pypi)
    if aot:
        layers.append(Layer("deps", "FlashInfer modules built ahead of time", "sglang_stack.image.steps.aot",
                            [recorded("flashinfer aot", sizes["flashinfer_aot"])]))
    layers.append(Layer("runtime", sglang.what, sglang.match, sglang.items))
    return layers


def report(layers: list[Layer], target: str, top: int = 12) -> list[str]:
    out = [f"{'stage':8} {'layer':52} {'on disk':>9} {'compressed':>10}  status"]
    for layer in layers:
        out.append(f"{layer.stage:8} {layer.what[:52]:52} {layer.unpacked / GB:8.2f}G {layer.compressed / GB:9.2f}G  {layer.status}")
        if len(layer.items) > 1:
            items = sorted(layer.items, key=lambda i: -i.unpacked)
            for item in items[:top]:
                out.append(f"{'':8}   {item.name[:49]:49} {item.unpacked / GB:8.3f}G {item.compressed / GB:9.3f}G  {item.status}")
            rest = items[top:]
            if rest:
                out.append(f"{'':8}   {f'{len(rest)} more':49} {sum(i.unpacked for i in rest) / GB:8.3f}G "
                           f"{sum(i.compressed for i in rest) / GB:9.3f}G")
    return out


def total_line(layers: list[Layer], target: str) -> str:
    unpacked, compressed = sum(layer.unpacked for layer in layers), sum(layer.compressed for layer in layers)
    return f"{target}: {unpacked / GB:.2f} GB on disk, {compressed / GB:.2f} GB compressed (budget from the lock)"


# --- against a built image ----------------------------------------------------------------------------


def built_layers(engine: Engine, image: str) -> list[tuple[str, int]]:
    """(instruction, bytes) per layer of a built image, oldest first, from the engine's history."""
    from sglang_stack.shell import run

    proc = run([engine.runner, "history", "--no-trunc", "--format", "{{json .}}", image], capture=True,
               what=f"{engine.runner} history")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    out = []
    for row in reversed(rows):
        size = row.get("Size", 0)
        out.append((row.get("CreatedBy", ""), size if isinstance(size, int) else parse_size(str(size))))
    return out


def parse_size(text: str) -> int:
    units = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * units[unit])
    return int(float(text or 0))


def compare(layers: list[Layer], built: list[tuple[str, int]], margin: float = 0.15) -> tuple[list[str], int]:
    """One line per budgeted layer against the built layer whose instruction matches; (lines, layers off)."""
    lines, off = [], 0
    for layer in layers:
        if not layer.match:
            lines.append(f"skip {layer.what}: the base image is whatever the build used")
            continue
        # A path or word of the instruction, never the prefix of a longer one: /opt/sglang is not /opt/sglang-stack/...
        token = re.compile(re.escape(layer.match) + r"(?![\w.-])")
        hits = [size for created, size in built if token.search(created)]
        if not hits:
            lines.append(f"skip {layer.what}: no layer of the built image runs {layer.match!r}")
            continue
        got = max(hits)
        ratio = got / layer.unpacked if layer.unpacked else float("inf")
        bad = abs(ratio - 1) > margin
        off += bad
        lines.append(f"{'OFF ' if bad else 'ok  '}{layer.what}: budget {layer.unpacked / 1e6:.1f} MB, built {got / 1e6:.1f} MB "
                     f"({(ratio - 1) * 100:+.0f}%; margin {margin * 100:.0f}%)")
    return lines, off


def locked_wheel(name: str, requirements: Path | None = None) -> Path:
    """The image platform's wheel of ``name`` at its version in ``requirements`` (default: the root's
    requirements.lock.txt), fetched and hash-checked."""
    from sglang_stack.lock.lockfile import REQUIREMENTS_PATH

    requirements = requirements or REQUIREMENTS_PATH
    problems: list[str] = []
    pin = next((p for p in read_pins(requirements, problems) if p.name == name), None)
    if pin is None:
        raise UserError(f"{requirements.name}: no pin of {name}")
    entry = locate("https://pypi.org/simple", name, pin.version, pin.hashes, image_tags("3.12"))
    return fetch(entry["url"], entry["sha256"])
