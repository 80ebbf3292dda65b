"""Install one hashed requirement file, as every install step of the Dockerfile does (runs in the image, standard library only).

    python3 -B -m sglang_stack.image.steps.install NAME --stage STAGE [--target DIR] [--slim]
    python3 -B -m sglang_stack.image.steps.install build-tools --scratch DIR
    python3 -B -m sglang_stack.image.steps.install build-tools --run STEP [ARGS...]

NAME is a file of ``/build/requirements`` (``NAME.txt``, which ``invoke render`` writes from versions.lock
and the download steps mount at /build) or the path of a requirement file. In the one step, so that
nothing of it reaches another layer:

1. the file through the mirror: with ``MIRROR=1`` (``invoke build --mirror``) pip gets no index and each
   URL requirement names the mirror's file of the same name, ``/mirror/wheels/FILE``; the sha256 is the same;
2. ``pip install --no-deps --require-hashes --only-binary=:all: --no-compile --report``: wheels only, each
   checked against its sha256, nothing resolved (the locks are complete), no .pyc from pip;
3. with ``--slim``, what nothing in the image loads is removed (``slim.py``, docker/slim.toml);
4. the hash-checked .pyc files of exactly what it installed (``pyc.py``);
5. the SBOM's record of every wheel and its sha256 (``sbom.py record``);
6. for the venv (no ``--target``), what ``pip list`` says is installed, sorted, in ``INSTALLED``.

``--scratch DIR`` installs into a throw-away tree for the rest of the step (the build tools: the ELF
reader and the SBOM writer) and skips 3 to 5. ``--run STEP ARGS...`` then runs
``python3 -B -m sglang_stack.image.steps.STEP ARGS...`` with that tree (``/tmp/build-tools`` unless
``--scratch`` says otherwise) first on its PYTHONPATH, removes the tree, and exits with the step's
status: the build tools are in no layer, and no stage holds them for another to mount (a stage bind
mount from another stage fails under buildah when that stage comes from its layer cache). The CA bundle build secret (``/run/secrets/ca``, for hosts
behind a TLS-inspecting proxy) is what pip trusts when it is there. Run it with ``-B``: the step's own
modules leave no .pyc behind either.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REQUIREMENTS = Path("/build/requirements")
CA_SECRET = Path("/run/secrets/ca")
MIRROR_WHEELS = "/mirror/wheels"
SLIM_DECLARATIONS = Path("/opt/sglang-stack/slim.toml")
INSTALLED = Path("/opt/sglang-stack/installed.txt")  # `invoke verify` and the smoke test read it
URL = re.compile(r"@ https?://\S*/([^/\s]+) ")


def requirements(name: str) -> Path:
    path = Path(name) if "/" in name else REQUIREMENTS / f"{name}.txt"
    if not path.is_file():
        raise SystemExit(f"error: install: {path}: no such requirement file (is docker/build mounted at /build?)")
    return path


def pip_environment(environ: dict[str, str], mirror: bool) -> dict[str, str]:
    """pip's environment for the step: the CA bundle secret when given, and no index from the mirror."""
    env = dict(environ)
    if CA_SECRET.is_file() and CA_SECRET.stat().st_size:
        env.update(PIP_CERT=str(CA_SECRET), SSL_CERT_FILE=str(CA_SECRET))
        print("install: using the CA bundle build secret", flush=True)
    if mirror:
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=MIRROR_WHEELS)
        print("installing from the mirror: no index, no URL", flush=True)
    return env


def through_mirror(text: str) -> str:
    """Each URL requirement of ``text`` pointed at the mirror's file of the same name."""
    return URL.sub(lambda m: f"@ file://{MIRROR_WHEELS}/{m.group(1)} ", text)


def run(argv: list[str], env: dict[str, str] | None = None) -> None:
    print(f"install: $ {shlex.join(argv)}", flush=True)
    proc = subprocess.run(argv, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"error: install: {argv[2] if len(argv) > 2 else argv[0]} failed (exit {proc.returncode})")


