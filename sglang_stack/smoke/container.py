"""Container smoke test: build the real Dockerfile's stages daemonless and check them from inside.

Where there is no Docker engine, no registry and no GPU (CI), ``buildah`` builds
the rendered ``docker/Dockerfile`` on a local Debian base image made with
``debootstrap``, up to the ``sglang`` stage: the pinned sglang wheel from PyPI,
the patch series and the EAGLE-3 audit. Then commands run inside the built
image with ``buildah run`` check what was built.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack.engine import BUILDAH, Engine
from sglang_stack import ROOT
from sglang_stack.image import store
from sglang_stack.errors import UserError
from sglang_stack.shell import require, run

BASE_IMAGE = "localhost/sglang-stack-smoke-base:bookworm"
# Each run tags its images with its own run id, so two runs on one machine never share a name.
SMOKE_NAME = "localhost/sglang-stack-smoke"
KIMI_METHODS = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
KIMI_FILE = "sglang/srt/models/kimi_k25.py"


# --- containers ------------------------------------------------------------------


class Container:
    """A working container of an image, removed on exit, pass or fail."""

    def __init__(self, image: str):
        self.image = image
        self.name = ""

    def __enter__(self) -> "Container":
        self.name = run(["buildah", "from", "--pull-never", self.image], capture=True, what="buildah from").stdout.strip()
        return self

    def __exit__(self, *exc) -> None:
        if self.name:
            run(["buildah", "rm", self.name], capture=True, check=False, quiet=True)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(
            ["buildah", "run", "--isolation", "chroot", self.name, "--", *argv],
            capture=True,
            check=check,
            what=f"buildah run {argv[0]}",
        )

    def python(self, code: str, check: bool = True) -> str:
        return self.run("python3", "-c", code, check=check).stdout.strip()


def layer_blobs(ref: str, workdir: Path) -> list[bytes]:
    """Every layer of ``ref``, decompressed, via an OCI layout written by ``buildah push``."""
    layout = workdir / "oci"
    run(["buildah", "push", "--quiet", ref, f"oci:{layout}:smoke"], capture=True, what="buildah push")
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    out = []
    for layer in manifest["layers"]:
        data = (blobs / layer["digest"].split(":")[1]).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        out.append(data)
    return out


def find_in_layers(layers: list[bytes], needles: dict[str, bytes]) -> list[str]:
    """Names of ``needles`` found anywhere in the layers, gzip-compressed files inside them included."""
    return [name for name, needle in needles.items() if any(_contains(data, needle) for data in layers)]


def _contains(layer: bytes, needle: bytes) -> bool:
    if needle in layer:
        return True
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith((".gz", ".tgz")):
                try:
                    if needle in gzip.decompress(tar.extractfile(member).read()):
                        return True
                except (OSError, EOFError):
                    continue
    return False


# --- the smoke run --------------------------------------------------------------


@dataclass
class SmokeResult:
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    size: int = 0

    def record(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append((name, ok, detail))
        print(f"smoke: {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.checks)


def expected_patched_hashes(patches_dir: Path = ROOT / "patches") -> dict[str, str]:
    """sha256 of every file the series touches, after applying it on the host to the pinned wheel."""
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.patching import patches
    from sglang_stack.download import fetch

    table = lockmod.load()["sglang"]
    wheel = fetch(table["url"], table["sha256"])
    series = patches.read_series(patches_dir)
    with tempfile.TemporaryDirectory(prefix="sglang-stack-expected-") as tmp:
        patches.unpack_wheel(wheel, Path(tmp))
        patches.apply_series(Path(tmp), patches_dir, quiet=True)
        out = {}
        for patch in series:
            for rel in patches.touched_files(patch.path):
                out[rel] = hashlib.sha256((Path(tmp) / rel).read_bytes()).hexdigest()
    return out


def check_image(ref: str, result: SmokeResult, *, ca_marker: bytes | None, token: bytes | None) -> None:
    """Every check the smoke test makes from inside (and on the layers of) the built image."""
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.patching import patches
    from sglang_stack.image import render

    lock = lockmod.check()
    with Container(ref) as box:
        version = box.python("import importlib.metadata as m; print(m.version('sglang'))", check=False)
        result.record("installed sglang is the pinned version", version == lock.sglang.version, f"found {version!r}")

        expected = expected_patched_hashes()
        listing = " ".join(f"/opt/sglang/{rel}" for rel in sorted(expected))
        got = {}
        for line in box.run("sh", "-c", f"sha256sum {listing}").stdout.splitlines():
            digest, path = line.split(maxsplit=1)
            got[path.removeprefix("/opt/sglang/")] = digest
        bad = sorted(rel for rel in expected if got.get(rel) != expected[rel])
        result.record("patched files match what the series produces", not bad and bool(expected), ", ".join(bad) or f"{len(expected)} files")

        code = (
            "import ast, sys; tree = ast.parse(open('/opt/sglang/" + KIMI_FILE + "').read()); "
            "cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == 'KimiK25ForConditionalGeneration'); "
            "print(' '.join(sorted(f.name for f in cls.body if isinstance(f, ast.FunctionDef))))"
        )
        methods = set(box.python(code).split())
        missing = [m for m in KIMI_METHODS if m not in methods]
        result.record("KimiK25ForConditionalGeneration has the EAGLE-3 methods", not missing, "missing " + ", ".join(missing) if missing else ", ".join(KIMI_METHODS))

        audit = box.run(
            "python3", "-m", "sglang_stack.audit.eagle3", "--sglang-src", "/opt/sglang", "--arch", lock.data["image"]["audit_arch"],
            check=False,
        )
        summary = (audit.stdout.strip().splitlines() or [""])[-1]
        result.record("the EAGLE-3 audit passes inside the container", audit.returncode == 0, summary)

    labels = store.labels(BUILDAH, ref)
    wanted = dict(render.labels(lock, ROOT / "patches", "sglang"))
    wrong = sorted(k for k, v in wanted.items() if labels.get(k) != v)
    result.record("labels record the stage's pins and the series", not wrong, ", ".join(wrong[:5]) or f"{len(wanted)} labels")
    series = patches.read_series(ROOT / "patches")
    result.record(
        "labels name the applied series in order",
        labels.get("io.sglang-stack.patches", "").split() == render.series_numbers(series),
        labels.get("io.sglang-stack.patches", ""),
    )

    if ca_marker is not None or token is not None:
        with tempfile.TemporaryDirectory(prefix="sglang-stack-layers-") as tmp:
            layers = layer_blobs(ref, Path(tmp))
            needles = {k: v for k, v in (("CA bundle", ca_marker), ("HF token", token)) if v is not None}
            leaked = find_in_layers(layers, needles)
        result.record("no build secret in any layer", not leaked, ("leaked: " + ", ".join(leaked)) if leaked else f"{len(layers)} layers scanned")


def smoke_secrets(workdir: Path) -> tuple[Path, bytes, Path, bytes]:
    """A working CA bundle carrying a unique marker, and a dummy HF token, as files."""
    from sglang_stack.download import ca_bundle

    host = ca_bundle()
    if host is None:
        raise UserError("no CA bundle found on this host (set PIP_CERT or SSL_CERT_FILE)")
    marker = f"# sglang-stack smoke marker {secrets.token_hex(16)}\n".encode()
    ca = workdir / "ca.pem"
    # PEM readers skip text outside BEGIN/END blocks, so the marker leaves the bundle valid.
    ca.write_bytes(Path(host).read_bytes() + b"\n" + marker)
    token_value = f"hf_smoke{secrets.token_hex(16)}".encode()
    token = workdir / "hf_token"
    token.touch(mode=0o600)
    token.write_bytes(token_value)
    return ca, marker.strip(), token, token_value


def build_sglang_stage(base: str, tag: str, *, ca: Path | None, token: Path | None, context: Path = ROOT, capture: bool = False):
    """Build the Dockerfile's ``sglang`` stage with buildah; returns the completed process.

    Without ``--layers``: the build leaves exactly one image, the one named ``tag``.
    """
    from sglang_stack.image.build import BuildRequest

    request = BuildRequest(
        engine=BUILDAH,
        tag=tag,
        target="sglang",
        base_image=base,
        ca_bundle=ca,
        hf_token_file=token,
        isolation="chroot",
        layers=False,
        context=context,
        dockerfile=context / "docker" / "Dockerfile",
    )
    request.validate()
    return run(request.command(), capture=capture, check=not capture, what="buildah bud (sglang stage)")


def copy_context(dest: Path) -> Path:
    """A throwaway copy of what a build of docker/Dockerfile needs, to edit without touching the repo: what
    .dockerignore's allow-list lets into the build context (the one list of it), the templates the render reads,
    and every profile's files."""
    patterns = [line[1:].strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.startswith("!")]
    for rel in ("docker", "profiles"):
        shutil.copytree(ROOT / rel, dest / rel, ignore=shutil.ignore_patterns("__pycache__"))
    for pattern in patterns:
        if pattern == "mirror/wheels":  # the user's mirror, gigabytes a smoke build (MIRROR=0) never reads
            continue
        for path in ROOT.glob(pattern):
            target = dest / path.relative_to(ROOT)
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
            elif not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
    shutil.copy(ROOT / ".dockerignore", dest / ".dockerignore")
    return dest


