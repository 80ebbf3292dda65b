"""models.lock: the weights by commit. The Hub is out of reach here, so a loopback HTTP server
answers huggingface_hub's own request (``/api/models/REPO/revision/REV?blobs=True``) with
metadata recorded in the Hub's format for a small repository whose files this test writes:
the hashes in it are the real hashes of those files, an LFS sha256 for the weights and a
git blob id for the small files, so the checks below hash real bytes against real records.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack.errors import UserError
from sglang_stack.services import models
from sglang_stack.doctor import inputs

from hub import COMMIT, FILES, SERVED, blob_id


def lock_file(tmp_path: Path, **drafter) -> Path:
    path = tmp_path / "models.lock"
    entry = {"role": "drafter", "repo": "lightseekorg/kimi-k2.5-eagle3", "track": "main", **drafter}
    path.write_text(models.render({"drafter": models.Model(**entry)}))
    return path


def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "drafter"
    directory.mkdir()
    for name, data in FILES.items():
        (directory / name).write_bytes(data)
    return directory


def test_models_lock_pins_the_commit_and_every_file_through_huggingface_hub(hub, tmp_path):
    path = lock_file(tmp_path)
    lines = models.lock_models(path)
    assert lines == [f"drafter: lightseekorg/kimi-k2.5-eagle3@main -> {COMMIT} (new); 3 files, 0.00 GB"]
    assert hub == ["/api/models/lightseekorg/kimi-k2.5-eagle3/revision/main?blobs=true"], "one request, with file metadata"
    pin = models.load(path)["drafter"]
    assert pin.revision == COMMIT and [f.name for f in pin.files] == sorted(FILES)
    weights = next(f for f in pin.files if f.name == "model.safetensors")
    assert weights.sha256 == hashlib.sha256(FILES["model.safetensors"]).hexdigest() and not weights.git_sha1
    config = next(f for f in pin.files if f.name == "config.json")
    assert config.git_sha1 == blob_id(FILES["config.json"]) and not config.sha256
    assert models.lock_models(path)[0].endswith("(unchanged); 3 files, 0.00 GB")
    assert models.render(models.load(path)) == path.read_text(), "load and render round-trip"


def test_the_hubs_refusals_are_one_line(hub, tmp_path):
    with pytest.raises(UserError, match="moonshotai/nope: no such repository on the Hub"):
        models.hub_record("moonshotai/nope", "main")
    with pytest.raises(UserError, match="no revision 'v9' on the Hub"):
        models.hub_record("lightseekorg/kimi-k2.5-eagle3", "v9")
    path = lock_file(tmp_path, track="v9")
    before = path.read_bytes()
    with pytest.raises(UserError):
        models.lock_models(path)
    assert path.read_bytes() == before, "nothing is written when the Hub refuses"


def test_a_wedged_hub_is_an_error_after_the_timeout_it_names(monkeypatch, capfd):
    """A Hub that accepts the connection and never answers: one line after HUB_TIMEOUT_S, not silence."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepted by the kernel, never read: the request hangs until the client gives up
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setattr(models, "HUB_TIMEOUT_S", 1.0)
    start = time.monotonic()
    try:
        with pytest.raises(UserError, match=r"lightseekorg/kimi-k2.5-eagle3@main: the Hub at http://127.0.0.1:\d+ did not "
                                            r"answer \(timeout 1 s per request\): ReadTimeout"):
            models.hub_record("lightseekorg/kimi-k2.5-eagle3", "main")
    finally:
        listener.close()
    assert time.monotonic() - start < 30, "the timeout did not apply"
    assert "(timeout 1 s)" in capfd.readouterr().err, "the wait is announced with its timeout"


def test_the_git_blob_id_is_gits_own(tmp_path):
    if not shutil.which("git"):
        pytest.skip("needs git")
    path = tmp_path / "f"
    path.write_bytes(FILES["config.json"])
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert models.file_digest(path, models.ModelFile("f", path.stat().st_size, git_sha1=git)) == git


@pytest.fixture
def pinned(hub, tmp_path) -> models.Model:
    path = lock_file(tmp_path)
    models.lock_models(path)
    return models.load(path)["drafter"]


def test_a_good_directory_verifies_and_each_kind_of_difference_is_named(pinned, tmp_path):
    directory = model_dir(tmp_path)
    seen = []
    assert models.verify_dir(directory, pinned, workers=3, progress=lambda done, total, name: seen.append(done)) == []
    assert seen[-1] == pinned.size and sorted(seen) == seen
    data = bytearray(FILES["model.safetensors"])
    data[1000] ^= 1  # one bit, same size: only the hash can tell
    (directory / "model.safetensors").write_bytes(data)
    (directory / "tokenizer_config.json").write_bytes(b"{ }\n")
    (directory / "config.json").unlink()
    assert models.quick_check(directory, pinned) == ["config.json: missing",
                                                     f"tokenizer_config.json: 4 bytes, lightseekorg/kimi-k2.5-eagle3@{COMMIT[:12]} has 3"]
    problems = models.verify_dir(directory, pinned, workers=2)
    assert len(problems) == 3 and problems[0] == "config.json: missing"
    assert problems[1].startswith("model.safetensors: sha256 ") and f"@{COMMIT[:12]} has " in problems[1]
    assert problems[2].startswith("tokenizer_config.json: 4 bytes")


