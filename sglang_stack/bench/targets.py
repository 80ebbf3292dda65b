"""What a bench request is sent to: SGLang's native ``/generate``, or an OpenAI-compatible API.

- ``native`` (default): ``POST /generate``, SGLang's benchmark's ``sglang`` client. Its ``meta_info`` gives exact
  token counts per event and every ``spec_*`` figure, so it is what acceptance is measured with.
- ``chat``: ``POST /v1/chat/completions``; ``completions``: ``POST /v1/completions``, its ``sglang-oai-chat`` and
  ``sglang-oai`` clients. Any OpenAI-compatible server: SGLang's own, its router, a Kubernetes Service, vLLM.

Each is streamed by default; ``stream=False`` sends one request and times the whole
answer (no TTFT then).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sglang_stack.bench.client import Endpoint
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
