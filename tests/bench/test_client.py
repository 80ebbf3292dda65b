"""SGLang's HTTP API from the host, against a loopback server that speaks SGLang's format."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_server import Behaviour, SGLangServer
from sglang_stack.bench import client
from sglang_stack.bench.client import Endpoint
from sglang_stack.serverapi import RequestFailed
from sglang_stack.errors import UserError
from test_bench import free_port


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
    assert why == "answers, but is not an SGLang server: HTTP 404 from /health (wrong port or URL?)", why
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


# --- speculative figures of an unexpected type: a failed request, never a crash ----------------------


@pytest.mark.parametrize("meta, says", [
    ({"spec_accept_length": "x"}, "meta_info.spec_accept_length is 'x', not the figure SGLang sends"),
    ({"spec_verify_ct": True}, "meta_info.spec_verify_ct is 'True', not the figure SGLang sends"),
    ({"spec_accept_histogram": [1, "2"]}, r"meta_info.spec_accept_histogram is \"\[1, '2'\]\""),
])
def test_a_speculative_figure_of_another_type_fails_the_request(meta, says):
    timing = client.Timing()
    with pytest.raises(RequestFailed, match=says):
        client.keep_spec(timing, meta)
    client.keep_spec(timing, {"spec_accept_length": 2.5, "spec_accept_histogram": [1, 2]})
    assert (timing.spec_accept_length, timing.spec_accept_histogram) == (2.5, [1, 2]), "figures of SGLang's types are kept"
