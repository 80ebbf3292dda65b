"""The tasks `invoke bench` and `invoke bench-compare`, collected into tasks.py's namespace.

Each is a thin wrapper: the measurement lives in ``measure`` and ``sweep``. Defaults come
from ``stack.bench`` in tasks.py's ``ns.configure``.
"""

from __future__ import annotations

from invoke import task

from sglang_stack.cli import user_errors

@task(
    auto_shortflags=False,
    iterable=["endpoint"],
    help={
        "endpoint": "NAME=URL of a running SGLang server; repeat for several "
        "(default: the compose services baseline and eagle3, those that answer)",
        "levels": "comma-separated concurrency levels (default: stack.bench.levels, 1,4,16)",
        "repeats": "measured rounds per endpoint and level (default: stack.bench.repeats, 3)",
        "warmup": "unmeasured requests per endpoint first (default: stack.bench.warmup, 2)",
        "prompts": "prompt set, JSON Lines (default: the packaged set, sglang_stack/bench/prompts/v1.jsonl)",
        "out": "results directory (default: stack.bench.results/<UTC timestamp>, i.e. bench-results/...)",
        "timeout": "seconds a request may stay silent before it fails (default: stack.bench.timeout, 600)",
        "ignore_eos": "generate max_new_tokens even past end-of-sequence (default: off)",
        "prompt_template": "wrap each prompt, e.g. a chat template; must contain {prompt} (default: none, raw text)",
        "no_flush": "keep SGLang's prefix cache between rounds (default: flushed before each round)",
        "reference": "endpoint the others are divided by (default: baseline, else the first)",
        "sweep": "restart eagle3 once per speculative setting and report the best (default: off)",
        "sweep_steps": "--speculative-num-steps values (default: stack.bench.sweep_steps, 1,2,3,4)",
        "sweep_topk": "--speculative-eagle-topk values (default: stack.bench.sweep_topk, 1)",
        "sweep_draft_tokens": "--speculative-num-draft-tokens values for topk > 1; with topk 1 SGLang "
        "uses steps + 1 (default: stack.bench.sweep_draft_tokens, none)",
        "sweep_level": "concurrency level the sweep ranks by (default: the lowest of --levels)",
        "ready_timeout": "seconds to wait for eagle3 after each restart (default: stack.bench.ready_timeout, 1800)",
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
):
    """Measure decode tok/s, TTFT, ITL, latency and acceptance length of running SGLang servers.

    Sends the packaged prompt set through SGLang's streaming /generate API at each
    concurrency level, interleaving the endpoints' rounds, and writes bench.json,
    bench.md and bench.png. With --sweep, restarts eagle3 per speculative setting.
    """
    from sglang_stack.bench import measure as bench_mod, sweep as sweep_mod

    cfg = c.config.stack.bench
    common = dict(
        levels=levels or cfg.levels,
        repeats=repeats or cfg.repeats,
        warmup=cfg.warmup if warmup is None else warmup,
        prompts=prompts,
        out=out or _results_dir(cfg.results),
        timeout=timeout or cfg.timeout,
        ignore_eos=ignore_eos,
        prompt_template=prompt_template,
        flush=not no_flush,
    )
    if sweep:
        sweep_mod.run(
            endpoints=endpoint or (),
            steps=sweep_steps or cfg.sweep_steps,
            topk=sweep_topk or cfg.sweep_topk,
            draft_tokens=sweep_draft_tokens or cfg.sweep_draft_tokens,
            level=sweep_level,
            ready_timeout=ready_timeout or cfg.ready_timeout,
            engine=c.config.stack.engine,
            **common,
        )
    else:
        bench_mod.run(endpoints=endpoint or (), reference=reference, **common)


@task(
    name="bench-compare",
    auto_shortflags=False,
    iterable=["results"],
    help={
        "results": "a results directory from invoke bench; repeat (at least two)",
        "out": "where the combined results go (default: stack.bench.results/<UTC timestamp>)",
        "reference": "endpoint the others are divided by (default: baseline, else the first)",
    },
)
@user_errors
def bench_compare(c, results=None, out=None, reference=None):
    """Combine runs made one service at a time (one box) into one table, plot and ratio.

    Both services want every GPU, so on one box run `invoke bench` with baseline up,
    then with eagle3 up, and combine the two results directories here.
    """
    from sglang_stack.bench import measure as bench_mod

    bench_mod.compare(results or [], out=out or _results_dir(c.config.stack.bench.results), reference=reference)


def _results_dir(root):
    """``root/<UTC timestamp>``; a relative ``root`` is taken from the repository root."""
    from sglang_stack import ROOT
    from sglang_stack.bench import measure as bench_mod

    return ROOT / root / bench_mod.timestamp()
