"""``invoke bump NAME VERSION``: move one PyPI distribution of a profile, and nothing else.

1. The release's files come from the index's simple API (PEP 691): each file's sha256 and upload time.
2. What sglang and the URL wheels declare for NAME is read from their metadata: a version they exclude
   needs ``--override "reason"``, and becomes an ``[[override]]`` of the profile's versions.lock.
3. Only NAME's resolver clock moves: ``[resolve] exclude_newer_package`` gets NAME = one second after
   the release's last upload (uv's ``--exclude-newer-package``); every other distribution keeps
   ``exclude_newer``, so the rest of the resolution is the one it was.
4. ``invoke lock`` and ``invoke render`` for the profile; NAME must come out at VERSION.
5. The files that changed are returned. Any failure puts every file back as it was.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sglang_stack.atomic import write_all
from sglang_stack.errors import UserError, read_text
from sglang_stack.lock import wheels
from sglang_stack.lock.profiles import Profile, display

TIMEOUT_S = (5, 30)


def release_files(index: str, name: str, version: str) -> list[dict]:
    """``name==version``'s files on ``index`` (simple API, JSON): filename, sha256 and upload time of each."""
    import requests
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    from sglang_stack.download import ca_bundle

    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    print(f"bump: GET {url} (Accept: application/vnd.pypi.simple.v1+json)", file=sys.stderr, flush=True)
    try:
        resp = requests.get(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"}, timeout=TIMEOUT_S,
                            verify=ca_bundle() or True)
    except requests.RequestException as err:
        raise UserError(f"{url}: {err.__class__.__name__}: the index cannot be reached") from None
    if resp.status_code == 404:
        raise UserError(f"{name}: {index} has no such project")
    if resp.status_code != 200:
        raise UserError(f"{url}: HTTP {resp.status_code}")
    try:
        entries = resp.json()["files"]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{url}: not a PEP 691 answer (the index must serve application/vnd.pypi.simple.v1+json)") from None
    wanted, out = Version(version), []
    for entry in entries:
        filename = entry.get("filename", "")
        try:
            got = parse_wheel_filename(filename)[1] if filename.endswith(".whl") else parse_sdist_filename(filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if got == wanted and not entry.get("yanked"):
            out.append({"filename": filename, "sha256": (entry.get("hashes") or {}).get("sha256", ""),
                        "uploaded": entry.get("upload-time", ""), "url": entry.get("url", "")})
    if not out:
        raise UserError(f"{name} {version}: {index} has no such release (or only yanked files)")
    return out


def clock_after(files: list[dict]) -> str:
    """One second after the last upload of the release's files, as RFC 3339 (what uv's clock takes)."""
    times = []
    for f in files:
        try:
            times.append(datetime.fromisoformat(f["uploaded"].replace("Z", "+00:00")))
        except (AttributeError, ValueError):
            continue
    if not times:
        raise UserError(f"{files[0]['filename']}: the index gives no upload time, so no resolver clock can be moved to it")
    last = max(times).astimezone(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
    return last.strftime("%Y-%m-%dT%H:%M:%SZ")


def declared(lock, name: str, sglang_requires: list[str]) -> list[tuple[str, str]]:
    """``(source, specifier)`` of every declaration of ``name`` by sglang or a URL wheel, for the image's platform."""

    env = lock.marker_env()
    sources = {"sglang": sglang_requires, **{w.name: list(w.requires) for w in lock.wheels}}
    out = []
    for source, lines in sources.items():
        for line in lines:
            req = Requirement(line)
            if canonicalize_name(req.name) == name and (req.marker is None or req.marker.evaluate(env)):
                out.append((source, str(req.specifier)))
    return out


def edited_lock(text: str, path: Path, name: str, version: str, clock: str, conflicts: list[tuple[str, str]],
                reason: str | None, admitted: tuple[str, ...] = ()) -> str:
    """versions.lock's text with NAME's clock moved and, for each declaration VERSION breaks, an [[override]];
    an override of NAME by a source in ``admitted`` (whose declaration VERSION meets) goes: it overrides nothing."""
    import tomlkit

    doc = tomlkit.parse(text)
    if "exclude_newer_package" not in doc["resolve"]:
        # Right under exclude_newer, where a reader looks for the clock (appended, it would land below the comments
        # that open the next table).
        lines, inside = text.splitlines(keepends=True), False
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("["):
                inside = stripped == "[resolve]"
            elif inside and re.match(r"exclude_newer\s*=", stripped):
                lines.insert(i + 1, "# `invoke bump` moved each of these past exclude_newer, to just after its release.\n"
                                    "exclude_newer_package = {}\n")
                break
        doc = tomlkit.parse("".join(lines))
    doc["resolve"]["exclude_newer_package"][name] = clock
    overrides = doc.get("override")
    stale = [i for i, o in enumerate(overrides or []) if canonicalize_name(o["package"]) == name
             and canonicalize_name(o["of"]) in {canonicalize_name(a) for a in admitted}]
    for i in reversed(stale):
        del overrides[i]
    for source, spec in conflicts:
        existing = next((o for o in overrides or [] if canonicalize_name(o["package"]) == name
                         and canonicalize_name(o["of"]) == canonicalize_name(source)), None)
        if existing is not None:
            existing["version"] = version
            existing.pop("omit", None)
            continue
        if reason is None:
            raise UserError(f"{name} {version}: {source} declares {name}{spec}, which excludes it: give "
                            f"--override \"why the stack may take it anyway\" (it becomes an [[override]] of {display(path)})")
        entry = tomlkit.table()
        for key, value in (("package", name), ("version", version), ("of", source), ("declared", spec), ("reason", reason)):
            entry[key] = value
        if overrides is None:
            doc["override"] = tomlkit.aot()
            overrides = doc["override"]
        overrides.append(entry)
    return tomlkit.dumps(doc)


def _platforms(profile: Profile) -> list[str]:
    """The platforms the profile's lock builds for: linux/amd64, and linux/arm64 where it names the aarch64 wheel."""
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock.platforms import PLATFORMS

    try:
        data = lockmod.load(profile.lock)
    except UserError:
        return ["linux/amd64"]
    return [p for p in PLATFORMS if p == "linux/amd64" or isinstance(data.get("sglang", {}).get("arm64"), dict)]


def _snapshot(profile: Profile) -> dict[Path, str | None]:
    """Every file ``invoke lock`` and ``invoke render`` may write for ``profile``, every platform's, with its text now."""
    from sglang_stack.image.render import build_name, dockerfile_of
    from sglang_stack.lock.platforms import PLATFORMS, requirements_name

    paths = [profile.lock, profile.root / "requirements.router.lock.txt", profile.root / "README.md"]
    for platform in PLATFORMS:
        paths += [profile.root / requirements_name(platform), dockerfile_of(profile.dockerfile, platform),
                  *sorted((profile.dockerfile.parent / build_name(platform) / "requirements").glob("*.txt"))]
    return {p: (p.read_text() if p.is_file() else None) for p in paths}


def holders(requirements: Path, name: str) -> list[str]:
    """What ``requirements`` (uv's output) says holds ``name``: its ``# via`` lines."""
    out, inside = [], False
    for line in read_text(requirements).splitlines():
        if re.match(r"[A-Za-z0-9]", line):
            inside = canonicalize_name(re.split(r"[=<>!~ ;\\]", line, maxsplit=1)[0]) == name
        elif inside and (m := re.match(r"\s+#\s+(?:via\s+)?([A-Za-z0-9][\w.-]*)\s*$", line)):
            out.append(m.group(1))
    return [h for h in out if h != "via"]


def _changed(before: dict[Path, str | None], profile: Profile) -> list[Path]:
    after = _snapshot(profile)
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _restore(before: dict[Path, str | None], profile: Profile) -> None:
    now = _snapshot(profile)
    write_all({p: text for p, text in before.items() if text is not None and now.get(p) != text})
    for p, text in now.items():
        if before.get(p) is None and text is not None:
            p.unlink()


def bump(profile: Profile, name: str, version: str, override: str | None = None) -> list[Path]:
    """Move ``name`` to ``version`` in ``profile`` (network: the index, uv); the files that changed."""
    from sglang_stack.image import render as rendermod
    from sglang_stack.lock import exclusive, lockfile as lockmod
    from sglang_stack.lock import releases, resolve

    try:
        Version(version)
    except InvalidVersion:
        raise UserError(f"VERSION {version!r}: not a version (PEP 440), such as 4.58.0") from None
    if override is not None and len(override.strip()) < 10:
        raise UserError(f"--override {override!r}: say why the stack may take a version its dependents exclude")
    # The whole run holds the profile's lock: a second bump or `invoke lock` is refused, not lost.
    with exclusive.writer(profile.lock):
        read = read_text(profile.lock)
        lock, _ = lockmod.check_all(profile.lock, download=True)
        key = canonicalize_name(name)
        if key == canonicalize_name(lock.sglang.name):
            raise UserError(f"{name}: the SGLang release is what names a profile: `invoke bump sglang {version} --new-profile`")
        if any(canonicalize_name(w.name) == key for w in lock.wheels):
            raise UserError(f"{name}: installed by URL ([[wheel]] {name} of {display(profile.lock)}): edit that table, "
                            "not the resolver's clock")
        current = lock.requirements.get(key) or lock.router_requirements.get(key)
        if current is None:
            raise UserError(f"{name}: not a distribution of {display(profile.requirements)} or the router's lock")
        if Version(current) == Version(version):
            raise UserError(f"{name}: {display(profile.requirements)} already pins {current}")
        files = release_files(lock.data["resolve"]["index"], key, version)
        clock = clock_after(files)
        requires = wheels.sglang_requires(lock, download=True)
        declarations = declared(lock, key, requires)
        conflicts = [(source, spec) for source, spec in declarations
                     if not Requirement(f"x{spec}").specifier.contains(Version(version), prereleases=True)]
        admitted = tuple(source for source, _ in declarations if (source, _) not in conflicts)
        if read_text(profile.lock) != read:
            raise UserError(f"{display(profile.lock)}: changed while this bump read it (an editor?): nothing changed; "
                            "run the bump again")
        before = _snapshot(profile)
        try:
            write_all({profile.lock: edited_lock(read_text(profile.lock), profile.lock, key, version, clock, conflicts, override,
                                                 admitted)})
            resolve.resolve(profile.lock)
            after = lockmod.check(profile.lock)
            pinned = after.requirements.get(key) or after.router_requirements.get(key)
            if pinned is None or Version(pinned) != Version(version):
                held = holders(profile.requirements, key) or holders(profile.root / "requirements.router.lock.txt", key)
                raise UserError(f"{name} {version}: the resolution with its clock at {clock} pins {pinned or 'nothing'}: "
                                + (f"held by {', '.join(held)} ({display(profile.requirements)}'s # via)" if held else
                                   "another requirement holds it") + "; nothing changed")
            for platform in _platforms(profile):  # every platform the lock builds for, rendered from its own lock
                rendermod.render(lockmod.check(profile.lock, platform=platform),
                                 rendermod.dockerfile_of(profile.dockerfile, platform))
            final, cross_checked = lockmod.check_all(profile.lock, download=True)
            releases.check_lock(final)
        except BaseException:
            _restore(before, profile)
            raise
        return _changed(before, profile)


# --- a profile for a new SGLang release ------------------------------------------------------------------


def best_wheel(files: list[dict], python: str, platform: str) -> dict:
    """The file of ``files`` that pip would install for CPython ``python`` on ``platform`` (``x86_64-manylinux_2_39``)."""
    from packaging import tags
    from packaging.utils import parse_wheel_filename

    arch, _, libc = platform.partition("-")
    major, minor = (int(x) for x in python.split("."))
    glibc = int(libc.rsplit("_", 1)[1]) if libc.startswith("manylinux_2_") else 17
    platforms = [f"manylinux_2_{m}_{arch}" for m in range(glibc, 16, -1)] + [f"manylinux2014_{arch}", "linux_" + arch]
    order = list(tags.cpython_tags((major, minor), platforms=platforms)) + list(
        tags.compatible_tags((major, minor), platforms=platforms))
    rank = {tag: i for i, tag in enumerate(order)}
    best = None
    for f in files:
        if not f["filename"].endswith(".whl"):
            continue
        score = min((rank[t] for t in parse_wheel_filename(f["filename"])[3] if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, f)
    if best is None:
        raise UserError(f"{files[0]['filename'].split('-')[0]}: no wheel of this release installs on CPython {python} "
                        f"{platform} (the image's interpreter)")
    return best[1]


def day_after(files: list[dict]) -> datetime:
    """Midnight UTC after the release's last upload: the clock of everything the release was published against."""
    last = datetime.fromisoformat(clock_after(files).replace("Z", "+00:00"))
    return (last + timedelta(days=1)).replace(hour=0, minute=0, second=0)


def toolchain_of(index: str, pins: dict[str, str], names: list[str], python: str, platform: str) -> list[str]:
    """The JIT compiler pinned where NVIDIA pairs it with the resolved CUDA runtime: cuda-toolkit's own extras
    (``nvcc``, ``cccl``, ``crt``) name each package at that release. The resolved set alone may hold a newer compiler
    (humming-kernels asks for any nvcc: 13.4 beside CUDA 13.0's runtime for 0.5.23), which CCCL refuses beside the
    runtime's headers. Without cuda-toolkit in the set, what the resolution installs."""
    from sglang_stack import download

    toolkit = pins.get("cuda-toolkit")
    paired: dict[str, str] = {}
    if toolkit:
        wheel = best_wheel(release_files(index, "cuda-toolkit", toolkit), python, platform)
        for line in wheels.wheel_requires(download.fetch(wheel["url"], wheel["sha256"])):
            req = Requirement(line)
            exact = [s.version.removesuffix(".*") for s in req.specifier if s.operator == "=="]
            if req.marker is not None and "extra" in str(req.marker) and exact:
                paired.setdefault(canonicalize_name(req.name), exact[0])
    return [f"{n}=={paired.get(canonicalize_name(n)) or pins[canonicalize_name(n)]}" for n in names]


def _cuda_version(requirements: dict[str, str]) -> str | None:
    """The CUDA release the resolution installs: ``cuda-toolkit`` (13.0.3.0 -> 13.0.3), else the CUDA runtime's."""
    pin = requirements.get("cuda-toolkit") or requirements.get("nvidia-cuda-runtime")
    return ".".join(pin.split(".")[:3]) if pin else None


ARM64_PLATFORM = "aarch64-manylinux_2_39"  # the aarch64 image's resolver platform: the same glibc as the x86-64 one


def profile_lock(root_lock, version: str, wheel: dict, clock: datetime, cuda: str, toolchain: list[str],
                 arm64: dict | None = None) -> str:
    """The text of a new profile's versions.lock: what follows from the release, the rest inherited."""
    import tomlkit

    from sglang_stack.lock.lockfile import cuda_tag

    def base(table: dict) -> dict:
        old = root_lock.cuda["version"]
        return {"image": table["image"], "tag": table["tag"].replace(old, cuda, 1), "status": "unverified",
                "note": "No registry reaches the machines this lock was made on: `invoke lock --verify` on one that "
                        "reaches it records the digest; until then the build names the image by tag."}

    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"The profile of SGLang {version}: `invoke bump sglang {version} --new-profile` made it from the"))
    doc.add(tomlkit.comment("release's metadata; every table it does not write is the root's (sglang_stack/lock/profiles.py)."))
    doc.add("extends", "../../versions.lock")
    resolve = dict(root_lock.data["resolve"])
    resolve.pop("exclude_newer_package", None)
    resolve.update(exclude_newer=clock.strftime("%Y-%m-%dT%H:%M:%SZ"), apt_snapshot=clock.strftime("%Y%m%dT%H%M%SZ"))
    devel = base(root_lock.cuda["devel"]) | {"stub": root_lock.cuda["devel"]["stub"]}
    doc.add("cuda", {"version": cuda, "tag": cuda_tag(cuda), "base": base(root_lock.cuda["base"]) | _sizes(root_lock),
                     "devel": devel})
    doc.add("jit", {"toolchain": toolchain, "arch_list": root_lock.jit["arch_list"]})
    sglang = {"version": version, "url": wheel["url"], "sha256": wheel["sha256"], "status": "checked"}
    if arm64 is not None:  # the release has an aarch64 wheel: its image can be rendered and budgeted too
        sglang["arm64"] = {"url": arm64["url"], "sha256": arm64["sha256"], "status": "checked"}
        resolve["arm64_platform"] = ARM64_PLATFORM
    doc.add("sglang", sglang)
    doc.add("resolve", resolve)
    return tomlkit.dumps(doc)


def _sizes(root_lock) -> dict:
    return {k: root_lock.cuda["base"][k] for k in ("size", "unpacked", "size_status") if k in root_lock.cuda["base"]}


def new_profile(version: str) -> list[Path]:
    """Make ``profiles/VERSION`` from SGLang VERSION's metadata (network: the index, uv); the files it wrote.

    Its wheel is the one the image's interpreter installs; its clock the midnight after the release; every
    distribution comes from the index (no URL wheel); CUDA follows the resolved CUDA toolkit, and the JIT
    compiler is pinned where that toolkit's own extras pair it with its runtime (``toolchain_of``). The base
    images' digests are unverified.
    """
    from sglang_stack.image import render as rendermod
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import profiles, releases, resolve

    try:
        Version(version)
    except InvalidVersion:
        raise UserError(f"VERSION {version!r}: not a version (PEP 440), such as 0.5.23") from None
    existing = profiles.available()
    if version in existing:
        raise UserError(f"sglang {version}: profile {version} exists ({display(existing[version].lock)})")
    root = profiles.default()
    root_lock = lockmod.check(root.lock)
    res = root_lock.data["resolve"]
    files = release_files(res["index"], "sglang", version)
    wheel = best_wheel(files, root_lock.python["version"], res["python_platform"])
    try:
        arm64 = best_wheel(files, root_lock.python["version"], ARM64_PLATFORM)
    except UserError:
        arm64 = None  # a release without an aarch64 wheel: an x86-64 profile only
    clock = day_after(files)
    profile = Profile(version, profiles.PROFILES_DIR / version)
    names = [Requirement(r).name for r in root_lock.jit["toolchain"]]
    try:
        profile.root.mkdir(parents=True)
        # First with the root's CUDA and no compiler of ours, to learn what the release's own set installs; then
        # the compiler its CUDA toolkit pairs with that runtime.
        write_all({profile.lock: profile_lock(root_lock, version, wheel, clock, root_lock.cuda["version"], [], arm64)})
        resolve.resolve(profile.lock)
        pins = lockmod.check(profile.lock).requirements
        cuda = _cuda_version(pins) or root_lock.cuda["version"]
        if missing := [n for n in names if canonicalize_name(n) not in pins]:
            raise UserError(f"sglang {version}: its set installs no {', '.join(missing)}: the JIT compiler of "
                            f"{display(profile.lock)} [jit] toolchain must be chosen by hand")
        names = toolchain_of(res["index"], pins, names, root_lock.python["version"], res["python_platform"])
        write_all({profile.lock: profile_lock(root_lock, version, wheel, clock, cuda, names, arm64)})
        resolve.resolve(profile.lock)
        series = profile.series
        series.parent.mkdir(parents=True, exist_ok=True)
        write_all({series: f"# target: sglang {version}\n# The patches of profile {version}, in order: none yet. Each "
                           "patch of the root's series is either carried here or retired with its proof (docs/profiles.md).\n"})
        final, _ = lockmod.check_all(profile.lock, download=True)
        releases.check_lock(final)
        rendermod.render(final, profile.dockerfile)
    except BaseException:
        import shutil

        shutil.rmtree(profile.root, ignore_errors=True)
        raise
    return sorted(p for p in profile.root.rglob("*") if p.is_file())
