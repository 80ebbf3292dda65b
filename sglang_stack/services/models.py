"""The weights are pinned too: models.lock names each model repository by commit, with every file.

    invoke models-lock              resolve each [[model]]'s ``track`` (a branch or tag) to its commit and
                                    record every file's size and hash as the Hub records them (network)
    invoke models-verify            hash MODEL_DIR (or --dir) against its entry, in parallel (offline)
    invoke doctor                   checks MODEL_DIR and DRAFT_MODEL_DIR against it by names and sizes

The Hub records a sha256 for every file stored in LFS (the weights) and a git blob id
(sha1 of ``blob SIZE\\0`` + the bytes) for the small files kept in git (configs, tokenizer
code): the check uses whichever the Hub has. A drafter re-uploaded under the same name
changes acceptance, so a figure is only reproducible with the revision it ran against.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import ROOT, hubfile
from sglang_stack.errors import NETWORK, UserError, read_text

MODELS_LOCK = ROOT / "models.lock"
HUB_TIMEOUT_S = 30.0  # per request: a wedged Hub is an error after this, not silence
SCHEMA = 1
ROLES = ("target", "drafter", "drafter-mla")
DRAFTERS = ("drafter", "drafter-mla")  # DRAFTER=mha and DRAFTER=mla (entrypoints/drafter.py)
COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# A file of a Hub repository, as a relative POSIX path: printable, no backslash, no leading slash.
FILE_NAME = re.compile(r"(?!/)[^\x00-\x1f\x7f\\]{1,1024}")
HEADER = """\
# models.lock: each model repository by commit, with every file's size and hash as the Hub records them.
#
#   invoke models-lock             resolve each `track` to its commit and record the files (network: the Hub)
#   invoke models-verify           hash MODEL_DIR (--role drafter or drafter-mla: DRAFT_MODEL_DIR) against it
#   rev=$(invoke model-revision ROLE) && hf download REPO --revision "$rev" --local-dir DIR
#
# Written by `invoke models-lock`: edit `repo` or `track`, then run it again. An empty `revision`
# is a repository not pinned yet. `sha256` is the Hub's LFS hash; `git_sha1` its git blob id.
# A drafter's `acceptance` is what `invoke acceptance` expects of it (`invoke models-lock
# --accept-baseline FILE` records a run you accept); it is dropped when the drafter's commit changes.
# `published` are the accept lengths its publishers state (dataset, draft tokens, where), which
# `invoke acceptance` sets a measurement beside; edit them by hand, models-lock keeps them.
"""


@dataclass(frozen=True)
class ModelFile:
    name: str
    size: int
    sha256: str = ""  # the Hub's LFS sha256
    git_sha1: str = ""  # the Hub's git blob id, for files not in LFS


FLOOR = 1.2  # tokens per verify pass: below it the drafter contributes nothing (#22836 showed ~1.0)
"""The accept length `invoke acceptance` asks of a drafter with no recorded expectation."""


@dataclass(frozen=True)
class Expectation:
    """What `invoke acceptance` expects of the drafter: models.lock's `acceptance` table."""

    accept_length: float
    tolerance: float
    settings: str
    source: str

    @property
    def minimum(self) -> float:
        return round(self.accept_length - self.tolerance, 3)


