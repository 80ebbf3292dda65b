"""Patch 0009 (profile 0.5.23): the engine's start-up log line shows no API key.

0.5.23's own parser (``prepare_server_args``) reads a command line with two planted keys, and its own
``_server_args_for_logging`` makes the dict the engine logs as ``server_args=...`` at start. Run in a Python
of the profile's pins.
"""

from __future__ import annotations

import pytest

from sglang_cpu_env import run_json

pytestmark = [pytest.mark.sglang_env, pytest.mark.network]

KEY, ADMIN = "sk-planted-0009-api", "sk-planted-0009-admin"

SCRIPT = r"""
import json, sys
from sglang.srt.server_args import prepare_server_args
from sglang.srt.entrypoints import engine

argv = ["--model-path", "/models/target", "--served-model-name", "kimi-k2.5", "--tp", "8"] + sys.argv[1:]
args = prepare_server_args(argv)
line = f"server_args={engine._server_args_for_logging(args)}"
logged = engine._server_args_for_logging(args)
print(json.dumps({"line": line, "api_key": logged.get("api_key"), "admin_api_key": logged.get("admin_api_key"),
                  "tp_size": logged.get("tp_size"), "served_model_name": logged.get("served_model_name"),
                  "keys_kept": args.api_key, "fields": len(logged)}))
"""


def test_unpatched_the_start_up_line_holds_both_keys(upstream_python, trees):
    pristine, _ = trees
    got = run_json(upstream_python, pristine, SCRIPT, "--api-key", KEY, "--admin-api-key", ADMIN)
    assert KEY in got["line"] and ADMIN in got["line"], "0.5.23 no longer logs the keys: retire 0009"


def test_patched_the_line_shows_neither_key_and_the_rest_unchanged(upstream_python, trees):
    pristine, patched = trees
    before = run_json(upstream_python, pristine, SCRIPT, "--api-key", KEY, "--admin-api-key", ADMIN)
    got = run_json(upstream_python, patched, SCRIPT, "--api-key", KEY, "--admin-api-key", ADMIN)
    assert KEY not in got["line"] and ADMIN not in got["line"], f"a planted key is in the log line: {got['line'][:300]}"
    assert got["api_key"] == got["admin_api_key"] == "<redacted>", got
    assert got["keys_kept"] == KEY, "the server itself must still hold its key"
    assert (got["tp_size"], got["served_model_name"], got["fields"]) == \
           (before["tp_size"], before["served_model_name"], before["fields"]), "the rest of the line changed"


def test_an_unset_key_is_logged_as_unset(upstream_python, trees):
    _, patched = trees
    got = run_json(upstream_python, patched, SCRIPT)
    assert got["api_key"] is None and got["admin_api_key"] is None, got
