"""The profiles: one per SGLang release the stack builds, each a folder laid out like the checkout's root.

The root is the default profile, the mission's pins: ``versions.lock``, the requirement
locks beside it, ``patches/series``, ``docker/Dockerfile`` and ``docker/build/``. Another profile is
``profiles/NAME/``, holding the same files for its release. A profile is named by its SGLang release
(its lock's ``[sglang] version``, which the folder's name must equal).

A profile's versions.lock says ``extends = "../../versions.lock"``. What follows from an SGLang release
(``PER_RELEASE``: its CUDA, compiler, wheel, clock, URL wheels, overrides, constraints, binary exceptions
and accepted advisories) it writes itself and never inherits. Every other table (the image's name, the
Python minor, the build tools, the router, the size figures of the base's packages) it inherits from
the root's lock unless it writes its own; one written the same as the root's is refused, so each fact
is written once. A patch file is one file in the root's ``patches/`` whichever series names it; the
templates (``docker/*.j2``) are shared too.

``SGLANG_PROFILE`` picks the profile for Compose and Kubernetes (default: the root's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack.errors import UserError

PROFILES_DIR = ROOT / "profiles"
ENV = "SGLANG_PROFILE"
HELP = ("the profile: an SGLang release this checkout builds (profiles/NAME, or the default: the root's versions.lock); "
        "default: $SGLANG_PROFILE, else the root's")
# What a profile never inherits from the root's versions.lock: what follows from its SGLang release.
PER_RELEASE = ("cuda", "jit", "sglang", "resolve", "wheel", "override", "constraint", "binary_exception", "advisory")


@dataclass(frozen=True)
class Profile:
    """One profile's files, laid out as at the root."""

    name: str
    root: Path

    @property
    def default(self) -> bool:
        return self.root.resolve() == ROOT.resolve()

    @property
    def lock(self) -> Path:
        return self.root / "versions.lock"

    @property
    def requirements(self) -> Path:
        return self.root / "requirements.lock.txt"

    @property
    def series(self) -> Path:
        return self.root / "patches" / "series"

    @property
    def dockerfile(self) -> Path:
        return self.root / "docker" / "Dockerfile"

    @property
    def build_dir(self) -> Path:
        return self.root / "docker" / "build"

    @property
    def prefix(self) -> str:
        """The profile's folder relative to the build context, its checkout's root: ``""``, or ``profiles/NAME/``
        (in this checkout or a copy of it, such as the runtime smoke's context)."""
        root = self.root.resolve()
        if root.parent.name == PROFILES_DIR.name and (root.parent.parent / "versions.lock").is_file():
            return f"{PROFILES_DIR.name}/{root.name}/"
        return ""


def _version_of(lock: Path) -> str:
    from sglang_stack.lock import parsed

    version = parsed.toml(lock, display(lock)).get("sglang", {}).get("version")
    if not isinstance(version, str) or not version:
        raise UserError(f"{display(lock)}: sglang.version: missing (a profile is named by its SGLang release)")
    return version


def display(path: Path) -> str:
    """``path`` as messages name it: relative to the checkout inside it (``profiles/0.5.23/versions.lock``), else its name."""
    try:
        return path.resolve().relative_to(ROOT.resolve()).as_posix()
    except ValueError:
        return path.name


def default() -> Profile:
    return Profile(_version_of(ROOT / "versions.lock"), ROOT)


def available() -> dict[str, Profile]:
    """Every profile of this checkout by name, the default first, then by SGLang release."""
    from packaging.version import InvalidVersion, Version

    first = default()
    found = {first.name: first}
    others = []
    for lock in sorted(PROFILES_DIR.glob("*/versions.lock")) if PROFILES_DIR.is_dir() else []:
        name = lock.parent.name
        version = _version_of(lock)
        if version != name:
            raise UserError(f"{display(lock)}: sglang.version {version!r}: a profile's folder is named by its SGLang "
                            f"release (rename the folder to profiles/{version}, or fix the version)")
        if name in found:
            raise UserError(f"{display(lock)}: profile {name} is the default profile's release too (versions.lock)")
        others.append(name)

    def order(name: str):
        try:
            return (0, Version(name))
        except InvalidVersion:
            return (1, name)

    for name in sorted(others, key=order):
        found[name] = Profile(name, PROFILES_DIR / name)
    return found


def get(name: str | None = None, where: str | None = None) -> Profile:
    """The profile ``name`` (``--profile``), else ``$SGLANG_PROFILE``, else the default; an unknown one is one line.
    ``where``: where ``name`` was set, as the line names it (compose's ``SGLANG_PROFILE=NAME (.env)``); given, the
    process environment is not read."""
    if not name and where is None:
        name = os.environ.get(ENV, "")
        where = f"{ENV} {name!r}"
    profiles = available()
    if not name:
        return next(iter(profiles.values()))
    if name not in profiles:
        raise UserError(f"{where or f'--profile {name!r}'}: no such profile (this checkout has {', '.join(profiles)}; "
                        "`invoke bump sglang VERSION --new-profile` makes one)")
    return profiles[name]


def of_lock(path: Path) -> Profile:
    """The profile whose versions.lock is ``path`` (a lock outside the checkout is a profile rooted where it lies)."""
    path = Path(path)
    return Profile(_version_of(path), ROOT if path.resolve() == (ROOT / "versions.lock").resolve() else path.parent)
