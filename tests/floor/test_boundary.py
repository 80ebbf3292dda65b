"""The error boundary every task runs in: the world's failures are one line, a bug is a traceback that says so."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from invoke import Exit

import tasks
from sglang_stack import ROOT
from sglang_stack.tasks.boundary import BUG, expected_failure, user_errors
from sglang_stack.errors import UserError


def invoke(*args: str, env: dict | None = None, cwd: Path = ROOT, timeout: float = 180) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG", "HF_", "INVOKE"))}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True,
                          env={**environ, **(env or {})}, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(proc: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said
    assert proc.returncode == code, f"exit {proc.returncode}, wanted {code}:\n{said}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, f"one error line, not {len(errors)}:\n{said}"
    assert all(w in errors[0] for w in words), f"{words} not all in {errors[0]!r}"
    return errors[0]


def test_every_task_runs_inside_the_boundary():
    bodies = {name: tasks.ns[name].body for name in tasks.ns.task_names}
    outside = sorted(name for name, body in bodies.items() if not getattr(body, "__boundary__", False))
    assert not outside, f"tasks outside the error boundary (decorate them with @user_errors): {outside}"


@pytest.mark.parametrize("err, words", [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), ["network failed", "Connection refused"]),
    (TimeoutError("timed out"), ["network failed", "timed out"]),
    (OSError(errno.ENOSPC, "No space left on device", "/out/bench.json"), ["/out/bench.json", "no space left"]),
    (OSError(errno.EROFS, "Read-only file system", "docker/Dockerfile"), ["docker/Dockerfile", "read-only"]),
    (PermissionError(errno.EACCES, "Permission denied", "/etc/x"), ["/etc/x", "permission denied"]),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
     ["not valid text", "UTF-8"]),
    (json.JSONDecodeError("Expecting value", "nul", 0), ["malformed data", "JSONDecodeError"]),
])
def test_the_worlds_failures_are_named(err, words):
    line = expected_failure(err)
    assert line and all(w in line for w in words), line


def test_a_network_error_of_another_library_is_recognised_by_its_class():
    class ConnectError(Exception):  # what httpx (huggingface_hub) raises, by name
        pass

    assert "network failed" in expected_failure(ConnectError("[Errno 111] Connection refused"))


@pytest.mark.parametrize("err", [ValueError("a bug"), KeyError("x"), AttributeError("y"), ZeroDivisionError()])
def test_a_bug_is_not_dressed_as_a_user_error(err, capsys):
    assert expected_failure(err) is None

    @user_errors
    def body():
        raise err

    with pytest.raises(Exit) as exit_:
        body()
    assert exit_.value.code == 70 and exit_.value.message == BUG
    assert "Traceback" in capsys.readouterr().err, "a bug keeps its traceback"


def test_interrupt_and_user_error_inside_a_task():
    @user_errors
    def interrupted():
        raise KeyboardInterrupt

    @user_errors
    def mistaken():
        raise UserError("versions.lock: something", code=1)

    with pytest.raises(Exit) as exit_:
        interrupted()
    assert (exit_.value.code, exit_.value.message) == (130, "error: interrupted")
    with pytest.raises(Exit) as exit_:
        mistaken()
    assert (exit_.value.code, exit_.value.message) == (1, "error: versions.lock: something")


def test_a_failed_download_is_named_by_the_boundary_alone(tmp_path):
    """fetch() has no catch of its own: the boundary names the URL, and no partial file is left."""
    from loopback import Handler, serving
    from sglang_stack.download import fetch

    with serving(Handler) as base:  # no do_GET: every GET is answered 501
        missing = f"{base}/torch-1.0-cp312-cp312-linux_x86_64.whl"
        for url, words in [(missing, [missing, "answered HTTP 501"]),
                           ("http://127.0.0.1:1/x-1-py3-none-any.whl", ["network failed", "127.0.0.1:1", "refused"])]:
            with pytest.raises(Exit) as exit_:
                user_errors(fetch)(url, "0" * 64, dest=tmp_path)
            assert exit_.value.code == 2 and all(w in exit_.value.message for w in words), exit_.value.message
    assert not list(tmp_path.iterdir()), "a failed download leaves nothing behind"


def test_no_hub_is_one_line():
    one_line(invoke("models-lock", env={"HF_ENDPOINT": "http://127.0.0.1:1"}), "the Hub at http://127.0.0.1:1 did not answer",
             "timeout 30 s", "ConnectError")


def test_offline_size_is_one_line(tmp_path):
    proxy = "http://127.0.0.1:1"
    env = {"HTTPS_PROXY": proxy, "https_proxy": proxy, "SGLANG_STACK_CACHE": str(tmp_path / "cache")}
    one_line(invoke("size", env=env), "cannot be reached", "pypi.org", "needs PyPI once")


@pytest.fixture
def tiny_fs(tmp_path):
    """A 16 KiB file system: where a long write runs out of space."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True, text=True)
    if proc.returncode != 0:
        if os.environ.get("SGLANG_STACK_CI"):
            pytest.fail(f"cannot mount a tmpfs: {proc.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_nearly_full_disk_is_refused_before_the_work(tiny_fs):
    (tiny_fs / "filler").write_bytes(b"\0" * 12 * 1024)
    one_line(invoke("k8s", "--out", str(tiny_fs / "k8s")), "KiB free there", str(tiny_fs))
    assert not (tiny_fs / "k8s").exists() or not any((tiny_fs / "k8s").iterdir()), "nothing written"


def test_a_set_is_written_whole_or_not_at_all(tiny_fs):
    from sglang_stack import atomic

    old = {tiny_fs / "a.yaml": b"old a", tiny_fs / "b.yaml": b"old b"}
    atomic.write_all(old)
    with pytest.raises(OSError) as err:
        atomic.write_all({tiny_fs / "a.yaml": b"new a", tiny_fs / "b.yaml": b"x" * (64 * 1024)})
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tiny_fs / "b.yaml"), err.value
    assert {p: p.read_bytes() for p in old} == old, "a full disk must leave the previous set as it was"
    assert sorted(p.name for p in tiny_fs.iterdir()) == ["a.yaml", "b.yaml"], "no temporary file stays behind"
    assert "b.yaml: no space left" in expected_failure(err.value)


