"""A verified local mirror of what a build downloads, for builds with no network.

``invoke fetch`` fills the project's ``mirror/`` directory (the build context holds it, so
every engine can mount it into a RUN step), and ``invoke build --mirror`` builds from it
with the build's network off:

    mirror/wheels/         every wheel: PyPI's (from the requirements files) and versions.lock's URL wheels
    mirror/images/         the base images, as archives the engine saved (docker-archive)
    mirror/manifest.json   each file's sha256, size and source, and the hashes of the lock files it serves

A file stays only if its sha256 is one the lock allows: a download whose hash differs is
deleted and named (a URL wheel re-uploaded upstream under the same name), and a wheel an
earlier fetch recorded that no pin of the lock allows any more is removed, each named before it
goes. A file the mirror never recorded is never deleted: it is left, and said. A second run
keeps what is already good (resuming an interrupted one) and writes the manifest last,
atomically; two runs on one mirror take turns (a lock file), so neither deletes the other's
downloads in progress.

The mirror is sealed: its folders are plain directories (a symlink out is refused), every path
the manifest names stays inside it, each base-image archive is hashed when saved and checked
before a build loads it, and an image in the store under the mirror's name is used only when it
is the image the archive recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sglang_stack import ROOT
from sglang_stack.atomic import write as atomic_write
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import Lock, _key
from sglang_stack.lock.pins import read_pins

MIRROR = ROOT / "mirror"
MANIFEST = "manifest.json"
SCHEMA = 1
TARGETS = ("all", "runtime", "deps", "sglang", "base", "router")
# The lock files a mirror serves: a change to any of them makes the mirror stale.
LOCK_FILES = ("versions.lock", "requirements.lock.txt", "requirements.router.lock.txt")


@dataclass(frozen=True)
class PyPISet:
    """One requirements file, downloaded for the interpreter and platform it was resolved for."""

    path: Path
    python: str  # "3.12"
    platform: str  # uv's form, "x86_64-manylinux_2_39"

    def pip_platforms(self) -> list[str]:
        """Every platform tag the target interpreter accepts, best first: pip takes ``--platform`` literally
        (manylinux_2_39 does not admit a manylinux_2_17 wheel), so spell out each glibc down to 2.5."""
        arch, _, libc = self.platform.partition("-")
        major, minor = (int(x) for x in libc.removeprefix("manylinux_").split("_"))
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        out = []
        for m in range(minor, 4, -1):
            out.append(f"manylinux_{major}_{m}_{arch}")
            if m in legacy:
                out.append(f"{legacy[m]}_{arch}")
        return out


@dataclass
class Plan:
    """What one target's build downloads: URL wheels, PyPI sets and base images (ARG -> reference)."""

    urls: list = field(default_factory=list)
    pypi: list[PyPISet] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)


def plan(lock: Lock, target: str, images: dict[str, str], optional: bool = False) -> Plan:
    """The artifacts ``target``'s build downloads; ``images`` are its base images (see build.base_images)."""
    if target not in TARGETS:
        raise UserError(f"--target {target!r}: choose one of {', '.join(TARGETS)}")
    stages = {"all": ("deps", "sglang", "router"), "runtime": ("deps", "sglang")}.get(target, (target,))
    out = Plan(images=dict(images))
    root = lock.path.parent
    if "deps" in stages:
        out.urls += [w for w in lock.wheels if optional or not w.optional]
        out.pypi.append(PyPISet(root / "requirements.lock.txt", lock.python["version"], lock.data["resolve"]["python_platform"]))
    if "sglang" in stages:
        out.urls.append(lock.sglang)
    if "router" in stages:
        out.urls.append(lock.router)
        out.pypi.append(PyPISet(root / "requirements.router.lock.txt", lock.router_table["python"], lock.router_table["python_platform"]))
    if stages != ("base",):
        out.urls += list(lock.build_tools)  # the binary audit's ELF reader and the SBOM generator
    return out


