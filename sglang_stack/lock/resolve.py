"""Re-resolve requirements.lock.txt and requirements.router.lock.txt from versions.lock (network).

``uv pip compile`` with every setting the answer depends on read from versions.lock, so the
same lock gives the same bytes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sglang_stack.atomic import write as atomic_write
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import LOCK_PATH, REQUIREMENTS_PATH, ROUTER_REQUIREMENTS_PATH, Lock, check
from sglang_stack.lock.pins import resolver_clock
from sglang_stack.lock.platforms import requirements_name
from sglang_stack.lock.pins import REQUIREMENTS_HEADER


def resolve_inputs(lock: Lock) -> tuple[str, str]:
    """The ``uv pip compile`` input and override files for this lock."""
    lines = [f"{lock.sglang.name}=={lock.sglang.version}"]
    for wheel in lock.wheels:
        lines += [f"{r}  # required by {wheel.name} {wheel.version}" for r in wheel.requires]
    lines += [f"{r}  # jit.toolchain: the CUDA compiler the runtime JITs with" for r in lock.jit["toolchain"]]
    lines += [f"{c['requirement']}  # constraint: see versions.lock" for c in lock.constraints]
    overrides = []
    for override in lock.overrides:
        if override.omit:
            # An impossible marker drops the package from the resolution entirely.
            overrides.append(f"{override.package} ; sys_platform == 'never'  # omitted: see versions.lock")
        else:
            overrides.append(f"{override.package}=={override.version}  # override of {override.of}{override.declared}")
    for wheel in lock.wheels:
        overrides.append(f"{wheel.name} ; sys_platform == 'never'  # installed by URL: [[wheel]] {wheel.name}")
    return "\n".join(lines) + "\n", "\n".join(overrides) + "\n"


def router_resolve_inputs(lock: Lock) -> tuple[str, str]:
    """The router stage's ``uv pip compile`` input: the router wheel, whose own file is left out."""
    return f"{lock.router.name}=={lock.router.version}\n", ""


# uv pip compile names its inputs in the `# via` comments. They are written under these
# names and passed relative to the directory uv runs in, so the comments point back to
# versions.lock and never to a temporary path.
RESOLVE_INPUT = "versions.lock.in"
RESOLVE_OVERRIDES = "versions.lock.overrides"
# uv reads these from the environment. They change how it talks to the index, never what
# it resolves; every other UV_* variable (UV_EXTRA_INDEX_URL, UV_PRERELEASE, UV_RESOLUTION,
# UV_EXCLUDE_NEWER ...) is dropped, so only versions.lock decides the answer.
UV_TRANSPORT_ENV = ("UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_CONCURRENT_DOWNLOADS", "UV_INSECURE_HOST")


def resolve_command(lock: Lock, outfile: str, uv: str = "uv", *, router: bool = False) -> list[str]:
    """``uv pip compile`` with every setting the answer depends on, from versions.lock.

    For the SGLang image, or with ``router`` for the router stage's interpreter and
    platform. Run it in the directory that holds ``RESOLVE_INPUT`` and ``RESOLVE_OVERRIDES``.
    """
    res = lock.data["resolve"]
    python = lock.router_table["python"] if router else lock.python["version"]
    platform = lock.router_table["python_platform"] if router else res["python_platform"]
    # `invoke bump` moves one distribution's clock and no other's (uv's --exclude-newer-package).
    moved = [arg for name, instant in sorted(res.get("exclude_newer_package", {}).items())
             for arg in ("--exclude-newer-package", f"{name}={instant}")]
    return [
        uv, "pip", "compile", RESOLVE_INPUT,
        "--override", RESOLVE_OVERRIDES,
        "--output-file", outfile,
        "--python-version", python,
        "--python-platform", platform,
        "--index-url", res["index"],
        "--exclude-newer", res["exclude_newer"],
        *moved,
        "--no-emit-package", (lock.router if router else lock.sglang).name,
        "--generate-hashes",
        "--only-binary", ":all:",  # no sdists: nothing is compiled at image build time
        "--no-config",  # a uv.toml of the user or the host must not change the answer
        "--no-header",  # ours names versions.lock instead of uv's command line
        "--no-python-downloads",
        "--quiet",
    ]


def resolver_version(uv: str) -> str:
    """``uv==X.Y.Z`` for the uv binary at ``uv``."""
    from sglang_stack.shell import run

    out = run([uv, "--version"], capture=True, quiet=True, what="uv --version").stdout.split()
    return f"uv=={out[1]}" if len(out) >= 2 and out[0] == "uv" else f"uv=={' '.join(out)}"


