"""Compose's variables as Docker Compose itself reads them: ``.env`` overlaid by the shell.

Compose is the only reader of ``.env`` and the compose files here: ``docker compose config``
does ``.env``, the shell, ``${VAR:-x}`` interpolation, ``COMPOSE_FILE`` overrides and profiles.
This module runs it (``config``) and turns what it refuses into one line that names the file and
line, or the variable, at fault, never showing a secret. ``environment`` asks Compose for the
value of every variable the compose files use, by interpolating a probe file of ``${NAME}``
references, so the doctor's messages and the bench see exactly what ``docker compose up`` will.
Where a variable comes from (the shell, or the ``.env`` line that sets it) is looked up only to
name it in a message.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from sglang_stack import ROOT, yaml_file
from sglang_stack.errors import UserError, read_text
from sglang_stack.redact import Redactor, known_secrets

ENV_FILE = ROOT / ".env"
ENV_LIMIT = 1 << 20  # .env.example is 7.5 KB
COMPOSE_TIMEOUT = 30  # seconds: `config` takes a tenth of one; a YAML alias bomb would take forever
# Characters that end or hide a line for an editor but not for Compose: C0/C1 controls but the tab,
# the BOM past the start, and Unicode's line and paragraph separators.
_ODD = frozenset({*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u2028", "\u2029", "\ufeff"} - {"\t"})
# A variable whose value is a secret: its value never appears in an error line.
# SGLANG_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD (not KEY or a *_FILE naming a file).
SECRET_NAME = re.compile(r"_(API_KEY|KEY|TOKEN|SECRET|SECRET_ACCESS_KEY|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)
# What the docker CLI itself needs from the shell, whatever else a caller hands Compose.
CLI_ENV = ("PATH", "HOME", "DOCKER_CONFIG", "DOCKER_HOST", "DOCKER_CONTEXT", "XDG_RUNTIME_DIR")


@dataclass(frozen=True)
class Environment:
    """The variables Compose interpolates with, as Compose read them.

    ``values``: every variable the compose files use that is set, in ``.env`` or the shell (the
    shell wins, as in Compose). ``origin`` says where each came from (``/path/.env:12`` or
    ``shell``), for a message. ``shell`` is the environment Compose runs with; None for one made
    by hand (a test, the settings table), which runs Compose with only ``values`` and no ``.env``.
    """

    values: Mapping[str, str]
    origin: Mapping[str, str] = field(default_factory=dict)
    env_file: Path | None = None
    shell: Mapping[str, str] | None = None
    referenced: frozenset[str] = frozenset()  # every variable the compose files interpolate (``referenced``)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def where(self, name: str) -> str:
        """``NAME=value (.env:12)``, ``NAME=value (shell)``, or ``NAME (unset)``; a secret's value is never shown."""
        if name not in self.values:
            return f"{name} (unset)"
        value = "***" if SECRET_NAME.search(name) else self.values[name]
        return f"{name}={value} ({self.origin.get(name, 'shell')})"

    def compose_environ(self) -> dict[str, str]:
        """The process environment ``docker compose`` runs with: the shell's, or the CLI's own plus ``values``. The
        CLI's own settings (HOME, DOCKER_CONFIG: where a per-user Compose plugin lives) come from this process where
        the shell given leaves them out."""
        cli = {k: os.environ[k] for k in CLI_ENV if k in os.environ}
        if self.shell is not None:
            return cli | dict(self.shell)
        return cli | dict(self.values)

    def env_file_args(self) -> list[str]:
        """``--env-file``: this environment's ``.env``, or none at all (an empty file) for one made by hand."""
        return ["--env-file", str(self.env_file if self.env_file is not None else os.devnull)]


# --- running `docker compose config` ---------------------------------------------------------------


