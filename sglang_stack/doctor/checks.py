"""What a doctor check is: a name, a status, what it saw, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL, SKIP, NOTE = "ok", "warn", "FAIL", "skip", "note"
IMAGE_USER_UID = 10001  # the image's user: the files it must read, the volumes it must write


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f" -- fix: {self.fix}" if self.fix and self.status in (FAIL, WARN) else ""
        return printable(f"{self.status:<5} {self.name:<12} {self.detail}{fix}")


def printable(text: str) -> str:
    """Control characters shown as escapes: a check quotes what tools and files said (nvidia-smi's cells, a .env
    value), and an escape sequence there would drive the terminal, not be read."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
