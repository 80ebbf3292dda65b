"""`--tokenizer OWNER/NAME[@REVISION]`: the served model's tokenizer from the Hub, for a server whose model is not on this
host. huggingface_hub's own download runs against a loopback Hub (tests/hub.py) and fetches the tokenizer's files,
never the weights, as plain files in this project's cache; then SGLang's benchmark loads them and measures."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import replace

import pytest

import hub as loopback_hub
from sglang_server import SGLangServer
from sglang_stack import ROOT
from sglang_stack.bench import measure as bench, report
from sglang_stack.bench import tokenizer
from sglang_stack.bench.request import Request
from sglang_stack.errors import UserError
from test_bench import write_prompts
from test_generator import BASE, TOKENS
from word_tokenizer import word_tokenizer

REPO = "lightseekorg/kimi-k2.5-eagle3"  # the loopback Hub's one repository


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """This project's cache in tmp_path; each test asks the Hub afresh (download() remembers per process)."""
    monkeypatch.setenv("SGLANG_STACK_CACHE", str(tmp_path / "cache"))
    tokenizer.download.cache_clear()
    yield tmp_path / "cache"
    tokenizer.download.cache_clear()


def test_a_hub_name_fetches_the_tokenizer_files_and_not_the_weights(hub, cache, monkeypatch):
    umask = os.umask(0o077)  # a hardened host's: what the user makes, only the user reads
    try:
        folder = tokenizer.tokenizer_dir(REPO)
    finally:
        os.umask(umask)
    assert folder == cache / "tokenizers" / "lightseekorg--kimi-k2.5-eagle3" / "main", folder
    got = sorted(p.name for p in folder.iterdir() if p.name != ".cache")
    assert got == ["config.json", "tokenizer_config.json"], got
    # plain files, so the folder can be mounted into an image; the Hugging Face cache would give links into its blobs
    assert not any(p.is_symlink() for p in folder.iterdir()), list(folder.iterdir())
    # readable by the image's uid 10001, which the folder is mounted for
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in [folder, *folder.rglob("*")]}
    unreadable = {str(path): oct(mode) for path, mode in modes.items() if mode & 0o004 == 0 or (path.is_dir() and mode & 0o001 == 0)}
    assert not unreadable, unreadable
    assert (folder / "tokenizer_config.json").read_bytes() == loopback_hub.FILES["tokenizer_config.json"]
    assert not any("model.safetensors" in path for path in hub), hub

    # The Hub out of reach: the folder answers (a port nothing listens on)
    tokenizer.download.cache_clear()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert tokenizer.tokenizer_dir(REPO) == folder


@pytest.mark.parametrize("value, says", [
    ("moonshotai/nope", "--tokenizer moonshotai/nope: no such directory, nor a repository on the Hub at http://127.0.0.1"),
    (f"{REPO}@v9", f"--tokenizer {REPO}@v9: {REPO} has no revision 'v9' on the Hub"),
    ("./tok", "--tokenizer ./tok: no such directory"),
    ("a/b/c", "--tokenizer a/b/c: no such directory (nor a Hub repository name, OWNER/NAME[@REVISION])"),
    (f"{REPO}@..", f"--tokenizer {REPO}@..: no such directory (nor a Hub repository name, OWNER/NAME[@REVISION])"),
    ("owner/..", "--tokenizer owner/..: no such directory (nor a Hub repository name: Repo id must use alphanumeric"),
])
def test_a_name_the_hub_does_not_have_is_one_line(hub, cache, value, says):
    with pytest.raises(UserError) as err:
        tokenizer.tokenizer_dir(value)
    assert str(err.value).startswith(says) and "\n" not in str(err.value), str(err.value)
    assert not (cache / "tokenizers").exists() or not any((cache / "tokenizers").rglob("*.json")), "nothing fetched"


def test_a_repository_without_a_tokenizer_is_named_with_where_it_went(hub, cache, monkeypatch):
    monkeypatch.delitem(loopback_hub.FILES, "tokenizer_config.json")
    monkeypatch.delitem(loopback_hub.SERVED, "tokenizer_config.json")
    with pytest.raises(UserError, match=rf"--tokenizer {REPO} \(downloaded to .*/main\): no tokenizer_config.json or "
                                        "tokenizer.json"):
        tokenizer.tokenizer_dir(REPO)


