"""`invoke acceptance --dataset speed-bench`: the user's SPEED-Bench JSONL checked line by line, its prompts made by
SGLang 0.5.23's own adapter and chat template (in the profile's CPU Python), sent to a loopback stand-in that reports
SGLang's speculative figures, and the result set beside the drafter's published accept lengths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pins import PIN
from sglang_server import Behaviour, SGLangServer
from word_tokenizer import word_tokenizer
from sglang_stack import ROOT
from sglang_stack.bench import acceptance, speedbench
from sglang_stack.errors import UserError

ROWS = [("mixed", "write a poem"), ("low_entropy", "sort the list"), ("high_entropy", "why is the sky blue"),
        ("mixed", "explain the sky")]
SPEC_INFO = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 4}
WORDS = ["[UNK]", "<|user|>", "<|assistant|>", "write", "a", "poem", "sort", "list", "explain", "the", "sky", "why",
         "is", "blue"]
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def speed_bench(path, rows=ROWS, tail: bytes = b"") -> str:
    with open(path, "wb") as f:
        for i, (category, text) in enumerate(rows):
            f.write(json.dumps({"question_id": i, "category": category, "turns": [text]}).encode() + b"\n")
        f.write(tail)
    return str(path)


def tokenizer(directory):
    """Our words, and a chat template SGLang's adapter applies."""
    return word_tokenizer(directory, WORDS, TEMPLATE)


# --- the file -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tail, says", [
    (b'{"turns": ["cut', "{path}:5: truncated: the last line is cut off"),
    (b"not json\n", "{path}:5: not JSON Lines"),
    (b'{"category": "mixed", "turns": []}\n', "{path}:5: no 'turns' list of strings"),
    (b'["write a poem"]\n', "{path}:5: no 'turns' list of strings"),
])
def test_a_file_that_is_not_speed_bench_is_named_by_line(tmp_path, tail, says):
    path = speed_bench(tmp_path / "sb.jsonl", tail=tail)
    with pytest.raises(UserError) as err:
        speedbench.check(tmp_path / "sb.jsonl")
    assert str(err.value).startswith(says.format(path=path)), err.value


def test_a_good_file_is_counted_by_category_and_hashed(tmp_path):
    import hashlib

    path = tmp_path / "sb.jsonl"
    speed_bench(path)
    checked = speedbench.check(path, "mixed")
    assert checked.categories == {"mixed": 2, "low_entropy": 1, "high_entropy": 1} and checked.rows == 4
    assert checked.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(UserError, match=r"--category mixed: .* has no row of it \(it has low_entropy\)"):
        speedbench.check(speed_bench(tmp_path / "low.jsonl", rows=ROWS[1:2]) and tmp_path / "low.jsonl", "mixed")
    for bad in (tmp_path, tmp_path / "missing.jsonl"):
        with pytest.raises(UserError, match=r"^--dataset-path "):
            speedbench.check(bad)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no rows"):
        speedbench.check(tmp_path / "empty.jsonl")


