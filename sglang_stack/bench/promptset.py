"""The prompt set a bench run sends: the packaged JSONL (or the user's), validated line by line."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from sglang_stack.errors import UserError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPTS = PROMPTS_DIR / "v1.jsonl"
PROMPT_FIELDS = {"version": int, "id": str, "category": str, "output": str, "max_new_tokens": int, "prompt": str}


# --- prompts -----------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    output: str
    max_new_tokens: int
    prompt: str


@dataclass(frozen=True)
class PromptSet:
    path: Path
    version: int
    prompts: tuple[Prompt, ...]
    sha256: str


def load_prompts(path: Path = DEFAULT_PROMPTS) -> PromptSet:
    """Read a prompt set: JSON Lines, one prompt per line, all of one ``version``.

    Each line holds ``version`` (int), ``id``, ``category`` (chat, code, math),
    ``output`` (short, long), ``max_new_tokens`` (int > 0) and ``prompt``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: prompt file not found (pass --prompts PATH to a JSON Lines file)") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read the prompt file: {err.strerror}") from None
    prompts: list[Prompt] = []
    versions: set[int] = set()
    seen: set[str] = set()
    for lineno, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{where}: not a JSON object: {err.msg} (one prompt per line)") from None
        if not isinstance(record, dict):
            raise UserError(f"{where}: not a JSON object (one prompt per line)")
        for key, kind in PROMPT_FIELDS.items():
            value = record.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise UserError(f"{where}: {key!r} must be a {kind.__name__}, got {value!r}")
        if record["max_new_tokens"] < 1:
            raise UserError(f"{where}: 'max_new_tokens' must be at least 1, got {record['max_new_tokens']}")
        if not record["prompt"].strip():
            raise UserError(f"{where}: 'prompt' is empty")
        if record["id"] in seen:
            raise UserError(f"{where}: duplicate id {record['id']!r}")
        seen.add(record["id"])
        versions.add(record["version"])
        prompts.append(Prompt(*(record[k] for k in ("id", "category", "output", "max_new_tokens", "prompt"))))
    if not prompts:
        raise UserError(f"{path}: the prompt file holds no prompts (one JSON object per line)")
    if len(versions) > 1:
        raise UserError(f"{path}: mixed prompt-set versions {sorted(versions)}: one file is one version")
    return PromptSet(path, versions.pop(), tuple(prompts), hashlib.sha256(raw).hexdigest())
