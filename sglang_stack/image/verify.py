"""``invoke verify IMAGE``: does a built or pulled image hold what this checkout says it should?

Five checks, one line each:

    labels     every pin label the Dockerfile writes, against versions.lock and patches/
    installed  what the image's Python sees, against requirements.lock.txt and versions.lock
    sbom       /opt/sglang-stack/sbom.cdx.json: the same set, each wheel's sha256 one the lock allows,
               the patch series with its hashes
    patches    the patched files in /opt/sglang, against the pinned wheel patched here
    digest     with --rebuild: the image ID of a fresh reproducible build of this commit

What is installed and the file hashes come from the image's own python3 running this
checkout's ``inventory.py``, mounted read-only: a derived image with one package or file
changed fails, naming it.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from sglang_stack import ROOT
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError

INVENTORY = Path(__file__).parent / "steps" / "inventory.py"  # the build step, run again in the image by verify
MOUNTED = "/tmp/sglang-stack-inventory.py"
SGLANG_TREE = "/opt/sglang"
# The venv's own tooling, from the interpreter's ensurepip: no hashed step installs it.
VENV_OWN = {"pip", "setuptools"}


@dataclass
class Check:
    name: str
    ok: bool | None  # None: not run
    detail: str


@dataclass
class Report:
    image: str
    image_id: str
    stage: str
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(c.ok is False for c in self.checks)

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def lines(self) -> list[str]:
        out = [f"{ {True: 'ok  ', False: 'FAIL', None: 'skip'}[c.ok]} {c.name}: {c.detail}" for c in self.checks]
        verdict = "verified" if self.ok else "NOT verified"
        out.append(f"{verdict}: {self.image} ({self.image_id}), stage {self.stage}, against this checkout")
        return out


def inventory(engine: Engine, image: str, paths: list[str]) -> dict:
    """Run inventory.py in a throwaway container of ``image`` (no network) and parse its JSON."""
    from sglang_stack.shell import run

    args = ["python3", "-I", MOUNTED, *[x for p in paths for x in ("--hash", p)]]
    mount = f"{INVENTORY}:{MOUNTED}:ro"
    if engine.name == "buildah":  # podman may be absent beside it; buildah runs a step, not a container
        name = run(["buildah", "from", "--pull-never", image], capture=True, what="buildah from").stdout.strip()
        try:
            proc = run(["buildah", "run", "--isolation", "chroot", "-v", mount, name, "--", *args],
                       capture=True, what="buildah run inventory.py")
        finally:
            run(["buildah", "rm", name], capture=True, check=False, quiet=True)
    else:
        proc = run([engine.runner, "run", "--rm", "--network", "none", "--user", "0", "-v", mount, "--entrypoint", args[0],
                    image, *args[1:]], capture=True, what=f"{engine} run inventory.py")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise UserError(f"{image}: inventory.py printed no JSON: {proc.stdout.strip()[-200:]!r}") from None


def stage_of(labels: dict[str, str], installed: dict[str, str]) -> str:
    if labels.get("org.opencontainers.image.title", "").endswith("-router"):
        return "router"
    return "runtime" if "torch" in installed else "sglang"


def expected_labels(lock, stage: str) -> dict[str, str]:
    from sglang_stack.image import render

    ctx = render.context(lock)
    if stage == "router":
        return {"org.opencontainers.image.version": lock.router.version,
                "io.sglang-stack.router.version": lock.router.version,
                "io.sglang-stack.router.sha256": lock.router.sha256,
                "io.sglang-stack.router.requirements.sha256": ctx.router_requirements_sha256}
    return {"org.opencontainers.image.version": ctx.version_tag, **dict(ctx.sglang_labels if stage == "sglang" else ctx.labels)}


def expected_installed(lock, stage: str) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> version that must be installed, name -> version that may be: the optional wheels)."""
    if stage == "router":
        return {**lock.router_requirements, canonicalize_name(lock.router.name): lock.router.version}, {}
    if stage == "sglang":
        return {canonicalize_name(lock.sglang.name): lock.sglang.version}, {}
    optional = {canonicalize_name(w.name): w.version for w in lock.wheels if w.optional}
    return {k: v for k, v in lock.pins().items() if k not in optional}, optional


def check_labels(have: dict[str, str], want: dict[str, str]) -> Check:
    bad = [f"{k}: image has {have[k]!r}, the checkout gives {v!r}" if k in have else f"{k}: missing"
           for k, v in want.items() if have.get(k) != v]
    return Check("labels", not bad, "; ".join(bad[:5]) if bad else f"{len(want)} pin labels match versions.lock and patches/")


def recorded(text: str | None) -> dict[str, str] | None:
    """/opt/sglang-stack/installed.txt (``pip list --format=freeze``) as name -> version; None where absent."""
    if text is None:
        return None
    pairs = (line.split("==", 1) for line in text.splitlines() if "==" in line)
    return {canonicalize_name(name): version.strip() for name, version in pairs}


