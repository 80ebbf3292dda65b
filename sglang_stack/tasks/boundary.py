"""How the tasks talk to the user: a user mistake is one ``error:`` line and exit 2, never a traceback."""

from __future__ import annotations

import errno
import functools
import re
import socket
import sys
from pathlib import Path

from invoke import Exit, ParseError

from sglang_stack.errors import NETWORK, UserError, format_error, read_text


BUG = ("error: this is a bug in sglang-stack, not something you did: please report it with the traceback above "
       "and the command you ran")
MALFORMED = {"JSONDecodeError", "TOMLDecodeError", "YAMLError", "ParserError", "ScannerError", "BadZipFile"}
DISK = {errno.ENOSPC: "no space left on the device: free some, or write elsewhere",
        errno.EDQUOT: "disk quota exceeded: free some, or write elsewhere",
        errno.EROFS: "read-only file system: write elsewhere",
        errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}


def _names(err: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(err).__mro__}


def _innermost(err: BaseException) -> BaseException:
    seen = set()
    while (err.__cause__ or err.__context__) is not None and id(err) not in seen:
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return err


def expected_failure(err: BaseException) -> str | None:
    """One line for a failure the world caused (network, disk, encoding, malformed data); None for a bug."""
    names = _names(err)
    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(status, int):  # the server answered, with a refusal: not a network failure
        url = getattr(getattr(err, "response", None), "url", None) or ""
        return f"{url or 'the server'} answered HTTP {status}: check the address, the credentials or the pin"
    if names & NETWORK or isinstance(err, (ConnectionError, socket.timeout, socket.gaierror)):
        request = getattr(err, "request", None)
        url = getattr(request, "url", None) or ""
        inner = _innermost(err)
        reason = str(getattr(inner, "reason", None) or inner).splitlines()[0][:200] or type(inner).__name__
        where = f" {url}" if url else ""
        return (f"the network failed{where}: {type(err).__name__}: {reason} (check the connection, the proxy "
                "variables and DNS; a timeout may need retrying)")
    if isinstance(err, UnicodeError):
        return f"not valid text: {err} (save the file as UTF-8)"
    if names & MALFORMED:
        return f"malformed data: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    if isinstance(err, OSError) and err.errno is not None:
        what = err.filename or ""
        why = DISK.get(err.errno) or (err.strerror or str(err))
        return f"{what}: {why}" if what else f"{why} ({type(err).__name__})"
    if isinstance(err, MemoryError):
        return "out of memory: the input is too large for this machine"
    return None


def user_errors(body):
    """The error boundary of every task: a failure the user or the world caused is one line, never a traceback.

    A ``UserError`` keeps its code (2, or 1 for a failed check); a network, disk, encoding or
    malformed-data failure becomes one line with exit 2; Ctrl-C is one line and exit 130. Every
    line goes through the redaction step (``sglang_stack.redact``) first. Anything else is a bug:
    its traceback, then one line that says so.
    """

    @functools.wraps(body)
    def wrapper(*args, **kwargs):
        from sglang_stack.services.variables import redact

        try:
            return body(*args, **kwargs)
        except UserError as err:
            raise Exit(redact(format_error(err)), code=err.code) from None
        except KeyboardInterrupt as err:
            said = f" ({err.args[0]})" if err.args and str(err.args[0]).startswith("SIG") else ""
            raise Exit(f"error: interrupted{said}", code=130) from None
        except (Exit, SystemExit):
            raise
        except Exception as err:  # the boundary: classify, or report a bug
            line = expected_failure(err)
            if line is None:
                import traceback

                print(redact(traceback.format_exc()), file=sys.stderr, end="")
                raise Exit(BUG, code=70) from None
            raise Exit(redact(f"error: {line}"), code=2) from None

    wrapper.__boundary__ = True
    return wrapper


