"""What the image's SGLang ships, found on disk with nothing imported: the start-time checks ask it before they turn
on a feature that only some releases have (the PCIe-IPC all-reduce, adaptive speculation, the MLA drafter).

Importing ``sglang`` to ask would cost seconds at every start and pull in torch; a module's file on disk is the
answer SGLang itself acts on when it imports it later. Stdlib only: it runs in the image.
"""

from __future__ import annotations

from pathlib import Path


def sglang_has(module_file: tuple[str, ...]) -> tuple[bool, str]:
    """Whether the installed SGLang ships ``module_file`` (a path under ``sglang/``), and its version ("" where no
    SGLang is installed, "?" where its metadata is missing)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return False, ""
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return any(Path(root, *module_file).is_file() for root in spec.submodule_search_locations), version
