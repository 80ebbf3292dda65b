"""A loopback HTTP server that streams ``/generate`` the way SGLang does.

It serves the same wire format (read from the 0.5.9 wheel:
``sglang/srt/entrypoints/http_server.py`` and
``sglang/srt/managers/tokenizer_manager.py``): chunked ``text/event-stream``,
one ``data: {json}`` event per step with the cumulative ``text``,
``output_ids`` and ``meta_info.completion_tokens``, ``finish_reason`` on the last
event (plus ``spec_*`` when speculative decoding is on), then ``data: [DONE]``.

The timing is known in advance: the first event comes ``ttft_s`` after the
request, then one event every ``step_s``, each adding the next count from
``accept`` tokens. On a busy machine events arrive later than that, never
earlier, so tests bound what a client measures by this schedule.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Behaviour:
    step_s: float = 0.008
    ttft_s: float = 0.02
    accept: tuple[int, ...] = (1,)
    spec: bool = False
    fail_after: int | None = None  # generate requests answered normally before the failure starts
    failure: str = "http500"  # http500, stream-error, abort, disconnect, hold (until release())
    api_key: str | None = None
    health_status: int = 200
    server_info: dict = field(default_factory=dict)
    flush_status: int = 200
    served_model_name: str = "default"
    model_path: str = ""
    wedged: bool = False  # like a hung scheduler: /health and /generate stop answering
    log_requests: bool = False  # one stdout line per /generate, as SGLang logs each request it serves
    histogram: tuple[int, ...] | None = None  # spec_accept_histogram of every request (spec on)
    usage: bool = True  # OpenAI answers carry usage.completion_tokens (when asked, for a stream)
    eos_at: int | None = None  # the answer ends (finish "stop") after this many tokens, unless ignore_eos is asked
    # Hold every /generate until this many are in flight at once (or gather_s passes, then stop
    # holding): a burst is then seen by arrival, whatever the host's load does to the timing.
    gather: int | None = None
    gather_s: float = 10.0
    # Continuous batching's cost: each step takes step_s plus load_s for every token verified across the batch,
    # that is, for each request in flight, ``verify`` tokens (1 without speculation; draft tokens + 1 with).
    load_s: float = 0.0
    verify: int = 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops connects when 16 streams start at once

    def handle_error(self, request, client_address) -> None:
        # A client that closes right after `data: [DONE]` leaves the chunk trailer unread,
        # so its socket resets; that is the end of a request, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class SGLangServer:
    def __init__(self, behaviour: Behaviour | None = None, host: str = "127.0.0.1", port: int = 0):
        self.behaviour = behaviour or Behaviour()
        self.lock = threading.Lock()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.served: list[dict] = []  # per finished request: tokens, verify passes
        self.flushes = 0
        self.flush_log: list[int] = []  # per /flush_cache: how many generation requests had come before it
        self.in_flight = 0
        self.max_in_flight = 0
        self.released = threading.Event()  # ends the "hold" failure
        self.gathered = threading.Event()  # set once behaviour.gather requests were in flight together
        self._httpd = _Server((host, port), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "SGLangServer":
        self._thread.start()
        return self

    def release(self) -> None:
        """Let requests held by the "hold" failure go on."""
        self.released.set()

    def __exit__(self, *exc) -> None:
        self.released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def histogram(self, counts: list[int]) -> list[int]:
        """SGLang's spec_accept_histogram of a schedule: verify steps by draft tokens accepted (tokens added - 1)."""
        accepted = [b - a - 1 for a, b in zip(counts, counts[1:])]
        hist = [0] * (max(accepted, default=0) + 1)
        for n in accepted:
            hist[n] += 1
        return hist

    def schedule(self, max_new_tokens: int, ignore_eos: bool = False) -> tuple[list[int], str]:
        """Cumulative completion_tokens of each event (1 from prefill, then ``accept`` counts), and why it ends:
        "length", or "stop" where the answer reaches ``eos_at`` first."""
        eos = self.behaviour.eos_at
        end, reason = ((eos, "stop") if eos is not None and eos < max_new_tokens and not ignore_eos
                       else (max_new_tokens, "length"))
        counts, total, i = [1], 1, 0
        accept = self.behaviour.accept
        while total < end:
            total = min(end, total + accept[i % len(accept)])
            counts.append(total)
            i += 1
        return counts, reason


