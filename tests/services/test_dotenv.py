""".env, as Compose reads it: its errors named by file and line, the shell over the file, secrets named and never
shown, and every value the tools use read back from Compose itself through a probe file. compose.yaml's own
semantics are tests/services/test_compose.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from sglang_stack.services import variables
from sglang_stack.errors import UserError

pytestmark = pytest.mark.usefixtures("compose")


# --- .env, as Compose reads it ---------------------------------------------------------------


@pytest.mark.parametrize(
    "line, message",
    [
        ("not a line", "key cannot contain a space"),
        ("KEY='open", "unterminated quoted value"),
        ('KEY="open', "unterminated quoted value"),
        ("KEY=${A", "Invalid template"),
        ("export  =3", "Compose cannot set this variable"),
    ],
)
def test_env_file_errors_name_the_file_and_line(tmp_path, line, message):
    env_file = tmp_path / ".env"
    env_file.write_text(f"OK=1\n{line}\nLATER=2\n")
    with pytest.raises(UserError) as err:
        variables.environment(env_file, {"PATH": os.environ["PATH"]})
    assert str(err.value).startswith(f"{env_file}:2: "), f"error must name the file and line: {err.value}"
    assert message in str(err.value), f"expected {message!r} in {err.value}"


def test_a_malformed_secret_line_is_named_never_shown(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text('OK=1\nSGLANG_API_KEY="sk-live-0123456789\n')
    with pytest.raises(UserError) as err:
        variables.environment(env_file, {"PATH": os.environ["PATH"]})
    assert str(err.value).startswith(f"{env_file}:2: unterminated quoted value"), err.value
    assert "sk-live" not in str(err.value), f"the secret's text is in the error: {err.value}"


def test_shell_wins_over_env_file(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("TP_SIZE=4\nEAGLE3_PORT=31001\n")
    env = variables.environment(env_file, {"TP_SIZE": "2", "PATH": os.environ["PATH"]})
    assert env.get("TP_SIZE") == "2" and env.origin["TP_SIZE"] == "shell", f"the shell must win, as in Compose: {env.where('TP_SIZE')}"
    assert env.get("EAGLE3_PORT") == "31001" and env.origin["EAGLE3_PORT"] == f"{env_file}:2", env.where("EAGLE3_PORT")
    assert "MODEL_DIR" not in env.values and env.where("MODEL_DIR") == "MODEL_DIR (unset)", env.where("MODEL_DIR")


def test_a_secret_variable_is_named_without_its_value():
    env = variables.Environment({"HF_TOKEN": "hf_abcdefgh"}, {"HF_TOKEN": ".env:3"})
    assert env.where("HF_TOKEN") == "HF_TOKEN=*** (.env:3)", env.where("HF_TOKEN")


# --- .env's values are Compose's own, read back through a probe file ------------------------------

ENV_CASES = {
    "plain": b"A=1\nB=two words\nC=\n",
    "bom": b"\xef\xbb\xbfA=1\nB=2\n",
    "crlf": b"A=1\r\nB=2\r\nC=3",
    "export and spaces": b"export A=1\n  B = 2  \nC=3 # comment\n# D=4\n",
    "quotes": b"A='single ${X}'\nB=\"double # not a comment\"\nC=\"esc\\\\aped\\\"\"\n",
    "interpolation": b"A=base\nB=${A}-x\nC=${UNSET:-fallback}\n",
    "dollars": b"A='a$b'\nB=c$$d\n",
    "last wins": b"A=1\nA=2\n",
}


def compose_reads(tmp_path: Path, data: bytes) -> dict[str, str]:
    """The values `docker compose config` resolves from ``data`` as a project's .env, in a file of its own."""
    (tmp_path / ".env").write_bytes(data)
    names = "ABC"
    (tmp_path / "compose.yaml").write_text("services:\n  s:\n    image: x\n    environment:\n"
                                           + "".join(f"      {n}: ${{{n}-(unset)}}\n" for n in names))
    proc = subprocess.run(["docker", "compose", "--project-directory", str(tmp_path), "config", "--format", "json"],
                          capture_output=True, text=True, timeout=60,
                          # A fresh HOME, but the user's plugins: the CLI finds a per-user Compose under DOCKER_CONFIG.
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                               "DOCKER_CONFIG": os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")})
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)["services"]["s"]["environment"]
    return {n: v.replace("$$", "$") for n, v in env.items() if v != "(unset)"}


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_the_values_are_what_compose_reads(tmp_path, case):
    theirs = compose_reads(tmp_path, ENV_CASES[case])
    env = variables.Environment({}, {}, tmp_path / ".env", {"PATH": os.environ["PATH"]})
    assert variables.probe(["A", "B", "C"], env) == theirs, f"the probe of {ENV_CASES[case]!r}"


@pytest.mark.parametrize("data, says", [
    ("A=1\nTP_SIZE=1\u2028TP_SIZE=8\n".encode(), ":2: U+2028 LINE SEPARATOR"),
    (b"A=1\x0cB=2\n", ":1: U+000C a control character"),
    (b"A=1\nB=\xef\xbb\xbf2\n", ":2: U+FEFF ZERO WIDTH NO-BREAK SPACE"),
])
def test_what_an_editor_hides_in_dotenv_is_named(tmp_path, data, says):
    (tmp_path / ".env").write_bytes(data)
    with pytest.raises(UserError, match=re.escape(says)):
        variables.environment(tmp_path / ".env", {"PATH": os.environ["PATH"]})


def test_a_dotenv_far_larger_than_any_is_refused_unread(tmp_path):
    with open(tmp_path / ".env", "wb") as handle:
        handle.truncate(40 << 20)
    with pytest.raises(UserError, match=r"\.env: 41943040 bytes, more than the 1048576 such a file may hold"):
        variables.environment(tmp_path / ".env", {"PATH": os.environ["PATH"]})
