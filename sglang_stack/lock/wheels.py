"""What a wheel declares (its METADATA's Requires-Dist), and the sglang wheel a lock pins, from the download cache."""

from __future__ import annotations

import email.parser
import zipfile
from pathlib import Path

from sglang_stack.errors import UserError


def wheel_requires(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if meta is None:
            raise UserError(f"{wheel}: no .dist-info/METADATA inside")
        message = email.parser.Parser().parsestr(zf.read(meta).decode())
    return message.get_all("Requires-Dist") or []


def sglang_wheel(url: str, sha256: str, *, download: bool) -> Path | None:
    """The pinned sglang wheel from the cache; fetched (hash-verified) if ``download``."""
    from sglang_stack.download import cache_dir, fetch, filename_of, sha256_of

    if download:
        return fetch(url, sha256)
    cached = cache_dir() / "downloads" / filename_of(url)
    if cached.is_file() and sha256_of(cached) == sha256:
        return cached
    return None


def sglang_requires(lock, *, download: bool) -> list[str] | None:
    """The Requires-Dist of the sglang wheel ``lock`` (a lockfile.Lock) pins; None where it is not cached and
    ``download`` is off."""
    wheel = sglang_wheel(lock.sglang.url, lock.sglang.sha256, download=download)
    return wheel_requires(wheel) if wheel else None
