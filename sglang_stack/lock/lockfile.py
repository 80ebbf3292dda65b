"""versions.lock: ``load`` parses it (offline); ``check`` validates it, with the requirement locks beside it, and
returns a ``Lock``, every problem one line naming the key and the value, all of them reported together;
``check_all`` adds sglang's own requirements where its wheel is cached. Re-resolving is ``lock/resolve.py``,
hashing what was only published ``lock/artifacts.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglang_stack import ROOT
from sglang_stack.download import filename_of
from sglang_stack.errors import UserError
from sglang_stack.lock import parsed
from sglang_stack.lock.pins import Pin, read_pins, resolver_clock, stated_clock
from sglang_stack.lock.platforms import for_platform, requirements_name
from sglang_stack.lock.profiles import PER_RELEASE, Profile, display
from sglang_stack.lock.schema import check_structure as _check_structure
from sglang_stack.lock.wheels import sglang_requires

LOCK_PATH = ROOT / "versions.lock"
REQUIREMENTS_PATH = ROOT / "requirements.lock.txt"
ROUTER_REQUIREMENTS_PATH = ROOT / "requirements.router.lock.txt"

SHA256 = re.compile(r"[0-9a-f]{64}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
STATUSES = ("checked", "published")
TARGET_ENV = {  # the image's interpreter; python_version is filled in from the lock
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


class LockProblems(UserError):
    """Several one-line problems found in the lock, reported together."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems), code=2)
        self.problems = problems


def _parse(path: Path) -> dict:
    return parsed.toml(path, display(path))


# What a table that names one distribution ([router]) says of it: a profile's own such table writes all of them.
DISTRIBUTION_KEYS = ("name", "version", "url", "sha256", "status", "requires")


def load(path: Path = LOCK_PATH) -> dict:
    """Parse versions.lock; a syntax error is one line naming the file and line.

    A profile's lock (``extends = "../../versions.lock"``) is read with every table of the lock it extends
    that it does not write, except those of ``profiles.PER_RELEASE``; one it writes the same as that lock's is
    refused (a copy). The lock it extends extends nothing.
    """
    data = _parse(path)
    if "extends" not in data:
        return data
    extends = data.pop("extends")
    if not isinstance(extends, str) or not extends:
        raise UserError(f"{display(path)}: extends: {extends!r} should name the root's versions.lock")
    base_path = (path.parent / extends).resolve()
    root = (path.parent.parent.parent / "versions.lock").resolve()  # profiles/NAME/versions.lock -> the checkout's
    if base_path != root:
        raise UserError(f"{display(path)}: extends: {extends!r} names {base_path}; a profile extends the root's "
                        "versions.lock of its own checkout (\"../../versions.lock\")")
    if not base_path.is_file():
        raise UserError(f"{display(path)}: extends: {extends!r}: no such file ({base_path})")
    base = _parse(base_path)
    if "extends" in base:
        raise UserError(f"{display(path)}: extends: {display(base_path)} extends another lock; a profile extends the root's")
    if copies := [key for key in data if key not in PER_RELEASE and data[key] == base.get(key)]:
        raise UserError(f"{display(path)}: {copies[0]}: the same as in {display(base_path)}, which every profile "
                        "inherits: remove it here (each fact is written once)")
    merged = {**{key: value for key, value in base.items() if key not in PER_RELEASE}, **data}
    for key, table in data.items():
        # A table the profile writes (its own router, say) keeps what it does not write of the root's (the
        # router stage's Python and base image); a sub-table written the same as the root's is a copy. What
        # names one distribution is written whole or not at all: no requires of another release inherited.
        if key in PER_RELEASE or not isinstance(table, dict) or not isinstance(base.get(key), dict):
            continue
        if copies := [k for k, v in table.items() if isinstance(v, dict) and base[key].get(k) == v]:
            raise UserError(f"{display(path)}: {key}.{copies[0]}: the same as in {display(base_path)}, which every "
                            "profile inherits: remove it here (each fact is written once)")
        if "name" in table and (unwritten := [k for k in DISTRIBUTION_KEYS if k in base[key] and k not in table]):
            raise UserError(f"{display(path)}: {key}.{unwritten[0]}: missing; a profile that names its own "
                            f"{key} writes {', '.join(k for k in DISTRIBUTION_KEYS if k in base[key])}")
        merged[key] = {**base[key], **table}
    return merged


