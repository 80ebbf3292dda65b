"""The doctor's checks as a registry: each check says what it reads and when it applies; one loop runs them.

A check is a function decorated with ``@check``. Its parameters name the facts it reads (``facts``:
what ``doctor.host`` gathered; ``svc``: the resolved service, None when it did not resolve; ``rows``:
``docker compose ps``; ``engine``; ``env``; ``error``: why the service did not resolve), and the
decorator says when it applies:

- ``needs``: ``service`` (it is SKIP, "config invalid", when the service did not resolve), ``gpu``
  (SKIP when the service reserves no GPU, as a CPU stand-in's override does), ``multinode`` (left
  out below NNODES 2);
- ``roles``: the roles of compose.yaml it checks (``server``, ``router``);
- ``names``: the lines it writes, which its SKIP lines carry.

Its docstring is its row in docs/services.md: the first paragraph says when it passes, a paragraph
that starts with ``Fix:`` what it names on a failure (``markdown`` writes the table; a test keeps the
two in sync). ``evaluate`` runs the checks in the order of the list it is given.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Iterable

from sglang_stack.doctor.checks import SKIP, Check
from sglang_stack.engine import Engine

NEEDS = ("service", "gpu", "multinode")
ROLES = ("server", "router")


@dataclass(frozen=True)
class Spec:
    """What ``@check`` records of one check."""

    fn: Callable
    names: tuple[str, ...]
    needs: tuple[str, ...]
    roles: tuple[str, ...]

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.fn).parameters)

    @property
    def passes_when(self) -> str:
        return " ".join(_paragraphs(self.fn)[0].split()).replace("``", "`")

    @property
    def fix(self) -> str:
        fix = next((" ".join(p.split())[len("Fix:"):].strip() for p in _paragraphs(self.fn) if p.startswith("Fix:")), "")
        return fix.replace("``", "`")


def _paragraphs(fn: Callable) -> list[str]:
    return [p.strip() for p in inspect.cleandoc(fn.__doc__ or "").split("\n\n") if p.strip()] or [""]


def check(*names: str, needs: Iterable[str] = (), roles: Iterable[str] = ("server",)):
    """Register a check under the names of the lines it writes (default: the function's name, ``check_`` dropped)."""
    needs, roles = tuple(needs), tuple(roles)
    unknown = [n for n in needs if n not in NEEDS] + [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"@check: unknown {unknown}")

    def register(fn: Callable) -> Callable:
        fn.spec = Spec(fn, names or (fn.__name__.removeprefix("check_").replace("_", "-"),), needs, roles)
        return fn

    return register


@dataclass(frozen=True)
class Context:
    """Everything a check may read; each takes the parts its parameters name."""

    facts: object
    svc: object | None
    engine: Engine
    env: object | None = None
    error: str = ""
    role: str = "server"

    @property
    def rows(self):
        return getattr(self.facts, "ps_rows", None)


def skipped(spec: Spec, ctx: Context) -> str | None:
    """Why ``spec`` does not run here: a SKIP line's text, "" to leave it out silently, None when it runs."""
    if ctx.role not in spec.roles:
        return ""
    if "service" in spec.needs and ctx.svc is None:
        return "skipped: config invalid"
    if "multinode" in spec.needs and getattr(ctx.svc, "nnodes", 1) <= 1:
        return ""
    if "gpu" in spec.needs and ctx.svc is not None and not getattr(ctx.svc, "gpus", True):
        files = ", ".join(str(f) for f in getattr(ctx.svc, "files", ()))
        return f"skipped: {ctx.svc.name} reserves no GPU (compose files: {files})"
    return None


def evaluate(checks: Iterable[Callable], ctx: Context) -> list[Check]:
    """Every check that applies, in order; each that cannot run writes its SKIP lines instead."""
    out: list[Check] = []
    for fn in checks:
        spec = fn.spec
        why = skipped(spec, ctx)
        if why is not None:
            out += [Check(name, SKIP, why) for name in spec.names] if why else []
            continue
        result = fn(**{name: getattr(ctx, name) for name in spec.reads})
        out += result if isinstance(result, list) else [result]
    return out


def markdown(checks: Iterable[Callable]) -> str:
    """The table of docs/services.md: each check, when it passes, what it needs, and the fix it names."""
    rows = ["| check | passes when | runs for | fix it names on failure |", "|---|---|---|---|"]
    for fn in checks:
        spec = fn.spec
        runs = ", ".join(spec.roles) + "".join(
            {"service": "; the service resolved", "gpu": "; it reserves GPUs", "multinode": "; NNODES > 1"}[n]
            for n in spec.needs)
        rows.append(f"| {', '.join(f'`{n}`' for n in spec.names)} | {spec.passes_when} | {runs} | {spec.fix} |")
    return "\n".join(rows) + "\n"


DOCS_BEGIN = "<!-- BEGIN the doctor's checks: generated by `python -m sglang_stack.doctor.checklist --docs` from their docstrings -->"
DOCS_END = "<!-- END the doctor's checks -->"


def documented(text: str, checks: Iterable[Callable], where: str = "docs/services.md") -> str:
    """``text`` (docs/services.md) with the table between its markers written from ``checks``."""
    import re

    from sglang_stack.errors import UserError

    pattern = re.compile(re.escape(DOCS_BEGIN) + r".*?" + re.escape(DOCS_END), re.S)
    if len(pattern.findall(text)) != 1:
        raise UserError(f"{where}: needs the doctor table's markers once each")
    return pattern.sub(lambda _: f"{DOCS_BEGIN}\n{markdown(checks)}{DOCS_END}", text)