def install(name: str, *, stage: str | None, target: Path | None = None, slim: bool = False,
            scratch: Path | None = None, environ: dict[str, str] | None = None) -> None:
    environ = dict(os.environ if environ is None else environ)
    mirror = environ.get("MIRROR", "0") == "1"
    source = requirements(name)
    with tempfile.TemporaryDirectory(prefix="sglang-stack-install-") as tmp:
        wanted = Path(tmp) / "requirements.txt"
        text = source.read_text(encoding="utf-8")
        wanted.write_text(through_mirror(text) if mirror else text, encoding="utf-8")
        report = Path(tmp) / "pip-report.json"
        into = scratch or target
        argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "--only-binary=:all:",
                "--no-compile", "--report", str(report), *(["--target", str(into)] if into else []), "-r", str(wanted)]
        run(argv, pip_environment(environ, mirror))
        if scratch:
            return
        from sglang_stack.image.steps import sbom
        from sglang_stack.image.steps import slim as slimmer

        if slim:
            site = sysconfig.get_paths()["purelib"]
            if slimmer.main(["--site", site, "--declarations", str(SLIM_DECLARATIONS)]) != 0:
                raise SystemExit("error: install: the slim step failed")
        # A fixed hash seed, as for compileall: nothing a step computes from string hashes reaches the bytes.
        run([sys.executable, "-B", "-m", "sglang_stack.image.steps.pyc", "--report", str(report),
             *(["--target", str(target)] if target else [])], {**environ, "PYTHONHASHSEED": "0"})
        print(f"sbom: recorded {sbom.record(report, stage)} wheels and their sha256", flush=True)
        if target is None:
            listed = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"], env=environ,
                                    capture_output=True, text=True, check=True).stdout
            INSTALLED.write_text("".join(sorted(line + "\n" for line in listed.splitlines() if line)))


def run_with_tools(scratch: Path, step: list[str], environ: dict[str, str] | None = None) -> int:
    """``python3 -B -m sglang_stack.image.steps.STEP ARGS`` with ``scratch`` first on its path; then no ``scratch``."""
    import shutil

    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(scratch), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-B", "-m", f"sglang_stack.image.steps.{step[0]}", *step[1:]]
    print(f"install: $ PYTHONPATH={shlex.quote(env['PYTHONPATH'])} {shlex.join(argv)}", flush=True)
    try:
        return subprocess.run(argv, env=env).returncode
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    step = argv[argv.index("--run") + 1:] if "--run" in argv else None
    if step is not None:
        argv = argv[:argv.index("--run")]
        if not step:
            raise SystemExit("error: install: --run needs a step (sbom write ..., binaries ...)")
    parser = argparse.ArgumentParser(prog="python3 -B -m sglang_stack.image.steps.install", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="a requirement file of /build/requirements (router, sglang, ...) or a path")
    parser.add_argument("--stage", help="the Dockerfile stage, for the SBOM's record (required unless --scratch)")
    parser.add_argument("--target", type=Path, help="install into this directory instead of the venv")
    parser.add_argument("--slim", action="store_true", help="remove what docker/slim.toml declares, once installed")
    parser.add_argument("--scratch", type=Path, help="a throw-away tree for this step: no slim, no .pyc, no record")
    parser.add_argument("--run", metavar="STEP ...", help="then run sglang_stack.image.steps.STEP with the tree on its "
                        "path, and remove the tree (the rest of the line is the step's)")
    args = parser.parse_args(argv)
    if step is not None and args.scratch is None:
        args.scratch = Path("/tmp/build-tools")
    if not args.scratch and not args.stage:
        parser.error("--stage is required (or --scratch DIR)")
    install(args.name, stage=args.stage, target=args.target, slim=args.slim, scratch=args.scratch)
    return 0 if step is None else run_with_tools(args.scratch, step)


if __name__ == "__main__":
    sys.exit(main())