# --- the validated view ------------------------------------------------------


@dataclass(frozen=True)
class Artifact:
    """A file installed by URL and sha256: the sglang wheel or a [[wheel]] entry."""

    name: str
    version: str
    url: str
    sha256: str
    status: str
    requires: tuple[str, ...] = ()
    superseded: tuple[str, ...] = ()
    optional: bool = False  # a [[wheel]] installed only on request (a build option)

    @property
    def filename(self) -> str:
        return unquote(Path(urlparse(self.url).path).name)

    @property
    def env(self) -> str:
        """The NAME in ``NAME_VERSION`` / ``NAME_SHA256`` build arguments."""
        return re.sub(r"[^A-Z0-9]", "_", self.name.upper())


@dataclass(frozen=True)
class Override:
    package: str
    of: str
    declared: str
    reason: str
    version: str | None = None
    omit: bool = False
    link: str | None = None


@dataclass(frozen=True)
class Lock:
    """versions.lock after validation, plus what ``requirements.lock.txt`` pins."""

    path: Path
    data: dict
    sglang: Artifact
    wheels: tuple[Artifact, ...]
    overrides: tuple[Override, ...]
    router: Artifact | None = None
    router_requirements: dict[str, str] = field(default_factory=dict)  # requirements.router.lock.txt
    build_tools: tuple[Artifact, ...] = ()
    platform: str = "linux/amd64"
    requirement_pins: tuple[Pin, ...] = ()  # requirements.lock.txt's entries as read, with the hashes each allows

    @cached_property
    def requirements(self) -> dict[str, str]:
        """What requirements.lock.txt pins: canonical name -> version."""
        return {pin.name: pin.version for pin in self.requirement_pins}

    def marker_env(self) -> dict[str, str]:
        """The environment markers of the image's interpreter on this lock's platform."""
        machine = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[self.platform]
        version = self.python["version"]
        return dict(TARGET_ENV, platform_machine=machine, python_version=version, python_full_version=version + ".0")

    @property
    def requirements_path(self) -> Path:
        """The requirement lock of this lock's platform, beside it."""
        return self.path.with_name(requirements_name(self.platform))

    @property
    def profile(self) -> Profile:
        """The profile this lock is: named by its SGLang release, its files beside the lock."""
        return Profile(self.sglang.version, self.path.parent)

    @property
    def cuda(self) -> dict:
        return self.data["cuda"]

    @property
    def python(self) -> dict:
        return self.data["python"]

    @property
    def name(self) -> str:
        return self.data["image"]["name"]

    @property
    def base_image(self) -> str:
        return _reference(self.cuda["base"])

    @property
    def devel_image(self) -> str:
        """The build-only devel image (NVIDIA's libcuda.so link stub comes from it)."""
        return _reference(self.cuda["devel"])

    @property
    def default_wheels(self) -> tuple[Artifact, ...]:
        """The [[wheel]]s every build installs (optional ones only on request)."""
        return tuple(w for w in self.wheels if not w.optional)

    @property
    def jit(self) -> dict:
        return self.data["jit"]

    @property
    def constraints(self) -> tuple[dict, ...]:
        return tuple(self.data.get("constraint", []))

    @property
    def binary_exceptions(self) -> tuple[dict, ...]:
        return tuple(self.data.get("binary_exception", []))

    @property
    def tag(self) -> str:
        """The default image tag: ``sglang-stack:0.5.9-cu130``."""
        return f"{self.name}:{self.sglang.version}-{self.cuda['tag']}"

    @property
    def router_table(self) -> dict:
        return self.data["router"]

    @property
    def router_base_image(self) -> str:
        return _reference(self.router_table["base"])

    @property
    def router_tag(self) -> str:
        """The router stage's default tag, named by the profile as the image's is: ``sglang-stack-router:0.5.9``."""
        return f"{self.name}-router:{self.profile.name}"

    def pins(self) -> dict[str, str]:
        """Every pinned distribution: canonical name -> version."""
        out = dict(self.requirements)
        out[canonicalize_name(self.sglang.name)] = self.sglang.version
        for wheel in self.wheels:
            out[canonicalize_name(wheel.name)] = wheel.version
        return out

    def unverified(self) -> list[str]:
        """Base images named by tag alone: no digest could be read where the lock was made."""
        bases = (("cuda.base", self.cuda["base"]), ("cuda.devel", self.cuda["devel"]), ("router.base", self.router_table["base"]))
        return [key for key, base in bases if base["status"] == "unverified"]

    def published(self) -> list[str]:
        """Keys whose hash was copied from a publisher, not hashed by us."""
        keys = [f"wheel[{w.name}]" for w in self.wheels if w.status == "published"]
        if self.sglang.status == "published":
            keys.insert(0, "sglang")
        if self.cuda["base"]["status"] == "published":
            keys.insert(0, "cuda.base")
        if self.cuda["devel"]["status"] == "published":
            keys.insert(1, "cuda.devel")
        if self.router.status == "published":
            keys.append("router")
        if self.router_table["base"]["status"] == "published":
            keys.append("router.base")
        return keys