def broken_patch_copy(workdir: Path) -> tuple[Path, str]:
    """A throwaway copy of the build context whose first patch no longer applies."""
    from sglang_stack.patching import patches

    dest = copy_context(workdir / "broken")
    first = patches.read_series(dest / "patches")[0]
    text = first.path.read_text().splitlines(keepends=True)
    # Corrupt the first context line of the first hunk: the hunk can no longer match.
    for i, line in enumerate(text):
        if line.startswith("@@"):
            j = next(k for k in range(i + 1, len(text)) if text[k].startswith(" "))
            text[j] = " # this context line does not exist upstream\n"
            break
    first.path.write_text("".join(text))
    return dest, first.name


def planted_variable_copy(workdir: Path, name: str = "SGLANG_PORT") -> Path:
    """A throwaway copy of the build context whose sglang-stage environment audit is told compose sets ``name``.

    As if compose.yaml set a variable docker/environment.toml does not declare (a ``NAME=WHERE`` argument of
    the audit, which the host-side check would have refused): the build must fail at the audit, naming the
    variable and the SGLang file that reads it.
    """
    dest = copy_context(workdir / "planted")
    dockerfile = dest / "docker" / "Dockerfile"
    marker = "envaudit --strict --root /opt/sglang\n"
    text = dockerfile.read_text()
    if marker not in text:
        raise UserError(f"{dockerfile}: no environment audit of /opt/sglang to plant {name} into")
    dockerfile.write_text(text.replace(marker, f"{marker[:-1]} {name}=compose\n", 1))
    return dest


