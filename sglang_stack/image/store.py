"""Local image stores, and how a run borrows a shared base image without breaking another run.

Two stores matter: the Docker Engine's, and the one buildah and podman share
(containers-storage). Both are shared by everyone on the machine, so a run only
ever removes images by the exact names or IDs it made, never "whatever is new".

The smoke base image (a Debian made with debootstrap) is expensive to make and
shared between runs. A run that uses it first adds a tag of its own, a lease
(``NAME:TAG-lease-<run>``), and builds FROM that tag. At the end it removes its
lease tag, and the shared name too if it made the image. In both stores a
tag removal only untags while another tag points at the image, so a concurrent
run that holds its own lease keeps its base, whoever made it. The run that
leaves the base with no name takes the nameless step images built on it too
(buildah's ``--layers`` cache), which would otherwise hold its layers forever.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.shell import require, run, show

DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SUITE = "bookworm"
# Everything the Dockerfile's base stage would otherwise install with apt (python3 with venv and its
# headers, g++, patch, libnuma, CA certificates), so that a build on this base skips apt.
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python3-dev", "build-essential", "libnuma1",
                 "ca-certificates", "patch")


def run_id() -> str:
    """A name part unique to this run on this machine: ``<pid>-<random>``."""
    return f"{os.getpid()}-{secrets.token_hex(3)}"


def repo_digest(engine: Engine, ref: str) -> str:
    """``REPOSITORY@sha256:...`` under which a registry serves the image ``ref`` names, as the store recorded it on a
    push or pull; "" where it records none (a local build, a loaded archive) or has no such image."""
    cli = engine.runner
    if not shutil.which(cli):
        return ""
    proc = subprocess.run([cli, "image", "inspect", "--format", "{{json .RepoDigests}}", ref], capture_output=True, text=True)
    if proc.returncode != 0:
        return ""
    try:
        digests = json.loads(proc.stdout or "null") or []
    except json.JSONDecodeError:
        return ""
    repo = ref.split("@", 1)[0].rsplit(":", 1)[0] if ":" in ref.split("@", 1)[0].rsplit("/", 1)[-1] else ref.split("@", 1)[0]
    # The digest of this name's repository first: one image pushed to two registries has two.
    mine = [d for d in digests if isinstance(d, str) and d.split("@", 1)[0].endswith(repo)]
    return (mine or [d for d in digests if isinstance(d, str)] or [""])[0]


def image_ids(engine: Engine, *refs: str) -> dict[str, str]:
    """Each of ``refs`` -> the ID of the image it names in the store, "" where the store holds none."""
    out = {}
    for ref in refs:
        argv = ([engine.store, "image", "inspect", "--format", "{{.Id}}", ref] if engine.daemon
                else [engine.store, "images", "--quiet", "--no-trunc", ref])
        proc = run(argv, capture=True, check=False, quiet=True)
        found = proc.stdout.split() if proc.returncode == 0 else []
        out[ref] = found[0] if found else ""
    return out


def exists(engine: Engine, ref: str) -> bool:
    """Whether the store holds ``ref``; False where the engine's CLI is not installed (it holds nothing here)."""
    return bool(shutil.which(engine.store)) and bool(image_ids(engine, ref)[ref])


def image_id(engine: Engine, ref: str) -> str:
    """The ID of the image ``ref`` names; a one-line error where the store holds none."""
    found = image_ids(engine, ref)[ref]
    if not found:
        raise UserError(f"{ref}: no such image in the {engine} image store")
    return found


def load(engine: Engine, archive: Path) -> None:
    """Load a ``docker save`` archive into the store (buildah, the CLI of podman's store too, pulls it instead)."""
    if engine.daemon:
        run([engine.store, "load", "--input", str(archive)], what=f"{engine.store} load {archive.name}")
    else:
        run([engine.store, "pull", f"docker-archive:{archive}"], what=f"{engine.store} pull {archive.name}")


def size(engine: Engine, ref: str) -> int:
    """Size in bytes (buildah prints only a rounded "271 MB"; podman shares its store and tells the bytes)."""
    cli = engine.runner
    proc = run([cli, "image", "inspect", "--format", "{{.Size}}", ref], capture=True, quiet=True, what=f"{cli} image inspect")
    return int(proc.stdout.strip())


def tag(engine: Engine, ref: str, new: str) -> None:
    run([engine.store, "tag", ref, new], capture=True, what=f"{engine.store} tag")


def remove(engine: Engine, *refs: str) -> None:
    """Remove these names or IDs (a name that still shares its image with another tag is only untagged)."""
    present = [ref for ref in refs if ref and exists(engine, ref)]
    if present:
        run([engine.store, "rmi", *present], capture=True, check=False)


