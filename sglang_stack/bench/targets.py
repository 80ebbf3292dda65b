"""What a bench request is sent to: SGLang's native ``/generate``, or an OpenAI-compatible API.

- ``native`` (default): ``POST /generate``. Its ``meta_info`` gives exact token counts per
  event and every ``spec_*`` figure, so it is what acceptance is measured with.
- ``chat``: ``POST /v1/chat/completions``; ``completions``: ``POST /v1/completions``. Any
  OpenAI-compatible server: SGLang's own, its router, a Kubernetes Service, vLLM.
  Streaming asks for ``stream_options.include_usage``, so the server's own
  ``usage.completion_tokens`` is the count when it sends one (SGLang and vLLM do);
  otherwise each content chunk counts as one token, and the sample says so
  (``token_source: chunks``). Per-chunk counts are not on the wire: the server's total is
  spread evenly over the chunks for the inter-token latencies.

Each is streamed by default; ``stream=False`` sends one request and times the whole
answer (no TTFT then).
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass

from sglang_stack.bench.client import Endpoint, Timing, generate_once, sse_events, stream_generate
from sglang_stack.serverapi import RequestFailed, connection, describe, headers
from sglang_stack.serverapi import get as http_get
from sglang_stack.errors import UserError

APIS = ("native", "chat", "completions")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(frozen=True)
class Target:
    api: str = "native"
    stream: bool = True
    model: str | None = None
    """The OpenAI ``model`` field; None: the first of the server's ``/v1/models``."""

    def body(self, prompt, ignore_eos: bool, template: str | None) -> dict:
        text = template.replace("{prompt}", prompt.prompt) if template else prompt.prompt
        ids = getattr(prompt, "input_ids", None)
        if self.api == "native":
            params = {"temperature": 0.0, "max_new_tokens": prompt.max_new_tokens, "ignore_eos": ignore_eos}
            # Greedy: reproducible, and the setting speculative acceptance is usually quoted for.
            return {**({"input_ids": list(ids)} if ids and not template else {"text": text}),
                    "sampling_params": params, "stream": self.stream}
        body = {"model": self.model, "max_tokens": prompt.max_new_tokens, "temperature": 0.0, "stream": self.stream}
        if ignore_eos:
            body["ignore_eos"] = True  # an SGLang and vLLM extension of the OpenAI API
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = list(ids) if ids and not template else text
        return body

    def send(self, endpoint: Endpoint, body: dict, api_key: str | None, timeout: float, sample: Timing, clock) -> Timing:
        if self.api == "native":
            if self.stream:
                return stream_generate(endpoint.url, body, api_key, timeout, sample, clock=clock)
            return generate_once(endpoint.url, body, api_key, timeout, sample, clock=clock)
        return openai_request(endpoint.url, PATHS[self.api], self.api, body, api_key, timeout, sample, clock)


def parse_api(text: str | None) -> str:
    api = (text or "native").strip()
    if api not in APIS:
        raise UserError(f"--api {text!r}: choose one of {', '.join(APIS)}")
    return api


def served_model(endpoint: Endpoint, api_key: str | None, timeout: float) -> str:
    """The first model ``/v1/models`` lists: what an OpenAI request names when ``--model`` is not given."""
    try:
        status, raw = http_get(endpoint.url, "/v1/models", api_key, timeout)
        doc = json.loads(raw) if status == 200 else None
    except (RequestFailed, ValueError):
        doc = None
    models = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(models, list) or not models or not isinstance(models[0], dict) or not models[0].get("id"):
        raise UserError(f"endpoint {endpoint.name} at {endpoint.url}: /v1/models names no model; pass --model NAME")
    return str(models[0]["id"])


def _choice(event: dict) -> dict:
    """The first choice of an answer or event, ``{}`` where there is none of the expected shape."""
    choices = event.get("choices")
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _content(event: dict, api: str) -> str:
    choice = _choice(event)
    if api == "chat":
        delta = choice.get("delta") or choice.get("message") or {}
        if not isinstance(delta, dict):
            return ""
        return _text(delta.get("content")) + _text(delta.get("reasoning_content"))
    return _text(choice.get("text"))


def _finish(event: dict):
    return _choice(event).get("finish_reason")


def openai_request(url: str, path: str, api: str, body: dict, api_key: str | None, timeout: float,
                   sample: Timing, clock=time.perf_counter) -> Timing:
    """One OpenAI completion, streamed or not, timed into ``sample``; a failure raises ``RequestFailed``."""
    conn, base = connection(url, timeout)
    sent = headers(api_key, **{"Content-Type": "application/json"})
    stamps: list[float] = []
    usage: dict | None = None
    start = clock()
    try:
        conn.request("POST", base + path, body=json.dumps(body).encode(), headers=sent)
        resp = conn.getresponse()
        if resp.status != 200:
            detail = resp.read(2000).decode("utf-8", "replace").strip().replace("\n", " ")
            raise RequestFailed(f"HTTP {resp.status} from {path}: {detail[:300]}")
        if not body.get("stream"):
            answer = json.loads(resp.read())
            if not isinstance(answer, dict):
                raise RequestFailed(f"{path} answered JSON that is not an object: {str(answer)[:120]!r}")
            sample.latency_s = clock() - start
            sample.finish_reason = _finish(answer)
            usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else None
            sample.chunks = 1
        else:
            for now, event in sse_events(resp, clock, start):
                if isinstance(event.get("usage"), dict):
                    usage = event["usage"]
                if _content(event, api):
                    stamps.append(now)
                    sample.chunks += 1
                if _finish(event) is not None:
                    sample.finish_reason = _finish(event)
                    sample.latency_s = now
    except (OSError, http.client.HTTPException) as err:
        raise RequestFailed(describe(err)) from err
    except ValueError:
        raise RequestFailed(f"{path} answered something that is not JSON") from None
    finally:
        conn.close()
    if sample.finish_reason is None:
        raise RequestFailed(f"{path}: the answer ended without a finish_reason")
    counted = (usage or {}).get("completion_tokens")
    if isinstance(counted, int) and counted > 0:
        sample.output_tokens, sample.token_source = counted, "server"
    else:
        sample.output_tokens, sample.token_source = len(stamps), "chunks"
    sample.time_chunks(stamps, sample.output_tokens)
    sample.ok = True
    return sample