def check_installed(installed: dict[str, str], must: dict[str, str], may: dict[str, str],
                    listed: dict[str, str] | None = None) -> Check:
    """What Python sees against the lock; and against installed.txt, the image's own list, where it has one."""
    bad = []
    for name in sorted(set(installed) | set(listed or {})) if listed is not None else ():
        if listed.get(name) != installed.get(name):
            bad.append(f"installed.txt says {name} {listed.get(name, 'absent')}, Python sees {installed.get(name, 'absent')}")
    for name, version in sorted(must.items()):
        if name not in installed:
            bad.append(f"{name}=={version}: not installed")
        elif installed[name] != version:
            bad.append(f"{name}: installed {installed[name]}, the lock pins {version}")
    for name, version in sorted(installed.items()):
        if name in must or name in VENV_OWN:
            continue
        if name in may and may[name] == version:
            continue
        bad.append(f"{name}=={version}: installed, but not in the lock")
    detail = "; ".join(bad[:6]) + (f"; and {len(bad) - 6} more" if len(bad) > 6 else "")
    return Check("installed", not bad, detail if bad else f"{len(must)} distributions at the lock's versions, nothing else")


def check_sbom(sbom, installed: dict[str, str], allowed: dict[str, str], patches: dict[str, str],
               debs: dict[str, str] | None = None) -> Check:
    """The SBOM against the image: each Python distribution's version and hash, each patch, and, where the image has a
    dpkg database (``debs``), each Debian package's version: apt run after the SBOM, or a package the SBOM lacks, shows."""
    if not isinstance(sbom, dict) or sbom.get("bomFormat") != "CycloneDX":
        return Check("sbom", False, "no CycloneDX SBOM at /opt/sglang-stack/sbom.cdx.json")
    comps = sbom.get("components", [])
    python = {}
    bad = []
    for comp in comps:
        if not comp.get("purl", "").startswith("pkg:pypi/"):
            continue
        name = canonicalize_name(comp["name"])
        python[name] = comp.get("version", "")
        digests = [h["content"] for h in comp.get("hashes", []) if h.get("alg") == "SHA-256"]
        if not digests and name not in VENV_OWN:
            bad.append(f"{name}: no sha256")
        for digest in digests:
            if digest not in allowed:
                bad.append(f"{name} {python[name]}: sha256 {digest[:12]}... is no hash the lock allows")
    for name in sorted(set(python) | set(installed)):
        if python.get(name) != installed.get(name):
            bad.append(f"{name}: SBOM says {python.get(name, 'absent')}, the image has {installed.get(name, 'absent')}")
    files = {c["name"]: (c.get("hashes") or [{}])[0].get("content") for c in comps if c.get("type") == "file"}
    for name, digest in sorted(patches.items()):
        if files.get(f"patches/{name}") != digest:
            bad.append(f"patches/{name}: SBOM records {str(files.get(f'patches/{name}'))[:12]}, patches/ has {digest[:12]}")
    recorded_debs = {c.get("name"): c.get("version") for c in comps if c.get("purl", "").startswith("pkg:deb/")}
    for name in sorted(set(recorded_debs) | set(debs or {})) if debs is not None else ():
        if recorded_debs.get(name) != debs.get(name):
            bad.append(f"deb {name}: SBOM says {recorded_debs.get(name, 'absent')}, dpkg has {debs.get(name, 'absent')}")
    hashed = sum(bool(c.get("hashes")) for c in comps if c.get("purl", "").startswith("pkg:pypi/"))
    base = [c for c in comps if c.get("type") == "container"]
    if not base:
        bad.append("no base image component")
    detail = "; ".join(bad[:6]) + (f"; and {len(bad) - 6} more" if len(bad) > 6 else "")
    return Check("sbom", not bad, detail if bad else (
        f"CycloneDX {sbom.get('specVersion')}: {len(python)} Python distributions ({hashed} with a sha256 the "
        f"lock allows, the rest the venv's own), "
        f"{len(recorded_debs)} Debian packages" + (" at dpkg's versions" if debs is not None else "")
        + f", the base image, {len(patches)} patches"))


def patched_hashes(lock, patches_dir: Path) -> dict[str, str]:
    """sha256 of every file the series touches, in the pinned wheel patched here (the cached download)."""
    from sglang_stack.download import fetch, sha256_of
    from sglang_stack.patching import patches as patchmod

    wheel = fetch(lock.sglang.url, lock.sglang.sha256)
    with tempfile.TemporaryDirectory(prefix="sglang-stack-verify-") as tmp:
        tree = patchmod.unpack_wheel(wheel, Path(tmp) / "site")
        patchmod.apply_series(tree, patches_dir, quiet=True, strict=True)
        touched = sorted({rel for p in patchmod.read_series(patches_dir) for rel in patchmod.touched_files(p.path)})
        return {rel: sha256_of(tree / rel) if (tree / rel).is_file() else None for rel in touched}


def check_patches(image_files: dict[str, str | None], want: dict[str, str | None]) -> Check:
    bad = [f"{SGLANG_TREE}/{rel}: {'missing' if image_files.get(f'{SGLANG_TREE}/{rel}') is None else 'differs from the patched wheel'}"
           for rel, digest in want.items() if image_files.get(f"{SGLANG_TREE}/{rel}") != digest]
    return Check("patches", not bad, "; ".join(bad) if bad else f"{len(want)} patched files match the series applied to the pinned wheel")


