"""`invoke bench` as a user runs it: the task's process end to end against real HTTP servers on loopback, its
one-line errors, Ctrl-C, two runs into one --out, and what the terminal shows. The measuring itself is
tests/bench/test_bench.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from sglang_stack import ROOT
from sglang_stack.bench import report
from sglang_server import Behaviour, SGLangServer
from test_bench import BASE, free_port, load, write_prompts


# --- the task, as a user runs it -----------------------------------------------------------


def invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.fixture
def generator_args(sglang_generator) -> list[str]:
    """sglang_generator's flags as a user types them: where SGLang's benchmark runs, and its tokenizer."""
    return ["--python", sglang_generator["python"], "--tokenizer", sglang_generator["tokenizer"]]


def test_task_unreachable_endpoint_is_one_line(tmp_path):
    port = free_port()
    proc = invoke("bench", "--endpoint", f"gone=http://127.0.0.1:{port}", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stderr}"
    want = f"error: endpoint gone at http://127.0.0.1:{port} is not reachable: connection refused"
    assert proc.stderr.strip() == want, f"stderr: {proc.stderr!r}"
    assert not (tmp_path / "r").exists(), "results directory created for a run that never started"


@pytest.mark.parametrize("flag, says", [
    ("--levels", "--levels '': '' is not an integer"),
    ("--repeats", "--repeats '': not an integer"),
    ("--timeout", "--timeout '': not a number of seconds"),
])
def test_a_flag_given_empty_is_named_not_replaced_by_its_default(tmp_path, flag, says):
    """`--levels ''` (an unset shell variable, most often) is an error; the default in its place would measure levels
    the user did not ask for, and say nothing."""
    port = free_port()
    proc = invoke("bench", flag, "", "--endpoint", f"gone=http://127.0.0.1:{port}", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.strip().startswith(f"error: {says}"), proc.stderr


def test_task_empty_prompt_file_is_one_line(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = invoke("bench", "--prompts", str(empty), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stderr}"
    assert proc.stderr.strip() == f"error: {empty}: the prompt file holds no prompts (one JSON object per line)", (
        f"stderr: {proc.stderr!r}"
    )
    assert "Traceback" not in proc.stderr, "a traceback for a user mistake"


def test_a_prompt_file_is_sized_before_the_probe_and_read_only_after_it(tmp_path):
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as handle:
        handle.truncate((1 << 30) + 1)  # sparse: a 1 GiB file that costs no disk
    port = free_port()
    proc = invoke("bench", "--prompts", str(huge), "--endpoint", f"gone=http://127.0.0.1:{port}", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: {huge}: 1.0 GiB, more than the 1 GiB a prompt file may hold (every prompt is kept in memory for the "
        "run): pass a subset"), proc.stderr
    unread = tmp_path / "later.jsonl"
    unread.write_text("not json at all\n")  # read only once an endpoint answers: the probe speaks first
    proc = invoke("bench", "--prompts", str(unread), "--endpoint", f"gone=http://127.0.0.1:{port}", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "not reachable" in proc.stderr and "later.jsonl" not in proc.stderr, proc.stderr


@pytest.mark.sglang_env
def test_task_runs_end_to_end(tmp_path, sglang_generator):
    """`invoke bench` as a user runs it against a server started on this host: SGLang's benchmark sends the rounds
    (here from a CPU Python of the pins, --python, where a host has the services' image), with the tokenizer of the
    model the server serves."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    with SGLangServer(replace(BASE, model_path=sglang_generator["tokenizer"])) as server:
        proc = invoke("bench", "--endpoint", f"baseline={server.url}", "--levels", "1,2", "--repeats", "1",
                      "--warmup", "0", "--prompts", str(prompts), "--out", str(tmp_path / "r"), "--python",
                      sglang_generator["python"])
    assert proc.returncode == 0, f"invoke bench failed: {proc.stderr}"
    doc = load(tmp_path / "r")
    assert doc["complete"] and doc["metadata"]["levels"] == [1, 2], f"flags not passed through: {doc['metadata']}"
    assert doc["metadata"]["load"]["generator"]["name"] == "sglang", doc["metadata"]["load"]
    assert "| baseline | 2 |" in proc.stdout, f"the table is not on stdout: {proc.stdout}"
    rounds = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert [r.split(":")[0] for r in rounds] == ["[1/2] baseline c=1 repeat 1/1", "[2/2] baseline c=2 repeat 1/1"], (
        f"one progress line per round on stdout: {proc.stdout}"
    )
    assert all(re.search(r": [0-9]+/[0-9]+ ok, [0-9]+ tokens, [0-9.]+ tok/s, [0-9.]+ in flight, [0-9.]+ s$", r) for r in rounds), rounds
    assert proc.stdout.rstrip().endswith(f"bench: results in {tmp_path / 'r'}"), proc.stdout
    assert proc.stderr == "", f"a clean run writes no diagnostics: {proc.stderr!r}"


def test_task_on_a_server_that_is_not_sglang_says_so(tmp_path):
    """A plain HTTP server (here: Python's file server) answers, but is not SGLang: not "unreachable"."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        proc = invoke("bench", "--endpoint", f"web={url}", "--out", str(tmp_path / "r"))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stderr}"
    want = f"error: endpoint web at {url} answers, but is not an SGLang server: HTTP 404 from /health (wrong port or URL?)"
    assert proc.stderr.strip() == want, f"stderr: {proc.stderr!r}"
    assert "not reachable" not in proc.stderr, "a server that answers is reachable"


def test_task_interrupted_keeps_partial_results(tmp_path, generator_args):
    import signal

    from conftest import wait_until

    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=10)
    out = tmp_path / "r"
    # The server holds every request after the first round until it is released, so Ctrl-C
    # always lands in the middle of the run, however slowly the machine gets there.
    with SGLangServer(Behaviour(step_s=0.005, ttft_s=0.005, fail_after=2, failure="hold")) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "invoke", "bench", "--endpoint", f"b={server.url}", "--levels", "1",
             "--repeats", "50", "--warmup", "0", "--prompts", str(prompts), "--out", str(out), *generator_args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # As in a terminal: a test run started in the background (`cmd &`, CI runners)
            # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        held = wait_until(lambda: (out / report.JSON_NAME).exists() and len(server.bodies) >= 3, timeout=60)
        proc.send_signal(signal.SIGINT)
        server.release()
        _, err = proc.communicate(timeout=60)
    assert held, f"the first round never finished: {err}"
    assert proc.returncode != 0, "an interrupted run must not exit 0"
    assert "Traceback" not in err, f"a traceback on Ctrl-C: {err}"
    doc = load(out)
    assert doc["complete"] is False, "an interrupted run is marked complete"
    assert doc["error"] == "interrupted", f"error field: {doc['error']}"
    assert 1 <= len(doc["rounds"]) < 50, f"rounds measured before the interrupt: {len(doc['rounds'])}"
    assert (out / report.PLOT_NAME).is_file(), "no plot for the interrupted run"


def test_two_runs_into_one_out_do_not_mix(tmp_path, generator_args):
    """The second `invoke bench` into an --out the first is still writing is refused in one line; the first's
    results are its own."""
    out = tmp_path / "r"
    prompts = write_prompts(tmp_path / "p.jsonl", count=3, tokens=8)  # 3 requests of about 0.5 s a round
    # After its first request the server holds the first run until the second has been answered, so the first
    # cannot finish before the second starts, however loaded the machine is.
    with SGLangServer(Behaviour(step_s=0.05, ttft_s=0.05, fail_after=1, failure="hold")) as server:
        first = subprocess.Popen([sys.executable, "-m", "invoke", "bench", "--endpoint", f"a={server.url}", "--out", str(out),
                                  "--prompts", str(prompts), "--levels", "1", "--repeats", "2", "--warmup", "0",
                                  *generator_args], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not server.bodies and time.monotonic() < deadline:  # the first is measuring
            time.sleep(0.05)
        second = invoke("bench", "--endpoint", f"b={server.url}", "--out", str(out), "--prompts", str(prompts),
                        "--levels", "1", "--warmup", "0", *generator_args)
        server.release()
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 2 and second.stderr.strip() == (
        f"error: --out {out}: another invoke bench is writing its results there; pick another --out"), second.stderr
    doc = json.loads((out / "bench.json").read_text())
    assert {s["endpoint"] for s in doc["samples"]} == {"a"}, "the refused run wrote nothing into the first's results"


def test_a_url_password_is_masked_on_the_terminal_as_in_the_files(tmp_path, generator_args):
    prompts = write_prompts(tmp_path / "p.jsonl", count=3, tokens=8)
    with SGLangServer(Behaviour(step_s=0.001, ttft_s=0.001)) as server:
        url = server.url.replace("http://", "http://user:hunter2-pass@")
        proc = invoke("bench", "--endpoint", f"a={url}", "--out", str(tmp_path / "r"), "--prompts", str(prompts),
                      "--levels", "1", "--repeats", "1", "--warmup", "0", *generator_args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "127.0.0.1" in proc.stdout and "hunter2-pass" not in proc.stdout + proc.stderr, \
        [line for line in proc.stdout.splitlines() if "hunter2" in line]
    assert all("hunter2-pass" not in f.read_text() for f in (tmp_path / "r").glob("bench.*[dn]"))
