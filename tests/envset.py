"""What this project sets in SGLang's environment, and where: the image's ENV, compose.yaml, the Kubernetes render.

The image build's environment audit (``image/steps/envaudit.py``) checks every name docker/environment.toml
declares against the installed trees (a variable a dependency reads must be declared with what it does there).
This list is the other half, checked on the host by tests/image/test_environment.py: every name we set is declared
(``undeclared``), so CI names a missing declaration before any build.
"""

from __future__ import annotations

import re

from sglang_stack import ROOT
from sglang_stack.errors import UserError

DECLARATIONS = ROOT / "docker" / "environment.toml"
# The stages whose ENV the server runs with: runtime and what it is built FROM, and the
# sglang stage, whose tree it copies.
RUNTIME_STAGES = ("base", "deps", "sglang", "runtime")
# docker/Dockerfile's instructions, continuation lines joined: `ENV A=1 \` + `    B=2`.
_INSTRUCTION = re.compile(r"^(?P<word>[A-Z]+)\s+(?P<rest>(?:[^\n]*\\\n)*[^\n]*)", re.M)
_ASSIGNMENT = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S*)')


def image_env(dockerfile: str, stages: tuple[str, ...] = RUNTIME_STAGES) -> list[str]:
    """The names ENV sets in ``stages`` of a rendered Dockerfile (``ENV A=1 B=2`` or ``ENV A 1``)."""
    names, stage = [], None
    for match in _INSTRUCTION.finditer(dockerfile):
        word, rest = match["word"], match["rest"].replace("\\\n", " ")
        if word == "FROM":
            stage = rest.split()[-1] if " AS " in rest.upper() else None
        elif word == "ENV" and stage in stages:
            pairs = _ASSIGNMENT.findall(rest)
            names += [name for name, _ in pairs] if pairs else rest.split()[:1]
    return names


def compose_env() -> list[str]:
    """The names compose.yaml's servers set, as Compose resolves compose.yaml alone."""
    from sglang_stack.services import composefile
    from sglang_stack.services.variables import Environment

    proj = composefile.project(Environment({}), (composefile.COMPOSE_FILE,))
    return [name for service in proj.names(composefile.SERVER)
            for name in proj.config["services"][service].get("environment") or {}]


def k8s_env(lock) -> list[str]:
    """The names the Kubernetes render sets on the servers, for the shipped values and each server of compose.yaml."""
    from sglang_stack.services import composefile, k8s
    from sglang_stack.services.variables import Environment

    names = []
    values = k8s.load_values()
    for service in composefile.project(Environment({}), (composefile.COMPOSE_FILE,)).names(composefile.SERVER):
        ctx = k8s.context(lock, {**values, "service": service})
        names += [item["name"] for item in ctx.env]
    return names


def variables_set(dockerfile: str, lock) -> dict[str, tuple[str, ...]]:
    """name -> where it is set, in a stable order: ``{"HF_HOME": ("image", "compose", "k8s"), ...}``."""
    out: dict[str, list[str]] = {}
    for where, names in (("image", image_env(dockerfile)), ("compose", compose_env()), ("k8s", k8s_env(lock))):
        for name in names:
            if where not in out.setdefault(name, []):
                out[name].append(where)
    return {name: tuple(out[name]) for name in sorted(out)}


def audit_args(set_: dict[str, tuple[str, ...]]) -> list[str]:
    """The build step's arguments: ``NAME=image,compose`` for each variable."""
    return [f"{name}={','.join(where)}" for name, where in set_.items()]


def undeclared(set_: dict[str, tuple[str, ...]], declarations=DECLARATIONS) -> list[str]:
    """One line per variable set but not declared in docker/environment.toml."""
    import tomllib

    from sglang_stack.errors import read_text

    try:
        declared = tomllib.loads(read_text(declarations))
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{declarations}: invalid TOML: {err}") from None
    return [f"{name} (set by {'+'.join(where)}) is not declared in {declarations.name}"
            for name, where in set_.items() if name not in declared]
