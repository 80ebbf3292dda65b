"""The whole runtime image, built here with declared stand-ins and checked from inside (``invoke smoke --target runtime``).

What no CI machine can fetch (the CUDA base and devel images, and the default profile's three URL
wheels) is replaced by what docker/standins.toml declares (``sglang_stack.smoke.substitutes``); a profile
whose every Python byte is on PyPI (``--profile 0.5.23``) has only the two images stood in. Everything
else is the real thing: a copy of this checkout whose versions.lock carries the stand-in wheels, rendered
by ``invoke render``'s own code, built by ``invoke build``'s own code on the Docker Engine
(BuildKit), with the real requirements.lock.txt, patch series, audits and binary checks. The
ahead-of-time FlashInfer step is skipped (``FLASHINFER_CUDA_ARCH_LIST=''``): on 2 cores it takes
six minutes, and tests/image/test_gpu_jit.py proves it on a GPU host.

Then, as a user's host would use the image: the imports, ``sglang.launch_server --help`` through
the entrypoint as uid 10001 with compose's read-only root, the health probe compose runs (against
nothing, then against a server that answers), SGLang's own serving benchmark sending a round as ``invoke bench
--generator sglang`` runs it (or its driver refusing a release without it), ``invoke verify``, ``invoke size --image`` on every
layer, and the SBOM's contents.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from sglang_stack.engine import DOCKER
from sglang_stack.errors import UserError
from sglang_stack.smoke import substitutes
from sglang_stack.image import store
from sglang_stack.shell import require, run
from sglang_stack.smoke.container import SmokeResult, copy_context

RUN_AS = "10001:10001"
SITE = "/opt/venv/lib/python3.12/site-packages"
IMAGE_NAME = "localhost/sglang-stack-smoke-runtime"


def standin_wheels(standins: substitutes.Standins) -> list[Path]:
    from sglang_stack.download import fetch

    return [fetch(w.url, w.sha256) for w in standins.wheels]


def prepare_context(workdir: Path, standins: substitutes.Standins, wheels: list[Path], prefix: str = ""):
    """A copy of this checkout with the stand-in lock of the profile at ``prefix`` (``""``: the default, or
    ``profiles/NAME/``), checked and rendered by the project's own code."""
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.image import render as rendermod
    from sglang_stack.lock.pins import read_pins
    from sglang_stack.lock.wheels import wheel_requires

    context = copy_context(workdir / "context")
    folder = context / prefix
    lock_path = folder / "versions.lock"
    if standins.wheels:
        # What each stand-in declares unconditionally on Linux: extras are not installed.
        requires = {w.name: [r for r in wheel_requires(path) if "extra ==" not in r]
                    for w, path in zip(standins.wheels, wheels)}
        problems: list[str] = []
        pinned = {pin.name for pin in read_pins(folder / "requirements.lock.txt", problems)}
        lock_path.write_text(substitutes.overlay(lock_path.read_text(), standins, requires, pinned))
    lock, _ = lockmod.check_all(lock_path, download=False)
    rendermod.render(lock, output=folder / "docker" / "Dockerfile", patches_dir=rendermod.patches_of(lock))
    return context, lock


def request(context: Path, tag: str, base: str, devel: str, prefix: str = ""):
    """``invoke build``'s request for the runtime target on the stand-ins: the devel stand-in, no ahead-of-time
    FlashInfer step (nvcc's output is not what the stand-ins check)."""
    from sglang_stack.download import ca_bundle
    from sglang_stack.image import build as buildmod

    ca = ca_bundle()
    return buildmod.BuildRequest(
        engine=DOCKER,
        tag=tag,
        target="runtime",
        base_image=base,
        build_args={"DEVEL_IMAGE": devel, "FLASHINFER_CUDA_ARCH_LIST": ""},
        ca_bundle=Path(ca) if ca else None,
        context=context,
        dockerfile=context / prefix / "docker" / "Dockerfile",
        source_date_epoch=buildmod.commit_epoch(),
        provenance=buildmod.provenance_args(context / prefix / "docker" / "Dockerfile"),
    )


def build(context: Path, tag: str, base: str, devel: str, prefix: str = "") -> str:
    """``invoke build``'s own build of the runtime target on the stand-in base; returns the image ID."""
    from sglang_stack.image import build as buildmod

    _, image_id = buildmod.build(request(context, tag, base, devel, prefix))
    return image_id


