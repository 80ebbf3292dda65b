"""Run external commands the way a user would: show each one, then run it.

Every command is a list of tokens. It is printed with ``$`` in front, in a
form that can be copied into a shell, before it runs.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from sglang_stack.errors import UserError


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
