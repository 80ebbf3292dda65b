"""`pip check`, judged against versions.lock: it may report exactly the declared [[override]]s, nothing more, nothing less.

    python3 -m sglang_stack.image.steps.depcheck --lock /opt/sglang-stack/versions.lock

Every install in the image runs with ``--no-deps`` from hashed lists, so pip never resolves
there; this is where the installed set is checked against every installed distribution's own
``Requires-Dist``, read from the wheels themselves (so the ``requires`` that versions.lock
copies for the URL wheels are checked too). Each line of ``pip check`` must be an override:
``of`` requires ``package`` at ``declared`` and the stack installs another version, or omits
it (``omit = true``). An override whose ``of`` is installed but that pip no longer reports is
stale. An override of a distribution not installed yet (sglang, before the ``runtime`` stage
puts it on the path) is not expected. Exit 1 with one line per problem. Stdlib only.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from sglang_stack.image.steps.binaries import normalize as canonical  # one name normalizer for both checks

CONFLICT = re.compile(r"(?P<of>\S+) (?P<ver>\S+) has requirement (?P<req>.+), but you have (?P<pkg>\S+) (?P<have>\S+)\.")
MISSING = re.compile(r"^(?P<of>\S+) (?P<ver>\S+) requires (?P<req>.+), which is not installed\.$")




def requirement_name(req: str) -> str:
    return canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req.strip()).group(0))


def parse(output: str) -> tuple[set[tuple[str, str, str]], list[str]]:
    """(of, package, kind) for each pip check line, and the lines that are neither form."""
    found, other = set(), []
    for line in output.splitlines():
        line = line.strip()
        if not line or line == "No broken requirements found.":
            continue
        if m := CONFLICT.fullmatch(line):
            found.add((canonical(m["of"]), requirement_name(m["req"]), "version"))
        elif m := MISSING.match(line):
            found.add((canonical(m["of"]), requirement_name(m["req"]), "omit"))
        else:
            other.append(line)
    return found, other


def expected(lock: dict, installed: set[str]) -> set[tuple[str, str, str]]:
    return {(canonical(o["of"]), canonical(o["package"]), "omit" if o.get("omit") else "version")
            for o in lock.get("override", []) if canonical(o["of"]) in installed}


def judge(output: str, lock: dict, installed: set[str], lock_name: str = "versions.lock") -> list[str]:
    found, other = parse(output)
    want = expected(lock, installed)
    problems = [f"error: pip check: {line}" for line in other]
    for of, pkg, kind in sorted(found - want):
        what = "is not installed" if kind == "omit" else "is installed at a version it does not admit"
        problems.append(f"error: pip check: {pkg}, required by {of}, {what}, and {lock_name} declares no "
                        f"[[override]] of {of} for it: pin what {of} asks for, or declare the override with a reason")
    for of, pkg, kind in sorted(want - found):
        problems.append(f"error: {lock_name} [[override]] {pkg} (of {of}) is stale: pip check no longer reports it; remove it")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, required=True, help="versions.lock")
    args = parser.parse_args(argv)
    try:
        lock = tomllib.loads(args.lock.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        print(f"error: {args.lock}: {err}", file=sys.stderr)
        return 2
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    installed = {canonical(d.metadata["Name"]) for d in importlib.metadata.distributions() if d.metadata["Name"]}
    problems = judge(proc.stdout + proc.stderr, lock, installed, args.lock.name)
    for line in problems:
        print(line)
    declared = len(expected(lock, installed))
    print(f"depcheck: pip check over {len(installed)} distributions: {declared} declared override(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
