"""Shared fixtures and options.

Image identity reaches the tests through options, so CI and a developer call the same thing:
  --base-image REF   use this Debian-like base (python3, venv, patch) instead of making one
  --keep-images      keep the images the container tests build (for poking at them afterwards)
"""

from __future__ import annotations

import shutil
import time

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
    """A local Debian base image for daemonless builds; removed afterwards if this session made it."""
    from sglang_stack import smoke

    if not (shutil.which("buildah") and shutil.which("debootstrap") and shutil.which("podman")):
        pytest.skip("container tests need buildah, podman and debootstrap (.ci/run installs them)")
    ref = request.config.getoption("--base-image") or smoke.BASE_IMAGE
    created = smoke.ensure_base_image(ref)
    yield ref
    if created and not request.config.getoption("--keep-images"):
        smoke.remove_image(ref)