def remove_cache_built_on(engine: Engine, base: list[str]) -> list[str]:
    """Remove the nameless images built on a base whose layers are ``base`` (bottom first); returns their IDs.

    buildah's ``--layers`` keeps an image of every step. ``rmi`` of a build's name takes the steps it was built
    from, but not those of the other stages of a multi-stage build, and each holds the base's layers (about 550 MB
    for the smoke base). Nothing is removed while an image with a name is built on these layers: the base itself
    under another run's lease, a base made from the same root filesystem, or an image someone keeps."""
    listed = run([engine.store, "images", "--all", "--quiet", "--no-trunc"], capture=True, check=False, quiet=True).stdout.split()
    if not base or not listed:
        return []
    proc = run([engine.runner, "image", "inspect", "--format", "{{.Id}} {{json .RepoTags}} {{json .RootFS.Layers}}",
                *dict.fromkeys(listed)], capture=True, check=False, quiet=True)
    cache = nameless_on(base, proc.stdout.splitlines())
    if cache:
        run([engine.store, "rmi", *cache], capture=True, check=False, what=f"{engine.store} rmi")
    return cache


def nameless_on(base: list[str], inspected: list[str]) -> list[str]:
    """Of ``inspect``'s lines (``ID ["NAME", ...] ["LAYER", ...]``), the IDs of the nameless images built on ``base``;
    none at all where a named image is built on it, or where a line does not read that way (a warning on stdout):
    what cannot be read may be a name someone keeps. An image removed since the listing has no line (podman names it
    on stderr and inspects the others)."""
    cache = []
    for line in inspected:
        try:
            image, names, stack = line.split(" ", 2)
            names, stack = json.loads(names), json.loads(stack)
        except ValueError:
            return []
        if (stack or [])[:len(base)] != base:
            continue
        if names:
            return []
        cache.append(image)
    return cache


def layers(engine: Engine, ref: str) -> list[str]:
    """The IDs of the image's layers, bottom first."""
    proc = run([engine.runner, "image", "inspect", "--format", "{{json .RootFS.Layers}}", ref], capture=True, quiet=True,
               what=f"{engine.runner} image inspect")
    return json.loads(proc.stdout or "null") or []


def labels(engine: Engine, ref: str) -> dict[str, str]:
    """The labels of a built image, read back from the engine (the Docker SDK for Docker)."""
    if engine.daemon:
        from sglang_stack.engine import reachable

        return reachable().images.get(ref).labels or {}
    if engine.name == "podman":
        proc = run(["podman", "image", "inspect", "--format", "{{json .Labels}}", ref], capture=True, quiet=True, what="podman image inspect")
        return json.loads(proc.stdout or "null") or {}
    proc = run(["buildah", "inspect", "--type", "image", ref], capture=True, quiet=True, what="buildah inspect")
    info = json.loads(proc.stdout)
    docker_config = (info.get("Docker") or {}).get("config") or {}
    return docker_config.get("Labels") or (info.get("OCIv1") or {}).get("config", {}).get("Labels") or {}


# --- the Debian base ------------------------------------------------------------


def debootstrap(suite: str, packages: tuple[str, ...] | list[str], rootfs: Path, mirror: str = DEBIAN_MIRROR) -> None:
    """A minimal Debian ``suite`` with ``packages`` at ``rootfs``: debootstrap's own output, made once a day.

    debootstrap downloads and unpacks a few hundred packages (minutes on 2 cores), and one test session makes
    the same tree for each store and for the stand-ins. The first run of the day keeps the tree it made as a
    tarball in the cache (``cache_dir()/rootfs``, keyed by suite, mirror, packages and the UTC day); later
    ones on this machine unpack that instead, while the others wait. Each caller then changes its own copy.
    """
    import fcntl
    import hashlib
    from datetime import datetime, timezone

    from sglang_stack.download import cache_dir

    day = datetime.now(timezone.utc).strftime("%Y%m%d")
    key = hashlib.sha256("\n".join([suite, mirror, *sorted(packages)]).encode()).hexdigest()[:16]
    folder = cache_dir() / "rootfs"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{suite}-{key}-{day}.tar"
    with open(folder / f"{suite}-{key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not archive.is_file():
            require("debootstrap", "install debootstrap (apt-get install debootstrap)")
            run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(rootfs), mirror],
                capture=True, what="debootstrap")
            partial = archive.with_suffix(".tar.partial")
            run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], what="tar")
            partial.replace(archive)
            for old in folder.glob(f"{suite}-{key}-*.tar"):
                if old != archive:
                    old.unlink()
            return
    print(f"debootstrap {suite}: today's tree from {archive}", flush=True)
    rootfs.mkdir(parents=True, exist_ok=True)
    run(["tar", "-C", str(rootfs), "--numeric-owner", "-xpf", str(archive)], what="tar")


