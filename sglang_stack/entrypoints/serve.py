"""The image's entrypoint: SGLang's launch_server, with the API key from a secret file, never from a command line.

    python3 -m sglang_stack.entrypoints.serve [launch_server's arguments]

A key written as ``--api-key=...`` in a container's command shows in ``docker inspect``,
``docker compose config``, a pod's spec, and the process list of the host. So the key is a
file: ``$SGLANG_API_KEY_FILE``, by default ``/run/secrets/sglang_api_key`` (what compose.yaml's
secret and the Kubernetes render mount). It reaches SGLang through this process's own
``sys.argv``: SGLang runs in this process (``runpy``), whose command line, as
``/proc/PID/cmdline`` shows it, stays the one the container started with; SGLang's workers are
started by multiprocessing's spawn, whose command line carries no argument of ours. An empty or
missing file means no key. A key given on the command line anyway is refused, and
``SGLANG_API_KEY`` is dropped from the environment SGLang and its workers inherit. Patch 0005
keeps the key out of SGLang's own ``server_args=`` log line.

``SGLANG_STACK_SERVER`` names the module to run (default ``sglang.launch_server``).

Before SGLang starts, the GPUs are checked against the architectures the image's FlashInfer
modules were built for (``/opt/sglang-stack/flashinfer-arch-list``, also the image label
``io.sglang-stack.flashinfer.arch-list``): those modules hold code for exactly those GPUs and
FlashInfer loads them whatever the GPU, so on another one the first sampled request would fail
with "no kernel image" after a model load of many minutes. Such a GPU is refused at once, with
the build command that fits it. ``nvidia-smi`` answers (the NVIDIA runtime mounts it); without
it the check says so and lets SGLang start.

``PCIE_ALLREDUCE`` (auto, on, off) becomes ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`` here, for SGLang and every
worker it starts; one line says what was decided and why (``entrypoints/pcie_ipc.py``). ``SPECULATIVE_ADAPTIVE=1``
adds ``--speculative-adaptive`` where the image's SGLang has it (``entrypoints/adaptive.py``). ``DRAFTER=mla`` is
refused where the image's SGLang cannot load the MLA drafter, and a drafter whose config.json is the other one is
refused either way, before the target loads (``entrypoints/drafter.py``). Stdlib only: it runs inside the image.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

from sglang_stack.redact import key_flag

DEFAULT_KEY_FILE = "/run/secrets/sglang_api_key"
SERVER = "sglang.launch_server"


ARCH_FILE = "/opt/sglang-stack/flashinfer-arch-list"  # written by sglang_stack.image.steps.aot in the image build


def arch_covers(arch: str, capability: str) -> bool:
    """Whether code built for ``arch`` (``9.0a``, ``12.0``, ``10.0f``) runs on a GPU of ``capability`` (``9.0``).

    ``a`` targets use features of exactly that GPU; ``f`` ones run on its family (same major,
    minor at least theirs); plain ones on the same major with a minor at least theirs.
    """
    m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch.strip())
    c = re.fullmatch(r"(\d+)\.(\d+)", capability.strip())
    if not m or not c:
        return False
    major, minor, kind = int(m[1]), int(m[2]), m[3]
    have = (int(c[1]), int(c[2]))
    if kind == "a":
        return have == (major, minor)
    return have[0] == major and have[1] >= minor


def unsupported_gpus(arch_list: str, capabilities: list[str]) -> list[str]:
    """The compute capabilities in ``capabilities`` that no architecture of ``arch_list`` covers."""
    archs = arch_list.split()
    return sorted({c for c in capabilities if not any(arch_covers(a, c) for a in archs)})


def rebuild_hint(capabilities: list[str]) -> str:
    archs = " ".join(f"{c}a" for c in capabilities)
    return f'invoke build --cuda-arch-list "{archs}" (docs/image.md, GPUs the image is built for)'


def gpu_capabilities() -> tuple[list[str] | None, str]:
    """Each visible GPU's compute capability from nvidia-smi, or None and why not."""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"nvidia-smi did not answer ({err.__class__.__name__})"
    caps = [line.strip() for line in proc.stdout.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())]
    if proc.returncode != 0 or not caps:
        return None, f"nvidia-smi listed no GPU (exit {proc.returncode})"
    return caps, ""