def _handler(server: SGLangServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def _json(self, status: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            key = server.behaviour.api_key
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._json(401, {"error": "Unauthorized"})
                return False
            return True

        def _wedge(self) -> bool:
            if server.behaviour.wedged:
                time.sleep(3600)
            return False

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                if self._authorised():
                    b = server.behaviour
                    self._json(200, {"object": "list", "data": [
                        {"id": b.served_model_name, "object": "model", "owned_by": "sglang", "root": b.model_path}]})
            elif self.path == "/get_model_info":
                self._json(200, {"model_path": server.behaviour.model_path, "is_generation": True})
            elif self.path == "/health" and not self._wedge():
                status = server.behaviour.health_status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/server_info":
                if self._authorised():
                    b = server.behaviour  # SGLang's names the model it serves, where this stand-in was given one
                    self._json(200, {**({"model_path": b.model_path} if b.model_path else {}), **b.server_info,
                                     "api_key": b.api_key})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            if self.path.split("?")[0] == "/flush_cache":  # SGLang's benchmark adds ?timeout=
                if self._authorised():
                    with server.lock:
                        server.flushes += 1
                        server.flush_log.append(len(server.bodies))
                    self._json(server.behaviour.flush_status, {})
                return
            generate = self.path == "/generate"
            if not generate and self.path not in ("/v1/chat/completions", "/v1/completions"):
                self._json(404, {"detail": "Not Found"})
                return
            if not self._authorised() or self._wedge():
                return
            body = json.loads(raw)
            with server.lock:
                server.bodies.append(body)
                server.headers.append(dict(self.headers))
                index = len(server.bodies) - 1
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
                if server.behaviour.gather is not None and server.in_flight >= server.behaviour.gather:
                    server.gathered.set()
            if server.behaviour.gather is not None and not server.gathered.wait(server.behaviour.gather_s):
                server.gathered.set()  # not a burst: the test's assertion says so; the rest are not held
            if generate and server.behaviour.log_requests:
                print(f"stand-in: /generate req-{index} text={body.get('text', '')[:60]!r}", flush=True)
            self._counted = True
            try:
                if generate:
                    self._generate(body, index)
                else:
                    self._openai(body, index, chat=self.path.endswith("chat/completions"))
            finally:
                self._leave()

        def _leave(self) -> None:
            """The request is over for the server: before its last bytes, which the client may act on at once."""
            if getattr(self, "_counted", False):
                self._counted = False
                with server.lock:
                    server.in_flight -= 1

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _event(self, payload) -> None:
            self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

        def _open_stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _steps(self, start: float, counts: list[int]):
            """Each step's (index, tokens so far), when continuous batching would emit it: the first after the
            time to first token, each next one later the more requests share the batch and the more each verifies."""
            b = server.behaviour
            due = start + b.ttft_s
            for k, tokens in enumerate(counts):
                if k:
                    with server.lock:
                        batch = server.in_flight
                    due += b.step_s + b.load_s * batch * b.verify
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                yield k, tokens

        def _openai(self, body: dict, index: int, chat: bool) -> None:
            """SGLang's OpenAI-compatible answer: one chunk per step (its new text), usage at the end when asked."""
            b = server.behaviour
            start = time.perf_counter()
            # Chat takes max_completion_tokens too, as SGLang's protocol does (SGLang's own benchmark sends it)
            n = body.get("max_completion_tokens") or body["max_tokens"] if chat else body["max_tokens"]
            counts, reason = server.schedule(n, body.get("ignore_eos", False))
            asked = body.get("stream_options") or {}
            stream = body.get("stream", False)
            sent: list[float] = []
            if stream:
                self._open_stream()
            last_tokens = 0
            for k, tokens in self._steps(start, counts):
                text = " tok" * (tokens - last_tokens)
                last_tokens = tokens
                finish = reason if k == len(counts) - 1 else None
                choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                          else {"index": 0, "text": text, "finish_reason": finish})
                if stream:
                    chunk = {"id": f"req-{index}", "object": "chat.completion.chunk", "choices": [choice]}
                    if b.usage and asked.get("continuous_usage_stats"):  # SGLang's: the count so far, every chunk
                        chunk["usage"] = {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens}
                    self._event(chunk)
                    sent.append(time.perf_counter())
            usage = {"prompt_tokens": 3, "completion_tokens": counts[-1], "total_tokens": 3 + counts[-1]}
            with server.lock:
                server.served.append({"tokens": counts[-1], "verify": len(counts) - 1, "events": len(counts),
                                      "start": start, "end": time.perf_counter(), "sent": sent})
            if not stream:
                message = {"role": "assistant", "content": " tok" * counts[-1]}
                answer = {"id": f"req-{index}", "choices": [{"index": 0, "finish_reason": reason,
                                                             **({"message": message} if chat else {"text": message["content"]})}]}
                if b.usage:
                    answer["usage"] = usage
                self._leave()
                self._json(200, answer)
                return
            if b.usage and asked.get("include_usage"):
                self._event({"id": f"req-{index}", "choices": [], "usage": usage})
            self._leave()
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _generate(self, body: dict, index: int) -> None:
            b = server.behaviour
            failing = b.fail_after is not None and index >= b.fail_after
            if failing and b.failure == "http500":
                self._json(500, {"object": "error", "message": "Internal server error", "code": 500})
                return
            if failing and b.failure == "hold":
                server.released.wait(60)
            start = time.perf_counter()
            n = body["sampling_params"]["max_new_tokens"]
            counts, reason = server.schedule(n, body["sampling_params"].get("ignore_eos", False))
            rid = f"req-{index}"
            sent: list[float] = []
            stream = body.get("stream", False)
            if stream:
                self._open_stream()
            for k, tokens in self._steps(start, counts):
                if failing and k == 2:
                    if b.failure == "stream-error":
                        self._event({"error": {"message": "CUDA error: an illegal memory access was encountered"}})
                        self._chunk(b"data: [DONE]\n\n")
                        self._chunk(b"")
                        return
                    if b.failure == "abort":
                        self._event({"text": "", "output_ids": [], "meta_info": {
                            "id": rid, "completion_tokens": tokens,
                            "finish_reason": {"type": "abort", "message": "Abort before prefill",
                                              "status_code": 503}}})
                        self._chunk(b"data: [DONE]\n\n")
                        self._chunk(b"")
                        return
                    if b.failure == "disconnect":
                        self.close_connection = True
                        return
                last = k == len(counts) - 1
                meta = {
                    "id": rid,
                    "finish_reason": ({"type": "length", "length": n} if reason == "length"
                                      else {"type": "stop", "matched": 2}) if last else None,
                    "prompt_tokens": len(body["input_ids"]) if "input_ids" in body else len(body["text"].split()),
                    "weight_version": "default",
                    "total_retractions": 0,
                    "completion_tokens": tokens,
                    "cached_tokens": 0,
                }
                if last:
                    meta["e2e_latency"] = time.perf_counter() - start
                    verify = len(counts) - 1
                    if b.spec and verify:
                        meta["spec_accept_rate"] = 0.5
                        meta["spec_accept_length"] = tokens / verify
                        meta["spec_accept_token_num"] = tokens - verify
                        meta["spec_draft_token_num"] = verify * 3
                        meta["spec_verify_ct"] = verify
                        meta["spec_accept_histogram"] = list(b.histogram) if b.histogram else server.histogram(counts)
                    with server.lock:
                        server.served.append({"tokens": tokens, "verify": verify, "events": len(counts), "start": start,
                                              "end": time.perf_counter(), "sent": sent})
                event = {"text": " tok" * tokens, "output_ids": list(range(tokens)), "meta_info": meta}
                if stream:
                    self._event(event)
                    sent.append(time.perf_counter())
                elif last:
                    self._leave()
                    self._json(200, event)
            if stream:
                self._leave()
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve on SGLang's flags, in the foreground: the CPU stand-in for the model server in a container.

    Takes ``--host``, ``--port``, ``--model-path``, ``--served-model-name``, ``--api-key``
    and ``--speculative-algorithm`` as ``sglang.launch_server`` does, and ignores the rest.
    ``/health`` answers 503 for ``--standin-load-seconds`` (default 2) while a progress bar
    runs, as a model load does; ``--standin-crash`` makes the load end in a crash (exit 1)
    instead. SIGUSR1 wedges the server (``/health`` and ``/generate`` stop answering);
    SIGTERM stops it. Each ``/generate`` it serves is one log line, ``stand-in: /generate
    req-N text='...'``, so a test behind a router can tell which server answered.
    """
    import argparse
    import os
    import signal

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model-path", default="")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--speculative-algorithm", default=None)
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        parser.add_argument(flag, type=int, default=None)
    # Stand-in only, passed through SGLANG_EXTRA_ARGS as a user passes SGLang flags.
    parser.add_argument("--standin-load-seconds", type=float, default=2.0)
    parser.add_argument("--standin-accept", default="2,3,2",
                        help="tokens each verify step delivers, cycled (with EAGLE-3): 1,1,1 is a drafter that never hits")
    parser.add_argument("--standin-crash", action="store_true")
    args, ignored = parser.parse_known_args(argv)
    config = os.path.join(args.model_path, "config.json")
    if args.model_path and not os.path.isfile(config):
        sys.exit(f"stand-in: {config}: no such file (is the model directory mounted?)")
    spec = args.speculative_algorithm is not None
    accept = tuple(int(n) for n in args.standin_accept.split(",")) if spec else (1,)
    behaviour = Behaviour(
        step_s=0.004, ttft_s=0.01, accept=accept, spec=spec, api_key=args.api_key,
        served_model_name=args.served_model_name or args.model_path or "default", model_path=args.model_path,
        health_status=503, log_requests=True, server_info={
            "model_path": args.model_path, "speculative_algorithm": args.speculative_algorithm,
            "speculative_num_steps": args.speculative_num_steps, "speculative_eagle_topk": args.speculative_eagle_topk,
            "speculative_num_draft_tokens": args.speculative_num_draft_tokens},
    )
    server = SGLangServer(behaviour, host=args.host, port=args.port)
    signal.signal(signal.SIGUSR1, lambda *_: setattr(behaviour, "wedged", True))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"stand-in: serving {args.model_path or '(no model)'} on {args.host}:{args.port}"
          f"{' with ' + args.speculative_algorithm if spec else ''}; ignoring {len(ignored)} other arguments", flush=True)
    with server:
        shards, load_s = 64, args.standin_load_seconds
        for shard in range(1, shards + 1):  # the same \r-redrawn bar that SGLang's loader prints
            time.sleep(load_s / shards)
            print(f"\rLoading safetensors checkpoint shards: {100 * shard // shards:3d}% {shard}/{shards}", end="", flush=True)
        print(flush=True)
        if args.standin_crash:
            sys.exit("torch.OutOfMemoryError: CUDA out of memory (stand-in)")
        behaviour.health_status = 200
        print("The server is fired up and ready to roll!", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
