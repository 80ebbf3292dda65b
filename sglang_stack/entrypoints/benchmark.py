"""SGLang's own serving benchmark, driven one round at a time.

    python3 -m sglang_stack.entrypoints.benchmark --tokenizer DIR

Run where SGLang imports (the image, or a profile's Python), on a network that reaches the servers. It imports
``sglang.benchmark.serving`` once (torch comes with it: seconds), prints ``{"ready": VERSION}``, then reads one JSON
object per line of stdin, a round:

    {"base_url": URL, "backend": one of SGLang's (sglang, sglang-oai, sglang-oai-chat...), "model": NAME or null,
     "rows": [{"prompt": TEXT or [TOKEN IDS], "prompt_len": N or null (then counted here), "output_len": N}, ...],
     "max_concurrency": N or null, "request_rate": R or "inf", "warmup": N,
     "ignore_eos": BOOL, "stream": BOOL, "seed": N, "timeout": SECONDS, "extra": {FIELD: VALUE} merged into each
     request's body, as SGLang's --extra-request-body is, "flush_cache": BOOL (after the warm-up, as SGLang's
     --flush-cache does)}

and answers each with one line: ``{"outputs": [...], "metrics": {...}}``, each request as SGLang's
``RequestFuncOutput`` recorded it (``start_time`` on this process's ``time.perf_counter``; ``counted``: where its
token count came from) and SGLang's own figures
for the round (what ``benchmark()`` returns, its per-request lists left out; ``{"error": LINE}`` where they failed
after every request ran); or ``{"error": LINE}`` for a round that did not run. EOF ends it.
SGLang's console output goes to stderr; an API key comes from ``OPENAI_API_KEY``, where SGLang's client reads it.

Every setting SGLang's parser has keeps its default: ``cli_main`` runs once with ``run_benchmark`` captured, the way
0.5.23's ``sglang.benchmark.steady_state_serving`` extends it; each round then calls ``benchmark()`` with the rows
given (no dataset file) and keeps the per-request outputs where ``calculate_metrics`` receives them. A request whose
stream carried an error event or an abort fails (``failure``), where SGLang's clients would count it. Needs the
``sglang.benchmark`` package (0.5.23 on): 0.5.9 keeps its benchmark in ``bench_serving.py``, whose outputs carry no
``spec_accept_length``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import copy
import importlib.metadata
import inspect
import json
import random
import sys

from sglang_stack.entrypoints.prompts import PROFILE  # the first profile whose benchmark is a package

KEPT = ("success", "error", "start_time", "latency", "ttft", "itl", "prompt_len", "output_len", "spec_accept_length")
DETAILS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")  # per request: in "outputs"


def load():
    """``sglang.benchmark.serving``, or ``LookupError`` naming the profile that has it."""
    import importlib.util

    version = importlib.metadata.version("sglang")
    try:
        found = importlib.util.find_spec("sglang.benchmark.serving") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise LookupError(f"SGLang {version} has no sglang.benchmark.serving; profile {PROFILE} has it")
    from sglang.benchmark import serving

    return serving


# What each request's stream held, as SGLang's client parsed it: set per request (each runs in a task of its own).
EVENTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("events", default=None)


class Parsed:
    """SGLang's ``json`` or ``orjson`` module, whose ``loads`` also keeps each event parsed for the request under way."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    def loads(self, data, *args, **kwargs):
        value = self._module.loads(data, *args, **kwargs)
        seen = EVENTS.get()
        if seen is not None and isinstance(value, dict):
            seen.append(value)
        return value


def failure(events: list[dict]) -> str | None:
    """Why a stream that SGLang's client took for a success failed: an error event after the headers went out, or a
    request the server aborted (``finish_reason`` of type abort). SGLang's clients count such a request with the
    tokens it got; the built-in client fails it, in these words."""
    for event in events:
        err = event.get("error")
        if err is not None:
            return f"server error: {err.get('message', err) if isinstance(err, dict) else err}"
        meta = event.get("meta_info")
        choices = event.get("choices")
        reason = (meta.get("finish_reason") if isinstance(meta, dict)
                  else choices[0].get("finish_reason") if isinstance(choices, list) and choices
                  and isinstance(choices[0], dict) else None)
        if isinstance(reason, dict) and reason.get("type") == "abort":
            return f"aborted by the server: {reason.get('message', reason)}"
        if reason == "abort":
            return "aborted by the server"
    return None


def counted(events: list[dict]) -> str:
    """Where a request's token count came from: ``server`` (an event's ``meta_info`` or ``usage`` carried
    ``completion_tokens``, or the answer was not streamed), or ``requested``: no chunk carried a count, and SGLang's
    OpenAI clients then count the length asked for."""
    for event in events:
        for part in (event.get("meta_info"), event.get("usage")):
            if isinstance(part, dict) and "completion_tokens" in part:
                return "server"
    return "requested" if events else "server"


def watch(serving) -> None:
    """Every request function of SGLang's fails a request whose stream said it failed (``failure``) and says where its
    count came from (``counted``); the functions themselves run unchanged."""
    serving.json, serving.orjson = Parsed(serving.json), Parsed(serving.orjson)

    def watched(send):
        async def request(*args, **kwargs):  # as SGLang calls it: request_func_input=..., pbar=...
            events: list[dict] = []
            token = EVENTS.set(events)
            try:
                output = await send(*args, **kwargs)
            finally:
                EVENTS.reset(token)
            why, output.counted = failure(events), counted(events)
            if why and output.success:
                output.success, output.error = False, why
            return output
        return request

    for backend, send in list(serving.ASYNC_REQUEST_FUNCS.items()):
        serving.ASYNC_REQUEST_FUNCS[backend] = watched(send)


