"""Every version is written once: in the lock. A hand-written file names a pin by what it is ("the pinned FlashInfer").

A bump then changes versions.lock, the files rendered from it and nothing else. This test reads every tracked file
but the locks and the generated ones, and fails on a version literal of a distribution the lock pins: its name then
its version (``flashinfer X.Y.Z``, ``torch==…``, ``sglang-…-py3-none-any.whl``, ``"sgl-kernel": "…"``), and, for the
pins the README's first sentence names, the bare version too. SGLang's own release is exempt from the bare rule:
it names the image's tag, as a profile does.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from pins import PIN
from sglang_stack import ROOT
from sglang_stack.image import contents

# The locks, where versions live.
LOCKS = {"versions.lock", "requirements.lock.txt", "requirements.router.lock.txt", "requirements.arm64.lock.txt",
         "requirements-dev.txt",
         # The stand-ins' own lock: PyPI's builds of the URL wheels' releases, by URL and sha256 (docs/smoke.md).
         "docker/standins.toml",
         # The release the series' diffs were made against: a fact of the patches (`invoke patch --refresh` moves
         # it), checked against the pin whenever the series applies, which is what catches a bump without a refresh.
         "patches/series"}
# Written from the lock (or from SGLang run at the lock's pins), with a "generated" header and a test of their own.
GENERATED = {"docker/Dockerfile", "docker/Dockerfile.arm64", "docs/settings.md", "docker/settings.json"}
GENERATED_DIRS = ("docker/build/", "docker/build.arm64/", "docs/settings-", "tests/fixtures/")
# The README's first paragraph says what the project is, with the default pins; its table is generated.
SUMMARY_PINS = ("flashinfer-python", "torch", "sgl-kernel")


def variants(name: str) -> set[str]:
    """How prose names a distribution: ``flashinfer-python`` is also ``flashinfer``; ``-`` is also ``_`` or a space."""
    out = {name}
    for suffix in ("-python", "-cubin", "-jit-cache", "-cu13", "-cu12"):
        if name.endswith(suffix):
            out.add(name.removesuffix(suffix))
    return out


def patterns(pins: dict[str, str]) -> list[tuple[str, re.Pattern]]:
    out = []
    for name, version in pins.items():
        public = re.escape(version.split("+")[0])
        for variant in variants(name):
            spelled = re.escape(variant).replace(r"\-", "[-_ ]?")
            out.append((name, re.compile(rf"(?<![\w.-]){spelled}[^\w\n]{{0,6}}v?{public}(?![\w]*\d)(?!\.\d)", re.I)))
    for name in SUMMARY_PINS:
        out.append((name, re.compile(rf"(?<![\w.]){re.escape(pins[name].split('+')[0])}(?![\w]*\d)(?!\.\d)")))
    return out


def hand_written() -> list[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()

    def in_profile(f: str) -> str:  # profiles/NAME/docker/Dockerfile is laid out as the root's docker/Dockerfile
        return f.split("/", 2)[2] if f.startswith("profiles/") and f.count("/") >= 2 else f

    return [f for f in files if in_profile(f) not in LOCKS | GENERATED and not in_profile(f).startswith(GENERATED_DIRS)]


def readable(rel: str) -> str:
    """The file's text, the README without its summary paragraph and its generated section."""
    try:
        text = (ROOT / rel).read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return ""
    if rel == "README.md":
        for begin, end in ((contents.BEGIN, contents.END), (contents.PATCHES_BEGIN, contents.PATCHES_END)):
            text = re.sub(re.escape(begin) + r".*?" + re.escape(end), "", text, flags=re.S)
        # The lock check's example output: tests/lock/test_lock.py checks it is what the code prints, pins included.
        text = re.sub(r"^error: requirements\.lock\.txt:.*$", "", text, flags=re.M)
        head, _, rest = text.partition("\n\n")
        _, _, rest = rest.partition("\n\n")  # the title, then the summary paragraph
        text = "\n" * (head.count("\n") + 2) + rest
    return text


def literals(rel: str, text: str, found: list[tuple[str, re.Pattern]]) -> list[str]:
    return [f"{rel}:{n}: {m.group(0)!r} ({name}) in {line.strip()[:100]!r}"
            for n, line in enumerate(text.splitlines(), 1) for name, p in found if (m := p.search(line))][:1000]


def test_no_hand_written_file_writes_a_pinned_version():
    found = patterns(PIN)
    hits = [hit for rel in hand_written() for hit in literals(rel, readable(rel), found)]
    assert not hits, ("a version the lock pins, written by hand (name the pin, or read it from the lock):\n"
                      + "\n".join(hits[:40]) + (f"\n... and {len(hits) - 40} more" if len(hits) > 40 else ""))


EXAMPLE = {"flashinfer-python": "9.8.7", "torch": "7.6.5+cu130", "sgl-kernel": "6.5.43+cu130", "sglang": "5.4.3"}


@pytest.mark.parametrize("line", [
    "the image has flashinfer 9.8.7 in it", "pip install torch==7.6.5", "sglang-5.4.3-py3-none-any.whl",
    '"sgl-kernel": "6.5.43+cu130",', "FlashInfer v9.8.7's kernels", "torch 7.6.5+cu130 on PyPI",
    "a bare 9.8.7 is flashinfer's too",
])
def test_the_scan_finds_a_version_written_beside_its_name(line):
    assert literals("x", line, patterns(EXAMPLE)), line


@pytest.mark.parametrize("line", [
    "fixed upstream in sglang 5.4.30", "flashinfer 9.8.70 is another release", "torch 7.6.50", "sglang-stack:5.4.3-cu130",
    "the pinned FlashInfer", "cuda 13.0.1",
])
def test_the_scan_leaves_other_releases_and_names_alone(line):
    assert not literals("x", line, patterns(EXAMPLE)), line


def test_the_readme_summary_and_table_are_the_only_places_there():
    text = readable("README.md")
    assert contents.BEGIN not in text and "| override | the lock |" not in text
    assert PIN["flashinfer-python"] in (ROOT / "README.md").read_text().split("\n\n")[1], \
        "the README's summary names the pinned FlashInfer (its one sentence of default pins)"