def resolve(path: Path = LOCK_PATH, out_dir: Path | None = None) -> list[Path]:
    """Regenerate requirements.lock.txt and requirements.router.lock.txt from versions.lock (network).

    The same versions.lock and index give the same bytes: the inputs have fixed names,
    nothing in the output names a temporary path or a time, and every setting the
    resolution depends on (index, Python, platform, exclude_newer, the uv release) is
    read from versions.lock. The files go beside ``path``, or into ``out_dir``.
    """
    from sglang_stack.lock import exclusive

    with exclusive.writer(path):
        return _resolve(path, out_dir)


def _resolve(path: Path, out_dir: Path | None) -> list[Path]:
    import os

    from sglang_stack.shell import require, run

    uv = require("uv", "install the dev requirements (pip install --require-hashes --no-deps -r requirements-dev.txt)")
    lock = check(path, with_requirements=False)
    wanted, found = lock.data["resolve"]["resolver"], resolver_version(uv)
    if found != wanted:
        raise UserError(
            f"{path.name}: resolve.resolver: {wanted!r}, but {uv} is {found}: install requirements-dev.txt, "
            "or change resolve.resolver on purpose (another uv may resolve differently)"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in UV_TRANSPORT_ENV}
    written = []
    jobs = [(lock, False, REQUIREMENTS_PATH.name, resolve_inputs, _requirements_header),
            (lock, True, ROUTER_REQUIREMENTS_PATH.name, router_resolve_inputs, _router_requirements_header)]
    if isinstance(lock.data["sglang"].get("arm64"), dict):  # the same inputs, resolved for the aarch64 image
        arm = check(path, with_requirements=False, platform="linux/arm64")
        jobs.append((arm, False, requirements_name("linux/arm64"), resolve_inputs, _requirements_header))
    for each, router, name, inputs, header in jobs:
        output = (out_dir or path.parent) / name
        with tempfile.TemporaryDirectory(prefix="sglang-stack-lock-") as tmp:
            tmpdir = Path(tmp)
            requirements_in, overrides_in = inputs(each)
            (tmpdir / RESOLVE_INPUT).write_text(requirements_in)
            (tmpdir / RESOLVE_OVERRIDES).write_text(overrides_in)
            run(resolve_command(each, "compiled.txt", uv, router=router), cwd=tmpdir, env=env, what="uv pip compile")
            atomic_write(output, header(each) + (tmpdir / "compiled.txt").read_text())
        written.append(output)
    return written


def _router_requirements_header(lock: Lock) -> str:
    res, router = lock.data["resolve"], lock.router_table
    return (
        f"{REQUIREMENTS_HEADER}\n"
        f"#\n"
        f"# What the `router` image stage installs from {res['index']} beside {lock.router.name} {lock.router.version}\n"
        f"# (installed by URL and sha256 from versions.lock [router], so left out here), each with its\n"
        f"# sha256, resolved for Python {router['python']} on {router['python_platform']}. {resolver_clock(res)}.\n"
        f"# Resolver: {res['resolver']}. To change a pin, edit versions.lock and run `invoke lock`.\n"
    )


def _requirements_header(lock: Lock) -> str:
    res = lock.data["resolve"]
    wheels = ", ".join(w.name for w in lock.wheels)
    omitted = ", ".join(o.package for o in lock.overrides if o.omit) or "none"
    return (
        f"{REQUIREMENTS_HEADER}\n"
        f"#\n"
        f"# Every distribution the image installs from {res['index']}, each with its sha256,\n"
        f"# resolved for Python {lock.python['version']} on {res['python_platform']} from sglang {lock.sglang.version}'s\n"
        f"# requirements plus those of the URL wheels ({wheels}), which are installed by URL\n"
        f"# and therefore left out here, with every [[override]] of versions.lock applied.\n"
        f"# Omitted on purpose: {omitted}. {resolver_clock(res)}. Resolver: {res['resolver']}.\n"
        f"# `-r {RESOLVE_INPUT}` marks sglang's pin and the URL wheels' requirements,\n"
        f"# `--override {RESOLVE_OVERRIDES}` an [[override]]; both are written from versions.lock.\n"
        f"# To change a pin, edit versions.lock and run `invoke lock`.\n"
    )