@dataclass(frozen=True)
class Model:
    role: str
    repo: str
    track: str
    revision: str = ""
    files: tuple[ModelFile, ...] = field(default_factory=tuple)
    acceptance: dict | None = None  # the drafter's expected EAGLE-3 accept length (bench/acceptance.py)
    published: tuple[dict, ...] = ()  # accept lengths its publishers state, per dataset (`invoke acceptance` compares)

    @property
    def pinned(self) -> bool:
        return bool(self.revision)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def load(path: Path | None = None) -> dict[str, Model]:
    """role -> Model, validated; a problem is one line naming the key."""
    path = path or MODELS_LOCK
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: invalid TOML: {err}") from None
    if type(data.get("schema")) is not int or data["schema"] != SCHEMA:
        raise UserError(f"{path}: schema: expected {SCHEMA}, got {data.get('schema')!r}")
    entries = data.get("model", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path}: model: each model is a [[model]] table")
    out = {}
    for i, entry in enumerate(entries):
        where = f"{path.name}: model[{entry['role'] if isinstance(entry.get('role'), str) else i}]"
        unknown = set(entry) - {"role", "repo", "track", "revision", "files", "acceptance", "published"}
        if unknown:
            raise UserError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        role, repo = entry.get("role"), entry.get("repo")
        if role not in ROLES or role in out:
            raise UserError(f"{where}.role: {role!r}: one of {', '.join(ROLES)}, each once")
        if not isinstance(repo, str) or not re.fullmatch(r"[\w.-]+/[\w.-]+", repo) or set(repo.split("/")) & {".", ".."}:
            raise UserError(f"{where}.repo: {repo!r} is not a Hub repository (OWNER/NAME)")
        revision = entry.get("revision", "")
        if not isinstance(revision, str) or revision and not COMMIT.fullmatch(revision):
            raise UserError(f"{where}.revision: {revision!r} is not a 40-hex commit (run `invoke models-lock`)")
        track = entry.get("track", "main")
        if not isinstance(track, str) or not re.fullmatch(r"[\w./-]{1,255}", track):
            raise UserError(f"{where}.track: {track!r} is not a branch or tag name")
        listed = entry.get("files", [])
        if not isinstance(listed, list):
            raise UserError(f"{where}.files: a list of {{ name, size, sha256 | git_sha1 }} tables")
        files = []
        for j, f in enumerate(listed):
            if not isinstance(f, dict):
                raise UserError(f"{where}.files[{j}]: {f!r} is not a {{ name, size, sha256 | git_sha1 }} table")
            name, size = f.get("name"), f.get("size")
            if not isinstance(name, str) or not FILE_NAME.fullmatch(name) or ".." in name.split("/"):
                raise UserError(f"{where}.files[{j}].name: {name!r} is not a relative file name (no control "
                                "characters, backslashes, leading /, or ..)")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise UserError(f"{where}.files[{j}] ({name}).size: {size!r} is not a byte count")
            sha, sha1 = f.get("sha256", ""), f.get("git_sha1", "")
            if not isinstance(sha, str) or not isinstance(sha1, str):
                raise UserError(f"{where}.files[{j}] ({name}): sha256 and git_sha1 are hex strings")
            if not (SHA256.fullmatch(sha) if sha else re.fullmatch(r"[0-9a-f]{40}", sha1 or "")):
                raise UserError(f"{where}.files[{j}] ({name}): needs a sha256 or a git_sha1")
            files.append(ModelFile(name, size, sha, sha1))
        if files and not revision:
            raise UserError(f"{where}: files without a revision")
        acceptance = entry.get("acceptance")
        if acceptance is not None:
            _check_acceptance(acceptance, f"{where}.acceptance", role)
        published = entry.get("published", [])
        if not isinstance(published, list):
            raise UserError(f"{where}.published: a list of {{ {', '.join(PUBLISHED_KEYS)} }} tables")
        for j, figure in enumerate(published):
            _check_published(figure, f"{where}.published[{j}]", role)
        out[role] = Model(role, repo, track, revision, tuple(files), acceptance, tuple(published))
    return out


# An accept length a drafter's publishers state: on which dataset, at how many draft tokens (0: not stated), where.
PUBLISHED_KEYS = {"dataset": str, "accept_length": (int, float), "draft_tokens": int, "source": str}