def docker_run(image: str, *args: str, entrypoint: str | None = None, env: dict[str, str] | None = None,
               mounts: tuple[str, ...] = (), check: bool = False):
    """``docker run`` as compose runs the services: uid 10001, read-only root, a tmpfs /tmp, no capabilities,
    and a volume at /home/sglang/.cache (compose's cache volume; anonymous here, removed with the container)."""
    argv = ["docker", "run", "--rm", "--user", RUN_AS, "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--network", "none", "--mount", "type=volume,target=/home/sglang/.cache"]
    for key, value in (env or {}).items():
        argv += ["--env", f"{key}={value}"]
    for mount in mounts:
        argv += ["--mount", mount]
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    return run([*argv, image, *args], capture=True, check=check, what="docker run")


def smoke(*, keep: bool = False, profile: str | None = None) -> SmokeResult:
    """Build the profile's runtime image with the stand-ins it needs, check it from inside, remove what it made
    unless ``keep``."""
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import profiles

    require("docker", "install Docker (the whole-image smoke builds on the Docker Engine with BuildKit)")
    chosen = profiles.get(profile)
    result = SmokeResult()
    start = time.monotonic()
    standins = substitutes.load().for_lock(lockmod.load(chosen.lock))
    wheels = standin_wheels(standins)
    header = substitutes.header_text(standins, chosen.requirements)
    result.timings["stand-in wheels"] = time.monotonic() - start
    t0 = time.monotonic()
    base, devel = substitutes.make_images(DOCKER, standins, wheels, header)
    result.timings["stand-in images"] = time.monotonic() - t0
    tag = f"{IMAGE_NAME}:{'' if chosen.default else chosen.name + '-'}{store.run_id()}"
    print(f"smoke: this run's image: {tag}" + ("" if keep else " (removed at the end; --keep keeps it)"), flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="sglang-stack-runtime-smoke-") as tmp:
            context, lock = prepare_context(Path(tmp), standins, wheels, chosen.prefix)
            t0 = time.monotonic()
            build(context, tag, base, devel, chosen.prefix)
            result.timings["build runtime"] = time.monotonic() - t0
            result.size = store.size(DOCKER, tag)
            t0 = time.monotonic()
            check_image(tag, context, lock, standins, result, chosen.name)
            result.timings["checks"] = time.monotonic() - t0
    finally:
        if not keep:
            store.remove(DOCKER, tag)
    result.timings["total"] = time.monotonic() - start
    return result


# Not the model or HTTP server modules: they load sgl-kernel's ops, which need the driver's libcuda.so.1, and only the
# NVIDIA container runtime on a GPU host provides it.
IMPORTS = """
import importlib.metadata as m, json, sys
import torch, torchvision, flashinfer, triton, sglang, sglang.srt.server_args
import sglang_stack.entrypoints.health, sglang_stack.entrypoints.serve
names = ("torch", "torchvision", "sgl-kernel", "sglang-kernel", "flashinfer-python", "triton", "sglang")
print(json.dumps({n: m.version(n) for n in names if any(True for _ in m.distributions(name=n))}))
"""

# A server that answers /health with 200 on the port the probe defaults to, then compose's own
# healthcheck command, before and after the server starts: the probe must fail, then pass.
PROBE = """
import http.server, json, subprocess, sys, threading
test = json.loads(sys.argv[1])
before = subprocess.run(test, capture_output=True, text=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 30000), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
after = subprocess.run(test, capture_output=True, text=True)
print(json.dumps({"before": before.returncode, "before_out": (before.stdout + before.stderr).strip()[-300:],
                  "after": after.returncode, "after_out": (after.stdout + after.stderr).strip()[-300:]}))
"""


# `invoke bench --generator sglang` in the image, as bench/upstream.py starts it: the driver reads one round on stdin
# and SGLang's own benchmark sends it to a server on the container's loopback that streams as SGLang's /generate
# does (four tokens, the last event with an accept length), counted with a word-level tokenizer made here.
BENCHMARK = """
import http.server, json, os, subprocess, sys, threading
tok = "/tmp/tokenizer"
os.makedirs(tok)
vocab = {w: i for i, w in enumerate(["[UNK]", "prompt", "number"])}
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}, open(tok + "/tokenizer.json", "w"))
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}, open(tok + "/tokenizer_config.json", "w"))
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["sampling_params"]["max_new_tokens"]
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for k in range(1, n + 1):
            meta = {"completion_tokens": k, "finish_reason": {"type": "length"} if k == n else None}
            meta.update({"spec_accept_length": 2.5} if k == n else {})
            self.wfile.write(b"data: " + json.dumps({"text": "number " * k, "meta_info": meta}).encode() + b"\\n\\n")
        self.wfile.write(b"data: [DONE]\\n\\n")
    def do_GET(self):
        self.send_response(404); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
plan = {"base_url": "http://127.0.0.1:%d" % srv.server_port, "backend": "sglang", "model": None,
        "rows": [{"prompt": "prompt number", "prompt_len": None, "output_len": 4}] * 4, "max_concurrency": 2,
        "request_rate": "inf", "warmup": 1, "ignore_eos": True, "stream": True, "seed": 0, "timeout": 120}
proc = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.benchmark", "--tokenizer", tok],
                      input=json.dumps(plan) + "\\n", capture_output=True, text=True, timeout=600)
lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
made = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.prompts", "random-ids", "--tokenizer", tok,
                       "--num-prompts", "2", "--input-len", "5", "--output-len", "3", "--range-ratio", "1",
                       "--token-ids"], capture_output=True, text=True, timeout=600)
print(json.dumps({"rc": proc.returncode, "lines": lines, "stderr": proc.stderr.strip().splitlines()[-1:],
                  "prompts": json.loads(made.stdout) if made.returncode == 0 else made.stderr.strip()[-300:]}))
"""