def allowed(lock: Lock) -> dict[str, str]:
    """sha256 -> what it is, for every wheel any target of this lock installs."""
    out = {}
    problems: list[str] = []
    root = lock.path.parent
    for name in ("requirements.lock.txt", "requirements.router.lock.txt"):
        for pin in read_pins(root / name, problems):
            for digest in pin.hashes:
                out[digest] = f"{pin.name}=={pin.version} ({name})"
    for art in (lock.sglang, *lock.wheels, lock.router, *lock.build_tools):
        out[art.sha256] = f"{_key(lock, art)} ({lock.path.name})"
    return out


def lock_hashes(lock: Lock) -> dict[str, str]:
    root = lock.path.parent
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in LOCK_FILES}


def _hash(path: Path, known: dict) -> str:
    """A file's sha256, reusing the manifest's when its size and mtime are unchanged (a resumed run)."""
    from sglang_stack.download import sha256_of

    st = path.stat()
    entry = known.get(path.name)
    if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
        return entry["sha256"]
    return sha256_of(path)


SHA256 = re.compile(r"[0-9a-f]{64}")
MANIFEST_LIMIT = 16 << 20  # a manifest lists a few hundred files: anything this large is not one


def sealed(mirror: Path) -> None:
    """The mirror and its folders are plain directories of their own: a symlink would let a fetch
    write, or prune, outside it."""
    for path in (mirror, mirror / "wheels", mirror / "images"):
        if path.is_symlink():
            raise UserError(f"{path}: is a symbolic link (to {os.readlink(path)}): the mirror must be a plain "
                            "directory, so nothing outside it is written or deleted; replace the link with a directory")


def _inside(mirror: Path, rel: object, where: str) -> str:
    """``rel`` as a path inside ``mirror``: relative, no ``..``, not through a symlink out."""
    if not isinstance(rel, str) or not rel:
        raise UserError(f"{where}: path {rel!r} is not a relative file name")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or "\\" in rel or "\0" in rel:
        raise UserError(f"{where}: path {rel!r} leaves the mirror: only names inside it are allowed")
    resolved = (mirror / rel).resolve()
    if not resolved.is_relative_to(mirror.resolve()):
        raise UserError(f"{where}: path {rel!r} leads outside the mirror (to {resolved})")
    return rel


def read_manifest(mirror: Path) -> dict:
    """manifest.json, checked whole: its shape, every hash, and every path inside the mirror."""
    path = mirror / MANIFEST
    if not path.is_file():
        return {}
    if path.stat().st_size > MANIFEST_LIMIT:
        raise UserError(f"{path}: {path.stat().st_size} bytes, more than a manifest ever holds "
                        f"({MANIFEST_LIMIT >> 20} MiB): delete it and run `invoke fetch` again")
    if path.is_symlink():
        raise UserError(f"{path}: a link: the mirror's manifest is a file of the mirror itself; delete it and run "
                        "`invoke fetch` again")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid JSON ({err}): delete it and run `invoke fetch` again") from None
    except RecursionError:
        raise UserError(f"{path}: nested deeper than any manifest is: delete it and run `invoke fetch` again") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{path}: not a manifest of schema {SCHEMA}: delete it and run `invoke fetch` again")
    fix = "delete it and run `invoke fetch` again"
    if not isinstance(data.get("lock"), dict) or not isinstance(data.get("targets"), list):
        raise UserError(f"{path}: 'lock' and 'targets' must be a mapping and a list: {fix}")
    for key, fields in (("files", ("path", "sha256", "size")), ("images", ("arg", "ref", "path", "size"))):
        entries = data.get(key)
        if not isinstance(entries, list):
            raise UserError(f"{path}: {key!r} must be a list: {fix}")
        for i, entry in enumerate(entries):
            where = f"{path}: {key}[{i}]"
            if not isinstance(entry, dict) or any(f not in entry for f in fields):
                raise UserError(f"{where}: needs {', '.join(fields)}: {fix}")
            _inside(mirror, entry["path"], where)
            if not isinstance(entry["size"], int) or isinstance(entry["size"], bool) or entry["size"] < 0:
                raise UserError(f"{where}: size {entry['size']!r} is not a byte count: {fix}")
            digest = entry.get("sha256")
            if (key == "files" or digest is not None) and not (isinstance(digest, str) and SHA256.fullmatch(digest)):
                raise UserError(f"{where}: sha256 {digest!r} is not a sha256: {fix}")
    return data


