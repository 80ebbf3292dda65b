"""The one Jinja environment every render uses: the Dockerfile's (``image.render``) and the manifests' (``services.k8s``)."""

from __future__ import annotations

from pathlib import Path

import jinja2


def environment(template_dir: Path) -> jinja2.Environment:
    """A missing value fails the render instead of printing ''."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
