"""SGLang's HTTP API from the host, against a loopback server that speaks SGLang 0.5.9's format."""

from __future__ import annotations

import pytest

from sglang_server import Behaviour, SGLangServer
from sglang_stack.bench import client
from sglang_stack.bench.client import Endpoint, RequestFailed
from sglang_stack.errors import UserError
from test_bench import free_port


def body(tokens: int) -> dict:
    return {"text": "hi", "sampling_params": {"temperature": 0.0, "max_new_tokens": tokens}, "stream": True}


def test_stream_times_each_event():
    with SGLangServer(Behaviour(step_s=0.01, ttft_s=0.03, accept=(3,), spec=True)) as server:
        timing = client.stream_generate(server.url, body(10), None, 5.0)
    assert timing.ok, "a complete stream is not ok"
    assert timing.chunks == 4, f"1 + 3 steps of 3 tokens expected, got {timing.chunks} events"
    assert timing.output_tokens == 10 and timing.first_chunk_tokens == 1, f"tokens: {timing}"
    assert 0.03 <= timing.ttft_s < 0.045, f"TTFT {timing.ttft_s:.4f} s, served 0.03"
    assert len(timing.itl_s) == 9, f"one ITL per token after the first: {len(timing.itl_s)}"
    assert all(abs(x - 0.01 / 3) < 0.002 for x in timing.itl_s), f"ITL per token is step/3: {timing.itl_s}"
    assert timing.decode_tps == pytest.approx(300, rel=0.15), f"decode {timing.decode_tps:.1f} tok/s, served 300"
    assert timing.spec_accept_length == pytest.approx(10 / 3), "spec_accept_length not taken from meta_info"
    assert timing.spec_verify_ct == 3, f"spec_verify_ct {timing.spec_verify_ct}"
    assert timing.finish_reason == {"type": "length", "length": 10}, f"finish_reason {timing.finish_reason}"


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
    assert client.probe(Endpoint("x", f"http://127.0.0.1:{free_port()}"), None, 1.0) == "connection refused"
    with SGLangServer(Behaviour(health_status=503)) as server:
        assert "503" in client.probe(Endpoint("x", server.url), None, 1.0), "a loading server must say 503"
    with SGLangServer() as server:
        assert client.probe(Endpoint("x", server.url), None, 1.0) is None, "a healthy server is usable"


def test_wait_ready_gives_up_with_the_reason():
    with SGLangServer(Behaviour(health_status=503)) as server:
        with pytest.raises(UserError, match=r"x at http://127\.0\.0\.1:\d+ not ready after 0 s: HTTP 503"):
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
        assert client.flush_cache(Endpoint("x", server.url), None, 1.0) is True, "200 from /flush_cache"
        assert server.flushes == 1, "the server was not asked to flush"
    with SGLangServer(Behaviour(flush_status=400)) as server:
        assert client.flush_cache(Endpoint("x", server.url), None, 1.0) is False, "400: the server was busy"