def config(args: Sequence[str], env: Environment, *, files: Sequence[Path] = (), what: str = "compose.yaml") -> str:
    """``docker compose --project-directory ROOT ... ARGS`` for this checkout: its standard output.

    A refusal is one ``UserError`` in the project's words (``explain``); Compose not installed,
    or a file it cannot finish reading within ``COMPOSE_TIMEOUT``, is one line too.
    """
    argv = ["docker", "compose", "--project-directory", str(ROOT), *env.env_file_args()]
    for f in files:
        argv += ["--file", str(f)]
    argv += list(args)
    environ = env.compose_environ()
    if bad := next((k for k, v in environ.items() if "\0" in k or "\0" in v), None):
        raise UserError(f"{env.where(bad)}: holds a NUL character, which no environment variable can")
    if not shutil.which("docker"):
        raise UserError(f"{what}: reading it needs Docker Compose v2 (`docker compose`), and there is no docker CLI "
                        "on PATH: install Docker Engine with the compose plugin")
    # An alias bomb would keep Compose busy until the timeout: one count on each file's node graph names it first.
    for f in _candidates(env, files):
        if f.exists() and not f.is_file():  # a FIFO would hold Compose until the timeout; a directory fails obscurely
            where = ""
            if f in listed_files(env):
                where = (f"{env.where('COMPOSE_FILE')}: " if "COMPOSE_FILE" in env.values else
                         f"COMPOSE_FILE={(env.shell or {}).get('COMPOSE_FILE')} (shell): ")
            raise UserError(f"{where}{f}: not a regular file (a compose file is YAML on disk)")
        if f.is_file():
            yaml_file.expanded_size(read_text(f), str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f))
    try:
        proc = _run_bounded(argv, environ)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what}: `docker compose config` did not finish within {COMPOSE_TIMEOUT} s (a YAML alias "
                        "bomb or a huge override?): check the compose files and .env") from None
    if proc.returncode != 0:
        raise UserError(explain(proc.stderr or proc.stdout or "", proc.returncode, env, files))
    return proc.stdout


def _run_bounded(argv: list[str], environ: dict) -> subprocess.CompletedProcess:
    """``argv`` in a process group of its own, ended whole at ``COMPOSE_TIMEOUT``: the docker CLI runs Compose as a
    child process of its own, which killing the CLI alone would leave running."""
    import signal

    proc = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=COMPOSE_TIMEOUT)
    except BaseException:  # the timeout, or Ctrl-C: nothing of it outlives this call
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _plugin_missing(said: str) -> bool:
    return "is not a docker command" in said or "unknown shorthand flag" in said or "unknown flag: --project-directory" in said


_QUOTED = re.compile(r"""\s*["'].*""", re.S)


def explain(said: str, code: int, env: Environment, files: Sequence[Path] = ()) -> str:
    """What ``docker compose config`` refused, as one line naming the file and line or the variable.

    Compose's own words, rephrased: ``failed to read F: line N: M`` becomes ``F:N: M``; a
    ``.env`` error with no line (``setenv: invalid argument``) is given its line by asking
    Compose again about ever shorter copies of the file (``_bad_line``); ``validating F: M``
    leads with F. Text Compose quotes from a ``.env`` line (which may be a secret) is left out.
    """
    lines = [line.strip() for line in said.strip().splitlines() if line.strip() and "level=warning" not in line]
    if _plugin_missing(said):
        from sglang_stack.engine import PLUGINS, require_plugin

        require_plugin("compose")  # raises, in the words every other task uses
        return f"reading compose.yaml needs Docker Compose v2 (`docker compose`): install {PLUGINS['compose'][1]}"
    if not lines:
        return f"docker compose config: exit {code}"
    if m := next((re.match(r"failed to read (.+?): (line (\d+): )?(.*)", line) for line in lines
                  if line.startswith("failed to read ")), None):
        path, message = m.group(1), m.group(4)
        # Compose's own line is where it gave up (the file's end, for an open quote): the first line it refuses instead.
        lineno = _bad_line(Path(path), env) or m.group(3)
        message = _QUOTED.sub("", message) or message
        return f"{path}:{lineno}: {message}" if lineno else f"{path}: {message}"
    if lines[-1] == "setenv: invalid argument" and env.env_file is not None:
        lineno = _bad_line(env.env_file, env)
        return f"{env.env_file}:{lineno or '?'}: Compose cannot set this variable (an empty name, or a NUL in it)"
    if (m := re.search(r"(?:stat|open) (\S+): no such file or directory", lines[-1])) and env.get("COMPOSE_FILE"):
        return f"{env.where('COMPOSE_FILE')}: {m.group(1)}: no such file"
    if m := re.match(r"validating (\S+): (.*)", lines[-1]):
        return f"{m.group(1)}: {m.group(2)}"
    # "error decoding 'services[baseline].shm_size': ..." and "error while interpolating services.baseline.pids_limit:
    # failed to cast to expected type: ...": a value of the wrong kind, named by the variable that put it there.
    if m := next((re.match(r"(?:error decoding '(.+?)'|error while interpolating (\S+?)): (.*)", line) for line in lines
                  if line.startswith(("error decoding ", "error while interpolating "))), None):
        where = m.group(1) or m.group(2)
        return f"{_variables_at(where, env, files) or 'compose.yaml'}: {where}: {m.group(3)}"
    if lines[-1].startswith("yaml:"):
        return _yaml_error(lines[-1], env, files)
    last = lines[-1]
    if m := re.match(r"([Ii]nvalid [^:]+): (.+)", last):  # "Invalid hostPort: abc", "Invalid ip address: x"
        suspects = [name for name, value in env.values.items() if value == m.group(2).strip()]
        if suspects:
            return f"{', '.join(env.where(n) for n in sorted(suspects))}: {last}"
    return f"compose.yaml: {last}"