def _check_published(value, where: str, role: str) -> None:
    if role not in DRAFTERS:
        raise UserError(f"{where}: only a drafter has published accept lengths")
    if not isinstance(value, dict) or set(value) != set(PUBLISHED_KEYS):
        raise UserError(f"{where}: expected {{ {', '.join(PUBLISHED_KEYS)} }}")
    for key, kind in PUBLISHED_KEYS.items():
        if not isinstance(value[key], kind) or isinstance(value[key], bool) or kind is str and not value[key].strip():
            raise UserError(f"{where}.{key}: {value[key]!r} is not a {'non-empty string' if kind is str else 'number'}")
    if not 1.0 <= value["accept_length"] <= 64 or not 0 <= value["draft_tokens"] <= 64:
        raise UserError(f"{where}: accept_length {value['accept_length']!r} (tokens per verify pass, at least 1) and "
                        f"draft_tokens {value['draft_tokens']!r} (0: not stated)")


ACCEPTANCE_KEYS = {"accept_length": (int, float), "tolerance": (int, float), "settings": str, "source": str}


def _check_acceptance(value, where: str, role: str) -> None:
    if role not in DRAFTERS:
        raise UserError(f"{where}: only a drafter has an acceptance expectation")
    if not isinstance(value, dict) or set(value) != set(ACCEPTANCE_KEYS):
        raise UserError(f"{where}: expected {{ {', '.join(ACCEPTANCE_KEYS)} }}")
    for key, kind in ACCEPTANCE_KEYS.items():
        if not isinstance(value[key], kind) or isinstance(value[key], bool):
            raise UserError(f"{where}.{key}: {value[key]!r} is not a {'number' if kind is not str else 'string'}")
    if not 1.0 <= value["accept_length"] <= 64 or not 0 <= value["tolerance"] < value["accept_length"]:
        raise UserError(f"{where}: accept_length {value['accept_length']!r} (tokens per verify pass, at least 1) and "
                        f"tolerance {value['tolerance']!r} (0 or more, below it)")


def _toml(value) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def render(models: dict[str, Model]) -> str:
    lines = [HEADER, f"schema = {SCHEMA}"]
    for model in (models[r] for r in ROLES if r in models):
        lines += ["", "[[model]]", f"role = {_toml(model.role)}", f"repo = {_toml(model.repo)}",
                  f"track = {_toml(model.track)}", f"revision = {_toml(model.revision)}"]
        if model.files:
            lines.append(f"# {len(model.files)} files, {model.size / 1e9:.2f} GB")
        lines.append("files = [" if model.files else "files = []")
        for f in model.files:
            digest = f'sha256 = "{f.sha256}"' if f.sha256 else f'git_sha1 = "{f.git_sha1}"'
            lines.append(f"    {{ name = {_toml(f.name)}, size = {f.size}, {digest} }},")
        if model.files:
            lines.append("]")
        if model.acceptance:
            a = model.acceptance
            lines.append(f"acceptance = {{ accept_length = {a['accept_length']}, tolerance = {a['tolerance']}, "
                         f"settings = {_toml(a['settings'])}, source = {_toml(a['source'])} }}")
        if model.published:
            lines.append("published = [")
            for p in model.published:
                lines.append(f"    {{ dataset = {_toml(p['dataset'])}, accept_length = {p['accept_length']}, "
                             f"draft_tokens = {p['draft_tokens']}, source = {_toml(p['source'])} }},")
            lines.append("]")
    return "\n".join(lines) + "\n"


def record_acceptance(expectation, path: Path | None = None, role: str = "drafter") -> str:
    """Write a drafter's acceptance expectation into models.lock (atomically); one line saying what."""
    from dataclasses import asdict

    from sglang_stack.atomic import write as atomic_write

    path = path or MODELS_LOCK
    models = load(path)
    if role not in models:
        raise UserError(f"{path.name}: no [[model]] with role {role!r} to record an acceptance for")
    drafter = models[role]
    value = asdict(expectation)
    _check_acceptance(value, f"{path.name}: model[{role}].acceptance", role)
    models[role] = Model(drafter.role, drafter.repo, drafter.track, drafter.revision, drafter.files, value,
                         drafter.published)
    atomic_write(path, render(models))
    return (f"drafter {drafter.repo}: expects accept length {expectation.accept_length:.2f} (at least "
            f"{expectation.accept_length - expectation.tolerance:.2f}) at {expectation.settings or 'any settings'}")


