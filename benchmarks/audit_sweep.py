"""Audit every architecture an SGLang tree's registry names, and count who decided each verdict.

    python benchmarks/audit_sweep.py --sglang-src DIR

For each class named in an ``EntryClass`` of ``DIR/sglang/srt/models/*.py``, runs the audit and prints:
how many method verdicts the run decided (Python's answer) and how many fell to the source; every
method where both could answer and they disagree (none is expected: each one is a bug of one half);
every architecture whose probe failed or that the audit refused; and the time taken.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_stack.errors import UserError
from sglang_stack.audit import eagle3 as audit
from sglang_stack.audit.source import Tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sglang-src", required=True, type=Path, help="directory that contains sglang/")
    args = parser.parse_args()
    archs = sorted({name for f in (args.sglang_src / "sglang/srt/models").glob("*.py")
                    for entry in re.findall(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", f.read_text(errors="replace"), re.M)
                    for name in re.findall(r"\b([A-Z]\w+)\b", entry)})
    counts, notes, started = collections.Counter(), [], time.perf_counter()
    tree = Tree(args.sglang_src)
    for arch in archs:
        try:
            report = audit.audit(args.sglang_src, arch)
        except UserError as err:
            notes.append(f"refused {arch}: {err}")
            continue
        if "probe failed" in report.run or "did not finish" in report.run:
            notes.append(f"probe {arch}: {report.run}")
        try:
            cls = audit.find_arch(tree, arch)
        except UserError:
            cls = None
        for method, how in report.decided.items():
            counts["run" if how == "run" else "source"] += 1
            source = audit.provider(tree, cls, method) if cls is not None and how == "run" else None
            if source is not None and source.kind != "undecided" and (source.kind == "found") != (method in report.providers):
                notes.append(f"disagree {arch}.{method}: the run says {report.providers.get(method) or 'missing'}; "
                             f"the source says {source.kind} ({source.where})")
    print(f"sglang {audit.tree_version(args.sglang_src)}: {len(archs)} architectures, {sum(counts.values())} method "
          f"verdicts: {counts['run']} decided by the run, {counts['source']} by the source; "
          f"{time.perf_counter() - started:.0f} s")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
