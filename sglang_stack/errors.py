"""The one exception type for mistakes a user can fix.

Anything raised as ``UserError`` is printed as a single line and exits
non-zero; everything else is a bug and keeps its traceback.
"""

import sys
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input or host, worded as one line.

    Name the file, key or value at fault, and how to fix it.
    """

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def read_text(path: Path, hint: str = "") -> str:
    """The UTF-8 text of a file the user provides or edits; anything wrong with it is one line naming it.

    Covers what a hand-edited tree meets: the file missing, a directory in its
    place, no permission, and bytes that are not UTF-8 (a Latin-1 editor, a
    stray binary paste). ``hint`` is appended to the "not found" line.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: not found{hint}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a file") from None
    except PermissionError:
        raise UserError(f"{path}: cannot read: permission denied") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 (byte {data[err.start]:#04x}): save it as UTF-8") from None


def format_error(err: UserError) -> str:
    """``error: ...`` on every line: several problems are reported one per line."""
    return "\n".join(f"error: {line}" for line in str(err).splitlines() or [""])


def run_main(main) -> None:
    """Run ``main()`` as a command: a ``UserError`` becomes one line on stderr."""
    try:
        code = main()
    except UserError as err:
        print(format_error(err), file=sys.stderr)
        sys.exit(err.code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code or 0)
