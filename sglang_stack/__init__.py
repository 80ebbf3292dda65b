"""sglang-stack: a pinned, patched, reproducible SGLang inference image.

The logic behind the `invoke` tasks (``sglang_stack.tasks``), in layers, each using only those below it
(docs/architecture.md):

    tasks/                      every task, and the error boundary they run in
    smoke/  bench/              the end-to-end checks; measuring running servers
    image/  doctor/             building the image; the host preflight
    services/  audit/           compose, settings, models, k8s; the EAGLE-3 audit
    lock/  patching/            versions.lock and its requirement files; the patch series
    entrypoints/  image/steps/  what the image runs, and its build steps
    errors redact atomic shell download engine flags yaml_file templates   the floor

entrypoints/, image/steps/, patching/, audit/ and errors, redact and atomic run inside the image on the
standard library alone (tests/project/test_in_image.py), so keep this file free of imports.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: where versions.lock, docker/ and patches/ live."""