@pytest.mark.parametrize("args, says", [
    (["--dataset", "mt-bench"], "error: --dataset 'mt-bench': speed-bench is the one dataset (without it: the probe)"),
    (["--dataset", "speed-bench"], "error: --dataset speed-bench needs --dataset-path FILE, the JSONL prepared on this host"),
    (["--category", "mixed"], "error: --category goes with --dataset speed-bench"),
    (["--dataset", "speed-bench", "--dataset-path", "{bad}", "--url", "http://127.0.0.1:9"],
     "error: {bad}:5: truncated: the last line is cut off (no newline, not whole JSON); prepare or download the file again"),
])
def test_invoke_acceptance_refuses_bad_dataset_flags_in_one_line(tmp_path, args, says):
    bad = speed_bench(tmp_path / "bad.jsonl", tail=b'{"turns": ["cu')
    proc = subprocess.run([sys.executable, "-m", "invoke", "acceptance", *[a.format(bad=bad) for a in args]], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == says.format(bad=bad), proc.stderr


# --- the published figures ----------------------------------------------------------------------


def test_the_published_figures_are_compared_only_where_measured_alike():
    from sglang_stack.services import models

    m = acceptance.Measurement(url="u", accept_length=2.5, server=dict(SPEC_INFO), dataset="speed-bench")
    figures = acceptance.against_published(m, models.load()["drafter-mla"].published)
    by = {(f["dataset"], f["draft_tokens"]): f for f in figures}
    assert by[("speed-bench", 4)]["comparable"] and by[("speed-bench", 4)]["short_by"] == pytest.approx(0.74)
    assert not by[("speed-bench", 3)]["comparable"], "the golden value at 3 draft tokens is not this run's 4"
    assert not by[("mt-bench", 0)]["comparable"], "MT-Bench is another dataset"
    line = acceptance.published_line(by[("speed-bench", 4)])
    assert line.startswith("published 3.24 on speed-bench at 4 draft tokens (InferenceX") and line.endswith(
        "this run falls short by 0.74"), line
    assert acceptance.published_line({**by[("speed-bench", 4)], "short_by": 0.0}).endswith("at or above it")


def test_a_speed_bench_report_is_not_the_probes_baseline(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"kind": acceptance.REPORT_KIND, "dataset": "speed-bench", "accept_length": 2.9}))
    with pytest.raises(UserError, match="measured on speed-bench; the expectation is what the probe gives"):
        acceptance.baseline_from(path)


# --- SGLang's own adapter -----------------------------------------------------------------------


@pytest.mark.sglang_env
def test_sglangs_adapter_makes_chat_templated_prompts_that_acceptance_sends(tmp_path, profile_python):
    python = str(profile_python("0.5.23"))
    path = speed_bench(tmp_path / "sb.jsonl")
    request = speedbench.Request(path, "mixed", 3, 16, str(tokenizer(tmp_path / "tok")), python=python)
    with SGLangServer(Behaviour(step_s=0.0005, ttft_s=0.001, accept=(2, 3, 2), spec=True, server_info=SPEC_INFO)) as server:
        passed, line = acceptance.check(url=server.url, out=str(tmp_path / "out.json"), speed_bench=request,
                                        say=lambda _: None)
    sent = [b["text"] for b in server.bodies]
    assert len(sent) == 3 and set(sent) <= {"<|user|> write a poem <|assistant|>", "<|user|> explain the sky <|assistant|>"}, sent
    assert all(b["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 16} for b in server.bodies)
    assert passed and "the floor 1.2" in line, line
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["dataset"] == "speed-bench" and report["probe"]["sha256"] == speedbench.check(tmp_path / "sb.jsonl").sha256
    assert report["probe"]["rows"] == {"mixed": 2, "low_entropy": 1, "high_entropy": 1} and report["probe"]["prompts"] == 3
    assert report["published"] and not any(f["comparable"] for f in report["published"]), \
        "with --url the MHA drafter's figures apply, all on MT-Bench: for reference only"


@pytest.mark.sglang_env
def test_the_default_profiles_sglang_has_no_speed_bench_and_says_so(tmp_path, default_python):
    python = default_python
    proc = subprocess.run([python, "-m", "sglang_stack.entrypoints.prompts", "speed-bench", "--dataset-path",
                           speed_bench(tmp_path / "sb.jsonl"), "--tokenizer", str(tokenizer(tmp_path / "tok"))],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        f"error: SGLang {PIN['sglang']}'s benchmark has no speed-bench dataset "
        "(sglang.benchmark.datasets.speed_bench); profile 0.5.23 has it"), proc.stderr


# --- the verdict's prompts ----------------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["--category", "mixed"], "error: --category goes with --dataset speed-bench"),
    (["--dataset", "mt-bench"], "error: --dataset 'mt-bench': choose prompts (--prompts, the default set or a "
     "ShareGPT file), random or speed-bench"),
    (["--dataset", "speed-bench"], "error: --dataset speed-bench needs --dataset-path FILE, the JSONL prepared on "
     "this host"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}", "--api", "chat"], "error: --dataset speed-bench with "
     "--api chat: SGLang's adapter sends chat-templated text already, and the chat API would template it again; use "
     "--api native or completions"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}", "--prompt-template", "<s>{{prompt}}"],
     "error: --prompt-template with --dataset speed-bench: SGLang's adapter applies the model's chat template already"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}"], "error: --dataset speed-bench with --endpoint: give "
     "--tokenizer DIR or OWNER/NAME, the served model's tokenizer (its chat template makes the prompts)"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}", "--tokenizer", "{tok}", "--num-prompts", "0"],
     "error: --num-prompts '0': must be at least 1"),
    (["--dataset", "speed-bench", "--dataset-path", "{bad}", "--tokenizer", "{tok}"],
     "error: {bad}:5: truncated: the last line is cut off (no newline, not whole JSON); prepare or download the file "
     "again"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}", "--tokenizer", "{tok}", "--category", "code"],
     "error: --category 'code': one of low_entropy, mixed, high_entropy"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}", "--tokenizer", "{good}"],
     "error: --tokenizer {good}: not a directory (the served model's directory holds tokenizer_config.json or "
     "tokenizer.json)"),
    (["--dataset", "speed-bench", "--dataset-path", "{good}", "--tokenizer", "{tok}", "--image", "x", "--python", "y"],
     "error: --image x and --python y: SGLang's adapter runs in one of them; choose one"),
])
def test_invoke_bench_refuses_bad_speed_bench_flags_before_any_request(tmp_path, args, says):
    good, bad = speed_bench(tmp_path / "good.jsonl"), speed_bench(tmp_path / "bad.jsonl", tail=b'{"turns": ["cu')
    tok = tokenizer(tmp_path / "tok")
    given = [a.format(good=good, bad=bad, tok=tok) for a in args]
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--endpoint", "gone=http://127.0.0.1:9", "--out",
                           str(tmp_path / "r"), *given], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == says.format(bad=bad, good=good), proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.sglang_env