def test_the_doctor_checks_names_and_sizes_against_the_pin(pinned, tmp_path, monkeypatch):
    monkeypatch.setattr(models, "MODELS_LOCK", tmp_path / "models.lock")
    directory = model_dir(tmp_path)
    ok = inputs._pin_check("drafter", directory, "D")
    assert ok.status == "ok" and ok.detail == (f"D; 3 files match lightseekorg/kimi-k2.5-eagle3@{COMMIT[:12]} by name and "
                                               "size, every file but the weights by hash")
    (directory / "model.safetensors").write_bytes(b"short")
    bad = inputs._pin_check("drafter", directory, "D")
    assert bad.status == "FAIL" and "1 of 3 files differ" in bad.detail and "(first: model.safetensors: 5 bytes" in bad.detail
    assert bad.fix.startswith(f"hf download lightseekorg/kimi-k2.5-eagle3 --revision {COMMIT} --local-dir {directory}")
    target = inputs._pin_check("model", directory, "M")
    assert target.status == "ok" and "models.lock does not pin" in target.detail, "no target entry in this lock"


def test_a_same_size_edit_of_the_repositorys_code_fails_the_preflight(pinned, tmp_path, monkeypatch):
    """--trust-remote-code runs the repository's Python: the preflight hashes every file but the weight shards on
    every start, so a same-size edit of it is caught; a weight shard's same-size edit is left to models-verify."""
    monkeypatch.setattr(models, "MODELS_LOCK", tmp_path / "models.lock")
    directory = model_dir(tmp_path)
    config = bytearray((directory / "config.json").read_bytes())
    config[-2] = ord("X") if config[-2] != ord("X") else ord("Y")  # one byte, same size
    (directory / "config.json").write_bytes(config)
    bad = inputs._pin_check("drafter", directory, "D")
    assert bad.status == "FAIL" and "config.json: its content is not" in bad.detail, bad.line()
    (directory / "config.json").write_bytes(FILES["config.json"])
    data = bytearray(FILES["model.safetensors"])
    data[1000] ^= 1
    (directory / "model.safetensors").write_bytes(data)
    assert inputs._pin_check("drafter", directory, "D").status == "ok", "the weights are hashed by invoke models-verify"


def test_the_shipped_models_lock_names_every_repository():
    pins = models.load()
    assert {p.role: p.repo for p in pins.values()} == {"target": "moonshotai/Kimi-K2.5", "drafter": "lightseekorg/kimi-k2.5-eagle3",
                                                      "drafter-mla": "lightseekorg/kimi-k2.5-eagle3-mla"}
    assert models.render(pins) == models.MODELS_LOCK.read_text(), "models.lock is exactly what `invoke models-lock` writes"


def test_bench_records_the_pins_and_whether_the_directories_match(pinned, tmp_path, monkeypatch):
    from sglang_stack.bench import provenance
    from sglang_stack.services import variables

    monkeypatch.setattr(models, "MODELS_LOCK", tmp_path / "models.lock")
    directory = model_dir(tmp_path)
    env = variables.environment(env_file=tmp_path / "none.env", shell_env={"DRAFT_MODEL_DIR": str(directory)})
    assert provenance.models(env) == {"drafter": {"repo": "lightseekorg/kimi-k2.5-eagle3", "revision": COMMIT,
                                                  "dir": str(directory), "matches": True}}
    (directory / "config.json").unlink()
    assert provenance.models(env)["drafter"]["matches"] is False


PIN = f'[[model]]\nrole = "drafter"\nrepo = "lightseekorg/kimi-k2.5-eagle3"\ntrack = "main"\nrevision = "{COMMIT}"\n'