def _reference(base: dict) -> str:
    """``image:tag@digest``, or ``image:tag`` for a base whose digest is unverified."""
    return f"{base['image']}:{base['tag']}" + (f"@{base['digest']}" if base.get("digest") else "")


# --- checks -------------------------------------------------------------------


def check(
    path: Path = LOCK_PATH,
    requirements: Path | None = None,
    *,
    sglang_requires: list[str] | None = None,
    with_requirements: bool = True,
    platform: str = "linux/amd64",
) -> Lock:
    """Validate versions.lock (and requirements.lock.txt beside it, or the requirement lock of ``platform``).

    ``sglang_requires`` are the Requires-Dist lines of the pinned sglang wheel;
    when given, every conflict between them and our pins must be a declared
    override. ``with_requirements=False`` skips everything that depends on
    requirements.lock.txt (used while regenerating it). Raises ``LockProblems``
    listing every problem.
    """
    data = load(path)
    requirements = requirements or path.with_name(requirements_name(platform))
    problems: list[str] = []
    where = display(path)
    data = for_platform(data, platform, where)

    def bad(key: str, message: str) -> None:
        problems.append(f"{where}: {key}: {message}")

    _check_structure(data, bad)
    if problems:
        raise LockProblems(problems)

    sglang = _artifact(data["sglang"], "sglang")
    wheels = tuple(_artifact(w, w["name"]) for w in data.get("wheel", []))
    overrides = tuple(
        Override(
            package=o["package"],
            of=o["of"],
            declared=o["declared"],
            reason=o["reason"],
            version=o.get("version"),
            omit=bool(o.get("omit", False)),
            link=o.get("link"),
        )
        for o in data.get("override", [])
    )
    entries = tuple(read_pins(requirements, problems)) if with_requirements else ()
    router = _artifact(data["router"], data["router"]["name"])
    router_file = path.with_name(ROUTER_REQUIREMENTS_PATH.name)
    router_pinned = {pin.name: pin.version for pin in read_pins(router_file, problems)} if with_requirements else {}
    tools = tuple(_artifact(t, t["name"]) for t in data.get("build_tool", []))
    lock = Lock(path, data, sglang, wheels, overrides, router=router, router_requirements=router_pinned,
                build_tools=tools, platform=platform, requirement_pins=entries)

    _check_artifacts(lock, bad)
    if with_requirements and router_file.is_file():
        _check_router_requirements(lock, router_file.name, bad)
    _check_cuda_tags(lock, bad)
    if with_requirements:  # what is pinned is known once the requirements are
        _check_flashinfer_trio(lock, bad)
    if with_requirements:
        for each in (requirements, router_file):
            if each.is_file():
                _check_clock(lock, each, problems)
    if with_requirements and requirements.is_file():  # a missing file is already one problem
        _check_requirements_file(lock, requirements.name, problems)
        _check_overrides(lock, _sources(lock, sglang_requires), bad)
        _check_references(lock, bad)
    if problems:
        raise LockProblems(problems)
    return lock


def _sources(lock: Lock, sglang_requires: list[str] | None = None) -> dict[str, list[str]]:
    """Package -> the requirements it declares, for the override check: each URL wheel's, and sglang's own
    (its wheel's Requires-Dist) where the wheel is at hand."""
    sources = {canonicalize_name(w.name): list(w.requires) for w in lock.wheels}
    if sglang_requires is not None:
        sources["sglang"] = sglang_requires
    return sources