def test_the_verdict_measures_the_prompts_sglangs_speed_bench_adapter_makes(tmp_path, profile_python):
    """`invoke bench --verdict --dataset speed-bench`: both servers get SGLang's chat-templated SPEED-Bench prompts,
    and verdict.json says what they were (the file's sha256, the category, where SGLang's adapter ran)."""
    from sglang_stack.bench import measure, pays, report
    from sglang_stack.bench.request import Request

    python = str(profile_python("0.5.23"))
    path = speed_bench(tmp_path / "sb.jsonl")
    base = Behaviour(step_s=0.001, ttft_s=0.002, accept=(1,), server_info={"speculative_algorithm": None})
    spec = Behaviour(step_s=0.001, ttft_s=0.002, accept=(3,), spec=True, server_info=SPEC_INFO)
    with SGLangServer(base) as b, SGLangServer(spec) as s:
        out = measure.run(Request(endpoints=[f"baseline={b.url}", f"eagle3={s.url}"], levels="1", repeats=2, warmup=0,
                                  out=tmp_path / "r", verdict=True, dataset="speed-bench", dataset_path=path,
                                  category="mixed", num_prompts=2, output_len=8, tokenizer=str(tokenizer(tmp_path / "tok")),
                                  python=python), environ={}, progress=False)
        sent = {server: [body["text"] for body in server.bodies] for server in (b, s)}
    templated = {"<|user|> write a poem <|assistant|>", "<|user|> explain the sky <|assistant|>"}
    assert all(texts and set(texts) == templated for texts in sent.values()), sent
    assert all(body["sampling_params"]["max_new_tokens"] == 8 for body in b.bodies + s.bodies)
    found = json.loads((out / pays.NAME).read_text())
    assert found["prompts"]["kind"] == "speed-bench" and found["prompts"]["prompts"] == 2, found["prompts"]
    made = found["prompts"]["made"]
    assert made["sha256"] == speedbench.check(tmp_path / "sb.jsonl").sha256 and made["category"] == "mixed"
    assert made["chat_template"] is True and made["sglang"] == f"python {python}", made
    assert "SPEED-Bench mixed prompts, chat-templated by SGLang's adapter (2 prompts" in (
        out / report.MARKDOWN_NAME).read_text()


