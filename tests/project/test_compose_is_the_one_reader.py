"""compose.yaml is the one list of services and Compose the one reader of it: no module of the package writes a
service's name or port variable, parses compose.yaml or copies Compose's interpolation."""

from __future__ import annotations

import pytest

from sglang_stack import ROOT
from sglang_stack.services import composefile, variables

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip


def _constants(tree):
    import ast

    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_module_lists_the_services_or_their_ports():
    """The names, roles and port variables are compose.yaml's: no module writes a service's name or a port map."""
    import ast

    proj = composefile.project(variables.Environment({}, {}), (ROOT / "compose.yaml",))
    names = set(proj.names())
    ports = {proj.port_variable(n, 30080 if proj.role(n) == composefile.ROUTER else 30000) for n in names}
    found = []
    for path in sorted((ROOT / "sglang_stack").rglob("*.py")):
        for lineno, value in _constants(ast.parse(path.read_text())):
            if value in (names - {composefile.ROUTER}) or value in ports:
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {value!r}")
    assert not found, f"service names or port variables written in code (compose.yaml holds them): {found}"


def test_no_module_reads_compose_files_or_interpolates_as_compose_does():
    """Compose is the one reader: no module parses `${VAR:-x}` or loads compose.yaml with a YAML parser."""
    import ast

    found = []
    for path in sorted((ROOT / "sglang_stack").rglob("*.py")):
        text = path.read_text()
        for lineno, value in _constants(ast.parse(text)):
            if value in (":-", ":?", ":+"):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {value!r}")
        if "yaml_file.load(COMPOSE" in text or "load_raw(" in text:
            found.append(f"{path.relative_to(ROOT)}: loads a compose file itself")
    assert not found, f"a copy of Compose's interpolation or reading: {found}"