def _artifact(table: dict, name: str) -> Artifact:
    return Artifact(
        name=name,
        version=table["version"],
        url=table["url"],
        sha256=table["sha256"],
        status=table["status"],
        requires=tuple(table.get("requires", ())),
        superseded=tuple(table.get("superseded", ())),
        optional=bool(table.get("optional", False)),
    )


def _key(lock: Lock, art: Artifact) -> str:
    if art in lock.build_tools:
        return f"build_tool[{art.name}]"
    return {id(lock.sglang): "sglang", id(lock.router): "router"}.get(id(art), f"wheel[{art.name}]")


def _check_artifacts(lock: Lock, bad) -> None:
    for art in (lock.sglang, *lock.wheels, lock.router, *lock.build_tools):
        key = _key(lock, art)
        if not SHA256.fullmatch(art.sha256):
            bad(f"{key}.sha256", f"{art.sha256!r} is not 64 lowercase hex digits")
        for old in art.superseded:
            if not SHA256.fullmatch(old):
                bad(f"{key}.superseded", f"{old!r} is not 64 lowercase hex digits")
        if art.status not in STATUSES:
            bad(f"{key}.status", f"{art.status!r} is not one of {', '.join(STATUSES)}")
        try:
            version = Version(art.version)
        except InvalidVersion:
            bad(f"{key}.version", f"{art.version!r} is not a PEP 440 version")
            continue
        url = urlparse(art.url)
        if url.scheme != "https" or not url.netloc or url.query or url.fragment:
            bad(f"{key}.url", f"{art.url!r} is not a plain https:// URL")
            continue
        try:
            filename_of(art.url)  # the name its download is kept under: one plain file name
        except UserError as err:
            bad(f"{key}.url", str(err).split(": ", 1)[1])
            continue
        try:
            name, file_version, _, _ = parse_wheel_filename(art.filename)
        except InvalidWheelFilename:
            bad(f"{key}.url", f"{art.url!r} does not name a wheel file")
            continue
        if name != canonicalize_name(art.name) or file_version != version:
            bad(f"{key}.url", f"{art.filename!r} is not {art.name} {art.version}")


def cuda_tag(cuda_version: str) -> str:
    """``13.0.1`` -> ``cu130``: the local version tag of wheels built for it."""
    major, minor = cuda_version.split(".")[:2]
    return f"cu{major}{minor}"


def _check_cuda_tags(lock: Lock, bad) -> None:
    expected = cuda_tag(lock.cuda["version"])
    if lock.cuda["tag"] != expected:
        bad("cuda.tag", f"{lock.cuda['tag']!r} does not match cuda.version {lock.cuda['version']} (expected {expected!r})")
    for key in ("base", "devel"):
        tag = lock.cuda[key]["tag"]
        if not tag.startswith(lock.cuda["version"] + "-"):
            bad(f"cuda.{key}.tag", f"{tag!r} is not an image of CUDA {lock.cuda['version']}")
    for wheel in lock.wheels:
        local = Version(wheel.version).local if _is_version(wheel.version) else None
        if local and local.startswith("cu") and local != expected:
            bad(f"wheel[{wheel.name}].version", f"{wheel.version!r} is built for {local}, not {expected} (CUDA {lock.cuda['version']})")
        for tag in set(re.findall(r"(?<![a-z])cu\d{3}\b", unquote(wheel.url))):
            if tag != expected:
                bad(f"wheel[{wheel.name}].url", f"{wheel.url!r} points at {tag}, not {expected}")


def _is_version(text: str) -> bool:
    try:
        Version(text)
        return True
    except InvalidVersion:
        return False


