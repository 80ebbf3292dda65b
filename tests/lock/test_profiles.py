"""Profiles (one per SGLang release) and `invoke bump`, on copies of this checkout.

A profile's lock inherits what it does not write and never a table that follows from its release; a copy of an
inherited table, a lock it cannot extend or a profile named after another release is one line. `invoke bump`
moves one PyPI distribution of a profile and nothing else, against the real index; a refused bump leaves
every file as it was.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
import sys
from pathlib import Path

import pytest

import checkout
from pins import PIN
from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.lock import lockfile, profiles
from sglang_stack.lock.pins import read_pins

PROFILE = "0.5.23"  # the profile this checkout carries beside the default


def invoke(tree: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    print("$ invoke " + " ".join(args))
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=tree, capture_output=True, text=True,
                          timeout=timeout)


def changed(tree: Path) -> set[str]:
    """What differs in ``tree`` from the checkout it was copied from."""
    out = subprocess.run(["git", "diff", "--no-index", "--name-only", str(ROOT), str(tree)], capture_output=True,
                         text=True).stdout
    return {line.split(str(tree) + "/", 1)[1] for line in out.splitlines() if line.startswith(str(tree))}


def tracked(tree: Path) -> Path:
    return checkout.copy(tree)


# --- reading a profile's lock ----------------------------------------------------------------------


def test_the_profile_reads_what_it_inherits_and_what_it_writes():
    lock = lockfile.check(ROOT / "profiles" / PROFILE / "versions.lock")
    root = lockfile.check(ROOT / "versions.lock")
    assert lock.sglang.version == PROFILE and lock.profile.name == PROFILE, lock.sglang
    assert lock.data["image"] == root.data["image"], "inherited tables are the root's"
    assert lock.router.name == "smg" and lock.router_table["base"] == root.router_table["base"], \
        "its own router, on the root's router base"
    assert lock.router_table["python"] == root.router_table["python"], "what the profile's [router] does not write is the root's"
    assert not lock.wheels and not lock.overrides, "a profile never inherits the root's URL wheels or overrides"
    assert lock.requirements != root.requirements, "its requirements are its own"
    assert lock.tag.endswith(f":{PROFILE}-{lock.cuda['tag']}"), f"the image tag names the profile: {lock.tag}"


def _profile_tree(tmp_path: Path, body: str) -> Path:
    tree = tracked(tmp_path / "tree")
    lock = tree / "profiles" / PROFILE / "versions.lock"
    lock.write_text(lock.read_text() + body)
    return lock


def test_a_table_written_the_same_as_the_roots_is_refused_as_a_copy(tmp_path):
    root = (ROOT / "versions.lock").read_text()
    image = root[root.index("[image]"):root.index("[cuda]")]
    lock = _profile_tree(tmp_path, "\n" + image)
    with pytest.raises(UserError, match=r"versions.lock: image: the same as in .*versions.lock, which every profile inherits"):
        lockfile.load(lock)


def test_a_profiles_own_router_is_written_whole(tmp_path):
    """A profile that names its own router says all of it: never another release's requires inherited."""
    lock = _profile_tree(tmp_path, "")
    text = lock.read_text()
    start = text.index("requires = [", text.index("[router]"))
    lock.write_text(text[:start] + text[text.index("\n", start) + 1:])
    with pytest.raises(UserError, match=r"versions.lock: router.requires: missing; a profile that names its own router writes"):
        lockfile.load(lock)


def test_a_router_base_written_the_same_as_the_roots_is_refused_as_a_copy(tmp_path):
    root = (ROOT / "versions.lock").read_text()
    base = root[root.index("[router.base]"):]
    base = base[:base.index("\n\n")]
    lock = _profile_tree(tmp_path, "\n" + base + "\n")
    with pytest.raises(UserError, match=r"versions.lock: router.base: the same as in"):
        lockfile.load(lock)


def test_a_lock_that_cannot_be_extended_is_one_line(tmp_path):
    lock = tmp_path / "profiles" / "9.9.9" / "versions.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text('extends = "../../versions.lock"\n[sglang]\nversion = "9.9.9"\n')
    with pytest.raises(UserError, match=r"extends: '../../versions.lock': no such file"):
        lockfile.load(lock)


