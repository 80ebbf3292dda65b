"""Compose's variables: the ``.env`` file, the shell over it, and ``${VAR:-default}`` interpolation.

Read the way Docker Compose reads them, so the preflight, ``invoke status`` and the bench
see the values ``docker compose`` will use. An error names the file and line, or the
variable, that holds the bad value.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from sglang_stack import ROOT
from sglang_stack.errors import UserError, read_text
from sglang_stack.redact import Redactor, known_secrets

ENV_FILE = ROOT / ".env"
ENV_LIMIT = 1 << 20  # .env.example is 7.5 KB
# Characters that end or hide a line for an editor but not for Compose: C0/C1 controls but the tab,
# the BOM past the start, and Unicode's line and paragraph separators.
_ODD = frozenset({*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u2028", "\u2029", "\ufeff"} - {"\t"})


# --- .env ------------------------------------------------------------------------------------

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Environment:
    """The variables compose interpolates with: ``.env`` overlaid by the shell.

    ``origin`` says where each came from (``.env:12`` or ``shell``) so an error
    can point at the line to fix.
    """

    values: Mapping[str, str]
    origin: Mapping[str, str] = field(default_factory=dict)
    env_file: Path | None = None

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def where(self, name: str) -> str:
        """``NAME=value (.env:12)``, ``NAME=value (shell)``, or ``NAME (unset)``."""
        if name not in self.values:
            return f"{name} (unset)"
        return f"{name}={self.values[name]} ({self.origin.get(name, 'shell')})"


def read_env_file(path: Path, lookup: Mapping[str, str] | None = None) -> tuple[dict, dict]:
    """Parse a Compose ``.env`` file into ``(values, origin)``.

    ``KEY=VALUE`` per line, optional ``export``; ``#`` starts a comment line, or an
    inline comment after whitespace in an unquoted value. Double-quoted values
    take ``\\n``, ``\\"`` and ``\\\\`` escapes; single-quoted ones are literal.
    Unquoted and double-quoted values may use ``${VAR}`` of earlier lines or
    the shell, as Compose allows. A malformed line is a ``UserError`` naming it.
    """
    lookup = dict(lookup if lookup is not None else os.environ)
    values: dict[str, str] = {}
    origin: dict[str, str] = {}
    text = read_text(path, limit=ENV_LIMIT).removeprefix("\ufeff")  # Compose skips a UTF-8 BOM too
    # Compose ends a line at \n (and \r\n) only; str.splitlines() would also end one at U+2028,
    # U+0085 or \x0c, and then the doctor and Compose would read different values.
    for lineno, raw in enumerate(text.split("\n"), 1):
        raw = raw.removesuffix("\r")
        if odd := next((ch for ch in raw if ch in _ODD), None):
            name = unicodedata.name(odd, "a control character")
            raise UserError(f"{path}:{lineno}: U+{ord(odd):04X} {name} in the line: Compose keeps it inside the value "
                            "(an editor may show a line break or nothing); remove it")
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{lineno}"
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, rest = line.partition("=")
        key = key.strip()
        if not _KEY.fullmatch(key):
            shown = raw.strip() if not SECRET_WORD.search(raw) else f"{key.split()[0] if key.split() else key}=***"
            raise UserError(f"{path}:{lineno}: expected KEY=VALUE, got {shown!r}")
        if not sep:  # a bare KEY takes its value from the shell, as in Compose
            if key in lookup:
                values[key], origin[key] = lookup[key], "shell"
            continue
        try:
            value = _value(rest.strip(), {**lookup, **values}, path, lineno, key, where)
        except UserError as err:
            if SECRET_NAME.search(key):  # a malformed secret is named, its value never shown
                raise UserError(f"{path}:{lineno}: {key}: not a valid value ({_kind(str(err))}); "
                                "the value is not shown") from None
            raise
        values[key], origin[key] = value, where
    return values, origin


# A variable whose value is a secret: its value never appears in an error line.
# SGLANG_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD (not KEY or a *_FILE naming a file).
SECRET_NAME = re.compile(r"_(API_KEY|KEY|TOKEN|SECRET|SECRET_ACCESS_KEY|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)
SECRET_WORD = re.compile(r"API_KEY|_TOKEN\b|SECRET|PASSW", re.I)  # in a line that is not even KEY=VALUE


def _kind(message: str) -> str:
    """What was wrong, without the text it was wrong in."""
    for words in ("unterminated single quote", "unterminated double quote", "unexpected text after the closing quote",
                  "invalid interpolation", "required variable"):
        if words in message:
            return words
    return "malformed"


def _value(rest: str, scope: Mapping[str, str], path: Path, lineno: int, key: str, where: str) -> str:
    """One ``.env`` value as Compose reads it: quoted, with comments, interpolated."""
    if rest[:1] == "'":
        end = rest.find("'", 1)
        if end < 0:
            raise UserError(f"{path}:{lineno}: {key}: unterminated single quote")
        _expect_comment(rest[end + 1 :], path, lineno, key)
        return rest[1:end]
    if rest[:1] == '"':
        value, end = _double_quoted(rest, path, lineno, key)
        _expect_comment(rest[end + 1 :], path, lineno, key)
        return interpolate(value, scope, f"{where} {key}")
    return interpolate(re.split(r"\s+#", rest, maxsplit=1)[0].strip(), scope, f"{where} {key}")


def _double_quoted(rest: str, path: Path, lineno: int, key: str) -> tuple[str, int]:
    out = []
    i = 1
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "$": "$$"}
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest):
            out.append(escapes.get(rest[i + 1], "\\" + rest[i + 1]))
            i += 2
            continue
        if ch == '"':
            return "".join(out), i
        out.append(ch)
        i += 1
    raise UserError(f"{path}:{lineno}: {key}: unterminated double quote")


def _expect_comment(tail: str, path: Path, lineno: int, key: str) -> None:
    tail = tail.strip()
    if tail and not tail.startswith("#"):
        raise UserError(f"{path}:{lineno}: {key}: unexpected text after the closing quote: {tail!r}")


def environment(env_file: Path | None = None, shell_env: Mapping[str, str] | None = None) -> Environment:
    """``env_file`` (default: the project's ``.env``, when present) overlaid by the shell: Compose's precedence."""
    env_file = env_file if env_file is not None else ENV_FILE
    shell_env = dict(os.environ if shell_env is None else shell_env)
    values: dict[str, str] = {}
    origin: dict[str, str] = {}
    used = None
    if env_file.exists() or env_file.is_symlink():  # a directory or a dangling link is named, not skipped
        values, origin = read_env_file(env_file, shell_env)
        used = env_file
    for key, value in shell_env.items():
        values[key], origin[key] = value, "shell"
    return Environment(values, origin, used)


# --- interpolation -----------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate(text: str, env: Mapping[str, str], where: str = "") -> str:
    """Expand ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+alt}``, ``${VAR+alt}`` and
    ``$$`` as Docker Compose does; defaults and alternatives may nest.

    ``:?`` on an unset or empty variable, or a malformed expression, is a
    ``UserError`` that names ``where``.
    """
    out, end = _expand(text, 0, env, where, closing=False)
    return out


def _expand(text: str, i: int, env: Mapping[str, str], where: str, closing: bool) -> tuple[str, int]:
    out = []
    n = len(text)
    while i < n:
        ch = text[i]
        if closing and ch == "}":
            return "".join(out), i
        if ch != "$":
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "{":
            value, i = _braced(text, i + 2, env, where)
            out.append(value)
        else:
            match = _NAME.match(text, i + 1)
            if not match:
                out.append("$")
                i += 1
                continue
            out.append(env.get(match.group(), ""))
            i = match.end()
    if closing:
        raise UserError(f"{where}: invalid interpolation: missing '}}' in {text!r}")
    return "".join(out), i


def _braced(text: str, i: int, env: Mapping[str, str], where: str) -> tuple[str, int]:
    match = _NAME.match(text, i)
    if not match:
        raise UserError(f"{where}: invalid interpolation format in {text!r}: a variable name must follow '${{'")
    name = match.group()
    i = match.end()
    value = env.get(name)
    if i >= len(text):
        raise UserError(f"{where}: invalid interpolation: missing '}}' in {text!r}")
    if text[i : i + 1] == "}":
        return value or "", i + 1
    for op in (":-", ":?", ":+", "-", "?", "+"):
        if text.startswith(op, i):
            break
    else:
        raise UserError(f"{where}: invalid interpolation format for {name} in {text!r}")
    word, end = _expand(text, i + len(op), env, where, closing=True)
    unset = value is None
    empty = unset or value == ""
    missing = empty if op.startswith(":") else unset
    if op in (":-", "-"):
        result = word if missing else value
    elif op in (":+", "+"):
        result = "" if missing else word
    else:  # ":?" / "?"
        if missing:
            raise UserError(f"{where}: required variable {name} is missing a value: {word or 'set it in .env'}")
        result = value
    return result, end + 1


def interpolate_tree(node, env: Mapping[str, str], path: str = ""):
    """Interpolate every string value (not key) of a loaded YAML tree."""
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env, f"{path}.{key}" if path else str(key)) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(value, env, f"{path}[{i}]") for i, value in enumerate(node)]
    if isinstance(node, str):
        return interpolate(node, env, f"compose.yaml: {path}")
    return node


# --- redaction on the host: the secrets of this process's environment and .env ---------------------------

_default: Redactor | None = None


def redactor() -> Redactor:
    """This process's redactor, built once from the environment and ``.env``'s secret files."""
    global _default
    if _default is None:
        values = dict(os.environ)
        root = ROOT
        try:
            if ENV_FILE.is_file():
                values = {**read_env_file(ENV_FILE, values)[0], **values}
        except (OSError, UserError):  # a .env it cannot read teaches it nothing; the tasks say why
            pass
        _default = Redactor(known_secrets(values, root))
    return _default


def redact(text: str) -> str:
    return redactor().text(text)