def _check_flashinfer_trio(lock: Lock, bad) -> None:
    """flashinfer-python is pinned; flashinfer-cubin and -jit-cache, where pinned (or an option), carry its version.

    FlashInfer refuses to start when an installed cubin or jit-cache differs from its own version;
    either may be left out (versions.lock says why), and FlashInfer then builds what it needs.
    """
    pins = lock.pins()
    for override in lock.overrides:
        if override.version:
            pins.setdefault(canonicalize_name(override.package), override.version)
    if "flashinfer-python" not in pins:
        bad("flashinfer-python", "not pinned")
        return
    found = {name: Version(pins[name]).public for name in ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
             if name in pins and _is_version(pins[name])}
    if len(set(found.values())) > 1:
        bad("flashinfer", "versions differ (" + ", ".join(f"{n} {v}" for n, v in found.items()) + "); flashinfer refuses to start unless they match")


def _check_references(lock: Lock, bad) -> None:
    """[[constraint]]s admit what is pinned; [[binary_exception]]s name a pinned package."""
    pins = lock.pins()
    for entry in lock.constraints:
        req = Requirement(entry["requirement"])
        pin = pins.get(canonicalize_name(req.name))
        if pin is not None and not req.specifier.contains(Version(pin), prereleases=True):
            bad(f"constraint[{entry['requirement']}]", f"{REQUIREMENTS_PATH.name} pins {req.name} {pin}, which it excludes (run `invoke lock`)")
    for entry in lock.binary_exceptions:
        # The declarations are the x86-64 image's; the aarch64 set may lack a package (torchcodec has no aarch64 build).
        if canonicalize_name(entry["package"]) not in pins and lock.platform == "linux/amd64":
            bad(f"binary_exception[{entry['package']}]", "names a package the image does not install: remove the declaration")
    for req in lock.jit["toolchain"]:
        r = Requirement(req)
        pin = pins.get(canonicalize_name(r.name))
        if pin is not None and not r.specifier.contains(Version(pin), prereleases=True):
            bad("jit.toolchain", f"{req} but {REQUIREMENTS_PATH.name} pins {r.name} {pin} (run `invoke lock`)")
        elif pin is None:
            bad("jit.toolchain", f"{req} is not in {REQUIREMENTS_PATH.name} (run `invoke lock`)")
    # nvcc compiles against the CUDA runtime's headers in the same tree (nvidia/cu13); CCCL refuses a compiler of
    # another minor release ("CUDA compiler and CUDA toolkit headers are incompatible"), and every FlashInfer module,
    # ahead of time and at run time, fails to build.
    runtime = pins.get("nvidia-cuda-runtime")
    for req in lock.jit["toolchain"]:
        r = Requirement(req)
        wanted = next((s.version for s in r.specifier if s.operator == "=="), "")
        if canonicalize_name(r.name) in ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm") and runtime and wanted \
                and wanted.split(".")[:2] != runtime.split(".")[:2]:
            bad("jit.toolchain", f"{req}: its CUDA {'.'.join(wanted.split('.')[:2])} does not match the CUDA runtime "
                                 f"headers the image compiles against (nvidia-cuda-runtime {runtime}): pin the compiler "
                                 f"of that release (cuda-toolkit's nvcc extra)")


def _check_overrides(lock: Lock, sources: dict[str, list[str]], bad) -> None:
    """Every conflict between a declared requirement and our pins is a declared override."""
    pins = lock.pins()
    env = lock.marker_env()
    declared_by: dict[tuple[str, str], SpecifierSet] = {}
    for source, lines in sources.items():
        for line in lines:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            declared_by[(source, canonicalize_name(req.name))] = req.specifier

    overrides = {(canonicalize_name(o.of), canonicalize_name(o.package)): o for o in lock.overrides}
    for (source, name), spec in sorted(declared_by.items()):
        override = overrides.get((source, name))
        if override and override.omit:
            if name in pins:
                bad(f"override[{override.package}]", f"omit = true, but {name} {pins[name]} is pinned")
            continue
        pin = pins.get(name)
        if override:
            pin = override.version
            if name in pins and pins[name] != override.version:
                bad(f"override[{override.package}].version", f"{override.version!r} but {REQUIREMENTS_PATH.name} pins {pins[name]} (run `invoke lock`)")
        if pin is None:
            bad(name, f"{source} requires {name}{spec} but nothing pins it (run `invoke lock`)")
            continue
        admits = spec.contains(Version(pin), prereleases=True)
        if not override and not admits:
            bad(name, f"{source} declares {name}{spec} but the stack pins {pin}: declare an [[override]] with a reason, or pin a matching version")
        elif override and admits:
            bad(f"override[{override.package}]", f"{source} declares {name}{spec}, which already admits {pin}: remove the override")
        elif override and SpecifierSet(override.declared) != spec:
            bad(f"override[{override.package}].declared", f"{override.declared!r}, but {source} declares {str(spec)!r}")
    for (source, name), override in sorted(overrides.items()):
        if source in sources and (source, name) not in declared_by:
            bad(f"override[{override.package}]", f"{source} does not require {name}: remove the override")
        if source not in sources and source != "sglang":
            bad(f"override[{override.package}].of", f"{override.of!r} is neither sglang nor a [[wheel]]")


