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
            task = tasks.ns[name]
            kept = dict(task.help)  # get_arguments hands the help strings to the flags and empties the dict
            arguments = task.get_arguments()
            task.help = kept
            known = {f"--{n}" for a in arguments for n in a.names} | {f"--no-{n}" for a in arguments for n in a.names}
            unknown = flags - known - GLOBAL_FLAGS
            assert not unknown, f"{doc.name}: `{command}`: {name} has no {sorted(unknown)}"


# Tasks whose documented commands run here as they are (offline or from the cache, no image, no GPU).
RUNS_HERE = {"render", "k8s", "doctor", "status", "model-revision", "models-verify", "lock", "patch-check", "--help", "--list"}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+$|^<|[.][.][.]|…|\[")


def runnable() -> list[tuple[str, str]]:
    """(the first doc that shows it, the command) for each distinct documented command that runs here."""
    out: dict[str, tuple[str, str]] = {}
    for doc in DOCS:
        for command in invocations(doc.read_text()):
            words = shlex.split(re.sub(r"\s+#.*$", "", command))[1:]
            task = next((w for w in words if not w.startswith("-")), words[0] if words else "")
            if task == "lock" and "--check" not in words:  # a re-resolve: network, and it rewrites the locks
                continue
            if words and task in RUNS_HERE and "|" not in command and not any(PLACEHOLDER.search(w) for w in words):
                out.setdefault(" ".join(words), (doc.name, " ".join(words)))
    return list(out.values())


@pytest.mark.parametrize("doc, command", runnable(), ids=lambda v: v)
def test_every_documented_command_that_can_run_here_runs_without_a_traceback(doc, command, tmp_path):
    """Run in a copy of the checkout, so a documented `invoke k8s --out manifests` writes there."""
    import subprocess
    import sys

    import checkout

    work = checkout.context(tmp_path / "checkout")
    words = command.split()
    if "my-values.yaml" in words:  # the docs' own first step: a copy of deploy/k8s/values.yaml
        (work / "my-values.yaml").write_bytes((ROOT / "deploy" / "k8s" / "values.yaml").read_bytes())
    proc = subprocess.run([sys.executable, "-m", "invoke", *words], cwd=work, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, f"{doc}: `{command}`:\n{said[-3000:]}"
    if words[:1] in (["render"], ["k8s"]) and "--out" in words or words == ["render"] or words[:2] == ["lock", "--check"]:
        assert proc.returncode == 0, f"{doc}: `invoke {command}` must work on a fresh checkout:\n{said[-3000:]}"
    if proc.returncode == 2:
        assert proc.stderr.strip().splitlines()[-1].startswith("error: "), f"{doc}: `{command}` exit 2 without a reason"
    else:
        assert proc.returncode in (0, 1), f"{doc}: `{command}` exit {proc.returncode}:\n{said[-3000:]}"
