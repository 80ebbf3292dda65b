"""Property-based tests: the files and flags a user gives, generated from their grammars and mutated.

The property is the same for every reader: it returns, or it raises ``UserError`` (one line
naming the thing); any other exception is a bug the task boundary would show as a
traceback. No reader changes a file. The table of known bad inputs (test_bad_inputs.py)
stays; this finds the cases nobody listed.

In CI each property runs a bounded number of examples (the ``ci`` profile); more on demand:

    HYPOTHESIS_PROFILE=deep pytest tests/project/test_fuzz.py

A failure prints the falsifying example and the ``@reproduce_failure`` blob that replays
it; the examples found are kept in .hypothesis/ and tried first on the next run.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_stack import ROOT
from sglang_stack.errors import UserError

settings.register_profile("ci", max_examples=60, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("deep", max_examples=3000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Characters that break naive readers: quotes, interpolation, comment and key syntax, NUL and
# other controls, Unicode line separators, a BOM, non-ASCII digits, surrogates excluded.
NASTY = st.sampled_from(list("\"'$={}[]#:,\\\n\r\t \x00\x0b\x0c\u2028\u2029\ufeff\u00a0\u0661\u00b2-_./") + ["${", "$$", "${A:-", "\r\n"])
TEXT = st.lists(st.one_of(st.characters(blacklist_categories=("Cs",)), NASTY), max_size=40).map("".join)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSONISH = st.recursive(SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(TEXT, kids, max_size=4)),
                       max_leaves=12)


def expect_clean(call, *args):
    """``call(*args)`` returns, or raises UserError with a message; anything else fails the property."""
    try:
        return call(*args)
    except UserError as err:
        assert str(err).strip(), "a UserError must say something"
        return None


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# --- mutations of a real file -------------------------------------------------------------


@st.composite
def mutated_lines(draw, text: str):
    """``text`` with a few lines dropped, duplicated, swapped or overwritten with nasty text."""
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "replace", "insert", "truncate"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "replace":
            line = lines[i]
            j = draw(st.integers(0, max(0, len(line) - 1)))
            lines[i] = line[:j] + draw(TEXT) + line[j + 1:]
        elif op == "insert":
            lines.insert(i, draw(TEXT) + "\n")
        else:
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
    return "".join(lines)


VERSIONS_LOCK = (ROOT / "versions.lock").read_text()
MODELS_LOCK = (ROOT / "models.lock").read_text()


@given(text=mutated_lines(VERSIONS_LOCK))
def test_a_mutated_versions_lock_is_read_or_refused_in_one_line(tmp_path_factory, text):
    from sglang_stack.lock import lockfile as lockmod

    root = tmp_path_factory.mktemp("lock")
    for name in ("requirements.lock.txt", "requirements.router.lock.txt"):
        (root / name).write_bytes((ROOT / name).read_bytes())
    (root / "versions.lock").write_text(text)
    before = snapshot(root)
    expect_clean(lambda: lockmod.check(root / "versions.lock"))
    assert snapshot(root) == before, "a check writes nothing"


MODEL = st.fixed_dictionaries({}, optional={
    "role": st.one_of(st.sampled_from(["target", "drafter"]), SCALARS),
    "repo": st.one_of(st.just("lightseekorg/kimi-k2.5-eagle3"), SCALARS),
    "track": SCALARS,
    "revision": st.one_of(st.just("0" * 40), SCALARS),
    "files": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
        "name": st.one_of(st.just("model.safetensors"), TEXT, SCALARS),
        "size": st.one_of(st.integers(-5, 2**62), SCALARS),
        "sha256": st.one_of(st.just("a" * 64), SCALARS),
        "git_sha1": st.one_of(st.just("b" * 40), SCALARS)}), max_size=3), SCALARS),
    "acceptance": st.one_of(st.fixed_dictionaries({"accept_length": SCALARS, "tolerance": SCALARS, "settings": SCALARS,
                                                    "source": SCALARS}), SCALARS),
})


def toml_value(value) -> str:
    """A TOML spelling of a generated value; what TOML cannot hold (None) becomes a string."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value) if value == value and abs(value) != float("inf") else ("nan" if value != value else
                                                                                       ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"


