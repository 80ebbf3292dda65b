"""Patch 0005 on the real sglang tree: ServerArgs' repr, the one SGLang logs at start, hides the API keys.

ServerArgs itself cannot be imported without SGLang's dependencies, so the class is rebuilt
from the patched file's own source: every field (annotations made plain ``object``, defaults
other than literals made None) and every method named ``__repr__``, under the class's
own ``@dataclasses.dataclass``. Then it is built and formatted the way entrypoints/engine.py
does (``f"{server_args=}"``). The same rebuild from the unpatched file shows the key: the
test sees what the patch changes.
"""

from __future__ import annotations

import ast
import dataclasses
import shutil

import pytest

from sglang_stack import ROOT
from sglang_stack.patching import patches

KEY = "sk-secret-0123456789"


def server_args_class(tree_root):
    source = (tree_root / "sglang" / "srt" / "server_args.py").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    body = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value if isinstance(node.value, ast.Constant) else ast.Constant(None)
            body.append(ast.AnnAssign(target=node.target, annotation=ast.Name("object", ast.Load()), simple=1, value=value))
        elif isinstance(node, ast.FunctionDef) and node.name == "__repr__":
            body.append(node)
    module = ast.Module(body=[ast.ClassDef(name="ServerArgs", bases=[], keywords=[], body=body,
                                           decorator_list=cls.decorator_list, type_params=[])], type_ignores=[])
    namespace = {"dataclasses": dataclasses, "field": dataclasses.field}
    exec(compile(ast.fix_missing_locations(module), "server_args.py", "exec"), namespace)
    return namespace["ServerArgs"]


@pytest.fixture(scope="module")
def trees(sglang_wheel, tmp_path_factory):
    import zipfile

    pristine = tmp_path_factory.mktemp("pristine")
    with zipfile.ZipFile(sglang_wheel) as zf:
        zf.extractall(pristine)
    patched = tmp_path_factory.mktemp("patched") / "site"
    shutil.copytree(pristine, patched)
    patches.apply_series(patched, ROOT / "patches", quiet=True)
    return pristine, patched


def log_line(cls, **values) -> str:
    server_args = cls(model_path="/models/target", **values)
    return f"{server_args=}"  # entrypoints/engine.py: logger.info(f"{server_args=}")


def test_the_patched_repr_hides_both_keys_and_keeps_the_rest(trees):
    line = log_line(server_args_class(trees[1]), api_key=KEY, admin_api_key=KEY + "-admin")
    assert KEY not in line, f"the key reaches the log line: {line[:300]}"
    assert "api_key='<redacted>'" in line and "admin_api_key='<redacted>'" in line, line[:400]
    assert "model_path='/models/target'" in line, "every other argument is still logged"


def test_an_unset_key_is_shown_as_unset(trees):
    line = log_line(server_args_class(trees[1]))
    assert "api_key=None" in line, "None is no secret: the log says that no key is set"


def test_unpatched_sglang_logs_the_key(trees):
    """The premise: SGLang's own dataclass repr prints the key."""
    assert KEY in log_line(server_args_class(trees[0]), api_key=KEY)
