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
        return f"{self.status:<5} {self.name:<12} {self.detail}{fix}"