@given(schema=st.one_of(st.just(1), SCALARS), models=st.lists(MODEL, max_size=3),
       mutated=st.one_of(st.none(), mutated_lines(MODELS_LOCK)))
def test_a_generated_models_lock_is_read_or_refused_in_one_line(tmp_path_factory, schema, models, mutated):
    from sglang_stack.services import models as modelsmod

    body = mutated if mutated is not None else f"schema = {toml_value(schema)}\n" + "".join(
        "\n[[model]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in m.items()) for m in models)
    path = tmp_path_factory.mktemp("models") / "models.lock"
    try:
        path.write_text(body, encoding="utf-8", errors="surrogatepass")
    except UnicodeEncodeError:
        return
    expect_clean(modelsmod.load, path)


MANIFEST = st.fixed_dictionaries({"schema": st.one_of(st.just(1), SCALARS)}, optional={
    "lock": st.one_of(st.dictionaries(TEXT, TEXT, max_size=2), SCALARS),
    "targets": st.one_of(st.lists(TEXT, max_size=2), SCALARS),
    "files": st.one_of(st.lists(st.one_of(st.fixed_dictionaries({}, optional={
        "path": st.one_of(st.sampled_from(["wheels/a.whl", "../x", "/etc/hostname", "wheels/../../y"]), TEXT, SCALARS),
        "sha256": st.one_of(st.just("c" * 64), SCALARS), "size": st.one_of(st.integers(-3, 2**40), SCALARS)}),
        JSONISH), max_size=3), SCALARS),
    "images": st.one_of(st.lists(JSONISH, max_size=2), SCALARS),
})


@given(manifest=st.one_of(MANIFEST, JSONISH))
def test_a_generated_mirror_manifest_is_read_or_refused_in_one_line(tmp_path_factory, manifest):
    from sglang_stack.image import mirror

    directory = tmp_path_factory.mktemp("mirror")
    (directory / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(directory)
    data = expect_clean(mirror.read_manifest, directory)
    if data:
        for entry in data["files"] + data["images"]:
            assert (directory / entry["path"]).resolve().is_relative_to(directory.resolve()), entry
    assert snapshot(directory) == before


ENV_LINE = st.one_of(
    st.tuples(st.sampled_from(["A", "B", "TP_SIZE", "SGLANG_API_KEY", "export A", " A ", "1A", "A.B-C"]), TEXT)
    .map(lambda kv: f"{kv[0]}={kv[1]}"),
    TEXT, st.just("# comment"), st.just(""),
)


@given(lines=st.lists(ENV_LINE, max_size=8), bom=st.booleans(), crlf=st.booleans())
def test_a_generated_dotenv_is_read_or_refused_in_one_line_and_shows_no_secret(tmp_path_factory, lines, bom, crlf):
    from sglang_stack.services import variables

    text = ("\ufeff" if bom else "") + ("\r\n" if crlf else "\n").join(lines)
    path = tmp_path_factory.mktemp("env") / ".env"
    try:
        path.write_text(text, encoding="utf-8")
    except UnicodeEncodeError:
        return
    try:
        variables.environment(path, {"PATH": os.environ["PATH"]})
    except UserError as err:
        secret = next((line.split("=", 1)[1] for line in lines if line.startswith("SGLANG_API_KEY=")), "")
        if len(secret.strip()) >= 8 and secret.strip() not in ("${A:-", "$$"):
            assert secret.strip() not in str(err), f"a secret's value in the error line: {err}"


VALUES = yaml.safe_load((ROOT / "deploy" / "k8s" / "values.yaml").read_text())


@st.composite
def mutated_values(draw):
    values = copy.deepcopy(VALUES)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(values)))
        if isinstance(values[key], dict) and values[key] and draw(st.booleans()):
            sub = draw(st.sampled_from(sorted(values[key])))
            values[key][sub] = draw(JSONISH)
        else:
            values[key] = draw(JSONISH)
    return values