def signals_interrupt() -> None:
    """SIGTERM and SIGHUP (a CI timeout, ``kill``, a closed terminal) stop a task the way Ctrl-C does: as a
    KeyboardInterrupt, so every restore path (``except BaseException``: a bump's files put back, a bundle's scratch
    removed) runs, and the boundary says one line. A command a task streams gets the signal forwarded
    (``shell.stream``), which installs its own handlers while it runs."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


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

        wrapper.__shaped__ = True
        return wrapper

    for name in ("parse_tasks", "parse_cleanup"):
        if not getattr(getattr(program, name), "__shaped__", False):
            setattr(program, name, shaped(getattr(program, name)))


def help_after_task(program) -> None:
    """Let ``invoke TASK --help`` print TASK's help for every task, as ``invoke --help TASK`` does.

    Invoke reads ``--help`` after a task name as a request for that task's help, except where the
    task still waits for a positional argument or a flag's value: there it takes ``--help`` as the
    value, so ``invoke up --help`` tried to start a service named "--help" and ``invoke k8s --help``
    wrote manifests into a directory of that name (the parser fills positionals before it looks at
    the core flags: invoke/parser/parser.py, ``handle``). Before Invoke parses the tasks, a
    ``--help`` (or a ``-h`` the task does not define) in a task's arguments is read as ``--help TASK``,
    which Invoke answers with the task's help and exit 0; the rest of the line is not read. Right after a
    flag that takes a value it stays that value, as Invoke reads it (``--image --help`` is a missing image).
    """
    step = program.parse_tasks
    if getattr(step, "__help__", False):
        return

    @functools.wraps(step)
    def wrapper():
        # Making a parser hands each task's help strings to its flags and empties the task's own dict
        # (invoke/tasks.py, ``arg_opts`` pops them): put them back for the parser Invoke makes next.
        kept = {name: dict(t.help) for name, t in program.collection.tasks.items()}
        contexts = program._make_parser().contexts
        for name, helps in kept.items():
            program.collection.tasks[name].help = helps
        task, previous = None, None
        for token in program.core.unparsed:
            wants_value = task and previous in contexts[task].flags and contexts[task].flags[previous].takes_value
            if token in contexts and not wants_value:
                task = token
            elif task and not wants_value and (token == "--help" or (token == "-h" and "-h" not in contexts[task].flags)):
                program.core.unparsed = []
                step()
                program.args.help.value = task  # what `invoke --help TASK` sets: parse_cleanup prints it
                return None
            previous = token.split("=", 1)[0] if token.startswith("-") else None
        return step()

    wrapper.__help__ = True
    program.parse_tasks = wrapper


def optional_positionals(program, flags: dict[str, str]) -> None:
    """Let ``invoke doctor eagle3`` mean ``invoke doctor --service eagle3``, as ``invoke up eagle3`` does.

    Invoke fills a positional argument only while it has no value, so one with a default
    (``doctor``'s eagle3, ``status``'s every service) can never be given positionally, and
    Invoke has no optional positionals (pyinvoke/invoke#159). ``flags`` maps a task to the
    flag its first bare word stands for: a word right after that task's name that is neither
    a flag nor a task gets the flag put before it, before Invoke parses the tasks.
    """
    step = program.parse_tasks
    if getattr(step, "__positionals__", False):
        return

    @functools.wraps(step)
    def wrapper():
        tasks = set(program.collection.task_names) | {a for v in program.collection.task_names.values() for a in v}
        argv, out = list(program.core.unparsed), []
        for i, token in enumerate(argv):
            out.append(token)
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if token in flags and nxt is not None and not nxt.startswith("-") and nxt not in tasks:
                out.append(f"--{flags[token]}")
        program.core.unparsed = out
        return step()

    wrapper.__positionals__ = True
    program.parse_tasks = wrapper


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


def engine_of(c, flag: str | None = None):
    """The ``Engine`` a task drives: its ``--engine``, else ``stack.engine`` (invoke.yaml, INVOKE_STACK_ENGINE)."""
    from sglang_stack.engine import named

    return named(flag, c.config.stack.engine)
