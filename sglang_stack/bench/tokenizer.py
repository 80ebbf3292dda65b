"""The served model's tokenizer, which SGLang's benchmark and SPEED-Bench adapter load (``--tokenizer``): a directory
on this host, or a Hub repository, ``OWNER/NAME[@REVISION]``, whose tokenizer files (never its weights) huggingface_hub
fetches into ``cache_dir()/tokenizers/OWNER--NAME/REVISION`` (``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` are
honoured). Each run fetches the set afresh (a few MB) into a folder beside it that then replaces it whole, so a fetch
cut short leaves the set fetched before, and that set serves when the Hub is out of reach. Plain files, not the
Hugging Face cache's links into its blob store: the folder is mounted into the image that runs SGLang, where such a
link would point outside the mount. Without ``--tokenizer``, an ``--endpoint``'s is the model it says it serves
(``served_tokenizer``)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import sys
import tempfile
from pathlib import Path

from sglang_stack.bench.client import Endpoint, server_info
from sglang_stack.download import cache_dir
from sglang_stack.errors import UserError
from sglang_stack.services.models import HUB_TIMEOUT_S, hub_failure

# What transformers' AutoTokenizer reads from a model repository: the tokenizer's own files (tokenizer.json,
# tokenizer_config.json, a SentencePiece or tiktoken model, vocabularies), the chat template, config.json (the
# tokenizer class where tokenizer_config.json names none), and the Python of a remote-code tokenizer (Kimi's
# tokenization_kimi.py with its tiktoken.model).
FILES = ["tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab*", "merges.txt", "*.model",
         "*.tiktoken", "chat_template*", "config.json", "*.py"]
REVISION = re.compile(r"\w[\w./-]*")  # a branch, tag or commit: never "." or "..", which the cache folder is named by


def check_tokenizer(directory: Path, shown: str | None = None) -> Path:
    """``directory``, where it holds a tokenizer: checked here, before an image or a Python is started for it.
    ``shown``: what the user gave, where it was a Hub name."""
    if not (directory / "tokenizer_config.json").is_file() and not (directory / "tokenizer.json").is_file():
        what = f"{shown} (downloaded to {directory})" if shown else str(directory)
        raise UserError(f"--tokenizer {what}: no tokenizer_config.json or tokenizer.json (the served model's "
                        "directory holds them)")
    return directory


def tokenizer_dir(value: str | Path) -> Path:
    """The tokenizer directory ``value`` names: itself where it is a directory, else the folder of the Hub repository
    ``OWNER/NAME[@REVISION]``'s tokenizer files (default revision: main); checked either way (``check_tokenizer``)."""
    path = Path(value)
    if path.is_dir():
        return check_tokenizer(path)
    if path.exists():
        raise UserError(f"--tokenizer {value}: not a directory (the served model's directory holds "
                        "tokenizer_config.json or tokenizer.json)")
    text = str(value)
    problem = not_a_hub_name(text)
    if problem is not None:
        raise UserError(f"--tokenizer {text}: no such directory{problem}")
    return check_tokenizer(download(text), text)


