"""A fourth service, written only in a copy of compose.yaml and its .env: every tool treats it as a service.

compose.yaml is the one list of services. The copy adds ``ngram`` (SGLang's n-gram speculation on the same
target, no drafter, its own port variable) as one block, and its test override as one more; nothing of
sglang_stack/ changes. ``invoke status``, ``invoke doctor ngram`` and ``invoke up ngram`` then run in that
copy on the real Docker Engine, with the CPU stand-in for the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import checkout
import engine

pytestmark = pytest.mark.engine

NGRAM = """
  # SGLang's n-gram speculation: drafts from the prompt itself, no drafter.
  ngram:
    <<: *sglang
    profiles: [ngram]
    ports:
      - "${BIND_ADDRESS:-127.0.0.1}:${NGRAM_PORT:-30002}:30000"
    command: >-
      --model-path /models/target
      --served-model-name ${SERVED_MODEL_NAME:-kimi-k2.5}
      --host 0.0.0.0
      --port 30000
      --tp ${TP_SIZE:-8}
      --trust-remote-code
      --speculative-algorithm NGRAM
      --speculative-num-draft-tokens 8
      ${SGLANG_EXTRA_ARGS:-}
"""
OVERRIDE = """
  ngram:
    deploy: !reset {}
    ulimits: !override
      stack: 67108864
"""


def add_service(tree: Path) -> None:
    compose = tree / "compose.yaml"
    text = compose.read_text()
    anchor = "  # SGLang's own router"
    assert anchor in text, "compose.yaml no longer has the router's comment to add the service before: update this test"
    compose.write_text(text.replace(anchor, NGRAM.lstrip("\n") + "\n" + anchor, 1))
    with open(tree / "tests" / "compose.engine.yaml", "a") as override:
        override.write(OVERRIDE)


@pytest.fixture
def tree(tmp_path, standin_image, model_dirs, run_id):
    tree = checkout.copy(tmp_path / "checkout")
    add_service(tree)
    ports = {var: str(engine.free_port()) for var in ("NGRAM_PORT", "BASELINE_PORT", "EAGLE3_PORT", "ROUTER_PORT")}
    (tree / ".env").write_text("".join(f"{k}={v}\n" for k, v in {
        "COMPOSE_PROJECT_NAME": f"sgs-test-{run_id}-ngram", "COMPOSE_FILE": "compose.yaml:tests/compose.engine.yaml",
        "SGLANG_STACK_IMAGE": standin_image, "MODEL_DIR": model_dirs["MODEL_DIR"], **ports}.items()))
    yield tree
    subprocess.run(["docker", "compose", "--profile", "*", "down", "--volumes", "--timeout", "5"], cwd=tree,
                   capture_output=True, timeout=120)


def invoke(tree: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG", "HF_", "INVOKE", "COMPOSE_"))
               and not k.endswith("_PORT") and k not in ("MODEL_DIR", "DRAFT_MODEL_DIR", "TP_SIZE")}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=tree, capture_output=True, text=True,
                          env=environ, timeout=timeout, stdin=subprocess.DEVNULL)


def test_a_service_written_only_in_compose_yaml_is_one_for_every_task(tree):
    port = next(line.split("=")[1] for line in (tree / ".env").read_text().splitlines() if line.startswith("NGRAM_PORT="))

    status = invoke(tree, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    line = next((row for row in status.stdout.splitlines() if row.startswith("ngram ")), "")
    assert "not created" in line and "invoke up ngram" in line, status.stdout

    doctor = invoke(tree, "doctor", "ngram")
    assert "Traceback" not in doctor.stderr, doctor.stderr
    lines = {row.split()[1]: row for row in doctor.stdout.splitlines()[1:-1] if len(row.split()) > 1}
    assert doctor.stdout.startswith("sglang-stack doctor: service ngram"), doctor.stdout
    assert lines["config"].startswith(("ok", "warn")) and f"ngram on http://127.0.0.1:{port}" in lines["config"], lines["config"]
    assert lines["drafter"].startswith("skip") and "uses no drafter" in lines["drafter"], lines["drafter"]
    assert lines["port"].startswith("ok") and f"127.0.0.1:{port} is free" in lines["port"], lines["port"]
    assert lines["gpu-runtime"].startswith("skip"), "the test override reserves no GPU, as for baseline and eagle3"

    up = invoke(tree, "up", "ngram", "--interval", "1")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    assert "ngram: healthy after" in up.stdout and f"http://127.0.0.1:{port}" in up.stdout, up.stdout
    # It speculates, so `invoke up` measures its acceptance; it has no drafter, so only the floor applies.
    assert "ngram: accept length" in up.stdout + up.stderr, up.stdout[-1500:]

    status = invoke(tree, "status")
    line = next((row for row in status.stdout.splitlines() if row.startswith("ngram ")), "")
    assert "running (healthy)" in line and f":{port}->30000" in line, status.stdout
