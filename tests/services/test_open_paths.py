"""Which paths SGLang serves without the API key, derived by running each profile's own auth decision
(``sglang/srt/utils/auth.py``: standard library only, as its docstring promises) and kept in docs/services.md."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from sglang_stack import ROOT
from sglang_stack.lock import profiles

# Every path the stack's own tools call, and the ones a reviewer would try: SGLang decides each.
PROBED = ("/health", "/health_generate", "/metrics", "/ready", "/readiness", "/generate", "/v1/chat/completions",
          "/v1/models", "/get_server_info", "/get_model_info", "/flush_cache")


def open_paths(site) -> list[str]:
    name = f"sglang_auth_of_{abs(hash(str(site)))}"
    spec = importlib.util.spec_from_file_location(name, site / "sglang" / "srt" / "utils" / "auth.py")
    auth = importlib.util.module_from_spec(spec)
    sys.modules[name] = auth  # dataclasses look their module up there
    try:
        spec.loader.exec_module(auth)
    finally:
        del sys.modules[name]
    return [path for path in PROBED
            if auth.decide_request_auth(method="GET", path=path, authorization_header=None, api_key="k" * 32,
                                        admin_api_key=None, auth_level=auth.AuthLevel.NORMAL).allowed]


def row(name: str, paths: list[str]) -> str:
    return f"| {name} | {', '.join(f'`{p}`' for p in paths)} |"


@pytest.mark.parametrize("name", sorted(profiles.available()))
def test_docs_name_the_paths_sglang_leaves_open_with_a_key(profile_trees, name):
    pristine, _ = profile_trees(name)
    paths = open_paths(pristine)
    assert "/generate" not in paths and "/v1/chat/completions" not in paths, f"{name}: generation must need the key"
    text = (ROOT / "docs" / "services.md").read_text()
    assert row(name, paths) in text, f"docs/services.md lacks the line {row(name, paths)!r}"