@pytest.mark.sglang_env
def test_a_tokenizer_transformers_cannot_load_is_one_line(tmp_path, profile_python):
    broken = tmp_path / "tok"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{}")
    proc = subprocess.run([str(profile_python("0.5.23")), "-m", "sglang_stack.entrypoints.prompts", "speed-bench",
                           "--dataset-path", speed_bench(tmp_path / "sb.jsonl"), "--tokenizer", str(broken)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "error: the tokenizer (--tokenizer) does not load in transformers: KeyError: 'added_tokens'"), proc.stderr


@pytest.mark.sglang_env
def test_a_compose_service_is_measured_with_the_tokenizer_of_its_model_dir(tmp_path, profile_python):
    """Without --tokenizer, the chat template is the one of the model the services serve (MODEL_DIR)."""
    from test_bench import free_port
    from sglang_stack.bench import measure
    from sglang_stack.bench.request import Request

    base = Behaviour(step_s=0.001, ttft_s=0.002, accept=(1,), server_info={"speculative_algorithm": None})
    with SGLangServer(base) as server:
        env = {"BASELINE_PORT": server.url.rsplit(":", 1)[1], "EAGLE3_PORT": str(free_port()),
               "MODEL_DIR": str(tokenizer(tmp_path / "model"))}
        out = measure.run(Request(only="baseline", levels="1", repeats=1, warmup=0, out=tmp_path / "r",
                                  dataset="speed-bench", dataset_path=speed_bench(tmp_path / "sb.jsonl"),
                                  category="low_entropy", num_prompts=1, output_len=4,
                                  python=str(profile_python("0.5.23"))),
                          environ=env, env_file=tmp_path / "none", progress=False)
        assert [body["text"] for body in server.bodies] == ["<|user|> sort the list <|assistant|>"]
    assert json.loads((out / "bench.json").read_text())["metadata"]["prompt_set"]["made"]["category"] == "low_entropy"


@pytest.mark.engine
def test_without_profile_the_adapter_runs_in_the_first_profile_that_has_it(tmp_path, docker_engine):
    """The services may run 0.5.9, whose benchmark has no SPEED-Bench adapter: the prompts are still made by the
    0.5.23 profile's image, and where it is not built the one line says to build that profile."""
    from sglang_stack.engine import DOCKER
    from sglang_stack.entrypoints.prompts import PROFILE
    from sglang_stack.image import store
    from sglang_stack.lock import lockfile, profiles

    tag = lockfile.check_all(profiles.get(PROFILE).lock, download=False)[0].tag
    if store.exists(DOCKER, tag):
        pytest.skip(f"{tag} is built here: the adapter would run in it")
    with SGLangServer(Behaviour(server_info={"speculative_algorithm": None})) as server:
        proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--endpoint", f"a={server.url}", "--dataset",
                               "speed-bench", "--dataset-path", speed_bench(tmp_path / "sb.jsonl"), "--tokenizer",
                               str(tokenizer(tmp_path / "tok")), "--out", str(tmp_path / "r")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SGLANG_PROFILE": profiles.default().name})
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: bench: {tag}: no such image in the docker store: build it first (`invoke build --profile {PROFILE}`), "
        "or name one with --image, or run SGLang with --python"), proc.stderr
    assert not (tmp_path / "r").exists()