def benchmark_check(tag: str, version: str, result: SmokeResult) -> None:
    """SGLang's benchmark (``version``'s: 0.5.9's ``sglang.bench_serving`` or 0.5.23's ``sglang.benchmark.serving``)
    sends a round from the image, and each request's accept length is the server's."""
    proc = docker_run(tag, "-c", BENCHMARK, entrypoint="python3")
    got = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else {}
    lines, last = got.get("lines", []), "".join(got.get("stderr", []))
    failed = (f"exit {got['rc']}: {last or json.dumps(lines)[-300:]}" if got
              else proc.stderr.strip()[-300:] or f"exit {proc.returncode}")
    outputs = lines[1].get("outputs", []) if len(lines) == 2 else []
    ok = (got.get("rc") == 0 and lines[0].get("ready") == version and len(outputs) == 4
          and all(o["success"] and o["output_len"] == 4 and o["spec"].get("spec_accept_length") == 2.5 for o in outputs))
    result.record("SGLang's own benchmark sends a round from the image, as `invoke bench --generator sglang` runs it",
                  ok, f"SGLang {version} ({lines[0].get('module')}): 4 requests of 4 tokens, accept length 2.5" if ok
                  else failed)
    made = got.get("prompts")
    rows = made.get("rows") if isinstance(made, dict) else None
    ok = (isinstance(rows, list) and len(rows) == 2
          and all(len(r["prompt"]) == 5 and r["prompt_len"] == 5 and r["output_len"] == 3 for r in rows))
    result.record("SGLang's own adapter makes `invoke bench --dataset random`'s prompts in the image", ok,
                  f"SGLang {version}'s random-ids: 2 prompts of 5 token ids, 3 tokens to generate each" if ok
                  else str(made or failed)[-300:])


def compose_healthcheck() -> list[str]:
    """The healthcheck command compose gives its first server (resolved as `invoke up` resolves it), without its CMD marker."""
    from sglang_stack.services import composefile

    proj = composefile.project()
    test = composefile.service(proj.names(composefile.SERVER)[0], proj.env).healthcheck["test"]
    return test[1:] if test[0] in ("CMD", "CMD-SHELL") else test