def _bad_line(path: Path, env: Environment) -> int | None:
    """The first line of the ``.env`` at ``path`` that Compose refuses: the shortest copy of the file it refuses, by halves."""
    try:
        lines = read_text(path, limit=ENV_LIMIT).split("\n")
    except UserError:
        return None
    with tempfile.TemporaryDirectory(prefix="sglang-stack-env-") as tmp:
        copy = Path(tmp) / ".env"
        probe = Path(tmp) / "compose.yaml"
        probe.write_text("services:\n  probe:\n    image: scratch\n")

        def refused(n: int) -> bool:
            copy.write_text("\n".join(lines[:n]) + "\n")
            copy.chmod(0o600)
            argv = ["docker", "compose", "--project-directory", tmp, "--env-file", str(copy), "--file", str(probe),
                    "config", "--quiet"]
            proc = subprocess.run(argv, env=env.compose_environ(), capture_output=True, timeout=COMPOSE_TIMEOUT)
            return proc.returncode != 0

        low, high = 0, len(lines)
        if not refused(high):
            return None
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if refused(mid) else (mid, high)
        return high


def _variables_at(path: str, env: Environment, files: Sequence[Path]) -> str:
    """The variables the uninterpolated file uses at ``path`` (``services[baseline].shm_size``), each with its origin."""
    try:
        raw = yaml_file.loads(config(["--profile", "*", "config", "--no-interpolate", "--no-path-resolution", "--format", "yaml"], env,
                                     files=files), "docker compose config --no-interpolate")
    except UserError:
        return ""
    node = raw
    for part in re.findall(r"[^.\[\]]+", path):
        node = node.get(part) if isinstance(node, dict) else None
    names = sorted(set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", str(node)))) if node is not None else []
    given = [n for n in names if n in env.values]  # a default is valid: the variable set is the one at fault
    return ", ".join(env.where(n) for n in given or names)


def _candidates(env: Environment, files: Sequence[Path]) -> list[Path]:
    """The compose files Compose reads here: those given, else compose.yaml and its override, and COMPOSE_FILE's."""
    candidates = list(files) or [ROOT / "compose.yaml", ROOT / "compose.override.yaml"]
    return candidates + list(listed_files(env))


def listed_files(env: Environment) -> tuple[Path, ...]:
    """COMPOSE_FILE's files as Compose reads them (relative to the project directory); () where it is unset."""
    listed = env.values.get("COMPOSE_FILE") or (env.shell or {}).get("COMPOSE_FILE") or ""
    separator = env.values.get("COMPOSE_PATH_SEPARATOR") or os.pathsep
    return tuple(Path(p) if Path(p).is_absolute() else ROOT / p for p in listed.split(separator) if p)


def _yaml_error(message: str, env: Environment, files: Sequence[Path]) -> str:
    """A YAML syntax error Compose names without its file: the first of the candidate files that does not parse."""
    for f in _candidates(env, files):
        if f.is_file():
            yaml_file.load(f)  # raises the file and line
    return f"compose files: {message}"


# --- the variables ---------------------------------------------------------------------------------

LEGACY_SECRETS = ("SGLANG_API_KEY", "HF_TOKEN")  # what .env held before the secrets became files


def environment(env_file: Path | None = None, shell_env: Mapping[str, str] | None = None) -> Environment:
    """``env_file`` (default: the project's ``.env``, when present) overlaid by the shell, as Compose reads them."""
    env_file = env_file if env_file is not None else ENV_FILE
    shell = dict(os.environ if shell_env is None else shell_env)
    used = env_file if (env_file.exists() or env_file.is_symlink()) else None
    lines = lint_env_file(used) if used is not None else []
    blank = Environment({}, {}, used, shell)
    # Compose's own settings first, through the probe file alone: a COMPOSE_FILE that names no file is then named.
    first = probe(["COMPOSE_FILE", "COMPOSE_PATH_SEPARATOR", *LEGACY_SECRETS], blank)
    known = Environment(first, dict.fromkeys(first, "shell"), used, shell)
    names = sorted(referenced(known) | set(first))
    values = {**first, **probe(sorted(set(names) - set(first)), blank)}
    origin = {}
    for name in values:
        if name in shell:
            origin[name] = "shell"
        else:
            found = [i for i, line in enumerate(lines, 1) if re.match(rf"\s*(?:export\s+)?{re.escape(name)}\s*=", line)]
            origin[name] = f"{used}:{found[-1]}" if found else str(used)
    return Environment(values, origin, used, shell, frozenset(names))


# Names a .env may hold that no compose file interpolates: Compose's own settings, read by the CLI itself.
COMPOSE_OWN = re.compile(r"COMPOSE_[A-Z_]+|DOCKER_[A-Z_]+")


def near_misses(env: Environment) -> list[str]:
    """A line per name of ``.env`` that nothing reads but is one slip from a name the compose files read:
    ``SGLANG_API_KY_FILE`` leaves the key unset, silently."""
    import difflib

    if env.env_file is None or not env.referenced:
        return []
    out = []
    for lineno, line in enumerate(lint_env_file(env.env_file), 1):
        m = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
        if not m or m[1] in env.referenced or COMPOSE_OWN.fullmatch(m[1]):
            continue
        # The secrets' old names too: SGLANG_API_KY= is meant as a key, and the key is read from a file now.
        close = difflib.get_close_matches(m[1], sorted(env.referenced | set(LEGACY_SECRETS)), n=1, cutoff=0.85)
        if close and close[0] in LEGACY_SECRETS:
            out.append(f"{m[1]} ({env.env_file}:{lineno}) is read by nothing: did you mean {close[0]}? That is no "
                       f"longer read either: write the value to a file and set {close[0]}_FILE")
        elif close:
            out.append(f"{m[1]} ({env.env_file}:{lineno}) is read by nothing: did you mean {close[0]}?")
    return out


def referenced(env: Environment) -> set[str]:
    """Every variable the compose files interpolate, from Compose's uninterpolated output.

    Not ``config --variables``: Compose 2.26 leaves out those of long-syntax volumes and of device
    reservations (MODEL_DIR, GPU_IDS).
    """
    raw = config(["--profile", "*", "config", "--no-interpolate", "--no-path-resolution", "--format", "yaml"], env)
    return set(re.findall(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)", raw))


def probe(names: Sequence[str], env: Environment) -> dict[str, str]:
    """The value of each variable Compose sees, for those set: Compose interpolates ``${NAME}`` and ``${NAME+1}``."""
    if not names:
        return {}
    body = "".join(f'      V{i}: "${{{name}}}"\n      S{i}: "${{{name}+1}}"\n' for i, name in enumerate(names))
    with tempfile.TemporaryDirectory(prefix="sglang-stack-vars-") as tmp:
        path = Path(tmp) / "variables.yaml"
        path.write_text(f"services:\n  variables:\n    image: scratch\n    environment:\n{body}")
        out = yaml_file.loads(config(["config", "--format", "yaml"], env, files=[path], what=".env"), "variables")
    got = unescape(((out.get("services") or {}).get("variables") or {}).get("environment") or {})
    return {name: str(got.get(f"V{i}") or "") for i, name in enumerate(names) if got.get(f"S{i}") == "1"}


def unescape(node):
    """``docker compose config`` prints every ``$`` of a value as ``$$``, so that its output reads back the same."""
    if isinstance(node, dict):
        return {key: unescape(value) for key, value in node.items()}
    if isinstance(node, list):
        return [unescape(value) for value in node]
    return node.replace("$$", "$") if isinstance(node, str) else node


def lint_env_file(path: Path) -> list[str]:
    """The lines of ``.env``, refused in one line when far too large or holding what an editor hides.

    Compose reads both without a word, but a ``U+2028`` that an editor shows as a line break
    (or a stray control character) keeps text inside a value that the user believes is a line
    of its own.
    """
    text = read_text(path, limit=ENV_LIMIT).removeprefix("\ufeff")  # Compose skips a UTF-8 BOM too
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    for lineno, raw in enumerate(lines, 1):
        if odd := next((ch for ch in raw if ch in _ODD), None):
            name = unicodedata.name(odd, "a control character")
            raise UserError(f"{path}:{lineno}: U+{ord(odd):04X} {name} in the line: Compose keeps it inside the value "
                            "(an editor may show a line break or nothing); remove it")
    return lines


# --- redaction on the host: the secrets of this process's environment and .env ---------------------------

_default: Redactor | None = None


def redactor() -> Redactor:
    """This process's redactor, built once from the environment and the secret files ``.env`` names."""
    global _default
    if _default is None:
        values = dict(os.environ)
        try:
            if ENV_FILE.is_file():
                values = {**environment().values, **values}
        except (OSError, UserError):  # a .env Compose cannot read teaches it nothing; the tasks say why
            pass
        _default = Redactor(known_secrets(values, ROOT))
    return _default


def redact(text: str) -> str:
    return redactor().text(text)
