"""The in-image boundary: what runs inside the image (or its build) imports the standard library and itself only.

The image's Python has no site-packages of ours: the Dockerfile copies these folders and files alone to
/opt/sglang-stack. This one test walks them, every import at any depth (a function's lazy import too), and
a second one imports each module from a bare copy with -S -E, as the image's python3 would.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT

PACKAGE = ROOT / "sglang_stack"
IN_IMAGE_FOLDERS = ("entrypoints", "image/steps", "patching", "audit")
IN_IMAGE_FILES = ("__init__.py", "errors.py", "redact.py", "atomic.py", "hubfile.py")  # the floor the folders stand on
# Imports the build supplies itself, each on a PYTHONPATH of its own for one step (docker/macros.j2, with_build_tools),
# the SGLang and torch of the runtime image, which `invoke settings` runs its module against,
# and the audit probe's import of its sibling when it runs as a file (`python3 classprobe.py`).
BUILD_TOOLS = {
    "sglang_stack/image/steps/binaries.py": {"elftools"},
    "sglang_stack/image/steps/sbom.py": {"packageurl"},
    "sglang_stack/audit/classprobe.py": {"standins"},
    "sglang_stack/entrypoints/settings.py": {"sglang", "torch"},  # the image's own: `invoke settings` runs it there
    "sglang_stack/entrypoints/probe.py": {"torch", "flashinfer"},  # the image's own: `invoke probe` runs it there
    "sglang_stack/entrypoints/allreduce.py": {"sglang", "torch", "flashinfer"},  # the image's own: `invoke doctor` runs it there
    "sglang_stack/entrypoints/drafter.py": {"sglang", "torch"},  # the image's own: `invoke drafter-check` runs it there
    "sglang_stack/entrypoints/prompts.py": {"sglang", "numpy"},  # the image's own: `invoke acceptance --dataset` runs it there
    "sglang_stack/entrypoints/benchmark.py": {"sglang", "numpy"},  # the image's own: `invoke bench --generator sglang`
}


def in_image_files(package: Path = PACKAGE) -> list[Path]:
    files = [p for folder in IN_IMAGE_FOLDERS for p in sorted((package / folder).rglob("*.py"))]
    return files + [package / name for name in IN_IMAGE_FILES]


def module_of(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in the file; ``from pkg import mod`` counts ``pkg.mod`` too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def boundary_violations(package: Path = PACKAGE) -> list[str]:
    files = in_image_files(package)
    inside = {module_of(p, package) for p in files} | {"sglang_stack.image"}  # steps' namespace parent
    bad = []
    for path in files:
        rel = str(path.relative_to(package.parent))
        allowed = BUILD_TOOLS.get(rel, set())
        for line, name in imports(path):
            top = name.split(".")[0]
            if top == "sglang_stack":
                # `from sglang_stack import ROOT` names an attribute, not a module: only modules are judged.
                where = package.parent / name.replace(".", "/")
                if name not in inside and (where.with_suffix(".py").is_file() or where.is_dir()):
                    bad.append(f"{rel}:{line}: imports {name}, which the image does not have")
            elif top not in sys.stdlib_module_names and top != "__future__" and top not in allowed:
                bad.append(f"{rel}:{line}: imports {name}, which is not in the standard library")
    return bad


def test_in_image_code_imports_the_standard_library_and_itself_only():
    bad = boundary_violations()
    assert not bad, "in-image code reaches outside the image:\n" + "\n".join(bad)


def test_the_boundary_check_finds_a_host_import_and_a_third_party_one(tmp_path):
    """The check can fail: a copy of the package with one host import and one third-party import planted."""
    copy = tmp_path / "sglang_stack"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    serve = copy / "entrypoints" / "serve.py"
    serve.write_text(serve.read_text() + "\n\ndef _planted():\n    from sglang_stack.services import compose\n    import yaml\n")
    bad = boundary_violations(copy)
    assert any("serve.py" in b and "sglang_stack.services.compose" in b for b in bad), bad
    assert any("serve.py" in b and "imports yaml" in b for b in bad), bad


def test_every_in_image_module_imports_from_a_bare_copy(tmp_path):
    """Each module imported from a copy of the in-image files alone, with no site-packages (-S -E)."""
    for path in in_image_files():
        dest = tmp_path / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    modules = sorted(module_of(p) for p in in_image_files())
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    proc = subprocess.run([sys.executable, "-S", "-E", "-c", code, *modules], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"an in-image module needs more than the in-image files: {proc.stderr[-2000:]}"


def test_the_boundary_covers_every_file_the_dockerfile_copies():
    """What docker/Dockerfile copies into the image lies inside the folders this test walks."""
    import image_layout

    walked = {str(p.relative_to(ROOT)) for p in in_image_files()}
    shipped = set(image_layout.modules())
    assert shipped, "docker/Dockerfile copies no package file"
    outside = sorted(shipped - walked)
    assert not outside, f"the image receives files the boundary test does not walk: {outside}"


@pytest.mark.parametrize("folder", IN_IMAGE_FOLDERS)
def test_the_dockerfile_copies_each_in_image_folder(folder):
    import image_layout

    copied = {str(Path(m).parent) for m in image_layout.modules()}
    assert f"sglang_stack/{folder}" in copied, f"docker/Dockerfile copies nothing from sglang_stack/{folder}/"