def test_ctrl_c_while_the_tasks_load_is_one_line():
    """SIGINT before any task runs: Invoke is still importing; one line, and the shell sees the interrupt."""
    # Python's own SIGINT handler, as at a terminal: a job started in the background inherits SIGINT ignored.
    code = ("import signal, sys, time; signal.signal(signal.SIGINT, signal.default_int_handler); sys.path.insert(0, '.'); "
            "from sglang_stack.errors import quiet_interrupts; quiet_interrupts(); print('ready', flush=True); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert err.strip() == "error: interrupted", err
    assert proc.returncode in (-signal.SIGINT, 130), proc.returncode


def test_ctrl_c_while_tasks_py_imports_the_task_modules_is_one_line():
    """The interrupt lands while tasks.py imports the task modules (the longest part of a start, before setup_cli):
    made certain by an import hook that raises it there, as Invoke's loader runs tasks.py."""
    code = ("import sys, runpy, invoke.main\n"
            "class Stop:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'sglang_stack.tasks.image':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Stop())\n"
            "sys.path.insert(0, '.')\n"
            "runpy.run_path('tasks.py')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stderr.strip() == "error: interrupted" and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_run_the_restore_paths_ctrl_c_runs(tmp_path, sig):
    """A task killed by a CI timeout or a closed terminal: its `except BaseException` restore runs (here it writes a
    file, as a bump puts its files back), and the boundary says one line, exit 130."""
    done = tmp_path / "restored"
    code = ("import sys, time; sys.path.insert(0, '.'); "
            "from sglang_stack.tasks.boundary import signals_interrupt, user_errors; signals_interrupt()\n"
            "@user_errors\ndef task():\n    try:\n        print('ready', flush=True); time.sleep(30)\n"
            f"    except BaseException:\n        open({str(done)!r}, 'w').write('1'); raise\n"
            "try:\n    task()\nexcept BaseException as err:\n    print(err, file=sys.stderr); sys.exit(getattr(err, 'code', 1))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert done.read_text() == "1", "the restore path ran"
    assert err.strip() == f"error: interrupted ({signal.Signals(sig).name})" and proc.returncode == 130, (err, proc.returncode)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# Each task's help strings as its @task declares them, read before any test can make a parser (which empties them).
HELPS = {name: dict(tasks.ns[name].help) for name in tasks.ns.task_names}


@pytest.mark.parametrize("name", sorted(tasks.ns.task_names))
def test_every_task_answers_help_after_its_name(name, tmp_path):
    # The first thing docker, vLLM and SGLang users type. A task with a positional argument used to take
    # "--help" as its value: `invoke k8s --help` wrote manifests into a directory named --help.
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True).stdout
    proc = invoke("--search-root", str(ROOT), name, "--help", cwd=tmp_path, timeout=60)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"invoke {name} --help: exit {proc.returncode}\n{said}"
    assert f"Usage: inv[oke] [--core-opts] {name} " in proc.stdout, said
    # Each flag's own help string, as `invoke --help TASK` prints it, not a bare list of flags.
    assert HELPS[name] or "Options:\n  none" in proc.stdout or "Options:" not in proc.stdout, f"{name}: no help strings"
    for flag, text in HELPS[name].items():
        first = " ".join(text.split()[:3])
        assert first in " ".join(proc.stdout.split()), f"invoke {name} --help lacks --{flag}'s help ({first!r}):\n{said}"
    assert "Traceback" not in said and "error:" not in said, said
    assert _tree(tmp_path) == [], f"invoke {name} --help wrote {_tree(tmp_path)}"
    assert subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True,
                          text=True).stdout == status, f"invoke {name} --help changed the checkout"


def test_help_piped_into_a_reader_that_left_is_quiet():
    # `invoke up --help | head -1`: the reader is gone before the help is written (its end of the pipe closed first).
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "invoke", "up", "--help"], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_every_task_takes_long_flags_only():
    """One convention: Invoke's automatic short flags gave `-e` three meanings across tasks and took `-h` from --help."""
    short = {f"{name} -{n}" for name, task in tasks.ns.tasks.items() for arg in task.get_arguments()
             for n in arg.names if len(n) == 1}
    assert not short, sorted(short)
    proc = subprocess.run([sys.executable, "-m", "invoke", "settings", "-h"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--all-reduce" in proc.stdout, "-h is help, not --host"
