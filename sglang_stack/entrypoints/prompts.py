"""Prompts from SGLang's own benchmark datasets: its adapter reads or makes them, its tokenizer loader counts them,
and the requests it would send come out as one JSON object.

    python3 -m sglang_stack.entrypoints.prompts DATASET --tokenizer DIR [--dataset-path FILE] [--num-prompts N]
        [--output-len N] [--input-len N] [--range-ratio R] [--token-ids] [--category CATEGORY] [--seed N]

Run where SGLang imports (the image, or a profile's Python). Every setting of SGLang's parser keeps its default but
those given here; DATASET is one of SGLang's ``--dataset-name`` values:

- ``sharegpt``: a ShareGPT-format file (``--dataset-path``, never downloaded): the first two turns of each
  conversation of at least two, shuffled, ``--num-prompts`` of them; each asks for ``--output-len`` tokens, by default
  as many as the conversation's answer has.
- ``random-ids``: ``--num-prompts`` prompts of random token ids, ``--input-len`` and ``--output-len`` long, each drawn
  from ``[len * R, len]`` for ``--range-ratio R`` (SGLang's meaning); ``--token-ids`` sends the ids themselves, else
  their decoded text.
- ``speed-bench`` (SGLang 0.5.23 on: ``sglang/benchmark/datasets/speed_bench.py``, sgl-project/sglang#24149):
  SPEED-Bench (nvidia/SPEED-Bench), the first user turn of each row of ``--category``, chat-templated by the tokenizer
  as vLLM's benchmark does, ``--output-len`` tokens each (512 by default). Acceptance is only comparable on
  chat-templated prompts: random tokens inflate the accept length (1.94 on chat against 3.93 on random,
  lightseekorg/tokenspeed#1305).

The adapters sample with Python's and numpy's generators, seeded with ``--seed`` here, so a rerun sends the same.
Prints ``{"sglang": VERSION, "dataset": NAME, "rows": [{"prompt": TEXT or [IDS], "prompt_len": N, "output_len":
N}, ...]}``; exit 1 with one line where this SGLang has no such dataset, or its adapter refuses the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DATASETS = {"sharegpt": None, "random-ids": None, "speed-bench": "sglang.benchmark.datasets.speed_bench"}
PROFILE = "0.5.23"  # the first release of this checkout's profiles whose benchmark has every one of them
CATEGORIES = ("low_entropy", "mixed", "high_entropy")


def rows(dataset: str, path: Path | None, tokenizer: str, num_prompts: int, seed: int = 0, output_len: int | None = None,
         input_len: int | None = None, range_ratio: float | None = None, token_ids: bool = False,
         category: str | None = None) -> list[dict]:
    """What SGLang's benchmark would send for ``dataset``: its own parser's defaults, adapter and tokenizer loader."""
    import contextlib
    import importlib.metadata
    import importlib.util
    import random

    import numpy as np

    from sglang_stack.entrypoints import benchmark

    module = DATASETS[dataset]
    try:
        found = module is None or importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # no sglang.benchmark package at all (0.5.9 keeps its benchmark in bench_serving.py)
        found = False
    if not found:
        raise LookupError(f"SGLang {importlib.metadata.version('sglang')}'s benchmark has no {dataset} dataset "
                          f"({module}); profile {PROFILE} has it")
    loaded = benchmark.tokenizer(tokenizer)  # first, as it is quick; no path in its error: in the image, a mount point
    serving = benchmark.load()
    try:
        from sglang.benchmark.datasets import get_dataset
    except ImportError:  # 0.5.9
        get_dataset = serving.get_dataset
    args = benchmark.defaults(serving, tokenizer)
    args.dataset_name, args.dataset_path, args.num_prompts = dataset, str(path or ""), num_prompts
    args.tokenize_prompt = token_ids
    given = {"sharegpt": {"sharegpt_output_len": output_len},
             "speed-bench": {"speed_bench_output_len": output_len, "speed_bench_category": category},
             "random-ids": {"random_input_len": input_len, "random_output_len": output_len,
                            "random_range_ratio": range_ratio}}[dataset]
    for name, value in given.items():
        if value is not None or name == "speed_bench_category":  # None: the parser's default, or every category
            setattr(args, name, value)
    random.seed(seed)
    np.random.seed(seed)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the adapters print their token totals
            made = get_dataset(args, loaded)
    except (ValueError, OSError):
        raise
    except Exception as err:  # a file of the wrong shape fails inside the adapter: TypeError, KeyError...
        raise ValueError(f"{type(err).__name__}: {benchmark.one_line(err) or '-'}") from None
    return [{"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len} for r in made]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.entrypoints.prompts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=sorted(DATASETS))
    parser.add_argument("--dataset-path", type=Path)
    parser.add_argument("--tokenizer", required=True, help="a directory holding the model's tokenizer")
    parser.add_argument("--category", choices=CATEGORIES)
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--output-len", type=int)
    parser.add_argument("--input-len", type=int)
    parser.add_argument("--range-ratio", type=float)
    parser.add_argument("--token-ids", action="store_true", help="random-ids: send the ids, not their text")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.dataset != "random-ids" and args.dataset_path is None:
        parser.error(f"{args.dataset} needs --dataset-path")
    try:
        out = rows(args.dataset, args.dataset_path, args.tokenizer, args.num_prompts, args.seed, args.output_len,
                   args.input_len, args.range_ratio, args.token_ids, args.category)
    except (LookupError, ValueError, OSError) as err:  # json's decode error is a ValueError
        print(f"error: {str(err).splitlines()[0] if str(err) else err.__class__.__name__}", file=sys.stderr)
        return 1
    import importlib.metadata

    print(json.dumps({"sglang": importlib.metadata.version("sglang"), "dataset": args.dataset, "rows": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
