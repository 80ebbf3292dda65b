"""What versions.lock pins, for the tests: every version a test expects is read from here, never written."""

from __future__ import annotations

from packaging.utils import canonicalize_name

from sglang_stack.lock import lockfile


def pinned() -> dict[str, str]:
    """Every distribution the lock pins, image and router: canonical name -> version."""
    lock = lockfile.check()
    out = {canonicalize_name(name): version for name, version in lock.router_requirements.items()}
    out[canonicalize_name(lock.router.name)] = lock.router.version
    return {**out, **lock.pins()}


PIN = pinned()
