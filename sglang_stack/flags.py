"""Typed task flags: a number or a server's URL from the command line, or a one-line ``UserError`` naming the flag.

Invoke casts a flag whose default is an int, and a value that is not one ends in a
``ValueError`` traceback before the task runs (pyinvoke/invoke#912 asks for a hook;
there is none). So the tasks take numbers as text, with ``None`` for "the default",
and read them here.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from sglang_stack.errors import UserError

INTEGER = re.compile(r"[0-9]{1,18}")  # ASCII digits: int() also takes "١٢" and "1_000", and "²" raises


def parse_count(flag: str, value, minimum: int, maximum: int | None = None) -> int:
    """A whole number of at least ``minimum`` (and at most ``maximum``, the cap named in the refusal)."""
    text = str(value).strip()
    if not INTEGER.fullmatch(text.removeprefix("-")):
        raise UserError(f"{flag} {value!r}: not an integer")
    number = int(text)
    if number < minimum:
        raise UserError(f"{flag} {value!r}: must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise UserError(f"{flag} {value!r}: must be at most {maximum}")
    return number


def _number(flag: str, value, what: str) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} {value!r}: not a {what}") from None


def parse_seconds(flag: str, value) -> float:
    """A number of seconds above 0 (a fraction is fine)."""
    number = _number(flag, value, "number of seconds")
    if not number > 0:  # also refuses nan
        raise UserError(f"{flag} {value!r}: must be more than 0 seconds")
    if number == float("inf"):
        raise UserError(f"{flag} {value!r}: must be a finite number of seconds")
    return number


def parse_positive(flag: str, value, low: float = 0.0, high: float = float("inf")) -> float:
    """A finite number above 0 (a rate, a shape); within [``low``, ``high``] where those are given."""
    number = _number(flag, value, "number")
    if not number > 0 or number == float("inf"):  # also refuses nan
        raise UserError(f"{flag} {value!r}: must be a number above 0")
    if not low <= number <= high:
        raise UserError(f"{flag} {value!r}: must be between {low:g} and {high:g}")
    return number


def parse_url(flag: str, value: str, shown: str | None = None) -> str:
    """``value``, an http:// or https:// URL with a host and a valid port, without a trailing slash; ``shown`` is how
    the error quotes the flag's whole value (``--endpoint NAME=URL``), ``value`` by default."""
    given = str(value).strip()
    parts = urlsplit(given)
    quoted = repr(shown if shown is not None else value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{flag} {quoted}: {given!r} is not an http:// or https:// URL with a host")
    try:
        parts.port
    except ValueError:
        raise UserError(f"{flag} {quoted}: bad port in {given!r}") from None
    return given.rstrip("/")
