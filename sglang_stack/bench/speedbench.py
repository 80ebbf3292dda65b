"""SPEED-Bench prompts for `invoke acceptance --dataset speed-bench` and `invoke bench --dataset speed-bench` (the
verdict's prompts, when asked): the user's file checked here, the prompts made by SGLang's own adapter in the image.

SPEED-Bench (nvidia/SPEED-Bench) is the set speculative decoding is compared on across engines: SGLang 0.5.23's
benchmark reads it (``sglang/benchmark/datasets/speed_bench.py``), as vLLM's does (vllm-project/vllm#36029), and
published accept lengths for Kimi's EAGLE-3 drafters are measured on it. Many of its rows come from sources whose
licences keep them out of the Hub dataset, so the JSONL is assembled on the user's host by the upstream preparation
step and never shipped or built into the image; this module checks the file before anything is sent (each line a
JSON object with a non-empty ``turns`` list of strings; a cut-off last line is named as such), records its sha256,
and has SGLang's adapter, where SGLang is (``upstream.dataset``), turn it into the chat-templated prompts SGLang's
benchmark would send.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack.bench import upstream
from sglang_stack.bench.tokenizer import check_tokenizer, tokenizer_dir
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.flags import parse_count

NAME = "speed-bench"
LIMIT = 1 << 30  # bytes: the throughput splits are a few MB to a few hundred; a larger file is not SPEED-Bench
CATEGORIES = ("low_entropy", "mixed", "high_entropy")
ROW = 'a SPEED-Bench row is {"turns": ["..."], "category": "..."}'


@dataclass(frozen=True)
class File:
    """A checked SPEED-Bench file: its path, sha256, and rows per category."""

    path: Path
    sha256: str
    categories: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.categories.values())


def check(path: Path, category: str | None = None) -> File:
    """Read ``path`` line by line; one line naming the file and line where it is not SPEED-Bench's JSONL."""
    if category is not None and category not in CATEGORIES:
        raise UserError(f"--category {category!r}: one of {', '.join(CATEGORIES)}")
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise UserError(f"--dataset-path {path}: not a regular file")
        if size > LIMIT:
            raise UserError(f"--dataset-path {path}: {size} bytes, more than SPEED-Bench's JSONL ever is ({LIMIT})")
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"--dataset-path {path}: {err.strerror or err}") from None
    categories: dict[str, int] = {}
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        last = number == len(lines)  # no newline after it
        try:
            row = json.loads(raw)
        except (ValueError, RecursionError):
            if last:
                raise UserError(f"{path}:{number}: truncated: the last line is cut off (no newline, not whole "
                                "JSON); prepare or download the file again") from None
            raise UserError(f"{path}:{number}: not JSON Lines: {ROW}") from None
        turns = row.get("turns") if isinstance(row, dict) else None
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise UserError(f"{path}:{number}: no 'turns' list of strings: {ROW}")
        name = row.get("category")
        categories[str(name)] = categories.get(str(name), 0) + 1
    if not categories:
        raise UserError(f"{path}: no rows: {ROW}, one per line")
    if category is not None and category not in categories:
        raise UserError(f"--category {category}: {path} has no row of it (it has {', '.join(sorted(categories))})")
    return File(path, hashlib.sha256(data).hexdigest(), categories)


@dataclass(frozen=True)
class Request:
    """`--dataset speed-bench` and the flags that go with it, as typed (acceptance and bench share them)."""

    path: str
    category: str | None = None
    num_prompts: str | int = 32
    output_len: str | int = 512
    tokenizer: str | None = None  # default: the service's MODEL_DIR
    image: str | None = None
    python: str | None = None
    engine: Engine = Engine("docker")
    profile: str | None = None  # default: upstream.PROFILE, the first whose SGLang has the adapter
    seed: int = 0  # the adapter samples the rows with it
    caller: str = "acceptance"  # the task, as its messages name it

    def __post_init__(self):
        upstream.check_place(self.image, self.python, "SGLang's adapter")

    def prompts(self, model_dir: Path | None):
        """(the acceptance prompts, what the report records of them)."""
        from sglang_stack.bench.acceptance import Prompt

        num = parse_count("--num-prompts", self.num_prompts, 1)
        output_len = parse_count("--output-len", self.output_len, 1)
        checked = check(Path(self.path), self.category)
        if self.tokenizer is None and model_dir is None:
            raise UserError("--dataset speed-bench for a server given by URL (--url, --endpoint): give --tokenizer DIR "
                            "or OWNER/NAME, the served model's tokenizer")
        tokenizer = tokenizer_dir(self.tokenizer) if self.tokenizer else check_tokenizer(model_dir)
        # The adapter only makes the prompts, for a server of any release: without --profile, the first profile
        # whose SGLang has it, whichever one the services run.
        runner = upstream.runner(self.image, self.python, self.engine, self.profile, self.caller)
        rows = upstream.dataset(runner, NAME, tokenizer, f"{self.caller}: {checked.path}: SGLang's {NAME} adapter",
                                checked.path, num_prompts=num, output_len=output_len, seed=self.seed,
                                category=self.category)
        sent = {"dataset": NAME, "file": str(checked.path), "sha256": checked.sha256, "category": self.category,
                "rows": checked.categories, "prompts": len(rows), "max_new_tokens": output_len, "seed": self.seed,
                "chat_template": True, "sglang": runner.where}
        return [Prompt(f"{NAME}-{i}", r["prompt"], int(r["output_len"])) for i, r in enumerate(rows)], sent
