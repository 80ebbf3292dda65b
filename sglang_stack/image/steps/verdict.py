"""Run one of the build's checks and, only if it passes, record that it did.

    python3 -m sglang_stack.image.steps.verdict NAME -- COMMAND [ARG ...]

Runs COMMAND as it is given (no shell), with this process's environment. On exit 0 it writes
/opt/sglang-stack/verdicts/NAME.json: the check's name, the exact argv and "pass". On any other exit
it writes nothing and exits with the command's code, so the build fails as it did before and no
verdict of a failed check can exist. `invoke publish` attests these files as they are, read out of
the image: the host never re-runs or re-judges a check. Standard library only (it runs in the image).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DIRECTORY = Path("/opt/sglang-stack/verdicts")
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def record(name: str, argv: list[str], directory: Path = DIRECTORY) -> Path:
    """Write NAME.json whole (a temporary file renamed over it): a reader sees the old file or the new one."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    scratch = path.with_name(f".{name}.json.tmp")
    scratch.write_text(json.dumps({"check": name, "argv": argv, "result": "pass"}, indent=1, sort_keys=True) + "\n")
    os.replace(scratch, path)
    return path


def main(argv: list[str] | None = None, directory: Path = DIRECTORY) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--" or not NAME.fullmatch(args[0]):
        print("usage: python3 -m sglang_stack.image.steps.verdict NAME -- COMMAND [ARG ...] "
              "(NAME: lower-case letters, digits and '-')", file=sys.stderr)
        return 2
    name, command = args[0], args[2:]
    sys.stdout.flush()
    code = subprocess.call(command)
    if code != 0:
        print(f"verdict {name}: failed (exit {code}); nothing recorded", file=sys.stderr)
        return code if code > 0 else 1
    print(f"verdict {name}: pass, recorded in {record(name, command, directory)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
