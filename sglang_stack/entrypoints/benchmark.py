"""SGLang's own serving benchmark, driven one round at a time.

    python3 -m sglang_stack.entrypoints.benchmark --tokenizer DIR

Run where SGLang imports (the image, or a profile's Python), on a network that reaches the servers. It imports
SGLang's benchmark once (torch comes with it: seconds), prints ``{"ready": VERSION, "module": NAME}``, then reads one
JSON object per line of stdin, a round:

    {"base_url": URL, "backend": one of SGLang's (sglang, sglang-oai, sglang-oai-chat...), "model": NAME or null,
     "rows": [{"prompt": TEXT or [TOKEN IDS], "prompt_len": N or null (then counted here), "output_len": N}, ...],
     "max_concurrency": N or null, "request_rate": R or "inf", "warmup": N,
     "ignore_eos": BOOL, "stream": BOOL, "seed": N, "timeout": SECONDS, "flush_cache": BOOL (after the warm-up, as
     SGLang's --flush-cache does)}

and answers each with one line: ``{"outputs": [...], "metrics": {...}}``, each request as SGLang's
``RequestFuncOutput`` recorded it (``start_time`` on this process's ``time.perf_counter``; ``counted``: where its
token count came from; ``spec``: the server's speculative figures) and SGLang's own figures
for the round (what ``benchmark()`` returns, its per-request lists left out; ``{"error": LINE}`` where they failed
after every request ran); or ``{"error": LINE}`` for a round that did not run. EOF ends it.
SGLang's console output goes to stderr; an API key comes from ``OPENAI_API_KEY``, where SGLang's client reads it.

Either profile's benchmark: ``sglang.benchmark.serving`` (0.5.23 on) or ``sglang.bench_serving`` (0.5.9), so the
services' own image measures them. Every setting SGLang's parser has keeps its default: the parser runs once with
``run_benchmark`` captured (0.5.23's ``cli_main``, the way its ``sglang.benchmark.steady_state_serving`` extends it;
0.5.9's ``__main__`` block, which is where that release builds its parser); each round then calls ``benchmark()``
with the rows given (no dataset file) and keeps the per-request outputs where ``calculate_metrics`` receives them. A
request whose stream carried an error event or an abort fails (``failure``), where SGLang's clients would count it.
SGLang's clients keep at most the accept length of what the server's last ``meta_info`` says of speculation (0.5.23;
0.5.9 none of it): every ``spec_*`` figure, the accept length, the verify passes and the per-position histogram, is
taken from the same stream (``speculative``), the same way for both releases.
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

KEPT = ("success", "error", "start_time", "latency", "ttft", "itl", "prompt_len", "output_len")
# What SGLang's tokenizer manager puts in a request's last meta_info with speculative decoding
# (srt/managers/tokenizer_manager.py, _calculate_spec_decoding_metrics)
SPEC = ("spec_accept_length", "spec_verify_ct", "spec_accept_rate", "spec_accept_token_num", "spec_draft_token_num",
        "spec_accept_histogram")
DETAILS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")  # per request: in "outputs"


# 0.5.9's run_benchmark picks the path of each backend in an if-chain (0.5.23 keeps the table, _BACKEND_API_PATHS):
# those of the three backends --api sends by
PATHS_0_5_9 = {"sglang": "/generate", "sglang-oai": "/v1/completions", "sglang-oai-chat": "/v1/chat/completions"}


def load():
    """SGLang's serving benchmark module: ``sglang.benchmark.serving`` (0.5.23 on), else ``sglang.bench_serving``
    (0.5.9); ``LookupError`` where the installed SGLang has neither."""
    import importlib
    import importlib.util

    for name in ("sglang.benchmark.serving", "sglang.bench_serving"):
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            return importlib.import_module(name)
    raise LookupError(f"SGLang {importlib.metadata.version('sglang')} has neither sglang.benchmark.serving nor "
                      "sglang.bench_serving")


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


def speculative(events: list[dict]) -> dict:
    """The server's speculative figures for one request, where its stream carried them: every ``spec_*`` field of the
    last event whose ``meta_info`` has any, as sent."""
    for event in reversed(events):
        meta = event.get("meta_info")
        found = {key: meta[key] for key in SPEC if meta.get(key) is not None} if isinstance(meta, dict) else {}
        if found:
            return found
    return {}


def failure(events: list[dict]) -> str | None:
    """Why a stream that SGLang's client took for a success failed: an error event after the headers went out, or a
    request the server aborted (``finish_reason`` of type abort). SGLang's clients count such a request with the
    tokens it got; this driver fails it, in these words."""
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
    """Every request function of SGLang's fails a request whose stream said it failed (``failure``), says where its
    count came from (``counted``) and keeps the server's speculative figures (``speculative``); the functions
    themselves run unchanged."""
    for name in ("json", "orjson"):  # 0.5.9 parses with json alone
        if hasattr(serving, name):
            setattr(serving, name, Parsed(getattr(serving, name)))

    def watched(send):
        async def request(*args, **kwargs):  # as SGLang calls it: request_func_input=..., pbar=...
            events: list[dict] = []
            token = EVENTS.set(events)
            try:
                output = await send(*args, **kwargs)
            finally:
                EVENTS.reset(token)
            why, output.counted, output.spec = failure(events), counted(events), speculative(events)
            if why and output.success:
                output.success, output.error = False, why
            return output
        return request

    for backend, send in list(serving.ASYNC_REQUEST_FUNCS.items()):
        serving.ASYNC_REQUEST_FUNCS[backend] = watched(send)


def defaults(serving, tokenizer: str) -> argparse.Namespace:
    """SGLang's parser's Namespace: its parser parses, ``run_benchmark`` is captured before it runs."""
    captured: dict = {}
    original, argv = serving.run_benchmark, sys.argv
    capture = lambda args: captured.setdefault("args", args)  # noqa: E731
    sys.argv = [serving.__name__, "--model", tokenizer, "--tokenizer", tokenizer, "--disable-tqdm",
                "--output-file", "/dev/null"]  # benchmark() appends its result to a file: none kept
    try:
        if hasattr(serving, "cli_main"):  # 0.5.23 on
            serving.run_benchmark = capture
            serving.cli_main()
        else:
            exec(main_block(serving), {**vars(serving), "run_benchmark": capture})
    finally:
        serving.run_benchmark, sys.argv = original, argv
    return captured["args"]


def main_block(serving):
    """0.5.9 builds its parser in the module's ``if __name__ == "__main__":`` block, which ends by calling
    ``run_benchmark(args)``: that block alone, compiled from the module's own source."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(serving))
    block = next((node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)),
                 None)
    if block is None:
        raise LookupError(f"{serving.__name__} has neither cli_main nor a __main__ block that parses its flags")
    return compile(ast.Module(body=block.body, type_ignores=[]), serving.__file__, "exec")


