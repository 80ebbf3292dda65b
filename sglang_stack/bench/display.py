"""What a bench run shows while it runs: a progress line per round on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import Callable

class Progress:
    """One short line per round on stdout, numbered against the rounds planned.

    Plain lines, not a live bar: they read the same in a terminal, a log file and CI,
    and stdout stays free of diagnostics (those go to stderr).
    """

    def __init__(self, rounds: int, enabled: bool = True, out: Callable[[str], None] | None = None):
        self.total = rounds
        self.done = 0
        self.enabled = enabled
        self._out = out or (lambda line: print(line, flush=True))

    def line(self, text: str) -> None:
        if self.enabled:
            self._out(text)

    def warmed_up(self, endpoint: str, count: int, seconds: float) -> None:
        if count:
            self.line(f"warm-up {endpoint}: {count} request{'s' if count != 1 else ''}, {seconds:.1f} s")

    def round_done(self, record: dict, repeats: int) -> None:
        self.done += 1
        tps = record["aggregate_tps"]
        rate = f"{tps:.1f} tok/s" if tps is not None else "failed"
        self.line(
            f"[{self.done}/{self.total}] {record['endpoint']} c={record['level']} "
            f"repeat {record['repeat'] + 1}/{repeats}: {record['ok']}/{record['requests']} ok, "
            f"{record['output_tokens']} tokens, {rate}, {record['wall_s']:.1f} s"
        )

    def drop(self, rounds: int) -> None:
        """Rounds that will never run (a sweep point whose server did not come up)."""
        self.total -= rounds


def say(text: str) -> None:
    """A diagnostic (a skipped endpoint, a warning, a failure): stderr."""
    print(text, file=sys.stderr, flush=True)


def tell(text: str) -> None:
    """What the run does and what it found (the table, where the results are): stdout."""
    print(text, flush=True)
