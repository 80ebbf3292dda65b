"""How the tasks talk to the user: a user mistake is one ``error:`` line and exit 2, never a traceback."""

from __future__ import annotations

import functools
import re

from invoke import Exit, ParseError

from sglang_stack.errors import UserError, format_error


def user_errors(body):
    """Turn a ``UserError`` into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(body)
    def wrapper(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except UserError as err:
            raise Exit(format_error(err), code=err.code) from None

    return wrapper


def parse_error_line(err: ParseError) -> str:
    """Invoke's parse error in the project's words: which task, which flag, what to do."""
    text = str(err)
    task_name = getattr(getattr(err, "context", None), "name", None)
    see = f" (see `invoke --help {task_name}`)" if task_name else " (see `invoke --list`)"
    if m := re.fullmatch(r"Flag <Argument: ([\w-]+).*> needed value and was not given one!", text):
        return f"--{m.group(1).replace('_', '-')}: needs a value{see}"
    if m := re.fullmatch(r"'(.+)' did not receive required positional arguments: (.+)", text):
        names = ", ".join("--" + n.strip(" '").replace("_", "-") for n in m.group(2).split(","))
        return f"{m.group(1)}: missing {names}{see}"
    if m := re.fullmatch(r"No idea what '(.*)' is!", text):
        return f"{m.group(1)!r}: no such task or flag{see}"
    return text + see


def shape_parse_errors(program) -> None:
    """Make Invoke's parse errors one ``error:`` line with exit 2, like every other user mistake.

    Invoke prints a parse error (unknown task or flag, a flag without its value, a
    missing argument) bare and exits 1, inside ``Program.run``, and offers no hook for
    it (pyinvoke/invoke#912). Invoke imports this file in ``Program.parse_collection``,
    before ``parse_tasks`` reads the task flags and ``parse_cleanup`` handles --help, so
    wrapping those two methods of the running program covers the task names and their
    flags. What Invoke parses before it reads this file keeps Invoke's form: a core flag
    without its value (`invoke --search-root`) or a collection that cannot be found
    (`invoke -c nosuch`).
    """

    def shaped(step):
        @functools.wraps(step)
        def wrapper():
            try:
                return step()
            except ParseError as err:
                raise Exit(f"error: {parse_error_line(err)}", code=2) from None

        return wrapper

    for name in ("parse_tasks", "parse_cleanup"):
        if not hasattr(getattr(program, name), "__wrapped__"):
            setattr(program, name, shaped(getattr(program, name)))