def tokenizer(path: str, serving=None):
    """The tokenizer at ``path``, loaded by SGLang's benchmark's own loader (0.5.9's is in ``serving``, imported
    here if not given); ``ValueError`` with one line where transformers cannot load it."""
    try:
        from sglang.benchmark.utils import get_tokenizer
    except ImportError:  # 0.5.9
        get_tokenizer = (serving or load()).get_tokenizer
    try:
        return get_tokenizer(path)
    except Exception as err:  # transformers' loader raises whatever a broken file provokes (KeyError, TypeError...)
        raise ValueError(f"the tokenizer (--tokenizer) does not load in transformers: {type(err).__name__}: "
                         f"{one_line(err) or '-'}") from None


def one_line(text: str) -> str:
    """SGLang records a failed request's traceback; its last line says what failed."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def usage_asked(serving, backend: str, stream: bool) -> dict:
    """What SGLang's OpenAI client for ``backend`` must ask for (its ``extra_request_body``) to count the tokens served,
    not the tokens asked for: each takes ``usage.completion_tokens`` from whichever chunk has it and otherwise counts
    the requested length, and no server streams usage unasked. Chat, from 0.5.23 on: the usage-only chunk at the end
    (that client skips a chunk without choices). Completions, and 0.5.9's chat (``sglang.bench_serving``): usage in
    every chunk (SGLang's ``continuous_usage_stats``), since those clients read ``choices[0]`` of every chunk and fail
    on the usage-only one, whose choices are empty."""
    if backend not in ("sglang-oai", "sglang-oai-chat") or not stream:
        return {}  # /generate's meta_info counts every event; an unstreamed answer carries its usage
    if backend == "sglang-oai-chat" and serving.__name__ != "sglang.bench_serving":
        return {"stream_options": {"include_usage": True}}
    return {"stream_options": {"continuous_usage_stats": True}}


def run_round(serving, base: argparse.Namespace, tokenizer, plan: dict) -> dict:
    """One round of SGLang's ``benchmark()``: the outputs of every request and its own metrics."""
    import numpy as np

    try:
        from sglang.benchmark.datasets import DatasetRow
    except ImportError:  # 0.5.9
        DatasetRow = serving.DatasetRow
    paths = getattr(serving, "_BACKEND_API_PATHS", PATHS_0_5_9)  # SGLang's own table of backends and their paths
    backend = plan.get("backend", "sglang")
    if backend not in paths:
        raise ValueError(f"backend {backend!r}: not one of SGLang's ({', '.join(paths)})")
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
            backend=backend, api_url=args.base_url + paths[backend], base_url=args.base_url,
            model_id=args.model, tokenizer=tokenizer, input_requests=rows, request_rate=rate,
            max_concurrency=args.max_concurrency, disable_tqdm=True, lora_names=None, lora_request_distribution=None,
            lora_zipf_alpha=None, extra_request_body=usage_asked(serving, backend, not args.disable_stream),
            profile=False,
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
    outputs = [{**{key: getattr(out, key) for key in KEPT}, "counted": getattr(out, "counted", "server"),
                "spec": getattr(out, "spec", {})} for out in captured["outputs"]]
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
            base = defaults(serving, args.tokenizer)
        except LookupError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        watch(serving)
        try:
            loaded = tokenizer(args.tokenizer, serving)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    print(json.dumps({"ready": importlib.metadata.version("sglang"), "module": serving.__name__}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = run_round(serving, base, loaded, json.loads(line))
        except Exception as err:  # one round's failure is its answer; the next round may go on
            answer = {"error": f"{type(err).__name__}: {one_line(err) or '-'}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
