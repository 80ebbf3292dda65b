"""Shared fixtures and options.

Image identity reaches the tests through options, so CI and a developer call the same thing:
  --base-image REF   use this Debian-like base (python3, venv, patch) instead of making one
  --keep-images      keep the images the container tests build (for poking at them afterwards)

The real sglang wheel pinned in versions.lock is fetched once by URL and sha256
(cached in ~/.cache/sglang-stack, or $SGLANG_STACK_CACHE) and unpacked as
`pip install --target` lays it out: a directory holding sglang/ and its dist-info.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--base-image", default=None, help="smoke base image to build on (default: make one with debootstrap)")
    parser.addoption("--keep-images", action="store_true", help="keep images built by container tests")


def wait_until(predicate, timeout: float, interval: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.fixture(scope="session")
def smoke_base(request) -> str:
    """A local Debian base image for daemonless builds; what the session built is removed afterwards."""
    from sglang_stack.image import smoke

    if not (shutil.which("buildah") and shutil.which("debootstrap") and shutil.which("podman")):
        pytest.skip("container tests need buildah, podman and debootstrap (.ci/run installs them)")
    before = smoke.image_ids()
    ref = request.config.getoption("--base-image") or smoke.BASE_IMAGE
    smoke.ensure_base_image(ref)
    yield ref
    if not request.config.getoption("--keep-images"):
        # Everything the container tests made: the base (if made here), tagged images
        # and the intermediate layers that `--layers` builds leave behind.
        smoke.remove_new_images(before)


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    """The pinned sglang wheel (versions.lock [sglang]), hash-verified and cached."""
    from sglang_stack import fetch
    from sglang_stack.image import lock

    table = lock.load()["sglang"]
    return fetch.fetch(table["url"], table["sha256"])


@pytest.fixture(scope="session")
def sglang_pristine(sglang_wheel, tmp_path_factory) -> Path:
    """One unpacked copy of the wheel for the whole session. Read it, never write to it."""
    from sglang_stack.patching.patches import unpack_wheel

    return unpack_wheel(sglang_wheel, tmp_path_factory.mktemp("sglang-pristine") / "site")


@pytest.fixture(scope="session")
def sglang_patched(sglang_pristine, tmp_path_factory) -> Path:
    """One copy of the wheel with patches/ applied, for the whole session. Read it, never write to it."""
    from sglang_stack.patching.patches import apply_series

    dest = tmp_path_factory.mktemp("sglang-patched") / "site"
    shutil.copytree(sglang_pristine, dest, copy_function=shutil.copyfile)
    apply_series(dest, quiet=True)
    return dest


@pytest.fixture
def sglang_tree(sglang_pristine, tmp_path) -> Path:
    """A fresh, writable, unpatched copy of the sglang package tree: the directory that holds sglang/."""
    dest = tmp_path / "site"
    shutil.copytree(sglang_pristine, dest, copy_function=shutil.copyfile)
    return dest