def check_image(tag: str, context: Path, lock, standins: substitutes.Standins, result: SmokeResult,
                profile: str | None = None) -> None:
    """Every check from inside the built image, and of it, as a user's host would make them."""
    from sglang_stack.image import size as sizemod
    from sglang_stack.image import verify as verify_image
    from sglang_stack.image.render import patches_of
    from sglang_stack.patching.patches import read_series

    proc = docker_run(tag, "-c", IMPORTS, entrypoint="python3")
    versions = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else {}
    torch = next((w.version for w in standins.wheels if w.name == "torch"), None) or lock.pins()["torch"]
    want = {"torch": torch, "sglang": lock.sglang.version}
    wrong = {k: versions.get(k) for k, v in want.items() if versions.get(k) != v}
    result.record("torch, torchvision, flashinfer, triton and the patched sglang import as uid 10001",
                  proc.returncode == 0 and not wrong,
                  json.dumps(versions) if proc.returncode == 0 and not wrong else (proc.stderr.strip()[-300:] or json.dumps(wrong)))

    proc = docker_run(tag)  # the image's own ENTRYPOINT and CMD (--help), as `docker compose run` would start it
    out = proc.stdout + proc.stderr
    result.record("the entrypoint runs sglang.launch_server --help", proc.returncode == 0 and "--speculative-algorithm" in out,
                  "usage and --speculative-algorithm printed" if proc.returncode == 0 else out.strip()[-300:])

    with tempfile.TemporaryDirectory(prefix="sglang-stack-smoke-key-") as tmp:
        key = Path(tmp) / "key"
        secret = f"sk-smoke-{store.run_id()}"
        key.write_text(secret + "\n")
        key.chmod(0o644)
        proc = docker_run(tag, mounts=(f"type=bind,source={key},target=/run/secrets/sglang_api_key,readonly",))
        out = proc.stdout + proc.stderr
        result.record("the entrypoint hands the secret file's key to SGLang and never prints it",
                      proc.returncode == 0 and "--api-key (from the secret file)" in out and secret not in out,
                      "serve: ... --api-key (from the secret file)" if proc.returncode == 0 else out.strip()[-300:])

    test = compose_healthcheck()
    proc = docker_run(tag, "-c", PROBE, json.dumps(test), entrypoint="python3")
    probe = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else {}
    ok = probe.get("before") not in (None, 0) and probe.get("after") == 0 and "Traceback" not in probe.get("before_out", "")
    result.record("compose's healthcheck fails with one line while nothing answers, passes once /health answers",
                  ok, f"{' '.join(test)}: exit {probe.get('before')} ({probe.get('before_out', '')!r}), then {probe.get('after')}"
                  if probe else proc.stderr.strip()[-300:])

    benchmark_check(tag, lock.sglang.version, result)

    proc = docker_run(tag, "-m", "sglang_stack.image.steps.slim", "--check", "--site", SITE, "--declarations",
                      "/opt/sglang-stack/slim.toml", entrypoint="python3")
    result.record("nothing docker/slim.toml removes is in the image", proc.returncode == 0,
                  (proc.stdout.strip() or proc.stderr.strip())[-300:])

    report = verify_image.verify(DOCKER, tag, root=context, lock_path=lock.path)
    for line in report.lines():
        print(f"smoke: verify: {line}", flush=True)
    result.record("invoke verify passes against the stand-in lock", report.ok, f"{len(report.checks) - report.failed}/{len(report.checks)} checks")

    layers = sizemod.budget(lock, "runtime", aot=False, apt=False)
    lines, off = sizemod.compare(layers, sizemod.built_layers(DOCKER, tag), 0.15)
    for line in lines:
        print(f"smoke: size: {line}", flush=True)
    result.record("every layer within 15% of invoke size's budget", off == 0, sizemod.total_line(layers, "runtime"))

    # SGLang's own decisions, run in this image at compose's and k8s's settings, against the profile's table: the
    # table the ahead-of-time step read, and docs/settings*.md, say what this image's SGLang does.
    from sglang_stack.image import derive

    said: list[str] = []
    changed = derive.settings(derive.Request(image=tag, engine=DOCKER, profile=profile, check=True), say=said.append)
    result.record("SGLang's own settings in the image are what the profile's table records", not changed,
                  said[-1] if not changed else "; ".join(changed[:3]))

    with tempfile.TemporaryDirectory(prefix="sglang-stack-smoke-sbom-") as tmp:
        path = verify_image.export_sbom(DOCKER, tag, "smoke", Path(tmp))
        sbom = json.loads(path.read_text()) if path else {}
    components = sbom.get("components", [])
    names = {(c.get("name"), c.get("version")) for c in components}
    files = {c.get("name") for c in components if c.get("type") == "file"}
    missing = [f"{n} {v}" for n, v in [("torch", want["torch"]), ("sglang", lock.sglang.version)] if (n, v) not in names]
    series = read_series(patches_of(lock))
    stub = next((f for f in files if f.endswith("/lib/stubs/libcuda.so")), None)
    patches = sorted(f for f in files if f.startswith("patches/"))
    if stub is None:
        missing.append("the link stub (*/lib/stubs/libcuda.so)")
    if len(patches) != len(series):
        missing.append(f"patches: {len(patches)} listed ({', '.join(patches) or 'none'}), the series has {len(series)}")
    ok = bool(components) and not missing
    result.record("the SBOM lists torch, sglang, every patch and the link stub", ok,
                  f"{len(components)} components, {len(patches)} patches, stub {stub}" if ok else f"missing {'; '.join(missing)}")

    # What `invoke publish` attests: every check of the runtime stage recorded its pass in the image, and the
    # final stage carries its provenance labels.
    from sglang_stack.release import predicate as pred

    try:
        made = pred.make(tag, store.labels(DOCKER, tag), verify_image.inventory(DOCKER, tag, []))
        result.record("every check of the runtime stage recorded its pass, with the provenance `invoke publish` attests",
                      True, f"{', '.join(sorted(made['verdicts']))}; revision {made['revision'] or 'unknown'}")
    except UserError as err:
        result.record("every check of the runtime stage recorded its pass, with the provenance `invoke publish` attests",
                      False, str(err))