def check_gpus(arch_file: str | None = None) -> str | None:
    """An error line when a visible GPU is outside the image's FlashInfer architectures; notes go to stdout."""
    try:
        arch_list = Path(arch_file or ARCH_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None  # not this stack's runtime image (or an older one): nothing to check against
    if not arch_list:
        print("serve: this image has no ahead-of-time FlashInfer modules (built with --cuda-arch-list ''): "
              "FlashInfer compiles each one at first use, for minutes", flush=True)
        return None
    caps, why = gpu_capabilities()
    if caps is None:
        print(f"serve: GPU architecture not checked against {arch_list}: {why}", flush=True)
        return None
    missing = unsupported_gpus(arch_list, caps)
    if missing:
        return (f"this image's FlashInfer kernels are built for {arch_list}, and this GPU is compute capability "
                f"{', '.join(missing)}: its first sampled request would fail with 'no kernel image'; build the "
                f"image for it: {rebuild_hint(missing)}")
    return None


class KeyError_(Exception):
    """A key file that exists but cannot be used; the message is the one line to print."""


def api_key(environ=os.environ) -> str | None:
    """The key in ``$SGLANG_API_KEY_FILE`` (default the compose/Kubernetes secret), or None."""
    path = Path(environ.get("SGLANG_API_KEY_FILE") or DEFAULT_KEY_FILE)
    if not path.exists():
        if environ.get("SGLANG_API_KEY_FILE"):
            raise KeyError_(f"SGLANG_API_KEY_FILE={path}: no such file")
        return None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise KeyError_(f"{path}: cannot read the API key ({err.__class__.__name__}); the container runs as uid {os.getuid()}") from None
    if any(c.isspace() for c in key):
        raise KeyError_(f"{path}: the API key contains whitespace; use one word (e.g. `openssl rand -base64 32`)")
    return key or None


def key_on_command_line(argv: list[str]) -> str | None:
    """The first flag in ``argv`` that SGLang's argparse would take as a key flag: exact, or a prefix
    (``--api-ke`` is ``--api-key``: allow_abbrev), so the key would be on the command line."""
    return next((a.split("=", 1)[0] for a in argv if key_flag(a)), None)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if flag := key_on_command_line(args):
        print(f"error: {flag} on the command line shows in docker inspect and every process list; set "
              "write the key to a file and set SGLANG_API_KEY_FILE in .env (compose mounts it as /run/secrets/sglang_api_key)", file=sys.stderr)
        return 2
    try:
        key = api_key()
    except KeyError_ as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if refusal := check_gpus():
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    os.environ.pop("SGLANG_API_KEY", None)
    # PCIE_ALLREDUCE, resolved here, inside the container, from the GPUs it was given. Imported here: the router's
    # image shares this module for the API key and has no GPUs to decide for.
    from sglang_stack.entrypoints import pcie_ipc

    from sglang_stack.entrypoints import adaptive, drafter

    try:
        more, told = adaptive.at_start(args, os.environ)
        told = [*told, *drafter.at_start(args, os.environ)]
    except (adaptive.Refused, drafter.Refused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args = [*args, *more]
    enable, said = pcie_ipc.at_start(args, os.environ)
    for line in [*said, *told]:
        print(f"serve: {line}", flush=True)
    if enable:
        os.environ[pcie_ipc.SGLANG_ENV] = "1"
    else:
        os.environ.pop(pcie_ipc.SGLANG_ENV, None)
    module = os.environ.get("SGLANG_STACK_SERVER") or SERVER
    print(f"serve: {module} {' '.join(args)}" + (" --api-key (from the secret file)" if key else ""), flush=True)
    sys.argv = [module, *args, *(["--api-key", key] if key else [])]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
