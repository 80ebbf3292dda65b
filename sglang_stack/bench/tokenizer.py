"""The served model's tokenizer, which SGLang's benchmark and SPEED-Bench adapter load (``--tokenizer``): a directory
on this host, or a Hub repository, ``OWNER/NAME[@REVISION]``, whose tokenizer files (never its weights) huggingface_hub
downloads into ``cache_dir()/tokenizers/OWNER--NAME/REVISION``. It writes each file whole, fetches only what changed on
the next run, and answers from that folder when the Hub is out of reach (``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and
``HF_TOKEN`` are honoured). Plain files, not the Hugging Face cache's links into its blob store: the folder is mounted
into the image that runs SGLang, where such a link would point outside the mount."""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

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
    """The tokenizer directory ``value`` names: itself where it is a directory, else the files of the Hub repository
    ``OWNER/NAME[@REVISION]`` (default revision: main) in the Hugging Face cache; checked either way (``check_tokenizer``)."""
    path = Path(value)
    if path.is_dir():
        return check_tokenizer(path)
    if path.exists():
        raise UserError(f"--tokenizer {value}: not a directory (the served model's directory holds tokenizer_config.json "
                        "or tokenizer.json)")
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    text = str(value)
    repo, at, revision = text.partition("@")
    if text.startswith((".", "/", "~")):
        raise UserError(f"--tokenizer {text}: no such directory")
    if repo.count("/") != 1 or (at and not REVISION.fullmatch(revision)):
        raise UserError(f"--tokenizer {text}: no such directory (nor a Hub repository name, OWNER/NAME[@REVISION])")
    try:
        validate_repo_id(repo)  # huggingface_hub's own rule for a repository's name
    except HFValidationError as err:
        raise UserError(f"--tokenizer {text}: no such directory (nor a Hub repository name: {str(err).rstrip('.')})") from None
    return check_tokenizer(download(text), text)


@functools.cache  # one process asks the Hub once per name: bench checks the flag before its probes, then uses it
def download(name: str) -> Path:
    """The snapshot directory of the Hub repository ``name`` (``OWNER/NAME[@REVISION]``) with its tokenizer files."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError,
    )

    repo, _, revision = name.partition("@")
    revision = revision or "main"
    folder = cache_dir() / "tokenizers" / repo.replace("/", "--") / revision.replace("/", "--")
    # huggingface_hub reads HF_ENDPOINT once, when it is imported; this reads it now, as models.hub_record does
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    print(f"--tokenizer {name}: huggingface_hub snapshot_download({repo!r}, revision={revision!r}, "
          f"allow_patterns={FILES}, local_dir={str(folder)!r}) from {endpoint}", file=sys.stderr, flush=True)
    try:
        snapshot_download(repo, revision=revision, allow_patterns=FILES, local_dir=folder, endpoint=endpoint,
                          etag_timeout=HUB_TIMEOUT_S)
    except RevisionNotFoundError:
        raise UserError(f"--tokenizer {name}: {repo} has no revision {revision!r} on the Hub") from None
    except (RepositoryNotFoundError, GatedRepoError):
        raise UserError(f"--tokenizer {name}: no such directory, nor a repository on the Hub at {endpoint} (or it "
                        "is gated: set HF_TOKEN)") from None
    except LocalEntryNotFoundError as err:  # the Hub out of reach, and nothing of it in the folder
        cause = err.__cause__ or err
        raise UserError(f"--tokenizer {name}: not in the Hugging Face cache, and the Hub at {endpoint} did not "
                        f"answer: {type(cause).__name__}: {(str(cause).splitlines() or [''])[0]}") from None
    except Exception as err:
        if (cause := hub_failure(err)) is None:
            raise
        raise UserError(f"--tokenizer {name}: the Hub at {endpoint} did not answer: {cause}") from None
    return folder