def not_a_hub_name(text: str) -> str | None:
    """None where ``text`` names a Hub repository, ``OWNER/NAME[@REVISION]`` (huggingface_hub's own rule for the
    name); else why not, in words that follow "no such directory" (nothing, for a path)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo, at, revision = text.partition("@")
    if text.startswith((".", "/", "~")):
        return ""
    if repo.count("/") != 1 or (at and not REVISION.fullmatch(revision)):
        return " (nor a Hub repository name, OWNER/NAME[@REVISION])"
    try:
        validate_repo_id(repo)
    except HFValidationError as err:
        return f" (nor a Hub repository name: {str(err).rstrip('.')})"
    return None


def served_tokenizer(endpoint: Endpoint, api_key: str | None, timeout: float) -> Path:
    """The tokenizer of the model an ``--endpoint`` server says it serves, where ``--tokenizer`` is not given:
    ``/server_info``'s ``tokenizer_path``, else its ``model_path``, where that is a directory on this host (a server
    started here) or a Hub repository (a server started from one: its tokenizer files are fetched as ``--tokenizer``
    fetches them)."""
    info = server_info(endpoint, api_key, timeout)
    served = str(info.get("tokenizer_path") or info.get("model_path") or "")
    fix = "give --tokenizer DIR or OWNER/NAME[@REVISION], the served model's tokenizer"
    if not served:
        raise UserError(f"--endpoint {endpoint.name}: its /server_info names no model_path, whose tokenizer SGLang's "
                        f"benchmark would load: {fix}")
    where = f"--endpoint {endpoint.name} serves {served}"
    hub = not_a_hub_name(served) is None
    if not Path(served).is_dir() and not hub:
        raise UserError(f"{where}, which is not a directory on this host: {fix}")
    if hub and not Path(served).is_dir():
        print(f"bench: {where}: its tokenizer from the Hub", file=sys.stderr, flush=True)
    try:
        return tokenizer_dir(served)
    except UserError as err:  # its words name --tokenizer, which the user did not give
        raise UserError(f"{where}: {str(err).removeprefix(f'--tokenizer {served}: ')}: or {fix}") from None


@functools.cache  # one process asks the Hub once per name: bench checks the flag before its probes, then uses it
def download(name: str) -> Path:
    """The folder of the tokenizer files of the Hub repository ``name`` (``OWNER/NAME[@REVISION]``): fetched now, or
    the set fetched before where the Hub did not answer."""
    repo, _, revision = name.partition("@")
    revision = revision or "main"
    folder = cache_dir() / "tokenizers" / repo.replace("/", "--") / revision.replace("/", "--")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--tokenizer {name}: cannot write {folder.parent} ({err.strerror or err})") from None
    with fetching(folder.parent, name):
        return fetch(name, repo, revision, folder)


@contextlib.contextmanager
def fetching(parent: Path, name: str):
    """One fetch of a repository's tokenizers at a time (an ``flock`` on its folder, so nothing is written to hold
    it): a second run waits, and says so, rather than swapping the folder away under the first."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"--tokenizer {name}: another run is fetching it into {parent}: waiting for it to finish",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def fetch(name: str, repo: str, revision: str, folder: Path) -> Path:
    """``download``'s work, under its lock."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError,
    )

    # huggingface_hub reads HF_ENDPOINT once, when it is imported; this reads it now, as models.hub_record does
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}-", dir=folder.parent) as tmp:
        fresh = Path(tmp) / "fetched"
        print(f"--tokenizer {name}: huggingface_hub snapshot_download({repo!r}, revision={revision!r}, "
              f"allow_patterns={FILES}, local_dir={str(fresh)!r}) from {endpoint}", file=sys.stderr, flush=True)
        try:
            # cache_dir: huggingface_hub notes a branch's commit there even for a local_dir; a folder that goes
            # with the temporary one, so nothing is written to the user's Hugging Face cache
            snapshot_download(repo, revision=revision, allow_patterns=FILES, local_dir=fresh, endpoint=endpoint,
                              cache_dir=Path(tmp) / "hub", etag_timeout=HUB_TIMEOUT_S)
        except RevisionNotFoundError:
            raise UserError(f"--tokenizer {name}: {repo} has no revision {revision!r} on the Hub") from None
        except (RepositoryNotFoundError, GatedRepoError):
            raise UserError(f"--tokenizer {name}: no such directory, nor a repository on the Hub at {endpoint} (or "
                            "it is gated: set HF_TOKEN)") from None
        except Exception as err:
            # The Hub out of reach (or HF_HUB_OFFLINE): huggingface_hub raises LocalEntryNotFoundError, and what
            # it could not reach is its cause
            unreached = err.__cause__ if isinstance(err, LocalEntryNotFoundError) and err.__cause__ else err
            cause = hub_failure(unreached)
            if cause is None:
                raise
            if folder.is_dir():
                print(f"--tokenizer {name}: the Hub at {endpoint} did not answer ({cause}); the set fetched before "
                      f"serves: {folder}", file=sys.stderr, flush=True)
                return folder
            raise UserError(f"--tokenizer {name}: nothing fetched before, and the Hub at {endpoint} did not answer: "
                            f"{cause}") from None
        # Readable by all, whatever the umask: the image runs SGLang as uid 10001, not as the user who fetched them
        for path in [fresh, *fresh.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        if folder.exists():
            folder.rename(Path(tmp) / "previous")  # removed with the temporary folder
        fresh.rename(folder)
    return folder
