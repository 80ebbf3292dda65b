"""The prompts a bench run sends: the packaged JSONL (or the user's), or one of SGLang's own benchmark datasets.

- JSON Lines in our format (``v2.jsonl``, the default): validated line by line.
- A ShareGPT-format JSON file (``--prompts FILE`` whose first byte is ``[``), read by SGLang's ``sharegpt`` adapter:
  the first turn of each conversation of at least two, shuffled; each asks for as many tokens as its answer has.
- ``--dataset random``: SGLang's ``random-ids``, ``num_prompts`` prompts of random token ids (``input_len`` each) and
  ``output_len`` tokens to generate, both varied by ``range_ratio``, from ``seed``. The native API and completions
  send the ids themselves, so the input length is exact; chat sends their text.
- ``--dataset speed-bench``: SPEED-Bench's chat-templated prompts, made by SGLang's own adapter (``speedbench.py``).

SGLang's adapters run where its benchmark does, with its tokenizer (``upstream.dataset``). ``parse_dataset`` reads the
flags into a ``Dataset``, checked whole before any endpoint is probed; its ``load`` reads or makes the prompts once one
has answered.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from sglang_stack.bench import speedbench, upstream
from sglang_stack.bench.request import Request
from sglang_stack.bench.tokenizer import tokenizer_dir
from sglang_stack.engine import image_reference
from sglang_stack.errors import UserError
from sglang_stack.flags import parse_count
from sglang_stack.services import composefile, variables

if TYPE_CHECKING:  # rounds reads the prompts made here
    from sglang_stack.bench.rounds import Options

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
    """Made by SGLang's adapter: what it was given and where it ran (the report keeps it)."""

    def record(self) -> dict:
        """bench.json's ``metadata.prompt_set``."""
        return {"path": str(self.path), "kind": self.kind, "version": self.version, "sha256": self.sha256,
                "prompts": len(self.prompts), **({"made": self.made} if self.made else {})}


PROMPTS_LIMIT = 1 << 30  # ShareGPT's V3 file, the largest in common use, is 0.64 GB
MAX_TOKENS = 1 << 20  # one prompt's input or output length: past every served context
MAX_RANDOM_TOKENS = 1 << 26  # the whole random set, held in memory as ids


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
    """Read a prompt set in our JSON Lines format, one prompt per line, all of one ``version``.

    Each line holds ``version`` (int), ``id``, ``category`` (chat, code, math),
    ``output`` (short, long), ``max_new_tokens`` (int > 0) and ``prompt``. Lines are read
    one at a time (the file is hashed as it streams).
    """
    path = Path(path)
    check_size(path, " (pass --prompts PATH to a JSON Lines or ShareGPT file)")
    try:
        with open(path, "rb") as handle:
            return _load_jsonl(path, handle)
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None


SHAREGPT = '[{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}, ...]'


def check_sharegpt(path: Path) -> str:
    """A ShareGPT file's sha256, once it is seen to hold a conversation SGLang's adapter can send (two turns or more,
    each with a text ``value``): a file it would make nothing of is named in one line before it runs."""
    try:
        raw = Path(path).read_bytes()
        doc = json.loads(raw)
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise UserError(f"{path}: not JSON ({str(err).splitlines()[0]}): a ShareGPT file is {SHAREGPT}") from None
    usable = 0
    for record in doc if isinstance(doc, list) else ():
        turns = record.get("conversations", record.get("conversation")) if isinstance(record, dict) else None
        usable += (isinstance(turns, list) and len(turns) >= 2
                   and all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in turns[:2]))
    if not usable:
        raise UserError(f"{path}: no conversation with a human turn and an answer: a ShareGPT file is {SHAREGPT}")
    return hashlib.sha256(raw).hexdigest()


def is_sharegpt(path: Path) -> bool:
    """A JSON array, ShareGPT's layout, rather than our JSON Lines: its first byte that is not white space is ``[``."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4096).lstrip().startswith(b"[")
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None


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


# --- where a run's prompts come from ------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """Where a run's prompts come from, checked whole before any request; ``load`` reads or makes them
    (after the endpoints answered: a large file is not read for a run that cannot start)."""

    path: Path | None = None  # our JSONL, or the ShareGPT file SGLang's adapter reads; None for random
    sglang: str | None = None  # sharegpt or random-ids: SGLang's adapter makes the prompts
    flags: tuple[tuple[str, object], ...] = ()  # what that adapter is given (upstream.dataset's flags)
    speed_bench: speedbench.Request | None = None  # --dataset speed-bench: SGLang's adapter makes the prompts

    def load(self, model_dir: Path | None = None, place: Callable[[], tuple] | None = None) -> PromptSet:
        """The prompts; ``model_dir`` is the served model's directory, whose tokenizer SPEED-Bench's chat template
        comes from where --tokenizer is not given; ``place()``, asked only here, is where SGLang's benchmark runs
        and the tokenizer it counts with (measure.generator_place), which SGLang's other adapters run with."""
        if self.speed_bench is not None:
            prompts, made = self.speed_bench.prompts(model_dir)
            checked = Path(self.speed_bench.path)
            return PromptSet(checked, 0, tuple(Prompt(p.id, speedbench.NAME, speedbench.NAME, p.max_new_tokens, p.text)
                                               for p in prompts), made["sha256"], kind=speedbench.NAME, made=made)
        if self.sglang is None:
            return load_prompts(self.path)
        read = {"file": str(self.path), "file_sha256": check_sharegpt(self.path)} if self.path else {}
        runner, tokenizer = place()
        what = f"bench: {self.path or '--dataset random'}: SGLang's {self.sglang} adapter"
        rows = upstream.dataset(runner, self.sglang, tokenizer, what, self.path, **dict(self.flags))
        kind = "random" if self.sglang == "random-ids" else self.sglang
        prompts = tuple(Prompt(f"{kind}-{i}", kind, kind, int(r["output_len"]), "" if isinstance(r["prompt"], list)
                               else r["prompt"], tuple(r["prompt"]) if isinstance(r["prompt"], list) else None)
                        for i, r in enumerate(rows))
        made = {"dataset": self.sglang, **read, **dict(self.flags), "sglang": runner.where}
        spec = str(self.path) if self.path else ",".join(f"{k}={v}" for k, v in self.flags)
        digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()  # the requests as sent
        return PromptSet(self.path or f"random:{spec}", 0, prompts, digest, kind=kind, made=made)


