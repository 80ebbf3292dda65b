"""One redaction step between every message and the terminal or a file: secrets never print.

What it masks, wherever it appears in a text:

- the values of the secrets this project handles: the API key and the Hub token, read from the
  files ``SGLANG_API_KEY_FILE`` and ``HF_TOKEN_FILE`` name (shell or ``.env``), from
  ``/run/secrets`` inside a container, and from ``SGLANG_API_KEY``/``HF_TOKEN`` if set anyway;
- credentials in URLs: ``scheme://user:pass@host`` becomes ``scheme://***@host``;
- whatever follows a key flag in any form SGLang's or the router's argparse would take: the
  exact flag, any unambiguous prefix of it (argparse's ``allow_abbrev``, on by default:
  ``--api-ke`` is ``--api-key``), joined by ``=`` or as the next argument.

Standard library only: the image's entrypoint uses ``key_flag`` for its guard. On the host, the process's
redactor (with ``.env``'s secret files) is ``sglang_stack.services.variables.redactor``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MASK = "***"
# Flags whose value is a secret: SGLang's and the pinned sglang-router's.
KEY_FLAGS = ("--api-key", "--admin-api-key")
# The shortest prefix argparse resolves to each key flag (allow_abbrev is on): derived from SGLang
# 0.5.9's own parser, where `--a` is ambiguous (--attention-backend, --allow-auto-truncate, ...) but
# `--ap` and `--ad` are not; tests/floor/test_redact.py asks that parser again.
SHORTEST = {"--api-key": "--ap", "--admin-api-key": "--ad"}
SECRET_FILES = ("SGLANG_API_KEY_FILE", "HF_TOKEN_FILE")
SECRET_VARIABLES = ("SGLANG_API_KEY", "HF_TOKEN")
CONTAINER_SECRETS = ("/run/secrets/sglang_api_key", "/run/secrets/hf_token")
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<cred>[^/@\s'\"]+)@")


def key_flag(arg: str) -> str | None:
    """The key flag ``arg`` names (exactly, or as a prefix argparse resolves), or None."""
    flag = arg.split("=", 1)[0]
    if not flag.startswith("--"):
        return None
    for full in KEY_FLAGS:
        if flag == full or (len(flag) >= len(SHORTEST[full]) and full.startswith(flag)):
            return full
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() if path.is_file() else ""
    except OSError:
        return ""


def known_secrets(values: dict[str, str] | None = None, root: Path | None = None) -> set[str]:
    """The secret values this process could print: from the key and token files, and the variables."""
    values = dict(os.environ) if values is None else values
    found = {values.get(name, "").strip() for name in SECRET_VARIABLES}
    for name in SECRET_FILES:
        raw = values.get(name, "")
        if raw:
            path = Path(os.path.expanduser(raw))
            found.add(_read(path if path.is_absolute() or root is None else root / path))
    found |= {_read(Path(p)) for p in CONTAINER_SECRETS}
    return {s for s in found if len(s) >= 4}  # a one-character "secret" would mask half the text


class Redactor:
    """Masks the secrets it knows, URL credentials and key-flag values; ``add`` teaches it more values."""

    def __init__(self, secrets: set[str] | None = None):
        self.secrets = set(secrets or ())

    def add(self, *values: str | None) -> None:
        self.secrets |= {v for v in values if v and len(v) >= 4}

    def text(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, MASK)
        text = URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text)
        return _mask_flags(text)

    def argv(self, argv: list[str]) -> list[str]:
        """A command line with every key flag's value masked (``--api-key X``, ``--api-ke=X``)."""
        out, hide = [], False
        for arg in argv:
            if hide:
                out.append(MASK)
                hide = False
                continue
            if key_flag(arg):
                if "=" in arg:
                    out.append(arg.split("=", 1)[0] + "=" + MASK)
                else:
                    out.append(arg)
                    hide = True
                continue
            out.append(self.text(arg))
        return out


_FLAG_IN_TEXT = re.compile(r"(?P<flag>--[a-z][a-z-]*)(?P<sep>=|\s+)(?P<value>'[^']*'|\"[^\"]*\"|\S+)")


def _mask_flags(text: str) -> str:
    # In free text, only forms that cannot be one of our own flags (`invoke bench --api chat`): the
    # whole word before the last hyphen, and at least one letter after it (`--api-k`, `--admin-api-k`).
    def mask(m: re.Match) -> str:
        full = key_flag(m["flag"])
        if full and len(m["flag"]) > full.rfind("-") + 1 and not m["value"].startswith("--"):
            return f"{m['flag']}{m['sep']}{MASK}"
        return m.group(0)

    return _FLAG_IN_TEXT.sub(mask, text)
