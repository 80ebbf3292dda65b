"""Run external commands the way a user would: show each one, then run it.

Every command is a list of tokens. It is printed with ``$`` in front, in a
form that can be copied into a shell, before it runs.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Mapping, Sequence

from sglang_stack.errors import UserError


class CommandFailed(UserError):
    """A streamed command failed; ``tail`` holds the last lines of what it wrote to stderr."""

    def __init__(self, message: str, code: int, tail: list[str]):
        super().__init__(message, code=code)
        self.tail = tail


def show(argv: Sequence[str], cwd: Path | None = None) -> None:
    """Print a command as it would be typed."""
    where = f"(cd {shlex.quote(str(cwd))} && " if cwd else ""
    tail = ")" if cwd else ""
    print(f"$ {where}{shlex.join(str(a) for a in argv)}{tail}", file=sys.stderr, flush=True)


def require(tool: str, hint: str) -> str:
    """Return the path of ``tool`` or fail with a one-line hint.

    Tools installed beside the running interpreter (the project's .venv/bin) count
    even when that virtualenv is not activated.
    """
    beside = Path(sys.executable).parent / tool
    path = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which(tool)
    if not path:
        raise UserError(f"{tool} not found on PATH: {hint}")
    return path


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
    check: bool = True,
    quiet: bool = False,
    what: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """Show ``argv``, run it, and turn a failure into a one-line ``UserError``.

    ``what`` names the step in the error ("buildah bud", "uv pip compile").
    With ``capture`` the output is returned instead of streamed. A command
    still running after ``timeout`` seconds is killed and reported as a
    ``UserError`` (exit code 124, as timeout(1) uses).
    """
    argv = [str(a) for a in argv]
    if not quiet:
        show(argv, cwd)
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            text=True,
            errors="replace",  # a tool's stray non-UTF-8 byte (nvidia-smi, lspci) is a character, not a crash
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            timeout=timeout,
        )
    except FileNotFoundError as err:
        raise UserError(f"{argv[0]}: not found on PATH") from err
    except subprocess.TimeoutExpired as err:
        raise UserError(f"{what or argv[0]} did not finish within {timeout:g}s", code=124) from err
    if check and proc.returncode != 0:
        detail = ""
        if capture and proc.stderr:
            detail = ": " + proc.stderr.strip().splitlines()[-1]
        raise UserError(f"{what or argv[0]} failed with exit code {proc.returncode}{detail}", code=proc.returncode or 1)
    return proc


def stream(argv: Sequence[str], *, what: str, cwd: Path | None = None, keep: int = 80) -> None:
    """Show ``argv`` and run it, its output passed through; a long step such as an image build.

    SIGTERM and SIGHUP sent to this process are forwarded to the command, which is given 30 s to
    stop before it is killed: a terminated ``invoke build`` leaves no ``docker buildx build``
    behind. A failure raises ``CommandFailed`` with the last ``keep`` lines of stderr, for the
    caller to say why.
    """
    argv = [str(a) for a in argv]
    show(argv, cwd)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stderr=subprocess.PIPE, text=True, errors="replace")
    except FileNotFoundError as err:
        raise UserError(f"{argv[0]}: not found on PATH") from err
    tail: deque = deque(maxlen=keep)

    def pump() -> None:
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            tail.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    received: list[int] = []

    def forward(signum, _frame) -> None:
        received.append(signum)
        proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)} if main else {}
    try:
        try:
            code = proc.wait()
        except KeyboardInterrupt:  # the terminal sent SIGINT to the command too: let it stop, then go
            stop(proc)
            raise
        if received:
            stop(proc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        reader.join(timeout=5)
    if received:
        name = signal.Signals(received[0]).name
        raise UserError(f"{what}: stopped by {name}, and the command with it", code=128 + received[0])
    if code != 0:
        raise CommandFailed(f"{what} failed with exit code {code}", code=code if code > 0 else 1, tail=list(tail))


def stop(proc: subprocess.Popen, grace: float = 30) -> None:
    """Wait up to ``grace`` seconds for a command told to stop, then kill it."""
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