@pytest.mark.parametrize("extends", ["/etc/passwd", "../../../outside/versions.lock", "../other/versions.lock"])
def test_a_profile_extends_only_its_own_checkouts_root_lock(tmp_path, extends):
    outside = tmp_path / "outside" / "versions.lock"
    outside.parent.mkdir()
    outside.write_text((ROOT / "versions.lock").read_text())
    lock = tmp_path / "checkout" / "profiles" / "9.9.9" / "versions.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(f'extends = "{extends}"\n[sglang]\nversion = "9.9.9"\n')
    with pytest.raises(UserError, match=r"a profile extends the root's versions.lock of its own checkout"):
        lockfile.load(lock)


def test_a_profile_folder_named_after_another_release_is_refused(tmp_path):
    tree = tracked(tmp_path / "tree")
    (tree / "profiles" / PROFILE).rename(tree / "profiles" / "0.6.0")
    proc = invoke(tree, "lock", "--check", "--profile", "0.6.0")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "profiles/0.6.0/versions.lock: sglang.version '0.5.23': a profile's folder is named by its SGLang release" \
        in proc.stderr, proc.stderr


def test_an_unknown_profile_names_those_there_are(tmp_path):
    proc = invoke(ROOT, "render", "--check", "--profile", "0.4.0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--profile '0.4.0': no such profile (this checkout has {profiles.default().name}, {PROFILE}" in proc.stderr


@pytest.mark.network
def test_new_profile_makes_this_profile_again_from_the_release(tmp_path):
    """`invoke bump sglang 0.5.23 --new-profile`, in a copy without the profile, writes the committed profile's
    release tables and requirement locks (both platforms) byte for byte; what the committed lock adds is what came
    after: the router its release moved to, and the binary exceptions its image's build found."""
    tree = tracked(tmp_path / "tree")
    shutil.rmtree(tree / "profiles" / PROFILE)
    proc = invoke(tree, "bump", "sglang", PROFILE, "--new-profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    made, committed = (root / "profiles" / PROFILE for root in (tree, ROOT))
    for name in ("requirements.lock.txt", "requirements.arm64.lock.txt"):
        assert (made / name).read_text() == (committed / name).read_text(), f"{name} differs from the committed one"
    new, old = (tomllib.loads((root / "versions.lock").read_text()) for root in (made, committed))
    assert {k: v for k, v in old.items() if k not in ("router", "binary_exception")} == new, \
        "the committed lock's release tables are not what the release gives"


# --- the aarch64 image -----------------------------------------------------------------------------


def test_the_aarch64_lock_holds_every_pin_with_its_aarch64_hashes():
    """requirements.arm64.lock.txt: the same versions as the x86-64 set where both have a distribution, and for
    every pin an aarch64 wheel's hash (PyPI's release records, as `invoke lock --check` reads them)."""
    amd = lockfile.check(ROOT / "profiles" / PROFILE / "versions.lock")
    arm = lockfile.check(ROOT / "profiles" / PROFILE / "versions.lock", platform="linux/arm64")
    assert arm.requirements_path.name == "requirements.arm64.lock.txt" and arm.sglang.url.endswith("_aarch64.whl")
    both = amd.requirements.keys() & arm.requirements.keys()
    assert {n: (amd.requirements[n], arm.requirements[n]) for n in both if amd.requirements[n] != arm.requirements[n]} == {}
    assert len(both) >= len(amd.requirements) - 2, "the two sets should differ only by a few platform-only distributions"
    for pin in read_pins(arm.requirements_path, []):
        assert pin.hashes, f"{pin.name}: no hash"


def test_the_aarch64_dockerfile_is_rendered_from_its_own_lock():
    proc = invoke(ROOT, "render", "--check", "--profile", PROFILE, "--platform", "linux/arm64")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    text = (ROOT / "profiles" / PROFILE / "docker" / "Dockerfile.arm64").read_text()
    assert f"COPY profiles/{PROFILE}/requirements.arm64.lock.txt /opt/sglang-stack/requirements.lock.txt" in text
    assert "aarch64" in (ROOT / "profiles" / PROFILE / "docker" / "build.arm64" / "requirements" / "sglang.txt").read_text()


def test_a_platform_the_lock_cannot_build_is_one_line():
    proc = invoke(ROOT, "render", "--check", "--platform", "linux/arm64")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "versions.lock: no linux/arm64 build: it needs [sglang.arm64]" in proc.stderr, proc.stderr
    proc = invoke(ROOT, "size", "--profile", PROFILE, "--platform", "linux/riscv64")
    assert proc.returncode == 2 and "--platform 'linux/riscv64': choose linux/amd64 or linux/arm64" in proc.stderr, proc.stderr


@pytest.mark.network
def test_the_aarch64_size_is_budgeted_from_its_lock():
    proc = invoke(ROOT, "size", "--profile", PROFILE, "--platform", "linux/arm64")
    assert proc.returncode == 0, proc.stderr
    assert "requirements.arm64.lock.txt" in proc.stdout and "runtime: " in proc.stdout.splitlines()[-1], proc.stdout[-500:]


def test_sglang_profile_picks_the_profile_where_no_flag_does(monkeypatch):
    monkeypatch.setenv(profiles.ENV, PROFILE)
    assert profiles.get().name == PROFILE and profiles.get(profiles.default().name).default
    monkeypatch.setenv(profiles.ENV, "nope")
    with pytest.raises(UserError, match=r"SGLANG_PROFILE 'nope': no such profile"):
        profiles.get()


def test_each_profile_renders_its_own_dockerfile_in_sync():
    for name in profiles.available():
        proc = invoke(ROOT, "render", "--check", "--profile", name)
        assert proc.returncode == 0, f"invoke render --check --profile {name}:\n{proc.stdout}{proc.stderr}"
    text = (ROOT / "profiles" / PROFILE / "docker" / "Dockerfile").read_text()
    assert f"COPY profiles/{PROFILE}/versions.lock " in text and f"src=profiles/{PROFILE}/docker/build," in text, \
        "a profile's Dockerfile builds from the checkout's root with the profile's own files"
    assert "url-wheels" not in text, "a profile with no URL wheel has no URL-wheel step"


# --- invoke bump --------------------------------------------------------------------------------


@pytest.mark.network
def test_bump_moves_one_distribution_and_only_lock_and_generated_files(tmp_path):
    tree = tracked(tmp_path / "tree")
    before = {p.name: p.version for p in read_pins(tree / "requirements.lock.txt", [])}
    proc = invoke(tree, "bump", "certifi", "2026.4.22")
    assert proc.returncode == 0, f"invoke bump certifi:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    after = {p.name: p.version for p in read_pins(tree / "requirements.lock.txt", [])}
    assert after.pop("certifi") == "2026.4.22" and before.pop("certifi") != "2026.4.22", "certifi moved"
    assert after == before, f"only certifi moved: {sorted(set(after.items()) ^ set(before.items()))}"
    allowed = {"versions.lock", "requirements.lock.txt", "requirements.router.lock.txt", "docker/Dockerfile", "README.md"}
    assert changed(tree) <= allowed and "versions.lock" in changed(tree), f"bump changed {sorted(changed(tree))}"
    assert {f"changed {f}" for f in changed(tree)} == set(proc.stdout.split("\n")) - {""}, proc.stdout
    assert 'exclude_newer_package = {certifi = "2026-' in (tree / "versions.lock").read_text(), "only its clock moved"
    check = invoke(tree, "lock", "--check")
    assert check.returncode == 0, check.stderr


@pytest.mark.network
def test_bump_of_a_profile_moves_and_renders_every_platform_it_builds(tmp_path):
    """The 0.5.23 profile builds for linux/amd64 and linux/arm64: both locks move, both Dockerfiles are rendered
    and listed, and `invoke render --check` holds for each."""
    tree = tracked(tmp_path / "tree")
    proc = invoke(tree, "bump", "certifi", "2026.4.22", "--profile", "0.5.23")
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    moved = changed(tree)
    for rel in ("profiles/0.5.23/requirements.lock.txt", "profiles/0.5.23/requirements.arm64.lock.txt",
                "profiles/0.5.23/docker/Dockerfile", "profiles/0.5.23/docker/Dockerfile.arm64"):
        assert rel in moved and f"changed {rel}" in proc.stdout.splitlines(), f"{rel}: {sorted(moved)}\n{proc.stdout}"
    assert {f"changed {f}" for f in moved} == set(proc.stdout.split("\n")) - {""}, "every changed file is listed"
    for platform in ("linux/amd64", "linux/arm64"):
        check = invoke(tree, "render", "--check", "--profile", "0.5.23", "--platform", platform)
        assert check.returncode == 0, f"{platform}: {check.stdout[-1500:]}{check.stderr[-1500:]}"


@pytest.mark.network
def test_a_bump_another_requirement_holds_back_names_the_holder_and_leaves_every_platform_as_it_was(tmp_path):
    tree = tracked(tmp_path / "tree")
    proc = invoke(tree, "bump", "triton", "3.9.0", "--profile", "0.5.23")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "held by" in proc.stderr and "torch" in proc.stderr.split("held by", 1)[1], proc.stderr
    assert changed(tree) == set(), f"a failed bump changed {sorted(changed(tree))}"


@pytest.mark.network
@pytest.mark.parametrize("args, says", [
    (("transformers", "4.57.6"), f"transformers 4.57.6: sglang declares transformers=={PIN['transformers']}, which excludes it: give --override"),
    (("certifi", "1999.1.1"), "certifi 1999.1.1: https://pypi.org/simple has no such release"),
    (("torch", "2.9.2"), "torch: installed by URL ([[wheel]] torch of versions.lock)"),
    (("no-such-dist", "1.0"), "no-such-dist: not a distribution of requirements.lock.txt or the router's lock"),
])
def test_a_refused_bump_is_one_line_and_changes_nothing(tmp_path, args, says):
    tree = tracked(tmp_path / "tree")
    proc = invoke(tree, "bump", *args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert says in proc.stderr, proc.stderr
    assert changed(tree) == set(), f"a refused bump changed {sorted(changed(tree))}"


@pytest.mark.network
def test_an_override_makes_an_excluded_version_a_declared_one(tmp_path):
    tree = tracked(tmp_path / "tree")
    proc = invoke(tree, "bump", "transformers", "4.57.6", "--override", "The 4.57 patch release SGLang's own CI runs with.")
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    lock = lockfile.check(tree / "versions.lock")
    override = next(o for o in lock.overrides if o.package == "transformers")
    assert (override.version, override.of, override.declared) == ("4.57.6", "sglang", f"=={PIN['transformers']}"), override
    assert lock.requirements["transformers"] == "4.57.6", lock.requirements["transformers"]



def test_verify_records_the_digest_of_a_base_named_by_tag_and_keeps_the_comments(tmp_path):
    from sglang_stack.lock.artifacts import _record_digests

    tree = tracked(tmp_path / "tree")
    path = tree / "profiles" / PROFILE / "versions.lock"
    text = path.read_text()
    assert "cuda.base" in lockfile.check(path).unverified(), "the committed profile names its base by tag"
    digest = "sha256:" + "ab" * 32
    path.write_text(_record_digests(text, {"cuda.base": digest}))
    lock = lockfile.check(path)
    assert lock.base_image == f"{lock.cuda['base']['image']}:{lock.cuda['base']['tag']}@{digest}", lock.base_image
    assert "cuda.base" not in lock.unverified() and "note" not in lock.cuda["base"], lock.cuda["base"]
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert [line for line in path.read_text().splitlines() if line.startswith("#")] == comments, "comments are kept"


def test_bump_edits_the_lock_in_place_keeping_every_comment():
    from sglang_stack.image.bump import edited_lock

    text = (ROOT / "versions.lock").read_text()
    # An override whose declaration the new version meets overrides nothing any more: it goes.
    out = edited_lock(text, ROOT / "versions.lock", "flashinfer-python", "0.0.1", "2026-01-01T00:00:01Z", [], None,
                      admitted=("sglang",))
    lines = out.splitlines()
    clock = lines.index('exclude_newer_package = {flashinfer-python = "2026-01-01T00:00:01Z"}')
    assert lines[clock - 2].startswith("exclude_newer = "), "the moved clock sits under exclude_newer"
    assert [o for o in tomllib.loads(out)["override"] if o["package"] == "flashinfer-python"] == []
    kept = [line for line in text.splitlines() if line.startswith("#")]
    assert [line for line in lines if line.startswith("#") and "invoke bump` moved" not in line] == kept


def test_the_0_5_23_image_loads_cutlass_dsls_cuda_13_flavour_not_the_cuda_12_one(profile_python):
    """nvidia-cutlass-dsl requires its CUDA 12 libraries whatever the extras (docs/profiles.md); its own loader picks the
    flavour at import. Run in a Python of the profile's exact pins (no driver answers here: the newest is taken, as
    a CUDA 13 driver would)."""
    python = profile_python("0.5.23")
    code = ("import sys, cutlass._mlir._mlir_libs\n"
            "print(sys.modules['cutlass._mlir._mlir_libs._cutlass_ir'].__file__.rsplit('/', 1)[1])\n")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("_cutlass_ir.cu13."), proc.stdout

