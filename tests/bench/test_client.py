"""SGLang's HTTP API from the host, against a loopback server that speaks SGLang's format."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_server import Behaviour, ReadingClock, SGLangServer
from sglang_stack.bench import client
from sglang_stack.bench.client import Endpoint
from sglang_stack.serverapi import RequestFailed
from sglang_stack.errors import UserError
from test_bench import free_port


def body(tokens: int) -> dict:
    return {"text": "hi", "sampling_params": {"temperature": 0.0, "max_new_tokens": tokens}, "stream": True}


def test_event_times_become_ttft_itl_and_decode_speed():
    """The arithmetic, on times given exactly: 1 token at 30 ms, then steps of 3 tokens every 10 ms."""
    timing = client.Timing()
    timing.time_events([(0.030, 1), (0.040, 4), (0.040, 4), (0.050, 7), (0.060, 10)])
    assert timing.ttft_s == 0.030 and timing.first_chunk_tokens == 1, f"TTFT ends at the first token: {timing}"
    assert timing.itl_s == pytest.approx([0.01 / 3] * 9, abs=1e-12), f"each step's gap split over its 3 tokens: {timing.itl_s}"
    assert timing.decode_tps == pytest.approx(9 / 0.030), f"9 tokens after the first in 30 ms: {timing.decode_tps}"


def test_events_before_the_first_token_and_single_event_streams():
    timing = client.Timing()
    timing.time_events([(0.010, 0), (0.025, 2)])  # a prefill event without output tokens, then 2 at once
    assert (timing.ttft_s, timing.first_chunk_tokens) == (0.025, 2), f"TTFT is the first event with tokens: {timing}"
    assert timing.itl_s == [] and timing.decode_tps is None, f"one token event: no gap, no decode speed: {timing}"


def test_stream_stamps_each_event_as_it_arrives():
    clock = ReadingClock(0.001)
    with SGLangServer(Behaviour(step_s=0.001, ttft_s=0.002, accept=(3,), spec=True)) as server:
        timing = client.stream_generate(server.url, body(10), None, 5.0, clock=clock)
    assert timing.ok, "a complete stream is not ok"
    assert timing.chunks == 4, f"1 + 3 steps of 3 tokens expected, got {timing.chunks} events"
    assert timing.output_tokens == 10 and timing.first_chunk_tokens == 1, f"tokens: {timing}"
    # Event k (from 0) is stamped (1 + 2k) ms after the start: see ReadingClock.
    assert timing.ttft_s == pytest.approx(0.001), f"TTFT stamped at the first event's line: {timing.ttft_s}"
    assert timing.itl_s == pytest.approx([0.002 / 3] * 9), f"each event stamped on arrival, split over 3 tokens: {timing.itl_s}"
    assert timing.latency_s == pytest.approx(0.007), f"latency stamped at the last event: {timing.latency_s}"
    assert timing.decode_tps == pytest.approx(9 / 0.006), f"decode speed from the stamps: {timing.decode_tps}"
    assert timing.spec_accept_length == pytest.approx(10 / 3), "spec_accept_length not taken from meta_info"
    assert timing.spec_verify_ct == 3, f"spec_verify_ct {timing.spec_verify_ct}"
    assert timing.finish_reason == {"type": "length", "length": 10}, f"finish_reason {timing.finish_reason}"


def test_stream_on_the_real_clock_is_bounded_by_the_served_schedule():
    """On the real clock only what the served schedule guarantees is asserted, whatever the load.

    The server never sends an event before it is due (ttft + k * step after it read the
    request, and it read the request after the client started its clock), so TTFT and
    latency have hard lower bounds. A loaded machine only ever makes them later, so no
    upper bound is asserted here; the arithmetic is checked exactly above.
    """
    served = Behaviour(step_s=0.01, ttft_s=0.03, accept=(3,), spec=True)
    with SGLangServer(served) as server:
        timing = client.stream_generate(server.url, body(10), None, 5.0)
    assert timing.ok and len(timing.itl_s) == 9, f"a complete stream with one ITL per token after the first: {timing}"
    assert timing.ttft_s >= served.ttft_s, f"TTFT {timing.ttft_s:.4f} s before the first event was due ({served.ttft_s} s)"
    assert timing.latency_s >= served.ttft_s + 3 * served.step_s, f"latency {timing.latency_s:.4f} s before the last event was due"
    steps = [timing.itl_s[i:i + 3] for i in range(0, 9, 3)]
    assert all(len(set(step)) == 1 for step in steps), f"each 3-token step's gap is split evenly: {timing.itl_s}"
    assert sum(timing.itl_s) == pytest.approx(timing.latency_s - timing.ttft_s), "the ITLs add up to first-to-last event"
    assert timing.decode_tps == pytest.approx(9 / sum(timing.itl_s)), "decode speed is tokens after the first over their time"


def test_non_speculative_server_has_no_acceptance_length():
    with SGLangServer() as server:
        timing = client.stream_generate(server.url, body(3), None, 5.0)
    assert timing.spec_accept_length is None and timing.spec_verify_ct is None, "acceptance length was invented"


def test_failure_keeps_what_was_measured():
    with SGLangServer(Behaviour(step_s=0.002, fail_after=0, failure="stream-error")) as server:
        timing = client.Timing()
        with pytest.raises(RequestFailed, match=r"server error: CUDA error: an illegal memory access"):
            client.stream_generate(server.url, body(10), None, 5.0, timing)
    assert timing.chunks == 2 and not timing.ok, f"events before the error are kept, request not ok: {timing}"


def test_stalled_server_times_out():
    with SGLangServer(Behaviour(ttft_s=1.0)) as server:
        with pytest.raises(RequestFailed, match=r"timed out"):
            client.stream_generate(server.url, body(2), None, 0.2)


def test_probe_says_why_an_endpoint_is_not_usable():
    assert client.probe(Endpoint("x", f"http://127.0.0.1:{free_port()}"), None, 1.0) == "is not reachable: connection refused"
    with SGLangServer(Behaviour(health_status=503)) as server:
        why = client.probe(Endpoint("x", server.url), None, 1.0)
        assert why == "is not ready: HTTP 503 from /health (still loading, or unhealthy)", f"a loading server: {why}"
    with SGLangServer(Behaviour(api_key="k")) as server:
        assert client.probe(Endpoint("x", server.url), None, 1.0) is None, "a key-guarded /server_info is still SGLang's"
    with SGLangServer() as server:
        assert client.probe(Endpoint("x", server.url), None, 1.0) is None, "a healthy server is usable"


class PlainHandler(BaseHTTPRequestHandler):
    """Not SGLang: 200 on the paths in ``ok``, 404 on everything else."""

    ok: tuple[str, ...] = ()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200 if self.path in self.ok else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET


@contextlib.contextmanager
def plain_server(*ok: str):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (PlainHandler,), {"ok": ok}))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_server_that_is_not_sglang_is_said_to_be_one():
    with plain_server() as url:
        why = client.probe(Endpoint("x", url), None, 1.0)
        with pytest.raises(RequestFailed) as failed:
            client.stream_generate(url, body(2), None, 1.0)
    assert why == "answers, but is not an SGLang server: HTTP 404 from /health (wrong port or URL?)", why
    assert str(failed.value) == "HTTP 404 from /generate: not an SGLang server (wrong port or URL?)", failed.value
    with plain_server("/health") as url:  # a healthy service of another kind
        why = client.probe(Endpoint("x", url), None, 1.0)
    assert why == "answers /health, but is not an SGLang server: HTTP 404 from /server_info and /get_server_info (wrong port or URL?)", why
    with plain_server("/health", "/get_server_info") as url:  # SGLang's router answers only the older name
        why = client.probe(Endpoint("x", url), None, 1.0)
    assert why is None, f"an SGLang-compatible router must pass: {why}"


def test_wait_ready_gives_up_with_the_reason():
    with SGLangServer(Behaviour(health_status=503)) as server:
        with pytest.raises(UserError, match=r"^x at http://127\.0\.0\.1:\d+ is not ready: HTTP 503 .*, after 0\.1 s of waiting$"):
            client.wait_ready(Endpoint("x", server.url), None, timeout=0.1, interval=0.02)


def test_server_info_keeps_only_the_listed_keys():
    info = {"version": "0.5.9", "speculative_num_steps": 2, "admin_api_key": "secret", "internal_states": [{}]}
    with SGLangServer(Behaviour(server_info=info, api_key="k")) as server:
        got = client.server_info(Endpoint("x", server.url), "k")
        refused = client.server_info(Endpoint("x", server.url), "wrong")
    assert got == {"version": "0.5.9", "speculative_num_steps": 2}, f"server info kept: {got}"
    assert refused == {}, f"a refused /server_info must give nothing: {refused}"


def test_flush_cache_reports_whether_it_happened():
    with SGLangServer() as server:
        assert client.flush_cache(Endpoint("x", server.url), None, 1.0) == (True, None), "200 from /flush_cache"
        assert server.flushes == 1, "the server was not asked to flush"
    with SGLangServer(Behaviour(flush_status=400)) as server:
        assert client.flush_cache(Endpoint("x", server.url), None, 1.0) == (False, "answered HTTP 400 (requests still pending)")


# --- answers of an unexpected shape: a failed request, never a crash ----------------------


@contextlib.contextmanager
def answering(raw: bytes, content_type: str = "text/event-stream"):
    """A loopback server that answers every POST with ``raw``, as it is."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def events(*payloads: str) -> bytes:
    return b"".join(f"data: {p}\n\n".encode() for p in payloads) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("raw, says", [
    (events("null"), "an event that is not a JSON object in the stream: b'null'"),
    (events("5"), "an event that is not a JSON object"),
    (events('["a"]'), "an event that is not a JSON object"),
    (events('{"meta_info": []}'), "event without meta_info.completion_tokens"),
    (events('{"meta_info": {"completion_tokens": 1, "finish_reason": "stop", "spec_accept_length": "x"}}'),
     "meta_info.spec_accept_length is 'x', not the figure SGLang sends"),
    (events('{"meta_info": {"completion_tokens": 1, "finish_reason": "stop", "spec_accept_histogram": [1, "2"]}}'),
     "meta_info.spec_accept_histogram is"),
])
def test_a_generate_stream_of_another_shape_fails_the_request(raw, says):
    with answering(raw) as url:
        with pytest.raises(RequestFailed, match=says):
            client.stream_generate(url, body(2), None, 5.0)
