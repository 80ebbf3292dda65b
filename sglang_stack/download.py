"""Hash-verified, cached, atomic downloads.

A file lands in the cache only after its sha256 matched, under its final
name, by an atomic rename: an interrupted or tampered download never leaves
a file that a later run would trust.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from sglang_stack.errors import UserError


def cache_dir() -> Path:
    """Where downloads are kept: ``$SGLANG_STACK_CACHE`` or ``~/.cache/sglang-stack``."""
    env = os.environ.get("SGLANG_STACK_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-stack"
    return base


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def filename_of(url: str) -> str:
    """The file name a download is kept under: the URL's last path segment, percent-decoded, refused where it could
    name anything but one file in the download directory (``..%2F``, a slash, a backslash, NUL, a dot name)."""
    name = unquote(Path(urlparse(url).path).name)
    if not name or name in (".", "..") or name.startswith(".") or any(c in name for c in "/\\\0") or \
            any(ord(c) < 32 for c in name):
        raise UserError(f"{url}: its file name {name!r} is not one plain file name (a download never leaves its directory)")
    return name


def fetch(url: str, sha256: str, *, dest: Path | None = None) -> Path:
    """Return a local copy of ``url`` whose sha256 is ``sha256``.

    A cached copy is re-hashed before use; a mismatch there is deleted and
    fetched again. A mismatch after download is an error naming the URL and
    both hashes.
    """

    name = filename_of(url)  # refused before anything is touched
    dest = dest or cache_dir() / "downloads"
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    if target.is_symlink() or target.resolve().parent != dest.resolve():
        raise UserError(f"{target}: a link, or outside {dest}: remove it; downloads are plain files of that directory")
    if target.exists():
        if sha256_of(target) == sha256:
            return target
        target.unlink()
    print(f"fetch: {url}", file=sys.stderr, flush=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=dest, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, retrying() as session:
            # A network failure that outlasts the retries is the task boundary's to report
            # (sglang_stack.tasks.boundary.expected_failure names the URL).
            with session.get(url, stream=True, timeout=60, verify=ca_bundle() or True) as resp:
                resp.raise_for_status()
                for chunk in resp.iter_content(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
        got = digest.hexdigest()
        if got != sha256:
            raise UserError(f"sha256 mismatch for {url}: expected {sha256}, got {got}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


BACKOFF_S = 1.0  # urllib3's backoff factor: 1, 2, 4 s between the tries


def retrying():
    """A requests session (host-side only; the image never imports this module) that retries what a busy network drops before any byte arrives: a failed name lookup or
    connect, and a 502/503/504, three times with backoff (urllib3's Retry). A read cut off midway is not retried here:
    the download starts again at the next run."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = requests.Session()
    retry = Retry(total=3, connect=3, read=0, status=3, backoff_factor=BACKOFF_S, status_forcelist=(502, 503, 504),
                  allowed_methods=frozenset({"GET", "HEAD"}), raise_on_status=False)
    session.mount("https://", HTTPAdapter(max_retries=retry))
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


def ca_bundle(explicit_only: bool = False) -> str | None:
    """The CA bundle the host trusts, as pip and requests look for it.

    With ``explicit_only``, only a bundle named by $PIP_CERT, $REQUESTS_CA_BUNDLE
    or $SSL_CERT_FILE counts: those are set on hosts behind a TLS-inspecting proxy.
    """
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return value
    if explicit_only:
        return None
    for candidate in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
        if Path(candidate).is_file():
            return candidate
    return None

