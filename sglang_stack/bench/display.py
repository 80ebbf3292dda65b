"""What a bench run shows while it runs: a progress line per round on a terminal, plain lines otherwise.

Every line passes the redaction step first (URL credentials, the key and token), as the results files do."""

from __future__ import annotations

import sys
from typing import Callable

from sglang_stack.services.variables import redact


class Progress:
    """One short line per round on stdout, numbered against the rounds planned.

    Plain lines, not a live bar: they read the same in a terminal, a log file and CI,
    and stdout stays free of diagnostics (those go to stderr).
    """

    def __init__(self, rounds: int, enabled: bool = True, out: Callable[[str], None] | None = None,
                 live: bool | None = None):
        self.total = rounds
        self.done = 0
        self.enabled = enabled
        self._out = out or tell
        # A live line (requests done, tokens per second) only on a terminal; a log gets the round lines.
        self.live = sys.stdout.isatty() if live is None else live
        self._last = 0.0
        self._width = 0

    def request_done(self, endpoint: str, done: int, total: int, tokens: int, seconds: float) -> None:
        """Rewrite the live line after a request, at most ten times a second."""
        if not (self.enabled and self.live) or (done < total and seconds - self._last < 0.1):
            return
        self._last = seconds
        rate = tokens / seconds if seconds > 0 else 0.0
        text = f"[{self.done + 1}/{self.total}] {endpoint}: {done}/{total} requests, {rate:.0f} tok/s, {seconds:.0f} s"
        sys.stdout.write("\r" + text.ljust(self._width))
        sys.stdout.flush()
        self._width = len(text)

    def _end_live(self) -> None:
        if self.enabled and self.live and self._width:
            sys.stdout.write("\r" + " " * self._width + "\r")
            self._width = 0

    def line(self, text: str) -> None:
        if self.enabled:
            self._out(redact(text))

    def round_done(self, record: dict, repeats: int) -> None:
        self._end_live()
        self.done += 1
        tps = record["aggregate_tps"]
        rate = f"{tps:.1f} tok/s" if tps is not None else "failed"
        where = (f"c={record['level']}" if record.get("mode", "closed") == "closed"
                 else ("burst" if record.get("offered_rate") == "inf" else f"{record.get('offered_rate'):g} req/s")
                 + (f" cap {record['level']}" if record["level"] else ""))
        load = f", {record['mean_in_flight']:.1f} in flight" if record.get("mean_in_flight") is not None else ""
        self.line(
            f"[{self.done}/{self.total}] {record['endpoint']} {where} "
            f"repeat {record['repeat'] + 1}/{repeats}: {record['ok']}/{record['requests']} ok, "
            f"{record['output_tokens']} tokens, {rate}{load}, {record['wall_s']:.1f} s"
            + ("" if record.get("cache_flushed") is not False else ", cache NOT flushed")
        )

    def drop(self, rounds: int) -> None:
        """Rounds that will never run (a sweep point whose server did not come up)."""
        self.total -= rounds


def say(text: str) -> None:
    """A diagnostic (a skipped endpoint, a warning, a failure): stderr."""
    print(redact(text), file=sys.stderr, flush=True)


def tell(text: str) -> None:
    """What the run does and what it found (the table, where the results are): stdout."""
    print(redact(text), flush=True)
