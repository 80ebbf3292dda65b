"""What a bench request is sent to: SGLang's native ``/generate``, or an OpenAI-compatible API.

- ``native`` (default): ``POST /generate``. Its ``meta_info`` gives exact token counts per
  event and every ``spec_*`` figure, so it is what acceptance is measured with.
- ``chat``: ``POST /v1/chat/completions``; ``completions``: ``POST /v1/completions``. Any
  OpenAI-compatible server: SGLang's own, its router, a Kubernetes Service, vLLM. SGLang's own
  benchmark sends them (its ``sglang-oai`` and ``sglang-oai-chat`` clients, bench/rounds.py);
  the built-in client (``--generator builtin``) sends ``/generate`` only.

Each is streamed by default; ``stream=False`` sends one request and times the whole
answer (no TTFT then).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sglang_stack.bench.client import Endpoint, Timing, generate_once, stream_generate
from sglang_stack.serverapi import RequestFailed
from sglang_stack.serverapi import get as http_get
from sglang_stack.errors import UserError

APIS = ("native", "chat", "completions")


@dataclass(frozen=True)
class Target:
    api: str = "native"
    stream: bool = True
    model: str | None = None
    """The OpenAI ``model`` field; None: the first of the server's ``/v1/models``."""

    def body(self, prompt, ignore_eos: bool, template: str | None) -> dict:
        """The built-in client's ``/generate`` body for ``prompt``."""
        text = template.replace("{prompt}", prompt.prompt) if template else prompt.prompt
        ids = getattr(prompt, "input_ids", None)
        params = {"temperature": 0.0, "max_new_tokens": prompt.max_new_tokens, "ignore_eos": ignore_eos}
        # Greedy: reproducible, and the setting speculative acceptance is usually quoted for.
        return {**({"input_ids": list(ids)} if ids and not template else {"text": text}),
                "sampling_params": params, "stream": self.stream}

    def send(self, endpoint: Endpoint, body: dict, api_key: str | None, timeout: float, sample: Timing, clock) -> Timing:
        """The built-in client's request: ``/generate``, streamed or not."""
        if self.stream:
            return stream_generate(endpoint.url, body, api_key, timeout, sample, clock=clock)
        return generate_once(endpoint.url, body, api_key, timeout, sample, clock=clock)


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
