"""Secrets never print: one redaction step, and key flags known in every form argparse takes."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import sglang_cpu_env
from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.redact import MASK, Redactor, key_flag, known_secrets
from sglang_stack.services import k8s, variables
from sglang_stack.entrypoints import serve


@pytest.mark.parametrize("arg, flag", [
    ("--api-key", "--api-key"), ("--api-key=x", "--api-key"), ("--api-ke", "--api-key"), ("--api", "--api-key"),
    ("--ap", "--api-key"), ("--admin-api-key", "--admin-api-key"), ("--admin-api", "--admin-api-key"),
    ("--ad=x", "--admin-api-key"), ("--a", None), ("--api-keys", None), ("--attention-backend", None), ("api-key", None),
])
def test_key_flags_in_every_prefix_form(arg, flag):
    assert key_flag(arg) == flag


def test_the_redactor_masks_values_urls_and_flags():
    r = Redactor({"sk-supersecret"})
    line = "POST http://user:pw@host:1/x with sk-supersecret; --api-ke hunter22 --mem 0.8 --admin-api-key=zz9"
    out = r.text(line)
    assert "sk-supersecret" not in out and "user:pw" not in out and "hunter22" not in out and "zz9" not in out, out
    assert "--mem 0.8" in out and f"http://{MASK}@host:1/x" in out, out
    assert r.argv(["--port", "1", "--api-ke", "k1", "--ad=k2"]) == ["--port", "1", "--api-ke", MASK, f"--ad={MASK}"]


def test_known_secrets_come_from_the_files_and_variables(tmp_path):
    key = tmp_path / "api"
    key.write_text("sk-from-file\n")
    found = known_secrets({"SGLANG_API_KEY_FILE": str(key), "HF_TOKEN": "hf_from_env"})
    assert {"sk-from-file", "hf_from_env"} <= found, found


def test_a_malformed_secret_in_env_is_named_not_shown(tmp_path, compose):
    env = tmp_path / ".env"
    env.write_text('HF_TOKEN=hf_abc${oops\nSGLANG_API_KEY="sk-unterminated\n')
    with pytest.raises(UserError) as err:
        variables.environment(env, {"PATH": os.environ["PATH"]})
    message = str(err.value)
    assert message.startswith(f"{env}:1: ") and "hf_abc" not in message, message
    env.write_text('SGLANG_API_KEY="sk-unterminated\n')
    with pytest.raises(UserError) as err:
        variables.environment(env, {"PATH": os.environ["PATH"]})
    assert "sk-unterminated" not in str(err.value) and "unterminated quoted value" in str(err.value), err.value


def test_the_entrypoint_guard_refuses_an_abbreviated_key_flag(capsys):
    assert serve.main(["--port", "30000", "--api-ke", "sk-x"]) == 2
    err = capsys.readouterr().err
    assert "--api-ke on the command line" in err and "sk-x" not in err, err


def test_k8s_values_refuse_key_flags_as_compose_does():
    values = k8s.load_values()
    from sglang_stack.lock import lockfile as lockmod

    lock, _ = lockmod.check_all(download=False)
    for where, patch in (("extra_args", {"extra_args": ["--api-key", "sk-x"]}),
                         ("router.extra_args", {"router": {**values["router"], "extra_args": ["--api-k=sk-x"]}})):
        with pytest.raises(UserError) as err:
            k8s.render_text(lock, {**values, **patch})
        assert where in str(err.value) and "--api-key" in str(err.value) and "sk-x" not in str(err.value), err.value


def test_the_doctor_fails_a_key_flag_in_extra_args(compose):
    from sglang_stack.services import composefile
    from sglang_stack.doctor import inputs

    svc = composefile.service("eagle3", variables.Environment({"SGLANG_EXTRA_ARGS": "--api-ke sk-x"}),
                              (composefile.COMPOSE_FILE,))
    check = inputs.check_api_key(svc)
    assert check.status == "FAIL" and "--api-ke" in check.detail and "sk-x" not in check.line(), check.line()


def test_bench_results_carry_no_url_credentials(tmp_path):
    from sglang_stack.bench import report

    doc = {"metadata": {"endpoints": [{"name": "e", "url": "http://user:pw@127.0.0.1:1"}]}, "samples": [], "rounds": [],
           "complete": True, "schema": report.SCHEMAS[-1], "summary": {"rows": []}}
    try:
        report.write_results(tmp_path, doc)
    except Exception:  # the markdown of a near-empty run may not render; the JSON is what is checked
        pass
    for path in tmp_path.iterdir():
        assert "user:pw" not in path.read_text(errors="replace"), path


@pytest.mark.sglang_env
@pytest.mark.network
def test_the_prefixes_are_what_sglangs_own_parser_takes():
    """Ask SGLang's parser (allow_abbrev) which prefixes resolve to the key flags."""
    try:
        python = str(sglang_cpu_env.python())
    except sglang_cpu_env.Unavailable as err:
        if os.environ.get("SGLANG_STACK_CI"):
            pytest.fail(str(err))
        pytest.skip(str(err))
    code = ("import argparse, json, sys; sys.path.insert(0, %r); from sglang_stack.entrypoints import settings; "
            "settings.stand_in_missing(); from sglang.srt.server_args import ServerArgs; p = argparse.ArgumentParser(); "
            "ServerArgs.add_cli_args(p); opts = [o for a in p._actions for o in a.option_strings if o.startswith('--')]; "
            "print(json.dumps({f: min((f[:n] for n in range(3, len(f) + 1) if [o for o in opts if o.startswith(f[:n])] == [f]), "
            "key=len) for f in ('--api-key', '--admin-api-key')}))") % str(ROOT)
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    shortest = json.loads(proc.stdout.strip().splitlines()[-1])
    from sglang_stack.redact import SHORTEST

    assert shortest == SHORTEST, f"SGLang's parser resolves these prefixes now: {shortest}"
