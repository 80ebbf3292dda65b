"""The commands the README and docs/ show are ones this checkout has: every `invoke TASK --flag` exists."""

from __future__ import annotations

import re
import shlex

import pytest

from sglang_stack import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GLOBAL_FLAGS = {"--help", "--list", "--search-root"}


def invocations(text: str) -> list[str]:
    """`invoke ...` as shown inline or at the start of a line in a code block (after an optional `$ `)."""
    found = re.findall(r"`(invoke [^`]+)`", text)
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\$ ", "", line.strip())
            for part in re.split(r"\s*(?:&&|;|\|\|)\s*", line):
                if part.startswith(("invoke ", ". .venv/bin/activate && invoke ")):
                    found.append(part.split("&& ", 1)[-1])
    return found


def test_the_readme_activates_the_venv_before_the_first_invoke():
    first_block = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    assert ". .venv/bin/activate && invoke build" in first_block, f"the first command must activate the venv: {first_block}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_invoke_command_names_a_task_and_its_flags(doc):
    import tasks

    shown = invocations(doc.read_text())
    assert shown or doc.name == "README.md" or "invoke" not in doc.read_text(), f"{doc.name}: no invoke command found"
    for command in shown:
        words = shlex.split(re.sub(r"\s+#.*$", "", command).replace("|", " "))[1:]
        words = [w for w in words if not w.startswith(("[", "<")) and w not in ("...", "…")]
        task_name = next((w for w in words if not w.startswith("-")), None)
        flags = {w.split("=", 1)[0].strip("[]`,.") for w in words if w.startswith("--")}
        if task_name is None:
            assert flags <= GLOBAL_FLAGS, f"{doc.name}: `{command}` uses flags of no task"
            continue
        if task_name == "TASK":  # `invoke --help TASK`
            continue
        for name in task_name.split("/"):  # `invoke up/down/logs/status`
            assert name in tasks.ns.task_names, f"{doc.name}: `{command}` names no task ({name!r})"
            arguments = tasks.ns[name].get_arguments()
            known = {f"--{n}" for a in arguments for n in a.names} | {f"--no-{n}" for a in arguments for n in a.names}
            unknown = flags - known - GLOBAL_FLAGS
            assert not unknown, f"{doc.name}: `{command}`: {name} has no {sorted(unknown)}"
