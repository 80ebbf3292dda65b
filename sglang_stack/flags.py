"""Typed task flags: a number from the command line, or a one-line ``UserError`` naming the flag.

Invoke casts a flag whose default is an int, and a value that is not one ends in a
``ValueError`` traceback before the task runs (pyinvoke/invoke#912 asks for a hook;
there is none). So the tasks take numbers as text, with ``None`` for "the default",
and read them here.
"""

from __future__ import annotations

from sglang_stack.errors import UserError


def parse_count(flag: str, value, minimum: int) -> int:
    """A whole number of at least ``minimum``."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} {value!r}: not an integer") from None
    if number < minimum:
        raise UserError(f"{flag} {value!r}: must be at least {minimum}")
    return number


def parse_seconds(flag: str, value) -> float:
    """A number of seconds above 0 (a fraction is fine)."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} {value!r}: not a number of seconds") from None
    if not number > 0:  # also refuses nan
        raise UserError(f"{flag} {value!r}: must be more than 0 seconds")
    if number == float("inf"):
        raise UserError(f"{flag} {value!r}: must be a finite number of seconds")
    return number


def parse_positive(flag: str, value) -> float:
    """A finite number above 0 (a rate, a shape)."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} {value!r}: not a number") from None
    if not number > 0 or number == float("inf"):  # also refuses nan
        raise UserError(f"{flag} {value!r}: must be a number above 0")
    return number
