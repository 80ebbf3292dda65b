"""sglang-stack: a pinned, patched, reproducible SGLang inference image.

This package holds the logic behind ``tasks.py``. Modules named here run
inside the image as well (``patches``, ``audit``, ``health``, ``errors``, ``atomic``);
they use the standard library only, so keep this file free of imports.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: where versions.lock, docker/ and patches/ live."""