def smoke(*, base: str = BASE_IMAGE, keep: bool = False, negative: bool = True) -> SmokeResult:
    """Build the sglang stage on the Debian base, check it from inside, then prove a bad patch and a planted variable fail.

    Removes exactly what it made, by name, unless ``keep``: its two images, and the
    base image if it had to make it (see ``store.BaseLease``).
    """
    require("buildah", "install buildah (apt-get install buildah)")
    result = SmokeResult()
    run_id = store.run_id()
    tag, broken, planted = (f"{SMOKE_NAME}-{run_id}:{kind}" for kind in ("sglang", "broken", "planted"))
    print(f"smoke: this run's images: {tag} {broken} {planted}" + ("" if keep else " (removed at the end; --keep keeps them)"),
          flush=True)
    start = time.monotonic()
    with store.BaseLease(BUILDAH, base, make=base == BASE_IMAGE, keep=keep, run=run_id) as leased:
        result.timings["base image"] = time.monotonic() - start
        try:
            with tempfile.TemporaryDirectory(prefix="sglang-stack-smoke-") as tmp:
                workdir = Path(tmp)
                ca, marker, token, token_value = smoke_secrets(workdir)
                t0 = time.monotonic()
                build_sglang_stage(leased, tag, ca=ca, token=token)
                result.timings["build sglang stage"] = time.monotonic() - t0
                result.size = store.size(BUILDAH, tag)
                check_image(tag, result, ca_marker=marker, token=token_value)
                if negative:
                    context, name = broken_patch_copy(workdir)
                    proc = build_sglang_stage(leased, broken, ca=ca, token=None, context=context, capture=True)
                    output = proc.stdout + proc.stderr
                    result.record("a broken patch fails the build and is named", proc.returncode != 0 and name in output, name)
                    proc = build_sglang_stage(leased, planted, ca=ca, token=None, context=planted_variable_copy(workdir),
                                              capture=True)
                    output = proc.stdout + proc.stderr
                    named = "SGLANG_PORT (set by compose) is not declared" in output and "sglang/srt/utils/common.py:" in output
                    result.record("a variable SGLang reads, set but undeclared, fails the build and names its reader",
                                  proc.returncode != 0 and named, "SGLANG_PORT: sglang/srt/utils/common.py")
        finally:
            if not keep:
                store.remove(BUILDAH, tag, broken, planted)
    result.timings["total"] = time.monotonic() - start
    return result