# --- requirements.lock.txt ----------------------------------------------------


def _check_clock(lock: Lock, path: Path, problems: list[str]) -> None:
    """The requirement lock was resolved at versions.lock's clock: a clock moved without a resolution (an edit, a bump
    cut off between its two writes) is named, not called ok."""
    said, want = stated_clock(path), resolver_clock(lock.data["resolve"])
    if said is not None and said != want:
        problems.append(f"{path.name}: resolved at \"{said}\", but {display(lock.path)} [resolve] says \"{want}\" "
                        "(a clock moved without a resolution): run `invoke lock`")


def _check_requirements_file(lock: Lock, name: str, problems: list[str]) -> None:
    for wheel in lock.wheels:
        if canonicalize_name(wheel.name) in lock.requirements:
            problems.append(f"{name}: pins {wheel.name} from PyPI, but versions.lock installs it by URL ([[wheel]] {wheel.name}): run `invoke lock`")
    if canonicalize_name(lock.sglang.name) in lock.requirements:
        problems.append(f"{name}: pins sglang itself; the SGLang stage installs it from [sglang]: run `invoke lock`")


def _check_router_requirements(lock: Lock, name: str, bad) -> None:
    """Everything the router wheel declares is pinned in its own file, at a version it admits."""
    pins = lock.router_requirements
    if canonicalize_name(lock.router.name) in pins:
        bad("router", f"{name} pins {lock.router.name} itself; the router stage installs it from [router]: run `invoke lock`")
    env = dict(TARGET_ENV, python_version=lock.router_table["python"], python_full_version=lock.router_table["python"] + ".0")
    for line in lock.router.requires:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            bad("router.requires", f"{lock.router.name} requires {req} but {name} does not pin {req.name} (run `invoke lock`)")
        elif not req.specifier.contains(Version(pin), prereleases=True):
            bad("router.requires", f"{lock.router.name} requires {req} but {name} pins {pin} (run `invoke lock`)")


def check_all(path: Path = LOCK_PATH, *, download: bool, platform: str = "linux/amd64") -> tuple[Lock, bool]:
    """Validate the lock, including sglang's declared requirements when the wheel is at hand.

    Returns the lock and whether the sglang cross-check ran.
    """
    # The whole lock is valid before anything is downloaded: a URL it names is fetched only once it passed.
    lock = check(path, platform=platform)
    requires = sglang_requires(lock, download=download)
    if requires is None:
        return lock, False
    problems: list[str] = []
    _check_overrides(lock, _sources(lock, requires),
                     lambda key, message: problems.append(f"{display(path)}: {key}: {message}"))
    if problems:
        raise LockProblems(problems)
    return lock, True


def summary(lock: Lock, cross_checked: bool) -> str:
    pins = lock.pins()
    published = lock.published()
    parts = [
        f"{len(pins)} pinned distributions ({len(lock.wheels)} by URL, {len(lock.requirements)} from PyPI, sglang)",
        f"{len(lock.overrides)} declared overrides",
        f"router: {lock.router.name} {lock.router.version} and {len(lock.router_requirements)} from PyPI",
    ]
    if published:
        parts.append(f"hashes not yet checked by us: {', '.join(published)} (`invoke lock --verify`)")
    if unverified := lock.unverified():
        parts.append(f"by tag, digest unverified: {', '.join(unverified)} (`invoke lock --verify` on a host that "
                     "reaches the registry records it)")
    if not cross_checked:
        parts.append("sglang's declared requirements not cross-checked: wheel not cached (run `invoke lock --check`)")
    return f"{display(lock.path)}: ok: " + "; ".join(parts)
