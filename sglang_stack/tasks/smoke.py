"""`invoke smoke`: the daemonless container smoke test, or the whole runtime image with stand-ins."""

from __future__ import annotations

from invoke import Exit, task

from sglang_stack.errors import UserError
from sglang_stack.lock.profiles import HELP as PROFILE_HELP
from sglang_stack.tasks.boundary import engine_of, user_errors
from sglang_stack.engine import image_reference


@task(
    help={
        "keep": "keep the images and containers the smoke test creates (default: remove them)",
        "base-image": "build on this Debian-like base (python3, venv, patch) instead of the debootstrap one "
        "(default: localhost/sglang-stack-smoke-base:bookworm, made if missing)",
        "negative": "also prove that a broken patch fails the build (default: on; --no-negative skips it)",
        "gpu": "on a GPU host with Docker and the NVIDIA toolkit: build the full image, bring up baseline "
        "then eagle3 with --wait, send one completion to each, take them down (default: off; never in CI)",
        "target": "sglang (default: the sglang stage with buildah, daemonless) or runtime (the whole image on the "
        "Docker Engine, with the stand-ins docker/standins.toml declares for what no CI machine can fetch)",
        "profile": PROFILE_HELP + " (--target runtime)",
    }
)
@user_errors
def smoke(c, keep=False, base_image=None, negative=True, gpu=False, target="sglang", profile=None):
    """Container smoke test: build the real Dockerfile with what this machine can reach, and check it from inside.

    --target sglang (default), daemonless: makes (or reuses) a local Debian base with
    debootstrap, builds the SGLang stage of docker/Dockerfile on it with buildah (pinned
    wheel from PyPI, patch series, audit), then checks from inside the image: sglang
    version, patched-file hashes, the Kimi-K2.5 EAGLE-3 methods, the audit, the labels,
    and that no build secret reached a layer.

    --target runtime: the whole image on the Docker Engine through `invoke build`'s own
    code, with the stand-ins of docker/standins.toml for the CUDA base and devel images and
    the three URL wheels, FlashInfer's ahead-of-time step skipped; then the imports, the
    entrypoint (launch_server --help) and compose's healthcheck as uid 10001, `invoke
    verify`, `invoke size --image` on every layer, and the SBOM (see docs/smoke.md).

    Exits 1 if any check fails. With --gpu, the real image and services on a GPU host
    instead.
    """
    from sglang_stack.smoke import container as smokemod

    if target not in ("sglang", "runtime"):
        raise UserError(f"--target {target!r}: choose sglang or runtime")
    if base_image is not None:
        image_reference(base_image, "--base-image")
    if target == "runtime" and (base_image is not None or gpu):
        raise UserError("--target runtime makes its own stand-in base: it takes neither --base-image nor --gpu")
    if profile and target != "runtime":
        raise UserError("--profile applies to --target runtime (the sglang stage smoke builds the default profile)")
    if target == "runtime":
        from sglang_stack.smoke import whole_image

        result = whole_image.smoke(keep=keep, profile=profile)
    elif gpu:
        result = smokemod.gpu_smoke(engine=engine_of(c), keep=keep)
    else:
        result = smokemod.smoke(base=base_image or smokemod.BASE_IMAGE, keep=keep, negative=negative)
    times = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    size = f"; image {result.size / 1e6:.0f} MB" if result.size else ""
    print(f"smoke: {sum(ok for _, ok, _ in result.checks)}/{len(result.checks)} checks passed; {times}{size}")
    if not result.ok:
        raise Exit("error: smoke test failed", code=1)
