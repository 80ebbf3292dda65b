"""Byte-compile what one build step added, the same bytes every build (runs in the image, standard library only).

    PYTHONHASHSEED=0 python3 -m sglang_stack.image.steps.pyc --report /tmp/pip-report.json [--target DIR]
    PYTHONHASHSEED=0 python3 -m sglang_stack.image.steps.pyc --tree DIR [--clean]

Every ``pip install`` of the Dockerfile runs with ``--no-compile``: pip's own ``.pyc`` files embed the
source's mtime, and under ``--target`` the path of pip's random temporary directory, so two builds of
one commit would differ in that layer even where a later step rewrites them. This module then writes
hash-checked ``.pyc`` files (``--invalidation-mode checked-hash``) for exactly the files the step
installed (``--report``: each distribution's RECORD) or for one tree (``--tree``; ``--clean`` removes its
``__pycache__`` directories first, a run's default .pyc files among them), in the same layer.
Test suites and examples (any ``tests`` or ``examples`` directory) are left as source: nothing the
server runs imports them, and they were 70 MB of ``.pyc`` and a log full of SyntaxWarnings.
The Dockerfile runs it under ``PYTHONHASHSEED=0`` as it runs ``compileall``: the interpreter's marshal
sorts frozenset constants (a ``.pyc`` is the same under every seed, tests/image/test_pyc.py), and the fixed seed
keeps anything else a step computes from string hashes out of the bytes as well.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import shutil
import sys
import warnings
from pathlib import Path


class UserError(Exception):
    """One line on stderr and exit 2. Not sglang_stack.errors': this module runs where only it and sbom.py are copied."""


SKIPPED = {"tests", "examples"}  # directories of test suites and examples, at any depth


def wanted(path: Path) -> bool:
    return path.suffix == ".py" and not SKIPPED.intersection(path.parts[:-1])


def compile_files(files) -> tuple[int, int]:
    """(compiled, failed): a file that does not compile (a Python 2 example in a wheel) is left as source."""
    done = failed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings of third-party sources are not the build's to show
        for src in sorted(set(files)):
            try:
                py_compile.compile(str(src), cfile=importlib.util.cache_from_source(str(src)), doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                done += 1
            except (py_compile.PyCompileError, SyntaxError, ValueError, OSError):
                failed += 1
    return done, failed


def installed_files(report: Path, target: Path | None) -> list[Path]:
    """The .py files of every distribution ``pip install --report`` says the step installed."""
    try:
        items = json.loads(report.read_text(encoding="utf-8"))["install"]
        names = [item["metadata"]["name"] for item in items]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{report}: not a pip installation report ({type(err).__name__}: {err})") from None
    path = [str(target)] if target else sys.path
    files = []
    for name in names:
        dists = list(importlib.metadata.distributions(name=name, path=path))
        if not dists:
            raise UserError(f"{name}: in {report}, but not installed where this step looked ({', '.join(path)})")
        files += [Path(dists[0].locate_file(f)) for f in dists[0].files or () if wanted(Path(f))]
    return files


def tree_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise UserError(f"{root}: not a directory")
    out = []
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and d != "__pycache__")
        out += [Path(here, n) for n in names if n.endswith(".py")]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.image.steps.pyc", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--report", type=Path, help="pip's --report of the step: compile what it installed")
    which.add_argument("--tree", type=Path, help="compile every .py file under this directory")
    parser.add_argument("--target", type=Path, help="with --report: the --target directory pip installed into")
    parser.add_argument("--clean", action="store_true", help="with --tree: remove its __pycache__ directories first")
    args = parser.parse_args(argv)
    if args.clean and args.tree:
        for here, dirs, _ in os.walk(args.tree):
            for name in [d for d in dirs if d == "__pycache__"]:
                shutil.rmtree(Path(here, name))
                dirs.remove(name)
    files = installed_files(args.report, args.target) if args.report else tree_files(args.tree)
    done, failed = compile_files(files)
    where = args.tree or args.report
    print(f"pyc: {done} files compiled (hash-checked) for {where}; {failed} left as source (they do not compile)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
