"""SGLang's native HTTP API, as `invoke bench` and `invoke acceptance` ask it from the host.

``/health`` (can it generate?), ``/server_info`` (what it runs), ``/flush_cache``, and one non-streaming
``POST /generate`` (the acceptance probe's), with ``Timing``, what one request measured. The measured rounds are
sent by SGLang's own benchmark (bench/upstream.py); its per-request records fill the same ``Timing``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from sglang_stack.errors import UserError
from sglang_stack.serverapi import RequestFailed
from sglang_stack.serverapi import get as http_get, post as http_post

# What is recorded from /server_info. It returns every server argument, the API
# keys included, so only these are kept.
SERVER_INFO_KEYS = (
    "version",
    "mem_fraction_static",
    "max_running_requests",
    "chunked_prefill_size",
    "context_length",
    "kv_cache_dtype",
    "enable_dp_attention",
    "moe_runner_backend",
    "enable_metrics",
    "model_path",
    "tokenizer_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "ep_size",
    "quantization",
    "attention_backend",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "stream_interval",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str


@dataclass
class Timing:
    """What one streamed request measured. Times in seconds."""

    ok: bool = False
    ttft_s: float | None = None
    latency_s: float | None = None
    output_tokens: int | None = None
    first_chunk_tokens: int | None = None
    decode_tps: float | None = None
    itl_s: list[float] = field(default_factory=list)
    chunks: int = 0
    finish_reason: object = None
    token_source: str = "server"
    """Where ``output_tokens`` came from: ``server`` (its own count), ``chunks`` (one per streamed chunk, an estimate), or
    ``requested`` (the length asked for, which SGLang's OpenAI clients count where no chunk carries usage)."""
    # Every speculative-decoding figure SGLang puts in the final meta_info, as sent
    # (tokenizer_manager.py, _calculate_spec_decoding_metrics).
    spec_accept_length: float | None = None
    spec_verify_ct: int | None = None
    spec_accept_rate: float | None = None
    spec_accept_token_num: int | None = None
    spec_draft_token_num: int | None = None
    spec_accept_histogram: list | None = None

    def time_events(self, events: list[tuple[float, int]]) -> None:
        """Fill TTFT, ITL and decode speed from ``(seconds since the request, completion_tokens)`` per event.

        Time to first token ends at the first event whose ``completion_tokens`` is
        above 0. Inter-token latency: the gap between two events, split evenly over
        the tokens the later one added (a speculative step delivers several at once).
        Per-request decode speed: tokens after the first event over the time from the
        first event to the last. Pure arithmetic on the times given, so it can be
        checked to the digit.
        """
        last_tokens, first_at, last_at = 0, None, None
        for at, tokens in events:
            if tokens <= last_tokens:
                continue
            if first_at is None:
                first_at = at
                self.ttft_s = at
                self.first_chunk_tokens = tokens
            else:
                gap = (at - last_at) / (tokens - last_tokens)
                self.itl_s.extend([gap] * (tokens - last_tokens))
            last_at, last_tokens = at, tokens
        if first_at is not None and last_at > first_at:
            self.decode_tps = (last_tokens - self.first_chunk_tokens) / (last_at - first_at)

    def time_chunks(self, stamps: list[float], total: int) -> None:
        """``time_events`` for a stream whose chunks do not say how many tokens each carries (OpenAI's): the
        ``total`` spread evenly over the chunks stamped at ``stamps``, exact at the last one, so a chunk of a
        speculative step counts its several tokens, not one."""
        if stamps:
            self.time_events([(at, max(1, round(total * (i + 1) / len(stamps)))) for i, at in enumerate(stamps)])


# SGLang serves both; its router (sglang-router 0.3) only the older /get_server_info.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def _unreachable(err: RequestFailed, path: str, timeout: float) -> str:
    """Why a probe got no answer, in the words that continue "ENDPOINT at URL ..."."""
    if "timed out" in str(err):
        return f"is not reachable: no answer to {path} within {timeout:g} s"
    return f"is not reachable: {err}"


def probe(endpoint: Endpoint, api_key: str | None, timeout: float = 30.0) -> str | None:
    """``None`` when the endpoint is an SGLang server that can generate, else why not, in a few words.

    The words continue "ENDPOINT at URL ...". SGLang's ``/health`` answers 503 while the
    model loads, then runs a one-token generation, so a 200 means the server can
    generate (and ``/health`` needs no key). A server that answers but has no
    ``/health`` (404, 405), or no server information (``/server_info``, ``/get_server_info``)
    behind a healthy ``/health``, is some
    other HTTP server: that is said as such, not as "not reachable".
    """
    try:
        status, _ = http_get(endpoint.url, "/health", api_key, timeout)
    except RequestFailed as err:
        return _unreachable(err, "/health", timeout)
    if status in (404, 405):
        return f"answers, but is not an SGLang server: HTTP {status} from /health (wrong port or URL?)"
    if status == 503:
        return "is not ready: HTTP 503 from /health (still loading, or unhealthy)"
    if status != 200:
        return f"is not healthy: HTTP {status} from /health"
    for path in SERVER_INFO_PATHS:
        try:
            status, _ = http_get(endpoint.url, path, api_key, timeout)
        except RequestFailed as err:
            return f"is not reachable: {err} (on {path})"
        if status not in (404, 405):
            return None  # 200, or 401 without the right key: SGLang guards it with --api-key
    return f"answers /health, but is not an SGLang server: HTTP {status} from {' and '.join(SERVER_INFO_PATHS)} (wrong port or URL?)"


def probe_openai(endpoint: Endpoint, api_key: str | None, timeout: float = 30.0) -> str | None:
    """``None`` when the endpoint answers OpenAI's ``GET /v1/models``, else why not (``--api chat`` or ``completions``)."""
    try:
        status, _ = http_get(endpoint.url, "/v1/models", api_key, timeout)
    except RequestFailed as err:
        return _unreachable(err, "/v1/models", timeout)
    if status == 401:
        return "refuses the API key: HTTP 401 from /v1/models (set SGLANG_API_KEY_FILE)"
    if status != 200:
        return f"is not an OpenAI-compatible server: HTTP {status} from /v1/models (wrong port or URL?)"
    return None


def wait_ready(endpoint: Endpoint, api_key: str | None, timeout: float, interval: float = 5.0) -> None:
    """Poll ``/health`` until it answers 200; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        why = probe(endpoint, api_key, timeout=min(30.0, timeout))
        if why is None:
            return
        if time.monotonic() >= deadline:
            raise UserError(f"{endpoint.name} at {endpoint.url} {why}, after {timeout:g} s of waiting")
        time.sleep(interval)


def server_info(endpoint: Endpoint, api_key: str | None, timeout: float = 30.0) -> dict:
    """The recorded subset of ``/server_info`` (or ``/get_server_info``), or ``{}`` if the server does not say."""
    info: object = {}
    for path in SERVER_INFO_PATHS:
        try:
            status, body = http_get(endpoint.url, path, api_key, timeout)
            info = json.loads(body) if status == 200 else {}
        except (RequestFailed, ValueError):
            return {}
        if status not in (404, 405):
            break
    if not isinstance(info, dict):
        return {}
    return {key: info[key] for key in SERVER_INFO_KEYS if key in info}


def flush_cache(endpoint: Endpoint, api_key: str | None, timeout: float) -> tuple[bool, str | None]:
    """Empty the server's prefix cache, so every round prefills its prompts again: (flushed, why not).

    Without it, repeats hit SGLang's radix cache and time to first token measures
    a cache hit. ``/flush_cache`` answers 200 only when the server is idle (400 while
    requests are pending); a proxy in front (the router, a gateway) may not have it (404).
    """
    try:
        status, _ = http_post(endpoint.url, "/flush_cache", api_key, timeout)
    except RequestFailed as err:
        return False, f"failed: {err}"
    if status == 200:
        return True, None
    if status == 404:
        return False, "answered 404 (not SGLang itself: a router or proxy in front?)"
    return False, f"answered HTTP {status}" + (" (requests still pending)" if status == 400 else "")


SPEC_FIELDS = ("spec_accept_length", "spec_verify_ct", "spec_accept_rate", "spec_accept_token_num",
               "spec_draft_token_num", "spec_accept_histogram")


def keep_spec(sample: Timing, meta: dict) -> None:
    """Copy every ``spec_*`` figure of a final ``meta_info`` into ``sample``, unchanged; one of another
    type (not a number, the histogram not a list of counts) fails the request, naming it."""
    for key in SPEC_FIELDS:
        value = meta.get(key)
        if value is None:
            continue
        number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
        if not (all(number(v) for v in value) if key == "spec_accept_histogram" and isinstance(value, list) else number(value)):
            raise RequestFailed(f"meta_info.{key} is {str(value)[:60]!r}, not the figure SGLang sends")
        setattr(sample, key, value)


def generate_once(url: str, body: dict, api_key: str | None, timeout: float, sample: Timing) -> Timing:
    """A non-streaming ``/generate``: one JSON answer; latency is its arrival, TTFT is not observable."""
    start = time.perf_counter()
    status, raw = http_post(url, "/generate", api_key, timeout, {**body, "stream": False})
    sample.latency_s = time.perf_counter() - start
    if status != 200:
        raise RequestFailed(f"HTTP {status} from /generate: {raw[:300].decode('utf-8', 'replace')}")
    try:
        answer = json.loads(raw)
        meta = (answer[0] if isinstance(answer, list) else answer)["meta_info"]
        sample.output_tokens = int(meta["completion_tokens"])
    except (ValueError, KeyError, TypeError, IndexError):
        raise RequestFailed("the answer has no meta_info.completion_tokens: is this SGLang's /generate?") from None
    sample.finish_reason = meta.get("finish_reason")
    sample.chunks = 1
    keep_spec(sample, meta)
    sample.ok = True
    return sample