def defaults(serving, tokenizer: str) -> argparse.Namespace:
    """SGLang's parser's Namespace: ``cli_main`` parses, ``run_benchmark`` is captured before it runs."""
    captured: dict = {}
    original, argv = serving.run_benchmark, sys.argv
    serving.run_benchmark = lambda args: captured.setdefault("args", args)
    sys.argv = ["sglang.benchmark.serving", "--model", tokenizer, "--tokenizer", tokenizer, "--disable-tqdm",
                "--output-file", "/dev/null"]  # benchmark() appends its result to a file: none kept
    try:
        serving.cli_main()
    finally:
        serving.run_benchmark, sys.argv = original, argv
    return captured["args"]


def one_line(text: str) -> str:
    """SGLang records a failed request's traceback; its last line says what failed."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def run_round(serving, base: argparse.Namespace, tokenizer, plan: dict) -> dict:
    """One round of SGLang's ``benchmark()``: the outputs of every request and its own metrics."""
    import numpy as np
    from sglang.benchmark.datasets import DatasetRow

    backend = plan.get("backend", "sglang")
    if backend not in serving._BACKEND_API_PATHS:  # SGLang's own table of backends and their paths
        raise ValueError(f"backend {backend!r}: not one of SGLang's ({', '.join(serving._BACKEND_API_PATHS)})")
    args = copy.copy(base)
    args.backend, args.base_url = backend, plan["base_url"].rstrip("/")
    args.model = plan.get("model") or base.model
    args.disable_ignore_eos = not plan.get("ignore_eos", False)
    args.disable_stream = not plan.get("stream", True)
    rate = float(plan.get("request_rate", "inf"))
    args.request_rate, args.max_concurrency = rate, plan.get("max_concurrency")
    args.warmup_requests = int(plan.get("warmup", 0))
    serving.set_global_args(args)
    random.seed(plan.get("seed", 0))
    np.random.seed(plan.get("seed", 0))  # the open loop's arrival gaps
    rows = [DatasetRow(prompt=r["prompt"], output_len=int(r["output_len"]),
                       prompt_len=int(r["prompt_len"]) if r.get("prompt_len") is not None
                       else len(r["prompt"]) if isinstance(r["prompt"], list) else len(tokenizer.encode(r["prompt"])))
            for r in plan["rows"]]
    captured: dict = {}
    calculate = serving.calculate_metrics
    signature = inspect.signature(calculate)

    def capture(*call_args, **call_kwargs):
        captured["outputs"] = list(signature.bind(*call_args, **call_kwargs).arguments["outputs"])
        return calculate(*call_args, **call_kwargs)

    serving.calculate_metrics = capture
    try:
        bench = serving.benchmark(
            backend=backend, api_url=args.base_url + serving._BACKEND_API_PATHS[backend], base_url=args.base_url,
            model_id=args.model, tokenizer=tokenizer, input_requests=rows, request_rate=rate,
            max_concurrency=args.max_concurrency, disable_tqdm=True, lora_names=None, lora_request_distribution=None,
            lora_zipf_alpha=None, extra_request_body=plan.get("extra") or {}, profile=False,
            flush_cache=bool(plan.get("flush_cache")), warmup_requests=args.warmup_requests)
        with contextlib.redirect_stdout(sys.stderr):
            result = asyncio.run(asyncio.wait_for(bench, float(plan.get("timeout", 600))))
    except TimeoutError:
        raise TimeoutError(f"the round did not finish within {float(plan.get('timeout', 600)):g} s") from None
    except Exception as err:
        if "outputs" not in captured:
            raise
        # Every request ran, and SGLang's figures failed after (its percentiles of no completed request raise
        # IndexError): the outputs say what failed.
        result = {"error": f"{type(err).__name__}: {one_line(err) or '-'}"}
    finally:
        serving.calculate_metrics = calculate
    outputs = [{**{key: getattr(out, key) for key in KEPT}, "counted": getattr(out, "counted", "server")}
               for out in captured["outputs"]]
    for out in outputs:
        out["error"] = one_line(out["error"])
    metrics = {k: v for k, v in result.items() if k not in DETAILS and isinstance(v, (int, float, str, type(None)))}
    return {"outputs": outputs, "metrics": metrics}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.entrypoints.benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True,
                        help="the served model's tokenizer (a directory): SGLang counts and retokenizes with it")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):
        try:
            serving = load()
        except LookupError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        from sglang.benchmark.utils import get_tokenizer

        base = defaults(serving, args.tokenizer)
        watch(serving)
        try:
            tokenizer = get_tokenizer(args.tokenizer)
        except Exception as err:  # transformers' loader raises whatever a broken file provokes
            print(f"error: the tokenizer (--tokenizer) does not load in transformers: {type(err).__name__}: "
                  f"{one_line(err)}", file=sys.stderr)
            return 1
    print(json.dumps({"ready": importlib.metadata.version("sglang")}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = run_round(serving, base, tokenizer, json.loads(line))
        except Exception as err:  # one round's failure is its answer; the next round may go on
            answer = {"error": f"{type(err).__name__}: {one_line(err) or '-'}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
