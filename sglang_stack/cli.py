"""How the tasks talk to the user: a user mistake is one ``error:`` line and exit 2, never a traceback."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

from invoke import Exit, ParseError

from sglang_stack.errors import UserError, format_error, read_text


def user_errors(body):
    """Turn a ``UserError`` into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(body)
    def wrapper(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except UserError as err:
            raise Exit(format_error(err), code=err.code) from None

    return wrapper


def repeated_flag(argv: list[str]) -> str | None:
    """The first ``--flag`` given twice in ``argv``, if any.

    Invoke takes a repeated flag's second value as a task name and reports
    "No idea what '2' is!", which sends the user looking for a typo.
    """
    seen = set()
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            flag = token.split("=", 1)[0]
            if flag in seen:
                return flag
            seen.add(flag)
    return None


def parse_error_line(err: ParseError, argv: list[str] | None = None) -> str:
    """Invoke's parse error in the project's words: which task, which flag, what to do."""
    text = str(err)
    task_name = getattr(getattr(err, "context", None), "name", None)
    see = f" (see `invoke --help {task_name}`)" if task_name else " (see `invoke --list`)"
    if text.startswith("No idea what") and (flag := repeated_flag(argv or [])):
        return f"{flag}: given more than once; give it once{see}"
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
                raise Exit(f"error: {parse_error_line(err, sys.argv[1:])}", code=2) from None

        return wrapper

    for name in ("parse_tasks", "parse_cleanup"):
        if not hasattr(getattr(program, name), "__wrapped__"):
            setattr(program, name, shaped(getattr(program, name)))


def check_project_config(root: Path) -> None:
    """Refuse a broken ``invoke.yaml`` (or ``.yml``/``.json``) next to tasks.py with one line, not Invoke's traceback.

    Invoke reads the project's config file right after it imports tasks.py and
    lets the parser's exception escape. Reading it here first (``yaml_file.load``,
    PyYAML as Invoke vendors it; ``json``) turns a syntax error or a non-mapping
    document into one ``error:`` line and exit 2.
    """
    import json

    from sglang_stack import yaml_file

    for name in ("invoke.yaml", "invoke.yml", "invoke.json"):
        path = root / name
        if not path.exists():
            continue
        try:
            if name.endswith(".json"):
                try:
                    doc = json.loads(read_text(path))
                except ValueError as err:
                    raise UserError(f"{path}: invalid JSON: {err}") from None
            else:
                doc = yaml_file.load(path)  # the same PyYAML Invoke vendors; names the file and line
            if doc is not None and not isinstance(doc, dict):
                raise UserError(f"{path}: must be a mapping of settings, got {type(doc).__name__}")
        except UserError as err:
            print(format_error(err), file=sys.stderr)
            raise SystemExit(err.code) from None
