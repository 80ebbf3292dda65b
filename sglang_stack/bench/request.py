"""What a user asks of `invoke bench`: every flag, as typed, in one object with one set of defaults.

The task turns its flags into a ``Request`` and hands it to ``measure.run`` or, with ``--sweep``,
``sweep.run``; each reads it once into the ``rounds.Options`` it measures with (measure: any API, open or
closed loop; the sweep: SGLang's native API in closed loop, which is what acceptance is read from).
Values stay text until then, so a bad one is named by its flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sglang_stack.engine import DOCKER, Engine

DEFAULT_LEVELS = (1, 4, 16)


@dataclass(frozen=True)
class Request:
    """`invoke bench`'s flags; the defaults here are the flags' defaults."""

    endpoints: Sequence[str] = ()  # NAME=URL; none: the compose services that answer
    only: str | None = None  # one compose service, measured alone (one half of a verdict on a box that runs one)
    levels: str | Sequence[int] = DEFAULT_LEVELS
    repeats: int | str = 3
    warmup: int | str = 2
    prompts: str | Path | None = None
    out: str | Path | None = None
    timeout: float | str = 600.0
    ignore_eos: bool = False
    prompt_template: str | None = None
    flush: bool = True
    reference: str | None = None
    # what is asked of the server
    api: str = "native"
    stream: bool = True
    model: str | None = None
    # open loop
    request_rate: float | str | None = None
    burstiness: float | str = 1.0  # 1 only: SGLang's benchmark draws Poisson arrivals
    max_concurrency: int | str | None = None
    # the prompts
    num_requests: int | str | None = None
    seed: int | str = 0
    dataset: str | None = None
    random_input_len: int | str = 512
    random_output_len: int | str = 256
    random_range_ratio: float | str = 0.0
    # --dataset speed-bench: SGLang's own adapter makes the prompts (bench/speedbench.py)
    dataset_path: str | None = None
    category: str | None = None
    num_prompts: int | str | None = None  # default: speedbench.Request's, 32
    output_len: int | str | None = None  # default: 512, SGLang's
    tokenizer: str | None = None  # default: the compose services' MODEL_DIR, or what an --endpoint serves
    image: str | None = None  # where SGLang's adapter or benchmark runs (default: the profile's tag)
    python: str | None = None
    profile: str | None = None
    # who sends the requests: sglang, SGLang's own benchmark (run where --image/--python/--profile say), the only one
    generator: str = "sglang"
    # the report
    percentiles: str | Sequence[float] | None = None
    slo: str | None = None
    # --sweep: the speculative settings eagle3 restarts with
    steps: str = "1,2,3,4"
    topk: str = "1"
    draft_tokens: str = ""
    level: str | int | None = None
    ready_timeout: float | str = 1800.0
    verdict: bool = False  # --verdict: per level, does speculation pay over the baseline (bench/pays.py)
    engine: Engine = DOCKER  # the engine that runs the services (provenance; the sweep's restarts)