def hub_failure(err: BaseException) -> str | None:
    """``TYPE: its first line`` where ``err`` is huggingface_hub's failure to reach the Hub (its own, requests',
    httpx's or OSError's classes); None for any other exception, a bug to raise."""
    from huggingface_hub.errors import HfHubHTTPError

    if not isinstance(err, (HfHubHTTPError, OSError)) and not {c.__name__ for c in type(err).__mro__} & NETWORK:
        return None
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"


def hub_record(repo: str, revision: str, token: str | None = None) -> tuple[str, tuple[ModelFile, ...]]:
    """(commit, files) of ``repo`` at ``revision`` from the Hub (huggingface_hub; HF_ENDPOINT is honoured)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    endpoint = os.environ.get("HF_ENDPOINT") or None
    print(f"asking {endpoint or 'the Hub'} for {repo}@{revision} (timeout {HUB_TIMEOUT_S:g} s)", file=sys.stderr, flush=True)
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(repo, revision=revision, files_metadata=True,
                                                                timeout=HUB_TIMEOUT_S)
    except RevisionNotFoundError:
        raise UserError(f"{repo}: no revision {revision!r} on the Hub") from None
    except RepositoryNotFoundError:
        raise UserError(f"{repo}: no such repository on the Hub (or it is gated: set HF_TOKEN)") from None
    except Exception as err:
        if (cause := hub_failure(err)) is None:
            raise
        raise UserError(f"{repo}@{revision}: the Hub at {endpoint or 'https://huggingface.co'} did not answer (timeout "
                        f"{HUB_TIMEOUT_S:g} s per request): {cause}") from None
    files = []
    for s in sorted(info.siblings or [], key=lambda s: s.rfilename):
        lfs = s.lfs
        sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) or ""
        if s.size is None or not (sha or s.blob_id):
            raise UserError(f"{repo}@{revision}: the Hub gave no size or hash for {s.rfilename}")
        files.append(ModelFile(s.rfilename, int(s.size), sha, "" if sha else s.blob_id))
    return info.sha, tuple(files)


def lock_models(path: Path | None = None, token: str | None = None) -> list[str]:
    """Resolve and record every [[model]]; write models.lock atomically. Returns one line per model."""
    from sglang_stack.atomic import write as atomic_write

    path = path or MODELS_LOCK
    models = load(path)
    lines = []
    for role, model in models.items():
        commit, files = hub_record(model.repo, model.track, token)
        was = f"was {model.revision[:12]}" if model.revision and model.revision != commit else "unchanged" if model.revision else "new"
        # An accept length measured with other weights says nothing about these.
        kept = model.acceptance if model.revision == commit else None
        if model.acceptance and kept is None:
            lines.append(f"{role}: the acceptance expectation of {model.revision[:12]} is dropped: measure the new "
                         "commit and accept it (invoke acceptance, then invoke models-lock --accept-baseline FILE)")
        models[role] = Model(role, model.repo, model.track, commit, files, kept, model.published)
        lines.append(f"{role}: {model.repo}@{model.track} -> {commit} ({was}); {len(files)} files, "
                     f"{sum(f.size for f in files) / 1e9:.2f} GB")
    atomic_write(path, render(models))
    return lines


# --- checking a directory -------------------------------------------------------------------


def sglang_loads(runner, directory: Path, weights: bool) -> tuple[bool, str]:
    """Whether the SGLang ``runner`` runs (image.derive.Runner: an image, or a Python) has a model class for the
    drafter in ``directory`` (its own model registry) and, with ``weights``, builds it on the CPU and writes every
    parameter from the directory's weights (its own loader): ``entrypoints/drafter.py``. (ok, one line)."""
    from sglang_stack.entrypoints import drafter

    if not (directory / "config.json").is_file():
        raise UserError(f"{directory}: no config.json (a drafter directory holds its config and weights)")
    inside = str(drafter.DRAFT_DIR) if runner.image else str(directory.resolve())
    args = ["sglang_stack.entrypoints.drafter", inside, *(["--load"] if weights else [])]
    out = runner.json(args, "drafter-check", 3600, mounts={directory.resolve(): inside} if runner.image else None, ok=(0, 1))
    if out.get("error"):
        return False, f"{directory}: {out['error']}"
    line = f"{directory}: SGLang {out.get('sglang')} has {out.get('architecture')} ({out.get('class')})"
    if not weights:
        return True, line + "; --load also loads its weights"
    unwritten = out.get("unwritten") or []
    said = f"; SGLang warned: {out['warnings'][0]}" if out.get("warnings") else ""
    if unwritten:
        return False, (f"{line}, but {len(unwritten)} of {out.get('parameters')} parameters got no weight from the "
                       f"checkpoint (first: {unwritten[0]}){said}")
    return True, f"{line}: its loader wrote all {out.get('parameters')} parameters{said}"