def check_digest(engine: Engine, stage: str, image_id: str, base_image: str | None, lock=None, mirror: bool = False) -> Check:
    from sglang_stack.download import ca_bundle
    from sglang_stack.image import build as buildmod
    from sglang_stack.image import store

    ca = ca_bundle()
    tag = f"localhost/sglang-stack-verify:{stage}-{store.run_id()}"
    request = buildmod.BuildRequest(engine=engine, tag=tag, target=stage, base_image=base_image, no_cache=True,
                                    ca_bundle=Path(ca) if ca else None, source_date_epoch=buildmod.commit_epoch(),
                                    reproducible=True, oci=not engine.buildkit,
                                    isolation="chroot" if engine.name == "buildah" else None)
    if mirror:
        from sglang_stack.image import mirror as mirrormod

        mirrormod.prepare(request, lock)
    try:
        _, fresh = buildmod.build(request)
    finally:
        store.remove(engine, tag)
    same = fresh.removeprefix("sha256:") == image_id.removeprefix("sha256:")
    return Check("digest", same, f"a fresh reproducible build of this commit is {fresh[:19]}"
                 + ("" if same else f", the image is {image_id[:19]}"))


def verify(engine: Engine, image: str, *, rebuild: bool = False, base_image: str | None = None,
           mirror: bool = False, root: Path = ROOT, lock_path: Path | None = None) -> Report:
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.image import store
    from sglang_stack.image.mirror import allowed
    from sglang_stack.patching.patches import read_series

    if not store.exists(engine, image):
        first = image.split("/", 1)[0] if "/" in image else ""
        published = "." in first or ":" in first  # a registry host (podman names local images localhost/...)
        raise UserError(f"{image}: no such image in the {engine} store (pull or build it first, or pass --engine)" +
                        ("; a published image is verified from its registry with its signer's key: --key PUB"
                         if published else ""))
    from sglang_stack.image.render import patches_of

    lock, _ = lockmod.check_all(lock_path or root / "versions.lock", download=False)
    labels = store.labels(engine, image)
    image_id = store.image_id(engine, image)
    patches_dir = patches_of(lock)
    series = {p.name: p.sha256 for p in read_series(patches_dir)}
    want_files = {} if labels.get("org.opencontainers.image.title", "").endswith("-router") else patched_hashes(lock, patches_dir)
    found = inventory(engine, image, [f"{SGLANG_TREE}/{rel}" for rel in want_files])
    installed = {canonicalize_name(n): v for n, v, _ in found["distributions"]}
    stage = stage_of(labels, installed)
    report = Report(image, image_id, stage)
    report.checks.append(check_labels(labels, expected_labels(lock, stage)))
    must, may = expected_installed(lock, stage)
    report.checks.append(check_installed(installed, must, may, recorded(found.get("installed_txt"))))
    report.checks.append(check_sbom(found["sbom"], installed, allowed(lock), {} if stage == "router" else series,
                                    found.get("debs")))
    if stage != "router":
        report.checks.append(check_patches(found["files"], want_files))
    if rebuild:
        report.checks.append(check_digest(engine, stage, image_id, base_image, lock, mirror))
    else:
        report.checks.append(Check("digest", None, "not compared (--rebuild builds this commit afresh and compares image IDs)"))
    return report


# --- records beside the build ----------------------------------------------------------------

RECORDS = ROOT / "build"


def export_sbom(engine: Engine, image: str, name: str, out_dir: Path | None = None, found: dict | None = None) -> Path | None:
    """Copy the image's SBOM out beside the build: ``build/sbom/NAME.cdx.json``. None if it has none. ``found``: what
    inventory.py already read in the image."""
    from sglang_stack.atomic import write as atomic_write

    sbom = (found if found is not None else inventory(engine, image, []))["sbom"]
    if not isinstance(sbom, dict):
        return None
    path = (out_dir or RECORDS / "sbom") / f"{name.replace('/', '_').replace(':', '_')}.cdx.json"
    atomic_write(path, json.dumps(sbom, indent=2, sort_keys=True) + "\n")
    return path


def record_path(image_id: str, out_dir: Path | None = None) -> Path:
    return (out_dir or RECORDS / "verified") / f"{image_id.removeprefix('sha256:')}.json"


def write_record(report: Report, out_dir: Path | None = None) -> Path:
    """What `invoke verify` found for an image ID, for `invoke bench` to cite (build/verified/ID.json)."""
    from sglang_stack.atomic import write as atomic_write
    from sglang_stack.image.build import checkout

    path = record_path(report.image_id, out_dir)
    data = {"image": report.image, "id": report.image_id, "stage": report.stage, "ok": report.ok,
            "checkout": checkout(), "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks]}
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def read_record(image_id: str, out_dir: Path | None = None) -> dict | None:
    path = record_path(image_id, out_dir)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
