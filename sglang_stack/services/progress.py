"""What `invoke up` and `invoke status` say about a service: its state from `docker compose ps`, and the log."""

from __future__ import annotations

import json
import re

from sglang_stack.errors import UserError

# Terminal control sequences: Compose erases each line it prints (ESC [2K) even with
# --no-color, and progress bars redraw with carriage returns.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def parse_ps(text: str) -> list[dict]:
    """``docker compose ps --format json``: a JSON array (Compose < 2.21) or one object per line."""
    text = text.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        pass
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UserError(f"docker compose ps --format json: line {lineno} is not JSON: {err.msg}") from None
    return rows


def describe(row: dict, width: int = 9) -> str:
    """One status line for a ``ps`` row: ``eagle3  running (healthy)  127.0.0.1:30001->30000  Up 9 minutes``;
    the name padded to ``width``, the longest service name."""
    state = row.get("State", "?")
    health = row.get("Health") or ""
    if state == "exited":
        state = f"exited ({row.get('ExitCode', '?')})"
    elif health:
        state = f"{state} ({health})"
    ports = []
    for pub in row.get("Publishers") or []:
        if pub.get("PublishedPort"):
            ports.append(f"{pub.get('URL') or '0.0.0.0'}:{pub['PublishedPort']}->{pub.get('TargetPort')}")
    return f"{row.get('Service', '?'):<{width}} {state:<22} {', '.join(sorted(set(ports))) or '-':<26} {row.get('Status', '')}".rstrip()


def latest_state(log: str) -> str:
    """The newest non-empty line of ``log``, control sequences dropped, a redrawn bar at its latest state."""
    for line in reversed(log.splitlines()):
        latest = _ANSI.sub("", line).split("\r")
        text = next((part.strip() for part in reversed(latest) if part.strip()), "")
        if text:
            return text if len(text) <= 110 else text[:107] + "..."
    return ""


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_line(name: str, elapsed: float, row: dict | None, log_line: str) -> str:
    """``eagle3 4m10s  running, health: starting  | <last log line>``."""
    if row is None:
        where = "creating"
    else:
        where = row.get("State", "?")
        if row.get("Health"):
            where += f", health: {row['Health']}"
    tail = f"  | {log_line}" if log_line else ""
    return f"{name} {format_elapsed(elapsed):>7}  {where}{tail}"


def failure_reason(row: dict) -> str:
    """Why a service that ``up --wait`` gave up on is not serving, from its ``ps`` row."""
    state = row.get("State", "?")
    if state == "exited":
        return f"exited with code {row.get('ExitCode', '?')}"
    if row.get("Health") == "unhealthy":
        return "is unhealthy: /health did not answer 200"
    if row.get("Health") == "starting":
        return "was still starting when the wait ended"
    return f"is {state}"
