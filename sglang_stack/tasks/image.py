"""`invoke fetch`, `invoke verify` and `invoke advisories`: the image's inputs mirrored, a built image checked
against the lock, and the lock's pins checked against the index's advisory data."""

from __future__ import annotations

from pathlib import Path

from invoke import Exit, task

from sglang_stack.tasks.boundary import user_errors
from sglang_stack.errors import UserError


def _images(engine: str, target: str, base_image: str | None) -> dict[str, str]:
    """ARG -> reference of every base image ``target``'s build starts from."""
    from sglang_stack.image import build as buildmod

    from sglang_stack.image import store

    stages = {"all": ("runtime", "router")}.get(target, (target,))
    if base_image is not None:
        store.reference(base_image, "--base-image")
    if base_image and len(stages) > 1:
        raise UserError("--base-image: name the stage it is the base of with --target (runtime, sglang, router, ...)")
    out = {}
    for stage in stages:
        out.update(buildmod.base_images(buildmod.BuildRequest(engine=engine, tag="x", target=stage, base_image=base_image)))
    return out


@task(
    help={
        "dir": "where the mirror goes, relative to the project (default: mirror, the mirror/ that `invoke build "
        "--mirror` reads)",
        "target": "what to mirror: all (runtime and router), runtime, deps, sglang, base or router (default: all)",
        "engine": "the image store the base images are saved from, pulled into first if missing: docker, podman "
        "or buildah (default: stack.engine, 'docker')",
        "base-image": "mirror this base image instead of the pinned one (as `invoke build --base-image`; needs --target)",
        "optional": "also mirror the optional wheels (flashinfer-jit-cache, 5-8 GB) (default: off)",
    }
)
@user_errors
def fetch(c, dir="mirror", target="all", engine=None, base_image=None, optional=False):
    """Mirror every artifact a build downloads, each hashed against the lock (network).

    The PyPI wheels of the requirements files (for the interpreter and platform each was
    resolved for), the URL wheels and build tools of versions.lock, and the base images as
    docker-archive files, then manifest.json. Resumes: what is already there and good stays.
    A file whose sha256 the lock does not allow is deleted and named, a re-upload upstream.
    Then `invoke build --mirror` builds with no network (docs/image.md, Offline builds).
    """
    from sglang_stack import ROOT
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.image import mirror as mirrormod

    engine = engine or c.config.stack.engine
    lock, _ = lockmod.check_all(download=False)
    path = Path(dir) if Path(dir).is_absolute() else ROOT / dir
    for line in mirrormod.fetch(lock, target, _images(engine, target, base_image), engine, path, optional):
        print(line)


@task(
    help={
        "image": "the image to check: a local reference or ID (required)",
        "engine": "docker, podman or buildah: the store that holds it (default: stack.engine, 'docker')",
        "rebuild": "also build this checkout's stage afresh, reproducibly, and compare image IDs "
        "(needs the base image; default: off)",
        "base-image": "with --rebuild: the base to build on (as `invoke build --base-image`)",
        "mirror": "with --rebuild: build from the project's mirror/, as an image made by `invoke build --mirror` "
        "was (default: off)",
    }
)
@user_errors
def verify(c, image, engine=None, rebuild=False, base_image=None, mirror=False):
    """Check an image against this checkout: labels, installed set, SBOM, patched files (and digest).

    One line per check, then the verdict; exit 1 naming the label, package or file that
    differs. The image's own Python lists what is installed and hashes the patched files,
    with this checkout's inventory script mounted read-only (no code of the image's decides).
    """
    from sglang_stack.image import verify as verify_image

    from sglang_stack.image import store

    store.reference(image, "--image")
    if base_image is not None:
        store.reference(base_image, "--base-image")
    engine = engine or c.config.stack.engine
    if mirror and not rebuild:
        raise UserError("--mirror applies to --rebuild only")
    report = verify_image.verify(engine, image, rebuild=rebuild, base_image=base_image, mirror=mirror)
    for line in report.lines():
        print(line)
    print(f"wrote {verify_image.write_record(report).relative_to(verify_image.ROOT)} (`invoke bench` cites it)")
    if not report.ok:
        raise Exit(f"error: {image}: {report.failed} of {len(report.checks)} checks failed", code=1)


@task(
    help={
        "index": "the package index whose advisory data is read: its JSON API beside /simple "
        "(default: https://pypi.org/simple)",
    }
)
@user_errors
def advisories(c, index=None):
    """Known vulnerabilities of every pinned distribution, from the package index's own advisory data (network).

    Asks the index for each release the lock installs (requirements.lock.txt, the router's,
    and versions.lock's wheels) and prints each advisory that affects it: its id and aliases,
    the versions that fix it, and whether the stack can take the fix (not where versions.lock
    pins the distribution, nor where sglang's own requirement excludes every fixed version).
    An advisory the project accepts is a [[advisory]] table of versions.lock with its reason.
    Exit 1 while any advisory is neither fixed nor accepted.
    """
    from sglang_stack.lock import advisories as advisories_mod
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock.releases import DEFAULT_INDEX

    lock, cross_checked = lockmod.check_all(download=False)
    requires = lockmod.wheel_requires(lockmod.sglang_wheel(lock.sglang.url, lock.sglang.sha256, download=True))
    report = advisories_mod.audit(lock, requires, index or DEFAULT_INDEX)
    for line in report.lines():
        print(line)
    if report.open:
        raise Exit(f"error: {len(report.open)} advisories affect pinned distributions: take the fix, or accept each "
                   "with its reason in versions.lock ([[advisory]])", code=1)
