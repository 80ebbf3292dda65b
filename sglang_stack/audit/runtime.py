"""The provider side decided by running Python: the audit's side of ``classprobe.py``, which runs in a subprocess.

``Probe(...)`` picks the modules to run for real and starts the probe, which imports them and builds
the class while the audit reads the call sites; ``Probe.finish`` sends the call sites and takes Python's
verdict for each method. A verdict the probe cannot give (it rests on a guess about a stand-in, an
opaque base, an instance it could not build) is left to the source: ``audit.provider``. Which rule
decided each method is in the report. The rules: docs/patches.md ("The EAGLE-3 audit").
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack.audit.source import CallSite, Cls, Tree

PROBE = Path(__file__).with_name("classprobe.py")
COMMAND = [sys.executable, "-I", "-S", "-B", str(PROBE)]  # isolated: no site, no user paths, no .pyc in the tree
TIMEOUT_S = 60
MODELS = "sglang.srt.models"
# An import statement at any depth, read from the text (a parse of every module costs more than the run):
# from-dots, from-module, what it imports (a parenthesised list may span lines), or a plain import's modules.
IMPORTS = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([\w., \t]+))", re.M)


def candidates(tree: Tree, arch: str) -> list[str]:
    """The registry's modules that may serve ``arch``: top-level models modules (packages are skipped, as the
    registry skips them) whose source names it and ``EntryClass``."""
    out = []
    for module, rel in sorted(tree.modules.items()):
        if module.rpartition(".")[0] == MODELS and not rel.endswith("__init__.py"):
            text = tree.text(rel)
            if arch in text and "EntryClass" in text:
                out.append(module)
    return out


def real_set(tree: Tree, start: list[str], arch: Cls | None) -> list[str]:
    """What the probe runs from source: the candidates, the modules of the class's MRO, and every models
    module they import, transitively (at any depth of the module: under an ``if``, a ``try``, a def).
    The rest of SGLang (layers, managers, distributed) is stood in for."""
    bases = {c.module for c in tree.mro(arch) if isinstance(c, Cls)} if arch else set()
    seen, queue = set(), [*start, *sorted(bases)]
    while queue:
        module = queue.pop()
        if module in seen or module not in tree.modules or tree.modules[module].endswith("__init__.py"):
            continue
        if not module.startswith(MODELS + ".") and module not in bases:
            continue
        seen.add(module)
        package = module.rpartition(".")[0].split(".")
        for dots, base, names, plain in IMPORTS.findall(tree.text(tree.modules[module])):
            if plain:
                queue += [name.split()[0] for name in plain.split(",")]
                continue
            if dots:
                base = ".".join(package[: len(package) - len(dots) + 1] + ([base] if base else []))
            queue += [base] + [f"{base}.{name.split()[0]}" for name in re.findall(r"\w+(?:\s+as\s+\w+)?", names)]
    return sorted(seen)


@dataclass
class Verdict:
    """Python's answer for one method: ``kind`` found, absent, "not a method", or unknown (``why``)."""

    kind: str
    where: str = ""
    why: str = ""
    bad: dict = field(default_factory=dict)  # call site (path:line) -> why it does not bind
    present: dict = field(default_factory=dict)  # attribute -> whether the instance has it (a site's `unless`)


@dataclass
class Run:
    """What the probe did: the class it imported, whether it built one, and a verdict per method."""

    cls: str = ""
    built: str = ""
    real: list = field(default_factory=list)
    failed: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0
    guesses: int = 0

    def has(self, attribute: str) -> bool:
        """Did the built instance show ``attribute``? False where it lacks it or none was built."""
        return any(v.present.get(attribute) for v in self.verdicts.values())

    @property
    def summary(self) -> str:
        if self.error:
            return f"run: {self.error}"
        if not self.cls:
            failed = "; ".join(f"{m}: {e}" for m, e in self.failed.items())
            return f"run: the registry serves no such class{' (' + failed + ')' if failed else ''}"
        return (f"run: imported {self.cls} with {len(self.real)} models modules from source and the rest stood in for; "
                f"{self.built}; {self.guesses} guesses about stand-ins; {self.seconds:.2f} s")


class Probe:
    """The probe subprocess, started early so that it imports while the audit reads the source."""

    def __init__(self, tree: Tree, arch: str, cls: Cls | None, config: dict | None):
        self.cands = candidates(tree, arch)
        self.setup = {"src": str(tree.src.resolve()), "real": real_set(tree, self.cands, cls), "candidates": self.cands,
                      "arch": arch, "config": config}
        self.proc, self.error = None, ""
        try:
            self.proc = subprocess.Popen(COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
            self.proc.stdin.write(json.dumps(self.setup) + "\n")
            self.proc.stdin.flush()
        except OSError as err:
            self.error = f"could not start {' '.join(COMMAND)}: {err}"

    def finish(self, methods: dict[str, tuple[CallSite, ...]]) -> Run:
        if self.proc is None:
            return Run(error=self.error)
        calls = {m: {"sites": [[str(s), s.args, list(s.keywords), s.star] for s in ss],
                     "unless": sorted({a for s in ss for a in s.unless})} for m, ss in methods.items()}
        try:
            out, err = self.proc.communicate(json.dumps(calls) + "\n", timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return Run(error=f"the probe did not finish in {TIMEOUT_S} s")
        except BrokenPipeError:
            out, err = self.proc.communicate()
        try:
            data = json.loads(out)
        except json.JSONDecodeError:
            last = (err.strip().splitlines() or ["no output"])[-1]
            return Run(error=f"the probe failed (exit {self.proc.returncode}): {last[:300]}")
        verdicts = {m: Verdict(v["kind"], v.get("where", ""), v.get("why", ""), v.get("bad", {}), v.get("present", {}))
                    for m, v in data.get("verdicts", {}).items()}
        return Run(data.get("class", ""), data.get("built", ""), data.get("real", []), data.get("failed", {}), verdicts,
                   seconds=data.get("seconds", 0.0), guesses=data.get("guesses", 0))
