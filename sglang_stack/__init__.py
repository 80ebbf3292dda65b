"""sglang-stack: a pinned, patched, reproducible SGLang inference image.

This package holds the logic behind ``tasks.py``, in layers, each using only those below it:

    smoke                      the end-to-end check: builds, serves, benches
    services/  bench/          compose, doctor, health, router, k8s; the client and reports
    patching/                  the patch series and the EAGLE-3 audit
    image/                     lock, pins, resolve, verify, render, build, store, size, binaries
    errors shell atomic fetch engine flags yaml_file   the floor

Modules named here run
inside the image as well (``patches``, ``audit``, ``health``, ``errors``, ``atomic``);
they use the standard library only, so keep this file free of imports.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: where versions.lock, docker/ and patches/ live."""