def test_the_hub_out_of_reach_with_nothing_fetched_is_one_line(cache, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(UserError) as err:
        tokenizer.tokenizer_dir(REPO)
    message = str(err.value)
    assert message.startswith(f"--tokenizer {REPO}: nothing fetched before, and the Hub at http://127.0.0.1:9 did not "
                               "answer: ") and "\n" not in message, message
    assert list((cache / "tokenizers" / "lightseekorg--kimi-k2.5-eagle3").iterdir()) == [], "no folder, no leftovers"


def test_a_fetch_that_fails_part_of_the_way_leaves_the_set_fetched_before(hub, cache, monkeypatch, capfd):
    folder = tokenizer.tokenizer_dir(REPO)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    # main moves to a commit that adds a tokenizer.json and changes config.json; the Hub fails to send tokenizer.json
    monkeypatch.setattr(loopback_hub, "COMMIT", "f" * 40)
    monkeypatch.setitem(loopback_hub.SERVED, "tokenizer.json", b"{}")
    monkeypatch.setitem(loopback_hub.SERVED, "config.json", b'{"changed": true}')
    loopback_hub.BROKEN.add("tokenizer.json")
    tokenizer.download.cache_clear()
    assert tokenizer.tokenizer_dir(REPO) == folder
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before, "the set fetched before, whole"
    assert f"the set fetched before serves: {folder}" in capfd.readouterr().err
    assert sorted(p.name for p in folder.parent.iterdir()) == ["main"], "no temporary folder left beside it"

    # Served whole, the new set replaces the old one
    loopback_hub.BROKEN.clear()
    tokenizer.download.cache_clear()
    assert tokenizer.tokenizer_dir(REPO) == folder
    assert (folder / "config.json").read_bytes() == b'{"changed": true}' and (folder / "tokenizer.json").is_file()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["main"]


def test_an_endpoint_started_from_a_hub_repository_serves_its_tokenizer_from_the_hub(hub, cache, capfd):
    """No --tokenizer: a server started from a Hub repository names it as its model_path, and its tokenizer files are
    fetched as --tokenizer OWNER/NAME fetches them."""
    from sglang_stack.bench.client import Endpoint

    with SGLangServer(replace(BASE, model_path=REPO)) as server:
        folder = tokenizer.served_tokenizer(Endpoint("x", server.url), None, 10)
    assert folder == cache / "tokenizers" / "lightseekorg--kimi-k2.5-eagle3" / "main", folder
    assert (folder / "tokenizer_config.json").is_file()
    assert f"--endpoint x serves {REPO}: its tokenizer from the Hub" in capfd.readouterr().err


def test_a_second_fetch_of_the_same_name_waits_for_the_first(hub, cache, capfd):
    """Two runs fetching one name at once: the second waits, so neither swaps the folder away under the other (an
    OSError traceback for one of them, before)."""
    import fcntl
    import threading

    folder = cache / "tokenizers" / "lightseekorg--kimi-k2.5-eagle3" / "main"
    folder.parent.mkdir(parents=True)
    fd = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a first run holds while it fetches and swaps
    got: list = []
    second = threading.Thread(target=lambda: got.append(tokenizer.tokenizer_dir(REPO)))
    try:
        second.start()
        second.join(timeout=3)
        assert second.is_alive() and not folder.exists(), "the second fetch went ahead while the first held the name"
    finally:
        os.close(fd)  # the first run ends
    second.join(timeout=60)
    assert got == [folder] and (folder / "tokenizer_config.json").is_file(), got
    assert f"another run is fetching it into {folder.parent}: waiting for it to finish" in capfd.readouterr().err


@pytest.mark.sglang_env
def test_sglangs_benchmark_measures_with_a_tokenizer_from_the_hub(tmp_path, hub, cache, sglang_generator, monkeypatch):
    """The loopback Hub serves a word tokenizer's files; `invoke bench --generator sglang --tokenizer OWNER/NAME` sends
    the rounds with it."""
    words = word_tokenizer(tmp_path / "tok", ["[UNK]", "prompt", "number", *map(str, range(10))])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        monkeypatch.setitem(loopback_hub.FILES, name, (words / name).read_bytes())
        monkeypatch.setitem(loopback_hub.SERVED, name, (words / name).read_bytes())
    monkeypatch.delitem(loopback_hub.FILES, "config.json")  # a tokenizer_config.json with a class needs none
    flags = {**sglang_generator, "tokenizer": REPO}
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=TOKENS)
    with SGLangServer(BASE) as server:
        out = bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts,
                                out=tmp_path / "r", **flags), environ={}, progress=False)
    doc = json.loads((out / report.JSON_NAME).read_text())
    assert doc["complete"], doc["error"]
    made = doc["metadata"]["load"]["generator"]
    assert made["name"] == "sglang" and made["tokenizer"] == str(cache / "tokenizers" / "lightseekorg--kimi-k2.5-eagle3"
                                                                  / "main"), made
    assert [s["output_tokens"] for s in doc["samples"]] == [TOKENS, TOKENS], doc["samples"]
    assert f", tokenizer {made['tokenizer']}\n" in (out / report.MARKDOWN_NAME).read_text()
    assert any(path.startswith(f"/{REPO}/resolve/") and path.split("?")[0].endswith("tokenizer.json") for path in hub), hub


def test_invoke_bench_names_a_tokenizer_the_hub_does_not_have_before_any_request(hub, tmp_path):
    env = {**os.environ, "SGLANG_STACK_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--endpoint", "gone=http://127.0.0.1:9", "--out",
                           str(tmp_path / "r"), "--generator", "sglang", "--tokenizer", "moonshotai/nope"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("--tokenizer moonshotai/nope: huggingface_hub snapshot_download('moonshotai/nope', "), lines
    assert lines[-1] == f"error: --tokenizer moonshotai/nope: no such directory, nor a repository on the Hub at " \
                        f"{env['HF_ENDPOINT']} (or it is gated: set HF_TOKEN)", lines
    assert not (tmp_path / "r").exists()