# --- on a GPU host with Docker ------------------------------------------------------

PROMPT = "The capital of France is"


def gpu_smoke(engine: Engine = Engine("docker"), services: tuple[str, ...] = (), keep: bool = False) -> SmokeResult:
    """Build the full image, then bring up each server of compose.yaml (or ``services``) with --wait, send one
    completion, take it down.

    For a host with Docker, the NVIDIA container toolkit, the GPUs and the model
    directories that .env names. Never run in CI, which has none of them.
    """
    from sglang_stack.image import build as buildmod
    from sglang_stack.services import compose, variables
    from sglang_stack.services import composefile
    from sglang_stack.doctor import checklist as doctor
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.serverapi import RequestFailed, post as http_post
    from sglang_stack.download import ca_bundle

    result = SmokeResult()
    lock = lockmod.check()
    proj = composefile.project(variables.environment())
    services = services or proj.names(composefile.SERVER)
    image = composefile.service(services[0], proj.env).image or lock.tag
    start = time.monotonic()
    ca = ca_bundle(explicit_only=True)
    buildmod.build(buildmod.BuildRequest(engine=engine, tag=image, ca_bundle=Path(ca) if ca else None))
    result.timings["build"] = time.monotonic() - start
    for name in services:
        svc = composefile.resolve(name, proj.env)
        doctor.preflight(engine, name, svc=svc)
        t0 = time.monotonic()
        try:
            compose.up(engine, svc, wait_timeout=composefile.wait_timeout(svc))
            result.timings[f"{name} up"] = time.monotonic() - t0
            body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
            try:
                status, raw = http_post(svc.url, "/generate", proj.api_key(), 300, body)
            except RequestFailed as err:
                status, raw = 0, str(err).encode()
            answer = json.loads(raw) if status == 200 else {}
            text = answer.get("text", "")
            result.record(f"{name}: one completion", status == 200 and bool(text.strip()), f"HTTP {status}: {text.strip()[:60]!r}")
            if svc.speculative:
                meta = answer.get("meta_info", {})
                result.record(
                    f"{name}: speculative decoding ({svc.speculative}) is on",
                    int(meta.get("spec_verify_ct") or 0) > 0,
                    f"spec_verify_ct={meta.get('spec_verify_ct')}, accept length={meta.get('spec_accept_length')}",
                )
        except UserError as err:
            result.record(f"{name}: up and healthy", False, str(err))
        finally:
            if not keep:
                compose.down(engine)
    result.timings["total"] = time.monotonic() - start
    return result
