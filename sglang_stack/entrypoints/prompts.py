"""Prompts from SGLang's own benchmark datasets: its adapter reads the file, its tokenizer loader applies the chat
template, and the requests it would send come out as one JSON object.

    python3 -m sglang_stack.entrypoints.prompts speed-bench --dataset-path FILE --tokenizer DIR
        [--category low_entropy|mixed|high_entropy] [--num-prompts N] [--output-len N] [--seed N]

Run where SGLang imports (the image, or a profile's Python). SPEED-Bench (nvidia/SPEED-Bench) is read by
``sglang/benchmark/datasets/speed_bench.py`` (0.5.23 on; sgl-project/sglang#24149): the first user turn of each row
of the category asked for, chat-templated by the tokenizer as vLLM's benchmark does, ``--output-len`` tokens each
(512 by default), ``--num-prompts`` of them sampled (seeded here, so a rerun sends the same). Acceptance is only
comparable on chat-templated prompts: random tokens inflate the accept length (1.94 on chat against 3.93 on random,
lightseekorg/tokenspeed#1305). Prints ``{"sglang": VERSION, "dataset": NAME, "rows": [{"prompt": TEXT, "prompt_len":
N, "output_len": N}, ...]}``; exit 1 with one line where this SGLang has no such dataset or its adapter refuses the
file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DATASETS = {"speed-bench": "sglang.benchmark.datasets.speed_bench"}
PROFILE = "0.5.23"  # the first release of this checkout's profiles whose benchmark has them
CATEGORIES = ("low_entropy", "mixed", "high_entropy")


def rows(dataset: str, path: Path, tokenizer: str, category: str | None, num_prompts: int, output_len: int,
         seed: int) -> list[dict]:
    """What SGLang's benchmark would send for ``dataset``: its own adapter and tokenizer loader."""
    import importlib.metadata
    import importlib.util
    import random

    version = importlib.metadata.version("sglang")
    try:
        found = importlib.util.find_spec(DATASETS[dataset]) is not None
    except ModuleNotFoundError:  # no sglang.benchmark package at all (0.5.9 keeps its benchmark in bench_serving.py)
        found = False
    if not found:
        raise LookupError(f"SGLang {version}'s benchmark has no {dataset} dataset ({DATASETS[dataset]}); profile "
                          f"{PROFILE} has it")
    from sglang.benchmark.datasets import get_dataset
    from sglang.benchmark.utils import get_tokenizer

    try:
        loaded = get_tokenizer(tokenizer)
    except Exception as err:  # transformers' loader raises whatever the broken file provokes (KeyError, TypeError...)
        # no path: in the image it is the mount point, which the user never typed
        raise ValueError(f"the tokenizer (--tokenizer) does not load in transformers: {type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else '-'}") from None
    args = argparse.Namespace(dataset_name=dataset, dataset_path=str(path), num_prompts=num_prompts,
                              speed_bench_category=category, speed_bench_output_len=output_len)
    random.seed(seed)  # the adapter samples with Python's random
    return [{"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len}
            for r in get_dataset(args, loaded)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.entrypoints.prompts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=sorted(DATASETS))
    parser.add_argument("--dataset-path", type=Path, required=True)
    parser.add_argument("--tokenizer", required=True, help="a directory holding the model's tokenizer")
    parser.add_argument("--category", choices=CATEGORIES)
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        out = rows(args.dataset, args.dataset_path, args.tokenizer, args.category, args.num_prompts, args.output_len,
                   args.seed)
    except (LookupError, ValueError, OSError) as err:
        print(f"error: {str(err).splitlines()[0] if str(err) else err.__class__.__name__}", file=sys.stderr)
        return 1
    import importlib.metadata

    print(json.dumps({"sglang": importlib.metadata.version("sglang"), "dataset": args.dataset, "rows": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
