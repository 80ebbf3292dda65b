"""Every typed flag, and every mistake Invoke's parser catches after the task name: one `error:` line, exit 2."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.flags import parse_count, parse_seconds


def run_invoke(capsys, *argv: str) -> tuple[int, str]:
    """The real `invoke` program, in process: (exit code, stderr)."""
    from invoke.main import program

    with pytest.raises(SystemExit) as info:
        program.run(["invoke", "--search-root", str(ROOT), *argv])
    return info.value.code, capsys.readouterr().err


BAD_VALUES = [
    (("up", "eagle3", "--timeout", "abc"), "error: --timeout 'abc': not an integer"),
    (("up", "eagle3", "--timeout", "-5"), "error: --timeout '-5': must be at least 0"),
    (("up", "eagle3", "--interval", "x"), "error: --interval 'x': not a number of seconds"),
    (("up", "eagle3", "--interval", "0"), "error: --interval '0': must be more than 0 seconds"),
    (("up", "eagle3", "--interval", "nan"), "error: --interval 'nan': must be more than 0 seconds"),
    (("logs", "eagle3", "--tail", "many"), "error: --tail 'many': a number of lines, or 'all'"),
    (("bench", "--repeats", "x"), "error: --repeats 'x': not an integer"),
    (("bench", "--warmup", "-1"), "error: --warmup '-1': must be at least 0"),
    (("bench", "--timeout", "soon"), "error: --timeout 'soon': not a number of seconds"),
    (("bench", "--levels", "1,x"), "error: --levels '1,x': 'x' is not an integer from 1 to 10000 (e.g. --levels 1,4,16)"),
    # odd numbers: a digit int() cannot read, one it reads too kindly, a rate whose gaps overflow a sleep
    (("bench", "--levels", "²"), "error: --levels '²': '²' is not an integer from 1 to 10000 (e.g. --levels 1,4,16)"),
    (("bench", "--levels", "١٢"), "error: --levels '١٢': '١٢' is not an integer from 1 to 10000 (e.g. --levels 1,4,16)"),
    (("bench", "--levels", "99999999999999999999999"),
     "error: --levels '99999999999999999999999': '99999999999999999999999' is not an integer from 1 to 10000 "
     "(e.g. --levels 1,4,16)"),
    (("bench", "--repeats", "²"), "error: --repeats '²': not an integer"),
    (("bench", "--request-rate", "1e-300"), "error: --request-rate '1e-300': must be between 0.001 and 1e+06"),
    (("bench", "--request-rate", "1", "--burstiness", "1e-300"),
     "error: --burstiness 1e-300: SGLang's benchmark sends Poisson arrivals only (burstiness 1)"),
    (("bench", "--request-rate", "1", "--burstiness", "nan"), "error: --burstiness 'nan': must be a number above 0"),
    (("bench", "--request-rate", "1", "--max-concurrency", "10001"), "error: --max-concurrency '10001': must be at most 10000"),
    (("bench", "--dataset", "random", "--random-input-len", "3000000"),
     "error: --random-input-len '3000000': must be at most 1048576"),
    (("bench", "--dataset", "random", "--num-requests", "1000000", "--random-input-len", "1000"),
     "error: --dataset random: 1000000 prompts of up to 1000 tokens is more than 67108864 tokens in all (they are held "
     "in memory): lower --num-requests or --random-input-len"),
    (("bench", "--dataset", "random", "--random-range-ratio", "1"), "error: --random-range-ratio '1': must be at least 0 and below 1"),
    # option injection: an image reference that an engine would read as its own option
    (("size", "--image", "--help"), "error: --image '--help': not an image reference ([registry/]name[:tag][@sha256:digest], "
     "lowercase) or image ID"),
    (("verify", "--image", "--format={{.Id}}"), "error: --image '--format={{.Id}}': not an image reference "
     "([registry/]name[:tag][@sha256:digest], lowercase) or image ID"),
    (("verify", "--image", "x", "--rebuild", "--base-image", "-q"), "error: --base-image '-q': not an image reference "
     "([registry/]name[:tag][@sha256:digest], lowercase) or image ID"),
    (("settings", "--image", "--privileged"), "error: --image '--privileged': not an image reference "
     "([registry/]name[:tag][@sha256:digest], lowercase) or image ID"),
    (("smoke", "--base-image", "--rm"), "error: --base-image '--rm': not an image reference "
     "([registry/]name[:tag][@sha256:digest], lowercase) or image ID"),
    (("fetch", "--target", "router", "--base-image", "--all-tags"), "error: --base-image '--all-tags': not an image "
     "reference ([registry/]name[:tag][@sha256:digest], lowercase) or image ID"),
    (("bench", "--sweep", "--sweep-steps", "a"), "error: --sweep-steps 'a': 'a' is not an integer from 1 to 32"),
    (("bench", "--sweep", "--sweep-topk", "0"), "error: --sweep-topk '0': '0' is not an integer from 1 to 64"),
    (("bench", "--sweep", "--sweep-steps", ",".join(map(str, range(1, 33))), "--sweep-topk", "2,3,4,5,6,7,8,9",
      "--sweep-draft-tokens", "2,3"),
     "error: --sweep-steps x --sweep-topk x --sweep-draft-tokens: 32 x 8 x 2 = 512 points; a sweep takes at most 256"),
    (("bench", "--sweep", "--sweep-level", "x"), "error: --sweep-level 'x': not an integer"),
    (("bench", "--sweep", "--ready-timeout", "inf"), "error: --ready-timeout 'inf': must be a finite number of seconds"),
]

PARSE_ERRORS = [
    (("up",), "error: up: missing --service (see `invoke --help up`)"),
    (("patch",), "error: patch: missing --sglang-src (see `invoke --help patch`)"),
    (("up", "eagle3", "--timeout"), "error: --timeout: needs a value (see `invoke --help up`)"),
    (("up", "eagle3", "--bogus"), "error: '--bogus': no such task or flag (see `invoke --help up`)"),
    (("nosuchtask",), "error: 'nosuchtask': no such task or flag (see `invoke --list`)"),
    (("--help", "nosuchtask"), "error: 'nosuchtask': no such task or flag (see `invoke --list`)"),
]


@pytest.mark.parametrize(("argv", "line"), BAD_VALUES + PARSE_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_mistake_is_one_error_line_exit_2(capsys, argv, line):
    code, err = run_invoke(capsys, *argv)
    assert "Traceback" not in err, f"invoke {' '.join(argv)}: a traceback: {err}"
    assert code == 2, f"invoke {' '.join(argv)}: exit {code}, want 2: {err}"
    assert err.strip() == line, f"invoke {' '.join(argv)}: stderr {err.strip()!r}, want {line!r}"


@pytest.mark.parametrize("argv", [("up", "eagle3", "--timeout", "abc"), ("up",), ("nosuchtask",)])
def test_the_installed_command_says_the_same(argv):
    proc = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, f"invoke {' '.join(argv)}: exit {proc.returncode}: {proc.stderr}"
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr


def test_no_task_lets_invoke_cast_a_number():
    """Invoke casts a flag whose default is an int or float, and a bad value ends in a traceback."""
    import tasks

    typed = [
        f"{t.name} --{name.replace('_', '-')}={p.default!r}"
        for t in tasks.ns.tasks.values()
        for name, p in inspect.signature(t.body).parameters.items()
        if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)
    ]
    assert not typed, f"take these as text (None for the default) and read them with sglang_stack.flags: {typed}"


def test_numbers_parse_and_bad_ones_name_the_flag():
    assert parse_count("--repeats", " 3 ", 1) == 3, "surrounding spaces are fine"
    assert parse_seconds("--interval", "0.5") == 0.5, "fractions of a second are fine"
    for bad in ("", "1.5", "x"):
        with pytest.raises(UserError, match=rf"^--repeats {bad!r}: not an integer$"):
            parse_count("--repeats", bad, 1)
    for bad in ("-1", "0", "nan", "-inf"):
        with pytest.raises(UserError, match=rf"^--interval {bad!r}: must be more than 0 seconds$"):
            parse_seconds("--interval", bad)


# --- every service- or role-taking task takes it positionally, as `invoke up eagle3` does ---------


@pytest.mark.parametrize("task, word, flag", [("model-revision", "drafter", "--role"), ("models-verify", "drafter", "--role"),
                                              ("doctor", "nosuch", "--service"), ("status", "nosuch", "--service")])
def test_the_first_word_is_the_service_or_role(capsys, task, word, flag):
    positional = run_invoke(capsys, task, word)
    assert positional == run_invoke(capsys, task, flag, word), f"`invoke {task} {word}` is not `invoke {task} {flag} {word}`"
    code, err = positional
    assert code != 0 and "no such task or flag" not in err and "Traceback" not in err, err
    assert word in err or "lightseekorg" in err, err


def test_a_task_name_after_a_task_is_still_a_task(capsys):
    """`invoke doctor status`: two tasks, not a service called status."""
    from sglang_stack.tasks.boundary import optional_positionals

    class Core:
        unparsed = ["doctor", "status", "model-revision", "drafter", "doctor", "--service", "router"]

    class Program:
        core = Core()
        collection = type("C", (), {"task_names": {"doctor": [], "status": [], "model-revision": ["rev"]}})()

        def parse_tasks(self):
            return list(self.core.unparsed)

    program = Program()
    optional_positionals(program, {"doctor": "service", "status": "service", "model-revision": "role"})
    assert program.parse_tasks() == ["doctor", "status", "model-revision", "--role", "drafter", "doctor", "--service", "router"]


def test_a_missing_revision_stops_the_download_line():
    """The README's `rev=$(invoke model-revision ROLE) && hf download ...`: no pin, no download."""
    proc = subprocess.run(["bash", "-c", f"rev=$({sys.executable} -m invoke model-revision bogus) && echo downloading"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "downloading" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "error: --role 'bogus': choose one of target, drafter, drafter-mla", proc.stderr
