"""`invoke bench` and `invoke bench-compare`: the measurement lives in ``sglang_stack.bench``; the defaults are
``DEFAULTS`` below (``stack.bench.*``)."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import Exit, task

from sglang_stack.errors import UserError
from sglang_stack.entrypoints.prompts import PROFILE as ADAPTER_PROFILE
from sglang_stack.tasks.boundary import engine_of, user_errors

DEFAULTS = {
    "stack": {
        "bench": {
            "levels": "1,4,16",
            "repeats": 3,
            "warmup": 2,
            "timeout": 600,
            "results": "bench-results",
            "sweep_steps": "1,2,3,4",
            "sweep_topk": "1",
            "sweep_draft_tokens": "",
            "ready_timeout": 1800,
        },
    }
}

@task(
    auto_shortflags=False,
    iterable=["endpoint"],
    help={
        "endpoint": "NAME=URL of a running SGLang server; repeat for several "
        "(default: the servers of compose.yaml, those that answer)",
        "only": "measure only this service of compose.yaml, which must answer; with --verdict, one half of a verdict "
        "on a box that runs one service at a time: then the other, and `invoke bench-compare --verdict` merges them "
        "(default: every service that answers)",
        "levels": "comma-separated concurrency levels (default: stack.bench.levels, 1,4,16)",
        "repeats": "measured rounds per endpoint and level (default: stack.bench.repeats, 3)",
        "warmup": "unmeasured requests per endpoint first (default: stack.bench.warmup, 2)",
        "prompts": "prompt set: our JSON Lines, or a local ShareGPT-format JSON file, which SGLang's sharegpt adapter "
        "reads (default: the packaged set, sglang_stack/bench/prompts/v2.jsonl)",
        "dataset": "prompts (--prompts, the default), random: SGLang's random-ids adapter (--random-input-len, "
        "--random-output-len, --random-range-ratio, --num-requests) "
        f"or speed-bench: SPEED-Bench's chat-templated prompts, made by SGLang's own adapter (the {ADAPTER_PROFILE} profile's "
        "image, or --python) from the JSONL prepared on this host (--dataset-path)",
        "dataset_path": "with --dataset speed-bench: the SPEED-Bench JSONL prepared on this host (required with it)",
        "category": "with --dataset speed-bench: low_entropy, mixed or high_entropy (default: every row)",
        "num_prompts": "with --dataset speed-bench: how many prompts SGLang's adapter samples (default: 32)",
        "output_len": "with --dataset speed-bench: tokens generated per prompt (default: 512, SGLang's)",
        "tokenizer": "the served model's tokenizer, which SGLang's benchmark and adapter load: a directory or a "
        "Hub repository OWNER/NAME[@REVISION] whose tokenizer files are downloaded (default: the services' MODEL_DIR; "
        "with --endpoint, the model the first endpoint serves, a directory here or a Hub repository)",
        "image": "run SGLang's adapter and benchmark in this image "
        "(default: the --profile's tag; the benchmark, without --profile, compose's SGLANG_STACK_IMAGE where set)",
        "python": "run SGLang's adapter and benchmark with this "
        "interpreter instead of an image (default: none)",
        "profile": "the profile whose image runs SGLang's adapter "
        f"and benchmark (default: the adapter, {ADAPTER_PROFILE}'s, the first whose SGLang has it, whichever profile "
        "the services run; the benchmark, the services' own: SGLANG_PROFILE as compose reads it, from .env or the "
        "shell, else the default one)",
        "generator": "who sends the requests: sglang, SGLang's own serving benchmark (sglang.bench_serving on 0.5.9, "
        "sglang.benchmark.serving from 0.5.23 on, one process kept for every round), the only one (default: sglang)",
        "random_input_len": "random dataset: input tokens per prompt (default 512)",
        "random_output_len": "random dataset: output tokens per prompt (default 256)",
        "random_range_ratio": "random dataset: lengths vary uniformly by this fraction either way (default 0)",
        "num_requests": "requests per round (default: closed loop, the prompts cycled to 3 per worker; open loop, "
        "about 30 s of arrivals); the random dataset's size",
        "seed": "seed of the random dataset, the ShareGPT subset and SGLang's arrivals (default 0)",
        "api": "native (SGLang's /generate: exact token counts and acceptance), chat (/v1/chat/completions) or "
        "completions (/v1/completions) of any OpenAI-compatible server (default: native)",
        "no_stream": "one answer per request instead of a stream: latency only, no TTFT or ITL (default: streamed)",
        "model": "the OpenAI model field (default: the first of the server's /v1/models)",
        "request_rate": "open loop: requests per second, sent at Poisson arrival times whatever the server's speed; "
        "inf sends every request of a round at once, as sglang.bench_serving does (default: closed loop at --levels)",
        "burstiness": "open loop: 1, Poisson arrivals, the only shape SGLang's benchmark draws (default 1)",
        "max_concurrency": "open loop: at most this many in flight (default: no cap)",
        "percentiles": "comma-separated percentiles to report (default 50,90,95,99)",
        "slo": "goodput objectives in ms, e.g. ttft:500,tpot:50,e2e:20000 (open loop; default: none)",
        "out": "results directory (default: stack.bench.results/<UTC timestamp>, i.e. bench-results/...)",
        "timeout": "seconds a request may stay silent before it fails (default: stack.bench.timeout, 600)",
        "ignore_eos": "generate max_new_tokens even past end-of-sequence (default: off)",
        "prompt_template": "wrap each prompt, e.g. a chat template; must contain {prompt} (default: none, raw text)",
        "no_flush": "keep SGLang's prefix cache between rounds (default: flushed before each round)",
        "reference": "endpoint the others are divided by (default: the first whose server does not speculate, else the first)",
        "sweep": "restart the EAGLE service (compose.yaml's default) once per speculative setting and report the best (default: off)",
        "sweep_steps": "--speculative-num-steps values (default: stack.bench.sweep_steps, 1,2,3,4)",
        "sweep_topk": "--speculative-eagle-topk values (default: stack.bench.sweep_topk, 1)",
        "sweep_draft_tokens": "--speculative-num-draft-tokens values for topk > 1; with topk 1 SGLang "
        "uses steps + 1 (default: stack.bench.sweep_draft_tokens, none)",
        "sweep_level": "concurrency level the sweep ranks by (default: the lowest of --levels)",
        "ready_timeout": "seconds to wait for the service after each restart (default: stack.bench.ready_timeout, 1800)",
        "verdict": "does speculation pay here: per level (default levels 1,2,4,8,16,32,64), each speculative server's "
        "output tok/s over the baseline's with a 95% interval, pays / does not pay / cannot be told apart, up to what "
        "load; writes verdict.json and verdict.png; exit 3 when it pays at no level (default: off)",
    },
)
@user_errors
def bench(
    c,
    endpoint=None,
    levels=None,
    repeats=None,
    warmup=None,
    prompts=None,
    out=None,
    timeout=None,
    ignore_eos=False,
    prompt_template=None,
    no_flush=False,
    reference=None,
    sweep=False,
    sweep_steps=None,
    sweep_topk=None,
    sweep_draft_tokens=None,
    sweep_level=None,
    ready_timeout=None,
    dataset=None,
    random_input_len=None,
    random_output_len=None,
    random_range_ratio=None,
    num_requests=None,
    seed=None,
    api="native",
    no_stream=False,
    model=None,
    request_rate=None,
    burstiness=None,
    max_concurrency=None,
    percentiles=None,
    slo=None,
    verdict=False,
    dataset_path=None,
    category=None,
    num_prompts=None,
    output_len=None,
    tokenizer=None,
    image=None,
    python=None,
    profile=None,
    only=None,
    generator=None,
):
    """Measure decode tok/s, TTFT, TPOT, ITL, latency and acceptance of running SGLang servers.

    Closed loop by default: at each --levels concurrency, that many requests in flight for
    the measured window (the prompt set cycled). --request-rate sends open-loop arrivals
    instead. Through SGLang's streaming /generate (every acceptance figure it sends), or
    --api chat/completions of any OpenAI-compatible server. Interleaves the endpoints'
    rounds and writes bench.json, bench.md and bench.png as it goes. With --sweep, restarts
    the EAGLE service per speculative setting. With --verdict, says per level whether
    speculation pays over the baseline (exit 3 where it pays nowhere). --dataset speed-bench
    sends SPEED-Bench's prompts, made by SGLang's own adapter. SGLang's own serving benchmark
    sends every round, from the services' image. See docs/bench.md.
    """
    from sglang_stack.bench import measure, sweep as sweep_mod
    from sglang_stack.bench.request import Request

    cfg = c.config.stack.bench
    given = dict(prompts=prompts, ignore_eos=ignore_eos, prompt_template=prompt_template, flush=not no_flush,
                 reference=reference, dataset=dataset, random_input_len=random_input_len,
                 random_output_len=random_output_len, random_range_ratio=random_range_ratio, num_requests=num_requests,
                 seed=seed, api=api, stream=not no_stream, model=model, request_rate=request_rate, burstiness=burstiness,
                 max_concurrency=max_concurrency, percentiles=percentiles, slo=slo, level=sweep_level,
                 dataset_path=dataset_path, category=category, num_prompts=num_prompts, output_len=output_len,
                 tokenizer=tokenizer, image=image, python=python, profile=profile, generator=generator)
    from sglang_stack.bench import pays

    if verdict and sweep:
        raise UserError("--verdict and --sweep: the verdict compares running servers; run the sweep first, then the "
                        "verdict with its best setting")
    if only is not None and sweep:
        raise UserError("--only and --sweep: the sweep measures the EAGLE service alone already")
    request = Request(
        endpoints=tuple(endpoint or ()),
        only=only,
        # `is None`, not `or`: a flag given empty (`--levels ''`) is named as empty, never replaced by the default
        levels=(pays.LEVELS if verdict else cfg.levels) if levels is None else levels,
        repeats=cfg.repeats if repeats is None else repeats,
        warmup=cfg.warmup if warmup is None else warmup,
        out=_results_dir(cfg.results) if out is None else out,
        timeout=cfg.timeout if timeout is None else timeout,
        steps=cfg.sweep_steps if sweep_steps is None else sweep_steps,
        topk=cfg.sweep_topk if sweep_topk is None else sweep_topk,
        draft_tokens=cfg.sweep_draft_tokens if sweep_draft_tokens is None else sweep_draft_tokens,
        ready_timeout=cfg.ready_timeout if ready_timeout is None else ready_timeout,
        engine=engine_of(c),
        verdict=bool(verdict),
        **{k: v for k, v in given.items() if v is not None},  # a flag not given keeps Request's default
    )
    out = (sweep_mod.run if sweep else measure.run)(request)
    if verdict and only is None and not json.loads((Path(out) / pays.NAME).read_text())["pays"]:
        raise Exit(code=3)  # speculation paid at no level: a script can act on it


@task(
    name="bench-compare",
    auto_shortflags=False,
    iterable=["results"],
    help={
        "results": "a results directory from invoke bench; repeat (at least two)",
        "out": "where the combined results go (default: stack.bench.results/<UTC timestamp>)",
        "reference": "endpoint the others are divided by (default: the first whose server does not speculate, else the first)",
        "verdict": "does speculation pay, as invoke bench --verdict says it, from these runs: their rounds paired by "
        "repeat (run each with the same --levels, --repeats and prompts); writes verdict.json and verdict.png; exit 3 "
        "when it pays at no level (default: off)",
    },
)
@user_errors
def bench_compare(c, results=None, out=None, reference=None, verdict=False):
    """Combine runs made one service at a time (one box) into one table, plot and ratio.

    Both services want every GPU, so on one box run `invoke bench` with baseline up,
    then with eagle3 up, and combine the two results directories here; with --verdict,
    also say whether speculation pays, level by level (the runs were not interleaved:
    the line says so, and the machine's drift between them is in every ratio).
    """
    from sglang_stack.bench import measure as bench_mod
    from sglang_stack.bench import pays

    out = bench_mod.compare(results or [], out=_results_dir(c.config.stack.bench.results) if out is None else out,
                            reference=reference, verdict=bool(verdict))
    if verdict and not json.loads((Path(out) / pays.NAME).read_text())["pays"]:
        raise Exit(code=3)  # speculation paid at no level: a script can act on it


def _results_dir(root):
    """``root/<UTC timestamp>``; a relative ``root`` is taken from the repository root."""
    from sglang_stack import ROOT
    from sglang_stack.bench import measure as bench_mod

    return ROOT / root / bench_mod.timestamp()