def make_debian_base(engine: Engine, ref: str, mirror: str = DEBIAN_MIRROR) -> None:
    """A minimal Debian with ``BASE_PACKAGES`` (``debootstrap``), imported as ``ref``."""
    with tempfile.TemporaryDirectory(prefix="sglang-stack-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        debootstrap(DEBIAN_SUITE, BASE_PACKAGES, rootfs, mirror)
        # Keep the image small and free of the host's apt lists.
        shutil.rmtree(rootfs / "var" / "lib" / "apt" / "lists", ignore_errors=True)
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        import_rootfs(engine, rootfs, ref)


def import_rootfs(engine: Engine, rootfs: Path, ref: str) -> None:
    """A root filesystem directory into the engine's store as the image ``ref`` (CMD bash)."""
    importer = [engine.runner, "import"]
    require(importer[0], f"install {importer[0]}; it imports the root filesystem")
    tar = ["tar", "-C", str(rootfs), "-c", "."]
    imp = importer + ["--change", "CMD /bin/bash" if engine.daemon else "CMD=/bin/bash", "-", ref]
    show(tar + ["|"] + imp)
    producer = subprocess.Popen(tar, stdout=subprocess.PIPE)
    consumer = subprocess.run(imp, stdin=producer.stdout, capture_output=True, text=True)
    producer.stdout.close()
    if producer.wait() != 0 or consumer.returncode != 0:
        raise UserError(f"{' '.join(importer)} of {ref} failed: {consumer.stderr.strip()[-300:]}")


class BaseLease:
    """Borrow the shared base image ``ref`` for one run; ``with`` gives the tag to build FROM.

    Makes the image (debootstrap) when missing and ``make`` is true; otherwise a
    missing ``ref`` is a one-line error. On exit removes the lease tag, and the
    shared name as well when this run made the image, unless ``keep``; then, if
    no name is left on the base, the step images built on it (``remove_cache_built_on``).

    Making, leasing and releasing happen under one lock per store and name (``flock`` on a
    file in the temporary directory), so concurrent cold runs make the base once: the
    first debootstraps while the others wait, then each tags its own lease. No run can
    untag the shared name between another's check and its tag, so no copy is left nameless.
    The holder removes the file as it lets go; a waiter that then holds a removed file
    opens the path again, so every holder holds the file at the path.
    """

    def __init__(self, engine: Engine, ref: str, *, make: bool = True, keep: bool = False, run: str | None = None):
        self.engine, self.ref, self.make, self.keep = engine, ref, make, keep
        self.layers: list[str] = []
        name, _, tag_part = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
        self.lease = f"{name}:{tag_part}-lease-{run or run_id()}"
        self.created = False

    def _lock(self):
        import fcntl
        import hashlib
        from contextlib import contextmanager

        key = hashlib.sha256(f"{self.engine.store}:{self.ref}".encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"sglang-stack-base-{key}.lock"

        def on_disk(handle) -> bool:
            try:
                return os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                return False

        @contextmanager
        def held():
            while True:
                handle = open(path, "a")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    print(f"waiting for another run to finish making or releasing {self.ref}", flush=True)
                    fcntl.flock(handle, fcntl.LOCK_EX)
                if on_disk(handle):
                    break
                handle.close()  # the holder before removed the file on its way out: lock the one now at the path
            try:
                yield
            finally:
                path.unlink(missing_ok=True)  # while still held, so no file is left per base name and store
                handle.close()

        return held()

    def __enter__(self) -> str:
        with self._lock():
            if exists(self.engine, self.ref):
                print(f"reusing base image {self.ref}", flush=True)
            elif self.make:
                make_debian_base(self.engine, self.ref)
                self.created = True
                print(f"created base image {self.ref}", flush=True)
            else:
                raise UserError(f"--base-image {self.ref}: no such image in the {self.engine} image store")
            tag(self.engine, self.ref, self.lease)
            self.layers = layers(self.engine, self.lease)
        return self.lease

    def __exit__(self, *exc) -> None:
        if self.keep:
            return
        with self._lock():
            remove(self.engine, self.lease, *([self.ref] if self.created else []))
            # The last run out, whoever made the base, takes the build cache on it too; while another run's lease
            # names the base, nothing goes.
            remove_cache_built_on(self.engine, self.layers)
