"""The patch series against the real sglang wheel: applying, failing closed, refreshing,
and what each patched method does, run without a GPU against small stand-ins."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import image_layout

from sglang_stack import ROOT
from pins import PIN
from sglang_stack.patching import patches
from sglang_stack.patching import diff
from sglang_stack.patching import refresh as refresh_mod
from sglang_stack.errors import UserError

PATCHES = ROOT / "patches"
KIMI = "sglang/srt/models/kimi_k25.py"
DEEPSEEK = "sglang/srt/models/deepseek_v2.py"
SIZES = "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
SYMM = "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
MODEL_RUNNER = "sglang/srt/model_executor/model_runner.py"
GRAPH_RUNNER = "sglang/srt/model_executor/cuda_graph_runner.py"
SERVER_ARGS = "sglang/srt/server_args.py"
SERIES_FILES = (KIMI, DEEPSEEK, SIZES, SYMM, GRAPH_RUNNER, MODEL_RUNNER, SERVER_ARGS)


def snapshot(tree: Path) -> dict[str, str]:
    """sha256 of every file under tree/sglang: proves a failed run wrote nothing."""
    return {
        p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((tree / "sglang").rglob("*"))
        if p.is_file()
    }


def copy_patches(tmp_path: Path) -> Path:
    dest = tmp_path / "patches"
    shutil.copytree(PATCHES, dest)
    return dest


def patched(tree: Path) -> Path:
    patches.apply_series(tree, PATCHES, quiet=True)
    return tree


# --------------------------------------------------------------------------
# The series applies
# --------------------------------------------------------------------------


def test_series_applies_cleanly_and_logs_each_patch_with_its_sha256(sglang_tree):
    before = snapshot(sglang_tree)
    lines: list[str] = []
    applied = patches.apply_series(sglang_tree, PATCHES, strict=True, log=lines.append)
    series = patches.read_series(PATCHES)
    assert [p.name for p in applied] == [p.name for p in series], "apply_series must apply the whole series, in order"
    for patch in series:
        assert any(patch.name in line and patch.sha256 in line for line in lines), f"no log line names {patch.name} with its sha256"
    after = snapshot(sglang_tree)
    changed = sorted(rel for rel in before if before[rel] != after[rel])
    assert changed == sorted(SERIES_FILES), f"the series changed {changed}, not exactly its {len(SERIES_FILES)} files"


def test_touched_files_names_every_file_of_each_patch():
    got = {p.name: patches.touched_files(p.path) for p in patches.read_series(PATCHES)}
    assert got == {
        "0001-kimi-k25-eagle3-delegation.patch": [KIMI],
        "0002-deepseek-v2-eagle3-embedding-capture.patch": [DEEPSEEK],
        "0003-sm120-torch-symm-mem.patch": [SIZES, SYMM],
        "0004-eagle3-aux-layers-before-graph-capture.patch": [GRAPH_RUNNER, MODEL_RUNNER],
        "0005-server-args-redact-api-keys.patch": [SERVER_ARGS],
        "0006-deepseek-v2-eagle3-capture-after-fused-allreduce.patch": [DEEPSEEK],
    }, f"touched_files: {got}"


def test_read_series_keeps_the_patch_contract():
    for patch in patches.read_series(PATCHES):
        assert patch.sha256 == hashlib.sha256(patch.path.read_bytes()).hexdigest(), f"{patch.name}: sha256 is not of its bytes"
        assert patch.path.parent == PATCHES, f"{patch.name}: path {patch.path} is not in patches/"
    assert patches.series_target(PATCHES) == "0.5.9", "patches/series must say which sglang it targets"


@pytest.mark.skipif(not shutil.which("patch"), reason="GNU patch is not installed (apt-get install patch)")
def test_result_is_byte_identical_to_gnu_patch_without_fuzz(sglang_pristine, sglang_patched, tmp_path):
    gnu = tmp_path / "gnu"
    for rel in SERIES_FILES:  # GNU patch reads and writes only these
        (gnu / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sglang_pristine / rel, gnu / rel)
    for patch in patches.read_series(PATCHES):
        proc = subprocess.run(
            ["patch", "-p1", "--fuzz=0", "--batch", "--forward", "-d", str(gnu), "-i", str(patch.path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"GNU patch rejects {patch.name}: {proc.stdout}{proc.stderr}"
        assert "offset" not in proc.stdout, f"GNU patch applies {patch.name} only at an offset: {proc.stdout}"
    for rel in SERIES_FILES:
        assert (sglang_patched / rel).read_bytes() == (gnu / rel).read_bytes(), f"{rel}: our applier and GNU patch disagree"


def test_image_commands_run_with_the_standard_library_only(sglang_tree, tmp_path):
    """The SGLang stage's two RUN lines, in the image's layout, with site-packages off (python -S)."""
    # Exactly the modules the Dockerfile copies, laid out as it lays them out.
    opt = image_layout.install(tmp_path / "opt" / "sglang-stack")
    copied = image_layout.modules()
    assert "sglang_stack/patching/patches.py" in copied and "sglang_stack/audit/eagle3.py" in copied, copied
    shutil.copytree(PATCHES, opt / "patches")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(opt)}
    apply = subprocess.run(
        [sys.executable, "-S", "-m", "sglang_stack.patching.patches", "apply", "--sglang-src", str(sglang_tree), "--patches-dir", str(opt / "patches")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert apply.returncode == 0, f"apply failed in the image layout: {apply.stdout}{apply.stderr}"
    for patch in patches.read_series(PATCHES):
        assert f"patch {patch.name} sha256={patch.sha256}" in apply.stdout, f"the build log lacks {patch.name} and its sha256"
    audit = subprocess.run(
        [sys.executable, "-S", "-m", "sglang_stack.audit.eagle3", "--sglang-src", str(sglang_tree), "--arch", "KimiK25ForConditionalGeneration"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert audit.returncode == 0, f"the audit fails on the patched tree in the image layout: {audit.stdout}{audit.stderr}"
    assert audit.stdout.strip().splitlines()[-1].startswith("audit passed"), f"last line is not the summary: {audit.stdout}"


def test_dry_run_checks_everything_and_writes_nothing(sglang_tree):
    before = snapshot(sglang_tree)
    lines: list[str] = []
    patches.apply_series(sglang_tree, PATCHES, dry_run=True, log=lines.append)
    assert snapshot(sglang_tree) == before, "--dry-run wrote into the tree"
    assert any("dry run" in line for line in lines), f"--dry-run does not say so: {lines}"


# --------------------------------------------------------------------------
# Failing closed: each failure names its cause and leaves the tree untouched
# --------------------------------------------------------------------------


def corrupt_first_context_line(patch_path: Path) -> None:
    text = patch_path.read_text().splitlines(keepends=True)
    for i, line in enumerate(text):
        if line.startswith("@@"):
            j = next(k for k in range(i + 1, len(text)) if text[k].startswith(" "))
            text[j] = " # this context line does not exist upstream\n"
            break
    patch_path.write_text("".join(text))


def test_a_patch_that_does_not_match_names_patch_file_and_hunk_and_writes_nothing(sglang_tree, tmp_path):
    pdir = copy_patches(tmp_path)
    corrupt_first_context_line(pdir / "0002-deepseek-v2-eagle3-embedding-capture.patch")
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, pdir, quiet=True)
    message = str(err.value)
    for part in ("0002-deepseek-v2-eagle3-embedding-capture.patch", DEEPSEEK, "hunk #1", "@@ -2719,13 +2719,19 @@"):
        assert part in message, f"the error does not name {part!r}: {message}"
    assert err.value.code == 1, f"a patch that does not apply exits 1, got {err.value.code}"
    assert snapshot(sglang_tree) == before, "0001 was written although 0002 failed: the series is not all-or-nothing"


@pytest.mark.parametrize(
    "damage, expect",
    [
        (lambda t: t.replace("@@ -772,5 +772,29 @@", "@@ -772,5 +772 @@ broken"), "hunk #1"),
        (lambda t: t.replace("+    def get_embed_and_head(self):\n", "?    def get_embed_and_head(self):\n"), "corrupt"),
        (lambda t: t[: t.index("+    def set_embed_and_head")], "ends early"),
        (lambda t: t.replace("+++ b/sglang", "+++ b/../sglang"), "relative"),
        (lambda t: t.split("\n--- a/")[0] + "\n", "no unified diff"),
    ],
    ids=["header-count", "bad-line-prefix", "truncated", "path-escape", "no-diff"],
)
def test_a_corrupted_patch_file_is_one_clear_error(sglang_tree, tmp_path, damage, expect):
    pdir = copy_patches(tmp_path)
    path = pdir / "0001-kimi-k25-eagle3-delegation.patch"
    path.write_text(damage(path.read_text()))
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, pdir, quiet=True)
    assert "0001-kimi-k25-eagle3-delegation.patch" in str(err.value), f"the error does not name the patch: {err.value}"
    assert expect in str(err.value), f"the error does not say {expect!r}: {err.value}"
    assert snapshot(sglang_tree) == before, "a corrupted patch changed the tree"


def test_a_tree_of_another_sglang_version_is_refused(sglang_tree):
    version_file = sglang_tree / "sglang" / "_version.py"
    version_file.write_text(version_file.read_text().replace("'0.5.9'", "'0.5.10'"))
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, PATCHES, quiet=True)
    message = str(err.value)
    assert "0.5.10" in message and "0.5.9" in message and "rebase" in message, f"unclear version error: {message}"
    assert snapshot(sglang_tree) == before, "a tree of another version was changed"


def test_changed_source_fails_the_hunk_even_without_a_version_check(sglang_tree, tmp_path):
    pdir = copy_patches(tmp_path)
    series = pdir / "series"
    series.write_text(series.read_text().replace(f"# target: sglang {PIN['sglang']}\n", ""))
    kimi = sglang_tree / KIMI
    kimi.write_text(kimi.read_text().replace("self.language_model.load_weights(language_weights)", "self.language_model.load_weights(list(language_weights))"))
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, pdir, quiet=True)
    assert "0001-kimi-k25-eagle3-delegation.patch" in str(err.value) and KIMI in str(err.value), f"error: {err.value}"
    assert "load_weights(list(language_weights))" in str(err.value), f"the error does not show the line that differs: {err.value}"
    assert snapshot(sglang_tree) == before


def test_an_already_applied_series_is_reported_not_skipped(sglang_tree):
    patched(sglang_tree)
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, PATCHES, quiet=True)
    assert "already applied" in str(err.value) and f"all {len(patches.read_series(PATCHES))} patches" in str(err.value), f"error: {err.value}"
    assert snapshot(sglang_tree) == before, "re-applying changed the tree"


def test_a_partly_applied_series_is_reported_not_skipped(sglang_tree, tmp_path):
    first = tmp_path / "first"
    first.mkdir()
    shutil.copy(PATCHES / "0001-kimi-k25-eagle3-delegation.patch", first)
    (first / "series").write_text(f"# target: sglang {PIN['sglang']}\n0001-kimi-k25-eagle3-delegation.patch\n")
    patches.apply_series(sglang_tree, first, quiet=True)
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, PATCHES, quiet=True)
    message = str(err.value)
    assert "partly applied" in message and "0001-kimi-k25-eagle3-delegation.patch already in" in message, f"error: {message}"
    assert "0002-deepseek-v2-eagle3-embedding-capture.patch" in message, f"the error does not say what is missing: {message}"
    assert snapshot(sglang_tree) == before, "a partly applied tree was changed"


def test_strict_refuses_a_hunk_that_matches_only_at_an_offset(sglang_tree):
    kimi = sglang_tree / KIMI
    kimi.write_text("# shifted\n" + kimi.read_text())
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, PATCHES, quiet=True, strict=True)
    assert "offset" in str(err.value) and KIMI in str(err.value), f"error: {err.value}"
    lines: list[str] = []
    patches.apply_series(sglang_tree, PATCHES, log=lines.append)
    assert any("offset" in line and "+1 lines" in line for line in lines), f"a shifted hunk is not reported: {lines}"


def shift_kimi(tree: Path, lines: int) -> None:
    kimi = tree / KIMI
    kimi.write_text("# shifted\n" * lines + kimi.read_text())


def test_a_hunk_may_sit_a_few_lines_away_and_is_logged(sglang_tree):
    shift_kimi(sglang_tree, patches.MAX_OFFSET)
    lines: list[str] = []
    patches.apply_series(sglang_tree, PATCHES, log=lines.append)
    assert any(f"+{patches.MAX_OFFSET} lines" in line for line in lines), f"the offset is not logged: {lines}"


@pytest.mark.parametrize("lines", ["limit+1", 400])
def test_a_hunk_further_away_is_refused(sglang_tree, lines):
    lines = patches.MAX_OFFSET + 1 if lines == "limit+1" else lines
    shift_kimi(sglang_tree, lines)
    before = snapshot(sglang_tree)
    with pytest.raises(UserError) as err:
        patches.apply_series(sglang_tree, PATCHES, quiet=True)
    message = str(err.value)
    assert KIMI in message and "hunk #1" in message, f"the error does not name the file and hunk: {message}"
    assert f"+{lines} lines" in message and f"{patches.MAX_OFFSET}-line limit" in message, f"the error does not say how far: {message}"
    assert snapshot(sglang_tree) == before, "a refused series changed the tree"


def one_hunk_tree(tmp_path: Path, content: str, hunk: str) -> tuple[Path, Path]:
    tree = make_tree(tmp_path / "t", {"sglang/m.py": content})
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "1.patch").write_bytes(("--- a/sglang/m.py\n+++ b/sglang/m.py\n" + hunk).encode())
    (pdir / "series").write_text("1.patch\n")
    return tree, pdir


@pytest.mark.parametrize(
    "content, shown, what",
    [
        ("a\nb \nc\n", ("'b\u00b7'", "'b'"), "trailing whitespace"),
        ("a\nb\t\nc\n", ("'b\u2192'", "'b'"), "trailing whitespace"),
        ("a\nb\r\nc\n", ("'b\\r'", "'b'"), "carriage return"),
        ("a\n\tb\nc\n", ("'\u2192b'", "'\u00b7\u00b7\u00b7\u00b7b'"), "indentation"),
    ],
    ids=["trailing-space", "trailing-tab", "crlf", "tab-for-spaces"],
)
def test_a_whitespace_only_difference_is_shown_visibly(tmp_path, content, shown, what):
    want_b = "    b" if what == "indentation" else "b"
    tree, pdir = one_hunk_tree(tmp_path, content, f"@@ -1,3 +1,3 @@\n a\n-{want_b}\n+B\n c\n")
    with pytest.raises(UserError) as err:
        patches.apply_series(tree, pdir, quiet=True)
    message = str(err.value)
    file_has, patch_expects = shown
    assert f"the file has {file_has}, the patch expects {patch_expects}" in message, f"the difference is not visible: {message}"
    assert what in message and "line 2" in message, f"the error does not say what differs where: {message}"


def test_a_file_shorter_than_the_hunk_says_so(tmp_path):
    tree, pdir = one_hunk_tree(tmp_path, "a\nb\nc\n", "@@ -10,3 +10,3 @@\n x\n-y\n+Y\n z\n")
    with pytest.raises(UserError) as err:
        patches.apply_series(tree, pdir, quiet=True)
    message = str(err.value)
    assert "the file has 3 lines, but this hunk expects lines 10-12" in message, f"misleading message: {message}"


def test_the_image_build_applies_the_series_strictly():
    for path in (ROOT / "docker" / "Dockerfile.j2", ROOT / "docker" / "Dockerfile"):
        runs = [line for line in path.read_text().splitlines() if "sglang_stack.patching.patches apply" in line]
        assert len(runs) == 1 and " apply --strict " in runs[0], f"{path.name}: the build must refuse offsets: {runs}"


def test_not_an_sglang_tree_is_one_clear_error(tmp_path):
    with pytest.raises(UserError) as err:
        patches.apply_series(tmp_path, PATCHES, quiet=True)
    assert "no sglang/ package" in str(err.value), f"error: {err.value}"


def test_cli_failure_is_one_line_on_stderr_without_traceback(sglang_tree, tmp_path):
    pdir = copy_patches(tmp_path)
    corrupt_first_context_line(pdir / "0003-sm120-torch-symm-mem.patch")
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.patches", "apply", "--sglang-src", str(sglang_tree), "--patches-dir", str(pdir)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line]
    assert len(errors) == 1 and errors[0].startswith("error: patch 0003-sm120-torch-symm-mem.patch"), f"stderr: {proc.stderr}"
    missing = subprocess.run(
        [sys.executable, "-m", "sglang_stack.patching.patches", "apply", "--sglang-src", str(tmp_path / "nowhere")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, f"{missing.returncode}: {missing.stderr}"


# --------------------------------------------------------------------------
# The applier on small synthetic trees (edge cases of the diff format)
# --------------------------------------------------------------------------


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode())
    return root


@pytest.mark.parametrize(
    "old, new",
    [
        ("a\nb\nc\n", "a\nb\nc"),  # drops the final newline
        ("a\nb\nc", "a\nB\nc"),  # a file without a final newline, changed
        ("x\n\x0cy\nz\n", "x\n\x0cy\nZ\n"),  # a form feed, which str.splitlines would split on
        ("l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\n", "l0\nl1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\n"),
    ],
    ids=["drop-final-newline", "no-final-newline", "form-feed", "two-hunks"],
)
def test_generated_diff_round_trips(tmp_path, old, new):
    rel = "sglang/mod.py"
    pristine = make_tree(tmp_path / "pristine", {rel: old})
    edited = make_tree(tmp_path / "edited", {rel: new})
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "one.patch").write_text(f"Description: test\n\n--- a/{rel}\n+++ b/{rel}\n")
    (pdir / "series").write_text("one.patch\n")
    refresh_mod.refresh(edited, pristine, pdir, log=lambda _: None)
    work = make_tree(tmp_path / "work", {rel: old})
    patches.apply_series(work, pdir, quiet=True)
    assert (work / rel).read_bytes() == new.encode(), f"diff did not round-trip:\n{(pdir / 'one.patch').read_text()}"
    if shutil.which("patch"):
        gnu = make_tree(tmp_path / "gnu", {rel: old})
        proc = subprocess.run(["patch", "-p1", "--fuzz=0", "--batch", "-d", str(gnu), "-i", str(pdir / "one.patch")], capture_output=True, text=True)
        assert proc.returncode == 0 and (gnu / rel).read_bytes() == new.encode(), f"GNU patch reads our diff differently: {proc.stdout}"


def test_patches_that_create_and_delete_files(tmp_path):
    tree = make_tree(tmp_path / "t", {"sglang/gone.py": "bye\n"})
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "new.patch").write_text("--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1,2 @@\n+hello\n+world\n")
    (pdir / "del.patch").write_text("--- a/sglang/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n")
    (pdir / "series").write_text("new.patch\ndel.patch\n")
    patches.apply_series(tree, pdir, quiet=True)
    assert (tree / "sglang/new.py").read_text() == "hello\nworld\n", "a /dev/null patch did not create its file"
    assert not (tree / "sglang/gone.py").exists(), "a +++ /dev/null patch did not delete its file"
    with pytest.raises(UserError, match="already applied"):
        patches.apply_series(tree, pdir, quiet=True)


@pytest.mark.parametrize("target, says", [
    ("sitecustomize.py", "a patch may change files under sglang/ only"),  # beside the package: runs in every process
    ("sglang/../sitecustomize.py", "must be relative to the tree"),  # the diff parser's own refusal
    ("other/x.py", "a patch may change files under sglang/ only"),
    ("sglang/out/x.py", "leads outside sglang/ .* through a symbolic link"),
])
def test_a_patch_outside_the_package_is_refused_and_nothing_written(tmp_path, target, says):
    tree = make_tree(tmp_path / "t", {"sglang/m.py": "a\n"})
    (tree / "sglang" / "out").symlink_to(tmp_path)
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "evil.patch").write_text(f"--- /dev/null\n+++ b/{target}\n@@ -0,0 +1 @@\n+import os\n")
    (pdir / "series").write_text("evil.patch\n")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(UserError, match=f"evil.patch:.*{says}"):
        patches.apply_series(tree, pdir, quiet=True)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before, "nothing was written"


def test_later_patches_see_what_earlier_ones_did(tmp_path):
    tree = make_tree(tmp_path / "t", {"sglang/m.py": "a\nb\nc\n"})
    pdir = tmp_path / "p"
    pdir.mkdir()
    (pdir / "1.patch").write_text("--- a/sglang/m.py\n+++ b/sglang/m.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")
    (pdir / "2.patch").write_text("--- a/sglang/m.py\n+++ b/sglang/m.py\n@@ -1,3 +1,4 @@\n a\n B\n+B2\n c\n")
    (pdir / "series").write_text("1.patch\n2.patch\n")
    patches.apply_series(tree, pdir, quiet=True)
    assert (tree / "sglang/m.py").read_text() == "a\nB\nB2\nc\n", "the second patch did not build on the first"


# --------------------------------------------------------------------------
# Refreshing (rebasing) the series
# --------------------------------------------------------------------------


def stub(patch_text: str) -> str:
    """A patch reduced to its header and file names: what a maintainer writes before a refresh."""
    parsed = diff.parse_patch(patch_text, "stub")
    heads = "".join(f"--- a/{f.path}\n+++ b/{f.path}\n" for f in parsed.files)
    return parsed.header + heads


def shared_files() -> set[str]:
    """Files that more than one patch of the series changes (0002 and 0006: deepseek_v2.py)."""
    owners = [f for p in patches.read_series(PATCHES) for f in patches.touched_files(p.path)]
    return {f for f in owners if owners.count(f) > 1}


def test_refresh_regenerates_the_committed_series_exactly(sglang_pristine, sglang_tree, tmp_path):
    edited = patched(sglang_tree)
    pdir = copy_patches(tmp_path)
    # A file of one patch is regenerated from the edited tree alone; a shared file's patches
    # are re-diffed from their own hunks, so those keep their bodies.
    stubbed = [p.name for p in patches.read_series(pdir) if not set(patches.touched_files(p.path)) & shared_files()]
    assert len(stubbed) < len(patches.read_series(pdir)) and DEEPSEEK in shared_files(), shared_files()
    for name in stubbed:
        (pdir / name).write_text(stub((pdir / name).read_text()))
    changed = refresh_mod.refresh(edited, sglang_pristine, pdir, log=lambda _: None)
    assert changed == stubbed, f"refresh rewrote {changed}"
    for patch in patches.read_series(PATCHES):
        assert (pdir / patch.name).read_bytes() == patch.path.read_bytes(), f"{patch.name} is not what refresh writes"
    assert (pdir / "series").read_text() == (PATCHES / "series").read_text(), "refresh changed an up-to-date series"


def test_refresh_picks_up_a_further_edit_and_only_rewrites_its_patch(sglang_pristine, sglang_tree, tmp_path):
    edited = patched(sglang_tree)
    kimi = edited / KIMI
    kimi.write_text(kimi.read_text().replace("EntryClass = [", "# one more line\nEntryClass = ["))
    pdir = copy_patches(tmp_path)
    changed = refresh_mod.refresh(edited, sglang_pristine, pdir, log=lambda _: None)
    assert changed == ["0001-kimi-k25-eagle3-delegation.patch"], f"refresh rewrote {changed}"
    assert (pdir / "0001-kimi-k25-eagle3-delegation.patch").read_text().startswith("Description: kimi_k25"), "the header was lost"
    fresh = tmp_path / "fresh"
    shutil.copytree(sglang_pristine, fresh)
    patches.apply_series(fresh, pdir, quiet=True)
    assert (fresh / KIMI).read_text() == kimi.read_text(), "the refreshed series does not reproduce the edit"


def test_refresh_refuses_an_edit_that_belongs_to_no_patch(sglang_pristine, sglang_tree, tmp_path):
    edited = patched(sglang_tree)
    stray = edited / "sglang/srt/models/llama.py"
    stray.write_text(stray.read_text() + "# stray\n")
    pdir = copy_patches(tmp_path)
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    with pytest.raises(UserError) as err:
        refresh_mod.refresh(edited, sglang_pristine, pdir, log=lambda _: None)
    assert "sglang/srt/models/llama.py" in str(err.value) and "no patch" in str(err.value), f"error: {err.value}"
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before, "a refused refresh wrote patches"


def test_refresh_refuses_a_patch_that_became_empty(sglang_pristine, sglang_tree, tmp_path):
    edited = patched(sglang_tree)
    shutil.copy(sglang_pristine / KIMI, edited / KIMI)  # as if upstream had merged 0001
    pdir = copy_patches(tmp_path)
    with pytest.raises(UserError) as err:
        refresh_mod.refresh(edited, sglang_pristine, pdir, log=lambda _: None)
    assert "0001-kimi-k25-eagle3-delegation.patch no longer changes anything" in str(err.value), f"error: {err.value}"


def test_refresh_keeps_each_patch_of_a_shared_file_to_its_own_change(sglang_pristine, sglang_tree, tmp_path):
    edited = patched(sglang_tree)
    pdir = copy_patches(tmp_path)
    names = [p.name for p in patches.read_series(pdir) if DEEPSEEK in patches.touched_files(p.path)]
    before = {name: (pdir / name).read_bytes() for name in names}
    refresh_mod.refresh(edited, sglang_pristine, pdir, log=lambda _: None)
    assert {name: (pdir / name).read_bytes() for name in names} == before, "re-diffing a shared file moved its hunks"
    deepseek = edited / DEEPSEEK
    deepseek.write_text(deepseek.read_text().replace("aux_hidden_states = []", "aux_hidden_states = []  # edited"))
    with pytest.raises(UserError) as err:
        refresh_mod.refresh(edited, sglang_pristine, pdir, log=lambda _: None)
    assert "cannot tell which patch" in str(err.value) and all(n in str(err.value) for n in names), str(err.value)
    assert {name: (pdir / name).read_bytes() for name in names} == before, "a refused refresh wrote a patch"


def test_refresh_moves_the_series_target_to_the_new_release(sglang_pristine, sglang_tree, tmp_path):
    pristine = tmp_path / "pristine-next"
    shutil.copytree(sglang_pristine, pristine)
    for tree in (pristine, sglang_tree):
        version = tree / "sglang" / "_version.py"
        version.write_text(version.read_text().replace("'0.5.9'", "'0.5.99'"))
    pdir = copy_patches(tmp_path)
    series = pdir / "series"
    series.write_text(series.read_text().replace("0.5.9", "0.5.99"))
    patches.apply_series(sglang_tree, pdir, quiet=True)
    series.write_text(series.read_text().replace("0.5.99", "0.5.9"))
    refresh_mod.refresh(sglang_tree, pristine, pdir, log=lambda _: None)
    assert patches.series_target(pdir) == "0.5.99", f"series target after refresh: {patches.series_target(pdir)}"


# --------------------------------------------------------------------------
# The tasks
# --------------------------------------------------------------------------


def invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})},
    )


def test_invoke_patch_applies_then_reports_an_applied_series(sglang_tree):
    first = invoke("patch", "--sglang-src", str(sglang_tree))
    assert first.returncode == 0, f"{first.stdout}{first.stderr}"
    assert f"applied {len(patches.read_series(PATCHES))} patches to sglang {PIN['sglang']}" in first.stdout, first.stdout
    again = invoke("patch", "--sglang-src", str(sglang_tree))
    assert again.returncode == 1, f"re-applying must fail: {again.returncode}"
    assert again.stderr.strip().startswith("error:") and "already applied" in again.stderr, again.stderr
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1, again.stderr


def test_invoke_patch_unpack_then_refresh_round_trip(sglang_pristine, tmp_path):
    site = tmp_path / "edit"
    proc = invoke("patch", "--sglang-src", str(site), "--unpack")
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}"
    assert (site / f"sglang-{PIN['sglang']}.dist-info").is_dir(), "--unpack did not lay out the wheel like pip --target"
    pdir = copy_patches(tmp_path)
    proc = invoke("patch", "--sglang-src", str(site), "--refresh", "--pristine", str(sglang_pristine), "--patches-dir", str(pdir))
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}"
    assert proc.stdout.count("unchanged") == len(patches.read_series(PATCHES)), \
        f"refresh of an unchanged edit rewrote patches: {proc.stdout}"
    refused = invoke("patch", "--sglang-src", str(site), "--refresh", "--dry-run")
    assert refused.returncode == 2 and "--refresh" in refused.stderr, refused.stderr


def test_invoke_patch_check_passes_on_the_pinned_wheel():
    proc = invoke("patch-check")
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}"
    assert "audit passed" in proc.stdout and "patch-check passed" in proc.stdout, proc.stdout


def test_invoke_patch_check_fails_on_a_broken_series(tmp_path):
    pdir = copy_patches(tmp_path)
    corrupt_first_context_line(pdir / "0001-kimi-k25-eagle3-delegation.patch")
    proc = invoke("patch-check", "--patches-dir", str(pdir))
    assert proc.returncode == 1, f"{proc.returncode}: {proc.stdout}{proc.stderr}"
    assert "0001-kimi-k25-eagle3-delegation.patch" in proc.stderr and KIMI in proc.stderr, proc.stderr


def test_invoke_patch_check_fails_when_the_audit_does(tmp_path):
    pdir = copy_patches(tmp_path)
    (pdir / "series").write_text(f"# target: sglang {PIN['sglang']}\n0002-deepseek-v2-eagle3-embedding-capture.patch\n")
    proc = invoke("patch-check", "--patches-dir", str(pdir))
    assert proc.returncode == 1, f"{proc.returncode}: {proc.stdout}{proc.stderr}"
    assert "missing: KimiK25ForConditionalGeneration.get_embed_and_head()" in proc.stdout, proc.stdout


@pytest.mark.network
def test_invoke_patch_check_on_a_cold_cache(tmp_path):
    """A clean machine: nothing cached, only PyPI to reach."""
    proc = invoke("patch-check", env={"SGLANG_STACK_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}"
    assert (tmp_path / "cache" / "downloads" / f"sglang-{PIN['sglang']}-py3-none-any.whl").is_file(), "the wheel was not cached"
