"""The prompts a bench run sends: the packaged JSONL (or the user's), a ShareGPT file, or random lengths.

- JSON Lines in our format (``v2.jsonl``, the default): validated line by line.
- ShareGPT-format JSON (a list of ``{"conversations": [{"from": "human", "value": ...}, ...]}``),
  read from a local file, never downloaded: the first human turn of each conversation is a
  prompt, and ``output_len`` its ``max_new_tokens`` (no tokenizer runs here to count the
  original answer). The file is read whole, within ``PROMPTS_LIMIT``; JSON Lines stream.
- ``random``: ``num_prompts`` prompts of random token ids (``input_len`` each) and
  ``output_len`` tokens to generate, both varied by ``range_ratio``, from ``seed``. The native
  API and completions send the ids themselves, so the input length is exact; chat sends
  words, one per id.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

from sglang_stack.errors import UserError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DEFAULT_PROMPTS = PROMPTS_DIR / "v2.jsonl"
PROMPT_FIELDS = {"version": int, "id": str, "category": str, "output": str, "max_new_tokens": int, "prompt": str}


# --- prompts -----------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    output: str
    max_new_tokens: int
    prompt: str
    input_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PromptSet:
    path: Path | str
    version: int
    prompts: tuple[Prompt, ...]
    sha256: str
    kind: str = "jsonl"
    """jsonl, sharegpt, random or speed-bench: how the set was made (the report says so)."""
    made: dict | None = None
    """speed-bench: what SGLang's adapter was given and where it ran (the report keeps it)."""


PROMPTS_LIMIT = 1 << 30  # ShareGPT's V3 file, the largest in common use, is 0.64 GB


def check_size(path: Path, hint: str = "") -> int:
    """A prompt file's size, refused past ``PROMPTS_LIMIT`` before a byte is read."""
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        raise UserError(f"{path}: not found{hint}") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None
    if not Path(path).is_file():
        raise UserError(f"{path}: is not a file{hint}")
    if st.st_size == 0:  # cheap enough to say before the endpoints are probed
        raise UserError(f"{path}: the prompt file holds no prompts (one JSON object per line)")
    if st.st_size > PROMPTS_LIMIT:
        raise UserError(f"{path}: {st.st_size / 2**30:.1f} GiB, more than the {PROMPTS_LIMIT >> 30} GiB a prompt file may "
                        "hold (every prompt is kept in memory for the run): pass a subset")
    return st.st_size


def load_prompts(path: Path = DEFAULT_PROMPTS) -> PromptSet:
    """Read a prompt set: JSON Lines, one prompt per line, all of one ``version``; or a ShareGPT file.

    Each line holds ``version`` (int), ``id``, ``category`` (chat, code, math),
    ``output`` (short, long), ``max_new_tokens`` (int > 0) and ``prompt``. Lines are read
    one at a time (the file is hashed as it streams); a ShareGPT file, one JSON array, is
    read whole, within ``PROMPTS_LIMIT``.
    """
    path = Path(path)
    check_size(path, " (pass --prompts PATH to a JSON Lines or ShareGPT file)")
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).lstrip()
            handle.seek(0)
            if not head.startswith(b"["):
                return _load_jsonl(path, handle)
            raw = handle.read()
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if isinstance(doc, list) and doc and all(isinstance(r, dict) for r in doc):
        return load_sharegpt(path, doc, hashlib.sha256(raw).hexdigest())
    return _load_jsonl(path, io.BytesIO(raw))  # not ShareGPT's layout: each line is named as JSON Lines


def _load_jsonl(path: Path, handle) -> PromptSet:
    digest = hashlib.sha256()
    prompts: list[Prompt] = []
    versions: set[int] = set()
    seen: set[str] = set()
    for lineno, raw in enumerate(handle, 1):
        digest.update(raw)
        where = f"{path}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"{where}: not UTF-8 (byte {raw[err.start]:#04x}): save it as UTF-8") from None
        if not line.strip():
            continue
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
    return PromptSet(path, versions.pop(), tuple(prompts), digest.hexdigest())


def load_sharegpt(path: Path, records: list[dict], sha256: str, output_len: int = 256) -> PromptSet:
    """A ShareGPT-format file's records: the first human turn of each conversation, ``output_len`` tokens each."""
    prompts = []
    for i, record in enumerate(records if isinstance(records, list) else []):
        turns = record.get("conversations") if isinstance(record, dict) else None
        first = next((t.get("value") for t in turns or [] if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
        if isinstance(first, str) and first.strip():
            ident = str(record.get("id") or i)
            prompts.append(Prompt(f"sharegpt-{ident}-{i}", "sharegpt", "sharegpt", output_len, first))
    if not prompts:
        raise UserError(f"{path}: no conversation with a human turn (expected ShareGPT's "
                        '[{"conversations": [{"from": "human", "value": ...}]}])')
    return PromptSet(path, 0, tuple(prompts), sha256, kind="sharegpt")


def random_prompts(num_prompts: int, input_len: int, output_len: int, range_ratio: float = 0.0, seed: int = 0) -> PromptSet:
    """``num_prompts`` prompts of random ids, lengths uniform in ``[len * (1 - r), len * (1 + r)]``."""
    if not 0.0 <= range_ratio < 1.0:
        raise UserError(f"--random-range-ratio {range_ratio}: must be at least 0 and below 1")
    rng = random.Random(seed)
    prompts = []
    for i in range(num_prompts):
        n_in = max(1, round(input_len * rng.uniform(1 - range_ratio, 1 + range_ratio)))
        n_out = max(1, round(output_len * rng.uniform(1 - range_ratio, 1 + range_ratio)))
        # Ids well inside any large vocabulary and clear of the special tokens at its ends.
        ids = tuple(rng.randrange(1000, 30000) for _ in range(n_in))
        words = " ".join(_WORDS[t % len(_WORDS)] for t in ids)
        prompts.append(Prompt(f"random-{i}", "random", "random", n_out, words, ids))
    spec = f"random:n={num_prompts},in={input_len},out={output_len},ratio={range_ratio},seed={seed}"
    return PromptSet(spec, 0, tuple(prompts), hashlib.sha256(spec.encode()).hexdigest(), kind="random")


_WORDS = ("time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
          "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
          "company", "system", "program", "question", "work", "number", "night", "point", "home", "water", "room")