@contextlib.contextmanager
def locked(mirror: Path):
    """One fetch at a time per mirror: a second waits, and says so, instead of deleting the first's downloads."""
    import fcntl

    mirror.mkdir(parents=True, exist_ok=True)
    # Never through a link: O_NOFOLLOW refuses one, so the lock file is created in the mirror and nowhere else.
    try:
        fd = os.open(mirror / ".fetch.lock", os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise UserError(f"{mirror / '.fetch.lock'}: {err.strerror}: a link or something else that is not the mirror's "
                        "lock file; remove it") from None
    with os.fdopen(fd, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"fetch: another invoke fetch is filling {mirror}: waiting for it to finish", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pip_download(wanted: PyPISet, wheels: Path) -> list[str]:
    """``pip download`` one hashed set for its interpreter; returns the pins whose hash PyPI no longer matches."""
    import re
    import subprocess

    from sglang_stack.shell import show

    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
            "--disable-pip-version-check", "--progress-bar", "off",
            *[x for tag in wanted.pip_platforms() for x in ("--platform", tag)], "--implementation", "cp", "--python-version", wanted.python, "--dest", str(wheels), "-r", str(wanted.path)]
    show(argv)
    proc = subprocess.run(argv, text=True, capture_output=True)
    sys.stderr.write(proc.stdout[-4000:])
    if proc.returncode == 0:
        return []
    # pip's hash report: "    NAME==VERSION from URL:" then "Expected sha256 ..." / "Got ...".
    changed = re.findall(r"^\s+(\S+==\S+) from (\S+):\n\s+Expected sha256 (\w+)\n\s+Got\s+(\w+)", proc.stderr, re.M)
    if changed:
        return [f"{req}: {url.rsplit('/', 1)[-1]} has sha256 {got}, the lock allows {want}" for req, url, want, got in changed]
    tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
    raise UserError(f"pip download -r {wanted.path.name} failed: {tail}")


def local_name(arg: str, ref: str) -> str:
    """The name a base image has inside its archive, and in the store after ``load``: a loaded archive
    keeps no registry digest, so a build from the mirror starts FROM this name instead of ``ref``."""
    return f"localhost/sglang-stack-mirror/{arg.lower().replace('_', '-')}:{hashlib.sha256(ref.encode()).hexdigest()[:16]}"


def _save_image(engine: Engine, arg: str, ref: str, dest: Path) -> None:
    """Save one base image as a docker-archive named ``local_name``, pulling it first if the store lacks it."""
    from sglang_stack.image import store
    from sglang_stack.shell import CommandFailed, run, stream

    cli = engine.name  # each of the three pulls; buildah alone has no save or load (it pushes and pulls archives)
    if not store.exists(engine, ref):
        try:
            stream([cli, "pull", ref], what=f"{cli} pull {ref}")
        except CommandFailed as err:
            why = next((line for line in reversed(err.tail) if line.strip()), f"exit code {err.code}")
            raise UserError(f"{cli} pull {ref} failed ({why.strip()}): run `invoke fetch` on a host that reaches "
                            f"{ref.split('/', 1)[0]}, or `{cli} load` the image here first", code=err.code) from None
    name = local_name(arg, ref)
    tmp = dest.with_name(f".{dest.name}.part")
    tmp.unlink(missing_ok=True)
    try:
        if engine.name == "buildah":
            run(["buildah", "push", ref, f"docker-archive:{tmp}:{name}"], what=f"buildah push {ref}")
        else:
            fresh = not store.exists(engine, name)
            store.tag(engine, ref, name)
            try:
                run([cli, "save", "--output", str(tmp), name], what=f"{cli} save {ref}")
            finally:
                if fresh:
                    store.remove(engine, name)  # only the name this made; ref keeps the image
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def image_file(arg: str) -> str:
    return f"{arg.lower().replace('_', '-')}.tar"


def fetch(lock: Lock, target: str, images: dict[str, str], engine: Engine, mirror: Path = MIRROR,
          optional: bool = False) -> list[str]:
    """Fill ``mirror`` for ``target``; returns the report lines. Raises naming every re-uploaded file."""
    want = plan(lock, target, images, optional)
    sealed(mirror)
    with locked(mirror):
        return _fetch(lock, target, want, engine, mirror)


def _fetch(lock: Lock, target: str, want: Plan, engine: Engine, mirror: Path) -> list[str]:
    from sglang_stack.download import fetch as download
    from sglang_stack.download import sha256_of
    from sglang_stack.image import store

    wheels, archives = mirror / "wheels", mirror / "images"
    wheels.mkdir(parents=True, exist_ok=True)
    archives.mkdir(parents=True, exist_ok=True)
    sealed(mirror)
    for stale in (*wheels.glob(".*.part"), *archives.glob(".*.part")):
        stale.unlink()  # what an interrupted run left: no other run is filling this mirror now
    old = read_manifest(mirror)
    known = {f["path"].rsplit("/", 1)[-1]: f for f in old.get("files", [])}
    report, changed = [], []
    # The base images first: a registry this host cannot reach ends the run before gigabytes of wheels.
    kept_images = {i["arg"]: i for i in old.get("images", [])}
    locked = anchors(lock, want.images)
    for arg, ref in sorted(want.images.items()):
        dest = archives / image_file(arg)
        image_id = store.image_ids(engine, ref)[ref]
        key, config = locked.get(arg, (None, None))
        if config and image_id and image_id != config:
            raise UserError(f"{ref} in the {engine} store is {image_id[:19]}, not {key}.config {config[:19]}: a name is "
                            f"not trusted; remove it ({engine} rmi {ref}) and pull it by its digest again")
        prior = kept_images.get(arg)
        if not (dest.is_file() and prior and prior.get("ref") == ref and (not image_id or prior.get("id") == image_id)):
            _save_image(engine, arg, ref, dest)
            image_id = store.image_id(engine, ref)
            prior = None
        st = dest.stat()
        same = prior and prior.get("size") == st.st_size and prior.get("mtime_ns") == st.st_mtime_ns
        kept_images[arg] = {"arg": arg, "ref": ref, "id": image_id or prior["id"], "path": f"images/{dest.name}",
                            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "format": "docker-archive",
                            "sha256": prior["sha256"] if same and prior.get("sha256") else sha256_of(dest)}
    for art in want.urls:
        try:
            download(art.url, art.sha256, dest=wheels)
        except UserError as err:
            if "sha256 mismatch" not in str(err):
                raise
            got = str(err).rsplit("got ", 1)[-1]
            changed.append(f"{_key(lock, art)}: {art.filename} was re-uploaded upstream (sha256 {got}, the lock pins "
                           f"{art.sha256}); the download was deleted")
    for pypi in want.pypi:
        changed += _pip_download(pypi, wheels)
    if changed:
        raise UserError("; ".join(changed))
    ok = allowed(lock)
    files = []
    for path in sorted(wheels.glob("*.whl")):
        if path.is_symlink():
            print(f"fetch: left {path.name}: a symbolic link, not a file invoke fetch wrote", file=sys.stderr, flush=True)
            continue
        digest = _hash(path, known)
        if digest not in ok:
            if path.name in known:  # written and recorded by an earlier fetch: ours to remove
                print(f"fetch: removing {path.name}: no pin of this lock allows sha256 {digest}", file=sys.stderr, flush=True)
                path.unlink()
                report.append(f"removed {path.name}: no pin of this lock allows sha256 {digest}")
            else:
                report.append(f"left {path.name}: not written by invoke fetch, and no pin of this lock allows it "
                              "(it is not in the manifest; remove it yourself if it is not yours)")
            continue
        st = path.stat()
        files.append({"path": f"wheels/{path.name}", "sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                      "pin": ok[digest]})
    manifest = {"schema": SCHEMA, "lock": lock_hashes(lock), "targets": sorted({target, *old.get("targets", [])}),
                "files": files, "images": [kept_images[k] for k in sorted(kept_images)]}
    atomic_write(mirror / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    size = sum(f["size"] for f in files) + sum(i["size"] for i in manifest["images"])
    report.append(f"mirror {mirror}: {len(files)} wheels, {len(manifest['images'])} base images, {size / 1e9:.2f} GB; "
                  f"wrote {MANIFEST}")
    return report


def check(lock: Lock, target: str, images: dict[str, str], mirror: Path = MIRROR, optional: bool = False) -> dict:
    """Before a mirror build: the manifest is this lock's, and every file ``target`` needs is there, whole.

    Returns the manifest. pip checks every wheel's sha256 again as it installs it.
    """
    sealed(mirror)
    manifest = read_manifest(mirror)
    if not manifest:
        raise UserError(f"{mirror / MANIFEST}: missing: run `invoke fetch --target {target}` where the network reaches")
    for name, digest in lock_hashes(lock).items():
        if manifest["lock"].get(name) != digest:
            raise UserError(f"{mirror / MANIFEST}: made for another {name}: run `invoke fetch --target {target}` again")
    listed = {f["path"]: f for f in manifest["files"]}
    hashes = {f["sha256"] for f in manifest["files"]}
    want = plan(lock, target, images, optional)
    for art in want.urls:
        if art.sha256 not in hashes:
            raise UserError(f"{mirror}: {art.filename} missing ({_key(lock, art)}): run `invoke fetch --target {target}`")
    problems: list[str] = []
    for pypi in want.pypi:
        for pin in read_pins(pypi.path, problems):
            if not hashes.intersection(pin.hashes):
                raise UserError(f"{mirror}: no wheel of {pin} ({pypi.path.name}): run `invoke fetch --target {target}`")
    for path, entry in listed.items():
        if not (mirror / path).is_file() or (mirror / path).stat().st_size != entry["size"]:
            raise UserError(f"{mirror / path}: missing or truncated: run `invoke fetch --target {target}`")
    kept = {i["arg"]: i for i in manifest["images"]}
    locked = anchors(lock, want.images)
    for arg, ref in want.images.items():
        if kept.get(arg, {}).get("ref") != ref:
            raise UserError(f"{mirror}: no archive of {arg}={ref}: run `invoke fetch --target {target}` (with the same --base-image)")
        _check_archive(mirror, kept[arg], target)
        if arg in locked:
            _check_anchor(mirror / kept[arg]["path"], arg, *locked[arg], lock, target)
    return manifest


# What a base-image ARG's locked reference is, in versions.lock: the archive of that reference must lead to the
# image config digest recorded beside it (``config``), which no mirror can rewrite.
LOCKED_BASES = {"BASE_IMAGE": ("cuda", "base"), "DEVEL_IMAGE": ("cuda", "devel"), "ROUTER_BASE_IMAGE": ("router", "base")}
ARCHIVE_LIMIT = 64 << 30  # a base image archive is a few GB at most
CONFIG_LIMIT = 4 << 20


def anchors(lock: Lock, images: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """ARG -> (the lock's key, its recorded config digest or None) for each image that is the lock's own reference.

    An image given by ``--base-image`` or ``--build-arg`` is the user's choice, not the lock's: its archive is
    checked against what the fetch recorded, and no lock can say more about it."""
    from sglang_stack.lock.lockfile import _reference

    out = {}
    for arg, ref in images.items():
        table, sub = LOCKED_BASES.get(arg, (None, None))
        if table is None:
            continue
        base = lock.data[table][sub]
        if ref == _reference(base):
            out[arg] = (f"{table}.{sub}", base.get("config"))
    return out


def archive_chain(archive: Path) -> tuple[str, list[str], list[str]]:
    """(sha256 of the image config, the config's layer diff_ids, the sha256 of each layer as stored) of a
    ``docker save`` archive; a malformed one is one line naming it. Reads every layer once: the chain from the
    config to the bytes docker will load."""
    import hashlib
    import posixpath
    import tarfile

    def hashed(tar, member) -> tuple[str, bytes | None]:
        try:
            handle = tar.extractfile(member)  # a link stands for the member it names, as the loader reads it
        except KeyError:  # `docker save` links a layer that appears twice; this link's target is not in the archive
            raise UserError(f"{archive}: {member.name} links to {member.linkname!r}, which the archive does not "
                            "hold") from None
        if handle is None:
            raise UserError(f"{archive}: {member.name} is not a file")
        digest, head = hashlib.sha256(), b""
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            if len(head) < CONFIG_LIMIT:
                head += block[:CONFIG_LIMIT - len(head)]
        return "sha256:" + digest.hexdigest(), head

    if archive.is_symlink() or not archive.is_file() or archive.stat().st_size > ARCHIVE_LIMIT:
        raise UserError(f"{archive}: not a plain file of at most {ARCHIVE_LIMIT >> 30} GB")
    try:
        with tarfile.open(archive, "r:") as tar:
            listed = tar.getmembers()
            # Two members one name once cleaned (`x/layer.tar` and `./x//layer.tar`, or the same name twice): this
            # check would hash one and the engine's loader might read the other.
            seen: dict[str, str] = {}
            for member in listed:
                clean = posixpath.normpath("/" + member.name).lstrip("/")
                if clean in seen:
                    raise UserError(f"{archive}: members {seen[clean]!r} and {member.name!r} are one path: not an "
                                    "archive `docker save` writes; delete it and run `invoke fetch` again")
                seen[clean] = member.name
            members = {m.name: m for m in listed}
            if "manifest.json" not in members or members["manifest.json"].size > CONFIG_LIMIT:
                raise UserError(f"{archive}: no manifest.json: not a `docker save` archive")
            manifest = json.loads(tar.extractfile(members["manifest.json"]).read())
            if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
                raise UserError(f"{archive}: manifest.json does not describe one image")
            config_name, layer_names = manifest[0].get("Config"), manifest[0].get("Layers")
            if not isinstance(config_name, str) or config_name not in members or not isinstance(layer_names, list):
                raise UserError(f"{archive}: manifest.json names no config or layers that the archive holds")
            config_digest, config_bytes = hashed(tar, members[config_name])
            config = json.loads(config_bytes)
            diff_ids = (config.get("rootfs") or {}).get("diff_ids")
            if not isinstance(diff_ids, list):
                raise UserError(f"{archive}: its config lists no layers (rootfs.diff_ids)")
            layers = []
            for name in layer_names:
                if not isinstance(name, str) or name not in members:
                    raise UserError(f"{archive}: manifest.json names a layer the archive lacks: {name!r}")
                layers.append(hashed(tar, members[name])[0])
    except (tarfile.TarError, OSError, ValueError, UnicodeDecodeError, RecursionError) as err:
        raise UserError(f"{archive}: not a readable `docker save` archive: {err}") from None
    return config_digest, diff_ids, layers


def _check_anchor(archive: Path, arg: str, key: str, config: str | None, lock: Lock, target: str) -> None:
    """The archive of a locked base leads to the lock's config digest, and its layers to the config's diff_ids."""
    from sglang_stack.lock.profiles import display

    if not config:
        raise UserError(f"{display(lock.path)}: {key}.config: not recorded, so the mirror's {arg} archive cannot be "
                        "checked against the lock: run `invoke lock --verify` where the registry answers (it records the "
                        "image config digest), or build with --base-image naming an image you trust")
    digest, diff_ids, layers = archive_chain(archive)
    if digest != config:
        raise UserError(f"{archive}: its image config is {digest}, not {key}.config {config} of {display(lock.path)}: "
                        f"the archive is not the locked {arg}; delete it and run `invoke fetch --target {target}` again")
    if layers != diff_ids:
        raise UserError(f"{archive}: its layers are not the ones its config lists (rootfs.diff_ids): the archive was "
                        f"changed; delete it and run `invoke fetch --target {target}` again")


def _check_archive(mirror: Path, entry: dict, target: str) -> None:
    """A base image's archive is the bytes the fetch saved: its size, and its sha256 read again now."""
    archive = mirror / entry["path"]
    if not archive.is_file() or archive.stat().st_size != entry["size"]:
        raise UserError(f"{archive}: missing or truncated: run `invoke fetch --target {target}`")
    if not entry.get("sha256"):
        raise UserError(f"{archive}: the manifest records no sha256 for it (an older fetch): run `invoke fetch "
                        f"--target {target}` again")
    with archive.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    if digest != entry["sha256"]:
        raise UserError(f"{archive}: its sha256 is not the one the fetch recorded: the archive was changed; "
                        f"run `invoke fetch --target {target}` again")


def base_images(engine: Engine, manifest: dict, images: dict[str, str], mirror: Path = MIRROR,
                anchored: dict[str, str] | None = None) -> dict[str, str]:
    """ARG -> what the build starts FROM: the reference itself where the store has it, else the mirror's
    archive, loaded into the store under ``local_name``. ``anchored``: ARG -> the image ID the lock records
    (its config digest), which the loaded image must have; the manifest's own record counts for the others."""
    from sglang_stack.image import store

    out = {}
    entries = {e["arg"]: e for e in manifest["images"]}
    for arg, ref in images.items():
        name = local_name(arg, ref)
        held = store.image_ids(engine, ref, name)
        if held[ref]:
            out[arg] = ref
            continue
        recorded = (anchored or {}).get(arg) or entries[arg].get("id") or ""
        if held[name] and recorded and held[name] != recorded:
            raise UserError(f"{name} in the {engine} store is not the image the mirror's archive recorded "
                            f"({held[name][:19]}, recorded {recorded[:19]}): a name is not trusted; "
                            f"remove it ({engine} rmi {name}) and build again")
        if not held[name]:
            archive = mirror / entries[arg]["path"]
            store.load(engine, archive)
            loaded = store.image_ids(engine, name)[name]
            if recorded and loaded != recorded:
                raise UserError(f"{archive}: loads as {loaded[:19] or 'nothing'}, not the image the fetch "
                                f"saved ({recorded[:19]}): run `invoke fetch` again")
        out[arg] = name
    return out


def prepare(request, lock: Lock, images: dict[str, str], mirror: Path = MIRROR) -> list[str]:
    """Make ``request`` (a build.BuildRequest) a mirror build: check the mirror, load the base images it starts
    from (``images``, ARG -> reference: build.base_images), and point the build at them. Returns what it did, one
    line each."""
    from sglang_stack.image import build as buildmod

    if mirror.resolve() != (request.context / "mirror").resolve():
        raise UserError(f"--mirror: the build reads the mirror from its context, {request.context / 'mirror'}; "
                        f"run `invoke fetch` there, or move {mirror} there")
    manifest = check(lock, request.target, images, mirror, optional="FLASHINFER_JIT_CACHE" in request.build_args)
    network = ("pip reads the mirror only; --isolation chroot keeps the host's network (use another isolation, "
               "or docker, to turn it off)" if request.chroot else "the build's network is off")
    lines = [f"mirror {mirror}: {len(manifest['files'])} wheels for {', '.join(manifest['targets'])}, "
             f"checked against this lock; {network}"]
    own = buildmod.BASE_ARG.get(request.target, "BASE_IMAGE")
    anchored = {arg: config for arg, (_, config) in anchors(lock, images).items()}
    for arg, ref in base_images(request.engine, manifest, images, mirror, anchored).items():
        if ref == images[arg]:
            continue
        lines.append(f"{arg}: {images[arg]} from the mirror, as {ref}")
        if arg == own:
            request.base_image = ref
        else:
            request.build_args[arg] = ref
    request.mirror = True
    return lines