# What the preflight hashes on every start: everything but the weight shards. `--trust-remote-code` runs the
# repository's own Python (modeling_*.py, tokenization_*.py), and a same-size edit of it passes a size check.
WEIGHTS = re.compile(r"\.(safetensors|bin|pt|pth|gguf|npz|h5|msgpack)$")
SMALL = 64 << 20


def quick_check(directory: Path, model: Model) -> list[str]:
    """Every file by name and size (a stat each: seconds for 600 GB), and every file but the weight shards (the
    code, configs and tokenizer, a few MB) by the hash the Hub records. Returns the differences."""
    problems = []
    for f in model.files:
        path = directory / f.name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            problems.append(f"{f.name}: missing")
            continue
        except OSError as err:
            problems.append(f"{f.name}: {err.strerror}")
            continue
        if size != f.size:
            problems.append(f"{f.name}: {size} bytes, {model.repo}@{model.revision[:12]} has {f.size}")
        elif not WEIGHTS.search(f.name) and size <= SMALL and file_digest(path, f) != (f.sha256 or f.git_sha1):
            problems.append(f"{f.name}: its content is not {model.repo}@{model.revision[:12]}'s (same size, other bytes)")
    return problems


def file_digest(path: Path, f: ModelFile) -> str:
    """The hash of ``path`` of the kind the Hub recorded for ``f``."""
    return hubfile.digest(path, f.sha256, f.git_sha1)


def verify_dir(directory: Path, model: Model, workers: int | None = None, progress=None) -> list[str]:
    """Hash every file against ``model``, ``workers`` at a time (hashlib runs outside the GIL).

    ``progress(done_bytes, total_bytes, name)`` is called as each file finishes.
    Returns the differences, each naming the file.
    """
    problems = quick_check(directory, model)
    bad = {p.split(":", 1)[0] for p in problems}
    todo = [f for f in model.files if f.name not in bad]
    total, done = sum(f.size for f in todo), 0
    workers = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(file_digest, directory / f.name, f): f for f in todo}
        for future in as_completed(futures):
            f = futures[future]
            want = f.sha256 or f.git_sha1
            try:
                got = future.result()
            except OSError as err:
                problems.append(f"{f.name}: {err.strerror}")
                continue
            if got != want:
                kind = "sha256" if f.sha256 else "git blob id"
                problems.append(f"{f.name}: {kind} {got[:12]}..., {model.repo}@{model.revision[:12]} has {want[:12]}...")
            done += f.size
            if progress:
                progress(done, total, f.name)
    return sorted(problems)
