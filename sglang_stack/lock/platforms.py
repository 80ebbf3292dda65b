"""The platforms a lock builds for, and how a build for one reads the lock: its requirement lock's name, its
sglang wheel and resolver platform."""

from __future__ import annotations

from sglang_stack.errors import UserError

# The platforms a lock can be built for: the default (x86-64), and arm64 where the lock names the aarch64 sglang
# wheel ([sglang.arm64]) and its resolver platform (resolve.arm64_platform). Each has its own requirement lock.
PLATFORMS = {"linux/amd64": "", "linux/arm64": "arm64"}


def requirements_name(platform: str = "linux/amd64") -> str:
    """``requirements.lock.txt``, or ``requirements.arm64.lock.txt`` for linux/arm64."""
    return f"requirements.{PLATFORMS[platform]}.lock.txt" if PLATFORMS[platform] else "requirements.lock.txt"


def platform_of(value: str | None, where: str = "--platform") -> str:
    """A platform of ``PLATFORMS`` (default linux/amd64); anything else is one line."""
    value = value or "linux/amd64"
    if value not in PLATFORMS:
        raise UserError(f"{where} {value!r}: choose {' or '.join(PLATFORMS)}")
    return value


def for_platform(data: dict, platform: str, where: str) -> dict:
    """The lock as a build for ``platform`` reads it: the aarch64 sglang wheel and resolver platform for linux/arm64."""
    if platform == "linux/amd64":
        return data
    arm = data.get("sglang", {}).get("arm64")
    if not isinstance(arm, dict) or not isinstance(data.get("resolve", {}).get("arm64_platform"), str):
        raise UserError(f"{where}: no {platform} build: it needs [sglang.arm64] (the aarch64 wheel's url and sha256) "
                        "and resolve.arm64_platform")
    if data.get("wheel"):
        raise UserError(f"{where}: no {platform} build: its [[wheel]]s are x86-64 files (a profile whose every "
                        "distribution is on PyPI has one)")
    sglang = {**data["sglang"], **{k: arm[k] for k in ("url", "sha256", "status") if k in arm}}
    return {**data, "sglang": sglang, "resolve": {**data["resolve"], "python_platform": data["resolve"]["arm64_platform"]}}
