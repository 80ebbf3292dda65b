"""`invoke models-lock`, `invoke models-verify` and `invoke model-revision`: the weights, pinned by commit."""

from __future__ import annotations

from pathlib import Path

from invoke import Exit, task

from sglang_stack.cli import user_errors
from sglang_stack.errors import UserError


def _pinned(role: str):
    """models.lock's entry for ``role``, which must carry a commit."""
    from sglang_stack.services import models

    if role not in models.ROLES:
        raise UserError(f"--role {role!r}: choose one of {', '.join(models.ROLES)}")
    pins = models.load()
    if role not in pins:
        raise UserError(f"{models.MODELS_LOCK.name}: no [[model]] with role {role!r}")
    if not pins[role].pinned:
        raise UserError(f"{models.MODELS_LOCK.name}: {pins[role].repo} is not pinned yet: run `invoke models-lock` "
                        "where the Hub is reachable")
    return pins[role]


@task(help={
    "token-file": "file holding a Hugging Face token, for gated repositories (default: $HF_TOKEN, if set)",
    "accept-baseline": "instead of the Hub: record the drafter's expected accept length from this file, an "
    "`invoke acceptance --out` report or an `invoke bench` bench.json you accept (offline; default: none)",
    "accept-tolerance": "with --accept-baseline: how far below it still passes (default: 0.15 for an acceptance "
    "report, 0.3 for a bench.json)",
})
@user_errors
def models_lock(c, token_file=None, accept_baseline=None, accept_tolerance=None):
    """Pin each model repository of models.lock by commit, with every file's size and hash (network: the Hub).

    Resolves each [[model]]'s `track` (a branch or tag, `main` by default) to the commit
    it names now, and records the files as the Hub lists them: the LFS sha256 of each weight
    file, the git blob id of each small one. Writes models.lock atomically; commit it.
    With --accept-baseline, records instead what `invoke acceptance` expects of the drafter.
    """
    import os

    from sglang_stack.errors import read_text
    from sglang_stack.services import acceptance, models

    if accept_baseline:
        if token_file:
            raise UserError("--accept-baseline records an expectation offline: it takes no --token-file")
        tolerance = None
        if accept_tolerance is not None:
            try:
                tolerance = float(str(accept_tolerance).strip())
            except ValueError:
                raise UserError(f"--accept-tolerance {accept_tolerance!r}: not a number") from None
        print(models.record_acceptance(acceptance.baseline_from(Path(accept_baseline), tolerance)))
        print(f"wrote {models.MODELS_LOCK.name}")
        return
    if accept_tolerance is not None:
        raise UserError("--accept-tolerance goes with --accept-baseline")
    token = read_text(Path(token_file)).strip() if token_file else os.environ.get("HF_TOKEN") or None
    for line in models.lock_models(token=token):
        print(line)
    print(f"wrote {models.MODELS_LOCK.name}")


@task(
    help={
        "role": "target or drafter (default: target)",
        "dir": "the downloaded directory (default: MODEL_DIR, or DRAFT_MODEL_DIR for the drafter, from .env)",
        "workers": "files hashed at once (default: the CPU count, at most 8)",
    }
)
@user_errors
def models_verify(c, role="target", dir=None, workers=None):
    """Hash a downloaded model directory against models.lock, in parallel, and name every file that differs.

    Offline. Reads every byte (about 600 GB for Kimi-K2.5: minutes on NVMe); `invoke doctor`
    checks names and sizes in seconds instead.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from sglang_stack.flags import parse_count
    from sglang_stack.services import compose, models

    count = parse_count("--workers", workers, 1) if workers is not None else None
    model = _pinned(role)
    if dir:
        directory = Path(dir)
    else:
        svc = compose.service("eagle3")
        directory = svc.model_dir if role == "target" else svc.draft_dir
    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory (pass --dir)")
    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), transient=True) as progress:
        job = progress.add_task(f"hashing {directory}", total=model.size)
        problems = models.verify_dir(directory, model, count, lambda done, total, name: progress.update(job, completed=done))
    for line in problems:
        print(f"FAIL {line}")
    if problems:
        raise Exit(f"error: {directory}: {len(problems)} of {len(model.files)} files differ from {model.repo}@{model.revision}", code=1)
    print(f"ok   {directory}: all {len(model.files)} files ({model.size / 1e9:.2f} GB) match {model.repo}@{model.revision}")


@task(help={"role": "target or drafter (default: target)"})
@user_errors
def model_revision(c, role="target"):
    """Print the commit models.lock pins for ROLE, for `hf download REPO --revision "$(invoke model-revision)"`."""
    print(_pinned(role).revision)
