"""Image lifecycle in the shared stores: a run removes exactly what it made, and never breaks another run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading

import pytest

from conftest import need, wait_until
from sglang_stack.engine import BUILDAH, DOCKER, Engine
from sglang_stack import ROOT
from sglang_stack.image import store
from sglang_stack.shell import run


def _lease_survives_the_maker(engine: Engine, base: str, run_id: str) -> None:
    """Run A made the shared base; run B leased it; A finishes and removes its name: B can still build on it."""
    shared = f"localhost/sglang-stack-test-{run_id}-shared:bookworm"
    store.tag(engine, base, shared)  # what run A's debootstrap would have made under the shared name
    try:
        with store.BaseLease(engine, shared, make=False, run=f"{run_id}-b") as lease_b:
            assert lease_b == f"{shared}-lease-{run_id}-b", lease_b
            store.remove(engine, shared)  # run A's clean-up: by name, only what it made
            assert not store.exists(engine, shared), "the maker's name is gone"
            assert store.exists(engine, lease_b), "run B's lease must survive the maker's clean-up"
        assert not store.exists(engine, lease_b), "run B removes its own lease"
        assert store.exists(engine, base), "neither run touched an image it did not make"
    finally:
        store.remove(engine, shared, f"{shared}-lease-{run_id}-b")


@pytest.mark.parametrize("engine", ["docker", "buildah"])
def test_missing_base_without_make_is_one_line(engine, run_id):
    from sglang_stack.errors import UserError

    if shutil.which(engine) is None:  # one engine missing skips its own case (fails in CI), never the other's
        need(f"the {engine} CLI is not installed")
    with pytest.raises(UserError) as err:
        with store.BaseLease(Engine(engine), f"localhost/sglang-stack-test-{run_id}-none:x", make=False):
            pass
    assert str(err.value) == f"--base-image localhost/sglang-stack-test-{run_id}-none:x: no such image in the {engine} image store", err.value


@pytest.mark.engine
def test_docker_lease_survives_the_maker(docker_base, run_id):
    _lease_survives_the_maker(DOCKER, docker_base, run_id)


@pytest.mark.container
def test_buildah_lease_survives_the_maker(smoke_base, run_id):
    _lease_survives_the_maker(BUILDAH, smoke_base, run_id)


def _images() -> set[str]:
    listed = subprocess.run(["buildah", "images", "--all", "--quiet", "--no-trunc"], capture_output=True, text=True).stdout
    return {i.removeprefix("sha256:") for i in listed.split()}


def _held(ids: set[str]) -> set[str]:
    """Those of ``ids`` still in the store (``buildah images`` names no image of a step without --all)."""
    return {i for i in ids if subprocess.run(["podman", "image", "inspect", i], capture_output=True).returncode == 0}


@pytest.mark.container
@pytest.mark.parametrize("kept", [False, True], ids=["no name left on the base", "an image built on it is kept"])
def test_the_last_lease_out_takes_the_step_images_built_on_the_base(smoke_base, run_id, tmp_path, kept):
    """buildah's --layers keeps an image of each step. Removing a build's name takes the steps it was built from but
    not another stage's, and each holds the base's layers. The lease that leaves a base with no name takes them
    too; while an image built on it keeps a name, none goes."""
    shared = f"localhost/sglang-stack-test-{run_id}-cache-{str(kept).lower()}:bookworm"
    built = f"localhost/sglang-stack-test-{run_id}-cache-{str(kept).lower()}:built"
    lease = f"{shared}-lease-{run_id}-c"
    # A base of the test's own: nothing built on the session's base may go while the session holds it.
    (tmp_path / "Base").write_text(f"FROM {smoke_base}\nRUN echo {run_id} {kept} > /base\n")
    (tmp_path / "Dockerfile").write_text(f"FROM {lease} AS one\nRUN echo one > /one\n"
                                         f"FROM {lease}\nCOPY --from=one /one /one\nRUN echo two > /two\n")
    bud = ["buildah", "bud", "--layers", "--isolation", "chroot"]
    base: list[str] = []
    try:
        run([*bud, "--file", str(tmp_path / "Base"), "--tag", shared, str(tmp_path)], capture=True)
        with store.BaseLease(BUILDAH, shared, make=False, run=f"{run_id}-c") as leased:
            assert leased == lease
            base = store.layers(BUILDAH, lease)
            before = _images()
            run([*bud, "--tag", built, str(tmp_path)], capture=True)
            made = {i for i in _images() - before if store.layers(BUILDAH, i)[:len(base)] == base}
            store.remove(BUILDAH, shared, *([] if kept else [built]))  # the maker's clean-up, and the build's
            steps = _held(made)
            assert steps, "the other stage's step image outlives the build's name"
        left = _held(steps)
        if kept:
            assert left == steps, f"{built} is kept: the step images built on its base stay ({len(steps - left)} went)"
        else:
            assert not left, f"the step images built on a base with no name left were left behind: {sorted(left)}"
    finally:
        store.remove(BUILDAH, built, shared, lease)
        store.remove_cache_built_on(BUILDAH, base)


@pytest.mark.parametrize("stray", ["WARN[0000] image not known", ""])
def test_an_inspection_line_that_does_not_read_removes_nothing(stray):
    """A line of ``podman image inspect`` that is not its --format line (a warning on stdout) may hide a name kept on
    the base: then no step image is taken."""
    base = ["sha256:a", "sha256:b"]
    lines = ['1111 null ["sha256:a","sha256:b","sha256:c"]', '2222 null ["sha256:z"]']
    assert store.nameless_on(base, lines) == ["1111"]  # the step on the base goes, the other image's stays
    assert store.nameless_on(base, [*lines, '3333 ["localhost/kept:1"] ["sha256:a","sha256:b"]']) == []
    assert store.nameless_on(base, [lines[0], stray, lines[1]]) == []


@pytest.mark.container
def test_smoke_leaves_images_it_did_not_make(smoke_base, run_id):
    """`invoke smoke` removes its own images by name; another's image made while it runs stays."""
    foreign = f"localhost/sglang-stack-test-{run_id}:foreign"
    smoke = subprocess.Popen(
        [sys.executable, "-m", "invoke", "smoke", "--base-image", smoke_base, "--no-negative"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(smoke.stdout), daemon=True)
    reader.start()
    try:
        # Someone else's image, made once the smoke run is building.
        assert wait_until(lambda: any("buildah bud" in line for line in output), timeout=300, interval=0.2), "".join(output)[-2000:]
        store.tag(BUILDAH, smoke_base, foreign)
        assert smoke.wait(timeout=900) == 0, "".join(output)[-3000:]
        reader.join(timeout=10)
        assert store.exists(BUILDAH, foreign), "invoke smoke removed an image it did not make"
        named = next((line for line in output if line.startswith("smoke: this run's images: ")), "")
        made = named.removeprefix("smoke: this run's images: ").split(" (")[0].split()
        assert len(made) == 3, f"the smoke run names its images (built, broken patch, planted variable): {named!r}"
        leftover = [ref for ref in made if store.exists(BUILDAH, ref)]
        assert not leftover, f"invoke smoke left its own images behind: {leftover}"
        assert store.exists(BUILDAH, smoke_base), "the leased base stays for the session that holds it"
    finally:
        if smoke.poll() is None:
            smoke.kill()
        store.remove(BUILDAH, foreign)


@pytest.mark.container
def test_debootstrap_makes_the_tree_once_a_day_and_unpacks_it_after(tmp_path, capfd):
    # Every base of a session (each store's, the stand-ins') starts from debootstrap's tree: made once, kept for the day.
    if not shutil.which("debootstrap"):
        need("needs debootstrap (.ci/run installs it)")
    first, second = tmp_path / "first", tmp_path / "second"
    store.debootstrap(store.DEBIAN_SUITE, store.BASE_PACKAGES, first)
    capfd.readouterr()
    store.debootstrap(store.DEBIAN_SUITE, store.BASE_PACKAGES, second)
    said = capfd.readouterr().out
    assert "today's tree from" in said, f"the second tree must come from the first's archive: {said!r}"

    def listing(root):
        return sorted((str(p.relative_to(root)), p.is_symlink(), p.lstat().st_mode, p.lstat().st_uid) for p in root.rglob("*"))

    assert listing(second) == listing(first), "the unpacked tree is debootstrap's, owners and modes included"
    assert (second / "usr" / "bin" / "python3").exists(), "BASE_PACKAGES are in it"


LOCKER = """
import sys
from sglang_stack.engine import BUILDAH
from sglang_stack.image import store
with store.BaseLease(BUILDAH, sys.argv[1], run="lock-test")._lock():
    print("held", flush=True)
    sys.stdin.readline()  # until the test lets go
"""


def test_the_base_lock_leaves_no_file_and_its_next_holder_holds_the_file_at_the_path(tmp_path):
    """The holder removes the lock file as it lets go. A run that was waiting then holds the removed file, so it
    must lock the path anew: else a third run would lock a new file there and make or untag the base beside it."""
    import fcntl

    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    ref = "localhost/sglang-stack-lock-test-base:bookworm"

    def locker() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", LOCKER, ref], cwd=ROOT, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    first = locker()
    assert first.stdout.readline().strip() == "held", first.stderr.read()
    second = locker()
    assert second.stdout.readline().startswith("waiting for another run"), "the second must wait for the first"
    first.stdin.write("\n")
    first.stdin.flush()
    assert first.wait(timeout=60) == 0, first.stderr.read()
    assert second.stdout.readline().strip() == "held", second.stderr.read()
    locks = list(tmp_path.glob("sglang-stack-base-*.lock"))
    assert len(locks) == 1, f"the second run holds a file no longer at the path: {locks}"
    with open(locks[0], "a") as third:
        with pytest.raises(BlockingIOError):
            fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the second run holds this very file
    second.stdin.write("\n")
    second.stdin.flush()
    assert second.wait(timeout=60) == 0, second.stderr.read()
    assert not list(tmp_path.glob("sglang-stack-base-*.lock")), "the lock file was left behind"
