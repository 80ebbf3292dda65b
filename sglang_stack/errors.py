"""The one exception type for mistakes a user can fix.

Anything raised as ``UserError`` is printed as a single line and exits
non-zero; everything else is a bug and keeps its traceback.
"""

import sys


class UserError(Exception):
    """A problem with the user's input or host, worded as one line.

    Name the file, key or value at fault, and how to fix it.
    """

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


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