@given(values=mutated_values())
def test_mutated_k8s_values_render_valid_yaml_or_are_refused_in_one_line(values):
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.services import k8s

    lock = _lock(lockmod)
    texts = expect_clean(k8s.render_text, lock, values)
    for name, text in (texts or {}).items():
        docs = [d for d in yaml.safe_load_all(text) if d]
        assert docs and all(isinstance(d, dict) and "kind" in d for d in docs), f"{name}: not manifests"


_LOCK = []


def _lock(lockmod):
    if not _LOCK:
        _LOCK.append(lockmod.check_all(download=False)[0])
    return _LOCK[0]


COMPOSE_VARS = st.dictionaries(st.sampled_from(["TP_SIZE", "GPU_IDS", "SHM_SIZE", "SGLANG_EXTRA_ARGS", "BIND_ADDRESS",
                                                "EAGLE3_PORT", "SGLANG_SPEC_NUM_STEPS", "NNODES", "NODE_RANK",
                                                "DIST_INIT_ADDR", "MODEL_DIR", "SERVED_MODEL_NAME"]), TEXT, max_size=4)


@given(env=COMPOSE_VARS)
def test_generated_compose_variables_resolve_or_are_refused_in_one_line(env):
    from sglang_stack.services import variables
    from sglang_stack.services import composefile

    environment = variables.Environment(env, {k: "shell" for k in env})
    expect_clean(composefile.service, "eagle3", environment, (composefile.COMPOSE_FILE,))


@given(levels=st.one_of(TEXT, SCALARS, st.lists(SCALARS, max_size=3)), rate=st.one_of(TEXT, SCALARS),
       percentiles=st.one_of(TEXT, st.none()), counts=st.tuples(TEXT, TEXT, TEXT), ratio=st.one_of(TEXT, SCALARS),
       grid=st.tuples(TEXT, TEXT, TEXT))
def test_generated_bench_flags_are_read_or_refused_in_one_line(levels, rate, percentiles, counts, ratio, grid):
    from sglang_stack.bench import measure, sweep
    from sglang_stack.bench import promptset, rounds
    from sglang_stack.bench.request import Request

    expect_clean(measure.parse_levels, levels)
    expect_clean(measure.parse_rate, rate)
    expect_clean(measure.parse_percentiles, percentiles)
    options = rounds.Options(levels=[1], repeats=1, warmup=0, timeout=1.0, ignore_eos=False, prompt_template=None,
                              flush_cache=False)
    expect_clean(promptset.parse_dataset, Request(dataset="random", random_input_len=counts[0],
                                                random_output_len=counts[1], random_range_ratio=ratio), options)
    expect_clean(promptset.parse_dataset, Request(dataset=counts[2]), options)
    expect_clean(lambda: sweep.grid(sweep.parse_ints("--sweep-steps", grid[0], maximum=sweep.MAX_STEPS),
                                    sweep.parse_ints("--sweep-topk", grid[1], maximum=sweep.MAX_TOPK),
                                    sweep.parse_ints("--sweep-draft-tokens", grid[2], minimum=2)))


# --- server event streams, as SGLang's benchmark parsed them ---------------------------------------


EVENT = st.fixed_dictionaries({}, optional={
    "meta_info": st.one_of(JSONISH, st.fixed_dictionaries({
        "completion_tokens": st.one_of(st.integers(-2, 50), SCALARS), "finish_reason": JSONISH}, optional={
        "spec_accept_length": SCALARS, "spec_verify_ct": SCALARS, "spec_accept_histogram": JSONISH})),
    "choices": JSONISH, "usage": JSONISH, "error": JSONISH})


@given(events=st.lists(EVENT, max_size=5))
def test_a_generated_event_stream_is_read_or_fails_the_request(events):
    """What this checkout reads of each stream SGLang's benchmark parsed (entrypoints/benchmark.py: a failure, where the
    count came from, the speculative figures), and what the host keeps of those figures: read, or one line."""
    from sglang_stack.bench import client
    from sglang_stack.entrypoints import benchmark
    from sglang_stack.serverapi import RequestFailed

    why = benchmark.failure(events)
    assert why is None or why.strip()
    assert benchmark.counted(events) in ("server", "requested")
    try:
        client.keep_spec(client.Timing(), benchmark.speculative(events))
    except RequestFailed as err:
        assert str(err).strip()