SPEED_BENCH_FLAGS = ("dataset_path", "category", "num_prompts", "output_len")


def parse_dataset(request: Request, options: Options) -> Dataset:
    """--prompts (our JSONL or a ShareGPT file), --dataset random with its lengths, within the caps, or --dataset
    speed-bench with its file (checked here, before any endpoint is probed)."""
    kind = (request.dataset or "prompts").strip()
    if kind != speedbench.NAME:
        given = next((f for f in SPEED_BENCH_FLAGS if getattr(request, f) is not None), None)
        if given is not None:
            raise UserError(f"--{given.replace('_', '-')} goes with --dataset {speedbench.NAME}")
    if kind == speedbench.NAME:
        if request.prompts:
            raise UserError(f"--prompts and --dataset {speedbench.NAME}: choose one")
        if not request.dataset_path:
            raise UserError(f"--dataset {speedbench.NAME} needs --dataset-path FILE, the JSONL prepared on this host")
        if options.target.api == "chat":
            raise UserError(f"--dataset {speedbench.NAME} with --api chat: SGLang's adapter sends chat-templated text "
                            "already, and the chat API would template it again; use --api native or completions")
        if options.prompt_template:
            raise UserError(f"--prompt-template with --dataset {speedbench.NAME}: SGLang's adapter applies the "
                            "model's chat template already")
        if request.image is not None:
            image_reference(request.image, "--image")
        if request.endpoints and request.tokenizer is None:
            raise UserError(f"--dataset {speedbench.NAME} with --endpoint: give --tokenizer DIR or OWNER/NAME, the "
                            "served model's tokenizer (its chat template makes the prompts)")
        if request.tokenizer is not None:
            tokenizer_dir(request.tokenizer)
        speedbench.check(Path(request.dataset_path), request.category)
        sizes = {"num_prompts": request.num_prompts, "output_len": request.output_len}
        sizes = {k: parse_count(f"--{k.replace('_', '-')}", v, 1, MAX_TOKENS) for k, v in sizes.items() if v is not None}
        return Dataset(speed_bench=speedbench.Request(
            request.dataset_path, request.category, tokenizer=request.tokenizer, image=request.image,
            python=request.python, engine=request.engine, profile=request.profile, seed=options.seed, caller="bench",
            **sizes))  # a flag not given keeps the adapter's default
    if kind == "random":
        if request.prompts:
            raise UserError("--prompts and --dataset random: choose one")
        n = options.num_requests or 64
        ratio = parse_fraction(request.random_range_ratio)
        input_len = parse_count("--random-input-len", request.random_input_len, 1, MAX_TOKENS)
        output_len = parse_count("--random-output-len", request.random_output_len, 1, MAX_TOKENS)
        if n * input_len * (1 + ratio) > MAX_RANDOM_TOKENS:
            raise UserError(f"--dataset random: {n} prompts of up to {round(input_len * (1 + ratio))} tokens is more than "
                            f"{MAX_RANDOM_TOKENS} tokens in all (they are held in memory): lower --num-requests or "
                            "--random-input-len")
        # Ours is [len * (1 - r), len * (1 + r)]; SGLang's adapter draws from [int(top * R), top]: the same range,
        # said its way (the half keeps int() from rounding the bottom down).
        top = round(input_len * (1 + ratio))
        flags = {"num_prompts": n, "input_len": top, "output_len": round(output_len * (1 + ratio)),
                 "range_ratio": min(1.0, (round(input_len * (1 - ratio)) + 0.5) / top), "seed": options.seed,
                 "token_ids": options.target.api != "chat" and not options.prompt_template}
        return Dataset(sglang="random-ids", flags=tuple(flags.items()))
    if kind != "prompts":
        raise UserError(f"--dataset {request.dataset!r}: choose prompts (--prompts, the default set or a ShareGPT "
                        f"file), random or {speedbench.NAME}")
    path = Path(request.prompts) if request.prompts else DEFAULT_PROMPTS
    check_size(path, " (pass --prompts PATH to a JSON Lines or ShareGPT file)")
    if not is_sharegpt(path):
        return Dataset(path)
    return Dataset(path, "sharegpt", (("num_prompts", options.num_requests), ("seed", options.seed)))


def served_model_dir(endpoints: Sequence[str], env: variables.Environment) -> Path | None:
    """The compose services' model directory (their tokenizer is the served model's), where the run measures them;
    None for --endpoint, whose model may not be on this host."""
    if endpoints:
        return None
    proj = composefile.project(env)
    return composefile.service(proj.names(composefile.SERVER)[0], proj.env).model_dir


def parse_fraction(value) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        raise UserError(f"--random-range-ratio {value!r}: not a number") from None
    if not 0.0 <= ratio < 1.0:  # also refuses nan
        raise UserError(f"--random-range-ratio {value!r}: must be at least 0 and below 1")
    return ratio