@pytest.mark.parametrize("body, says", [
    ("schema = true\n", "schema: expected 1, got True"),
    ("schema = 1\nmodel = 3\n", "model: each model is a [[model]] table"),
    ("schema = 1\nmodel = [1, 2]\n", "model: each model is a [[model]] table"),
    ("schema = 1\n" + PIN + "files = 7\n", "model[drafter].files: a list of"),
    ("schema = 1\n" + PIN + 'files = ["a"]\n', "model[drafter].files[0]: 'a' is not a { name, size"),
    ("schema = 1\n" + PIN + 'files = [{ name = "a\\u0000b", size = 1, sha256 = "' + "a" * 64 + '" }]\n',
     "files[0].name: 'a\\x00b' is not a relative file name"),
    ("schema = 1\n" + PIN + 'files = [{ name = "a\\\\b", size = 1, sha256 = "' + "a" * 64 + '" }]\n', "is not a relative file name"),
    ("schema = 1\n" + PIN + 'files = [{ name = "a", size = true, sha256 = "' + "a" * 64 + '" }]\n', "size: True is not a byte count"),
    ("schema = 1\n" + PIN + 'files = [{ name = "a", size = 1, sha256 = 5 }]\n', "sha256 and git_sha1 are hex strings"),
    ("schema = 1\n" + PIN.replace('track = "main"', "track = 3"), "model[drafter].track: 3 is not a branch or tag name"),
    ("schema = 1\n" + PIN.replace(f'revision = "{COMMIT}"', "revision = 0"), "model[drafter].revision: 0 is not a 40-hex"),
])
def test_a_models_lock_of_another_shape_is_one_line(tmp_path, body, says):
    path = tmp_path / "models.lock"
    path.write_text(body)
    with pytest.raises(UserError) as err:
        models.load(path)
    assert says in str(err.value) and "\n" not in str(err.value), err.value


def test_the_doctor_names_a_bad_models_lock_instead_of_crashing(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "MODELS_LOCK", tmp_path / "models.lock")
    (tmp_path / "models.lock").write_text("schema = 1\n" + PIN + 'files = [{ name = "a\\u0000b", size = 1, sha256 = "'
                                          + "a" * 64 + '" }]\n')
    check = inputs._pin_check("drafter", model_dir(tmp_path), "D")
    assert check.status == "FAIL" and "is not a relative file name" in check.detail, check


# --- PREFETCH_MODELS: the image's prefetch step, with the real `hf download` against the loopback Hub ----------


def prefetch(lock: Path, dest: Path, *refs: str) -> subprocess.CompletedProcess:
    from sglang_stack import ROOT

    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HOME": str(dest.parent / "hf-home"),
           "HF_ENDPOINT": os.environ["HF_ENDPOINT"], "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sglang_stack.image.steps.prefetch", "--lock", str(lock), "--dest",
                           str(dest), *refs], capture_output=True, text=True, timeout=120, env=env)


def test_prefetch_bakes_the_locked_commit_and_refuses_other_bytes(pinned, tmp_path):
    lock = tmp_path / "models.lock"
    ref = f"{pinned.repo}@{pinned.revision}"
    good = prefetch(lock, tmp_path / "models", ref)
    assert good.returncode == 0, good.stderr[-2000:]
    baked = tmp_path / "models" / pinned.repo
    assert sorted(p.name for p in baked.rglob("*")) == sorted(FILES), "the model's files and nothing else (no .cache)"
    assert models.verify_dir(baked, pinned) == []
    data = bytearray(FILES["model.safetensors"])
    data[7] ^= 1  # the repository changed upstream under the same name and size
    SERVED["model.safetensors"] = bytes(data)
    bad = prefetch(lock, tmp_path / "again", ref)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == (
        f"error: prefetch: {ref}: model.safetensors: other bytes than models.lock records"), bad.stderr[-2000:]
    other = prefetch(lock, tmp_path / "other", f"{pinned.repo}@{'f' * 40}")
    assert other.returncode == 1 and "models.lock pins no such model" in other.stderr, other.stderr


def test_prefetch_models_names_roles_of_models_lock(pinned, tmp_path):
    from sglang_stack.image import workflow

    lock = tmp_path / "models.lock"
    assert workflow.prefetch_refs("drafter", lock) == f"{pinned.repo}@{pinned.revision}"
    with pytest.raises(UserError, match=r"'org/model' is not a role of models.lock \(drafter\)"):
        workflow.prefetch_refs("org/model", lock)
    (tmp_path / "unpinned").mkdir()
    unpinned = lock_file(tmp_path / "unpinned")
    with pytest.raises(UserError, match="models.lock pins no commit of drafter .* run `invoke models-lock` first"):
        workflow.prefetch_refs("drafter", unpinned)


@pytest.mark.parametrize("repo", ["../..", "org/..", "./model"])
def test_a_repository_that_climbs_out_of_its_directory_is_refused(tmp_path, repo):
    """The prefetch step writes each repository to /opt/models/OWNER/NAME: a name of dots would leave it."""
    path = tmp_path / "models.lock"
    path.write_text(f'schema = 1\n\n[[model]]\nrole = "drafter"\nrepo = "{repo}"\ntrack = "main"\n')
    with pytest.raises(UserError, match=r"model\[drafter\]\.repo: .* is not a Hub repository"):
        models.load(path)
