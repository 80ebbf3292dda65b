"""versions.lock validation: the committed lock passes, and each kind of bad input is one clear line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT
from pins import PIN
from sglang_stack.errors import UserError
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock import wheels
from sglang_stack.lock import resolve as resolvemod

LOCK = (ROOT / "versions.lock").read_text()
REQUIREMENTS = (ROOT / "requirements.lock.txt").read_text()
ROUTER_REQUIREMENTS = (ROOT / "requirements.router.lock.txt").read_text()


@pytest.fixture(scope="module")
def sglang_requires(sglang_wheel) -> list[str]:
    """Requires-Dist of the real, hash-verified sglang wheel."""
    return wheels.wheel_requires(sglang_wheel)


def write(tmp_path: Path, lock_text: str = LOCK, requirements: str = REQUIREMENTS, router: str = ROUTER_REQUIREMENTS) -> Path:
    (tmp_path / "requirements.lock.txt").write_text(requirements)
    (tmp_path / "requirements.router.lock.txt").write_text(router)
    path = tmp_path / "versions.lock"
    path.write_text(lock_text)
    return path


def problems_of(path: Path, **kwargs) -> list[str]:
    with pytest.raises(lockmod.LockProblems) as info:
        lockmod.check(path, **kwargs)
    return info.value.problems


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, f"test setup: {old!r} not found in versions.lock"
    return text.replace(old, new, 1)


def test_committed_lock_is_consistent_with_sglang_metadata(sglang_requires):
    lock = lockmod.check(ROOT / "versions.lock", sglang_requires=sglang_requires)
    assert lock.tag == f"sglang-stack:{lock.sglang.version}-{lock.cuda['tag']}", f"default tag derived from the lock: {lock.tag}"
    assert len(lock.requirements) > 100, "requirements.lock.txt should pin the whole transitive set"


def test_sglang_declares_the_conflicts_facts_describe(sglang_requires):
    declared = {re.split(r"[=<>!~ ;]", r, maxsplit=1)[0].replace("_", "-").lower(): r for r in sglang_requires}
    assert "==0.6.3" in declared["flashinfer-python"], declared["flashinfer-python"]
    assert "==12.9" in declared["cuda-python"], declared["cuda-python"]


def test_pins_hold_the_target_stacks_rules():
    """What a pin must satisfy, whatever its version (the versions themselves are the lock's alone)."""
    from packaging.version import Version

    lock = lockmod.check()
    pins = lock.pins()
    for name in ("torch", "torchvision", "sgl-kernel", "flashinfer-jit-cache"):
        assert pins[name].endswith(f"+{lock.cuda['tag']}"), f"{name} {pins[name]}: not the {lock.cuda['tag']} build"
    # flashinfer refuses to start unless its jit-cache starts with its own version.
    assert pins["flashinfer-jit-cache"].startswith(pins["flashinfer-python"] + "+"), pins["flashinfer-jit-cache"]
    # The JIT compiler's parts move together, and not at the runtime's release, whose nvcc and nvvm are broken from pip.
    toolchain = {r.split("==")[0]: r.split("==")[1] for r in lock.jit["toolchain"]}
    assert toolchain["nvidia-nvvm"] == toolchain["nvidia-cuda-nvcc"] == pins["nvidia-cuda-nvcc"], toolchain
    assert pins["nvidia-cuda-nvcc"] != pins["nvidia-cuda-runtime"], "the runtime's own nvcc release lacks cicc and link.stub"
    assert Version(pins["setuptools"]) < Version("82"), "82 has no pkg_resources, which modelscope imports"
    for override in lock.overrides:
        assert pins.get(override.package) == override.version, f"{override.package}: pinned {pins.get(override.package)!r}"
    assert not any(n.endswith("-cu12") for n in pins), "a CUDA 12 library leaked into the CUDA 13 set"
    assert "flashinfer-cubin" not in pins, "flashinfer-cubin holds only sm_100/sm_103 cubins: left out"
    assert [w.name for w in lock.wheels if w.optional] == ["flashinfer-jit-cache"]


@pytest.mark.parametrize(
    ("old", "new", "key", "value"),
    [
        pytest.param(
            'sha256 = "e70e1b18881e6b3c1ce402d0a989da39f956a3a057526e03c354df23d704ce9b"',
            'sha256 = "e70e1b18"',
            "wheel[torch].sha256",
            "'e70e1b18'",
            id="short-sha256",
        ),
        pytest.param(
            'sha256 = "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"',
            'sha256 = "8A936C4D25FEA605F44254E533CFF2144C73CEFFBC1F8738ABA393461BBB64D1"',
            "sglang.sha256",
            "'8A936C4D",
            id="uppercase-sha256",
        ),
        pytest.param(
            'url = "https://download.pytorch.org/whl/cu130/torchvision',
            'url = "http://download.pytorch.org/whl/cu130/torchvision',
            "wheel[torchvision].url",
            "'http://download.pytorch.org",
            id="plain-http-url",
        ),
        pytest.param(
            f"flashinfer_jit_cache-{PIN['flashinfer-jit-cache']}-cp39-abi3-manylinux_2_28_x86_64.whl",
            f"flashinfer_jit_cache-{PIN['flashinfer-jit-cache']}.tar.gz",
            "wheel[flashinfer-jit-cache].url",
            f"flashinfer_jit_cache-{PIN['flashinfer-jit-cache']}.tar.gz",
            id="url-not-a-wheel",
        ),
        pytest.param(
            f"sglang-{PIN['sglang']}-py3-none-any.whl",
            "sglang-0.5.8-py3-none-any.whl",
            "sglang.url",
            "'sglang-0.5.8-py3-none-any.whl' is not sglang",
            id="url-version-differs",
        ),
        pytest.param(
            'version = "0.24.1+cu130"',
            'version = "0.24.1+cu128"',
            "wheel[torchvision].version",
            "'0.24.1+cu128' is built for cu128",
            id="local-tag-vs-cuda",
        ),
        pytest.param(
            'tag = "cu130"',
            'tag = "cu129"',
            "cuda.tag",
            "'cu129'",
            id="cuda-tag",
        ),
        pytest.param(
            f'version = "{PIN["flashinfer-jit-cache"]}"',
            'version = "0.6.3+cu130"',
            "flashinfer",
            "flashinfer-jit-cache 0.6.3",
            id="flashinfer-trio",
        ),
        pytest.param(
            'digest = "sha256:f8ef28f5',
            'digest = "md5:f8ef28f5',
            "cuda.base.digest",
            "'md5:f8ef28f5",
            id="base-digest",
        ),
        pytest.param(
            'status = "checked"',
            'status = "trusted"',
            "sglang.status",
            "'trusted'",
            id="status",
        ),
        pytest.param(
            'version = "13.1.1"\nof = "sglang"',
            'version = "13.1.1"\nomit = true\nof = "sglang"',
            "override[cuda-python].version",
            "exactly one of",
            id="override-version-and-omit",
        ),
        pytest.param(
            '[python]\nversion = "3.12"',
            '[python]\nversion = 3.12',
            "python.version",
            "3.12",
            id="python-version-type",
        ),
        pytest.param(
            'name = "sglang-stack"\n',
            "",
            "image.name",
            "missing",
            id="missing-key",
        ),
        pytest.param(
            'resolver = "uv==0.13.9"',
            'resolver = "uv"',
            "resolve.resolver",
            "'uv' is not uv==VERSION",
            id="resolver-unversioned",
        ),
        pytest.param(
            'apt_snapshot = "20260224T000000Z"',
            'apt_snapshot = "20260301T000000Z"',
            "resolve.apt_snapshot",
            "not the instant of resolve.exclude_newer",
            id="apt-snapshot-another-day",
        ),
        pytest.param(
            'apt_snapshot = "20260224T000000Z"',
            'apt_snapshot = "2026-02-24"',
            "resolve.apt_snapshot",
            "'2026-02-24' is not an Ubuntu snapshot id",
            id="apt-snapshot-format",
        ),
        pytest.param(
            'apt_snapshot = "20260224T000000Z"\n',
            "",
            "resolve.apt_snapshot",
            "None is not an Ubuntu snapshot id",
            id="apt-snapshot-missing",
        ),
    ],
)
def test_bad_lock_values_are_one_line_naming_key_and_value(tmp_path, old, new, key, value):
    path = write(tmp_path, replace_once(LOCK, old, new))
    problems = problems_of(path)
    hits = [p for p in problems if f": {key}:" in p or p.startswith(f"versions.lock: {key}")]
    assert hits, f"no problem names {key}; got {problems}"
    assert any(value in p for p in hits), f"the problem for {key} does not quote {value!r}: {hits}"
    assert all("\n" not in p for p in problems), "each problem must be a single line"


def test_cuda_tag_in_url_path_must_match(tmp_path):
    path = write(tmp_path, LOCK.replace("download.pytorch.org/whl/cu130/torch-", "download.pytorch.org/whl/cu128/torch-"))
    problems = problems_of(path)
    assert any("wheel[torch].url" in p and "cu128" in p for p in problems), problems


def test_invalid_toml_names_the_file_and_line(tmp_path):
    path = write(tmp_path, LOCK.replace('[sglang]\nversion = "0.5.9"', '[sglang]\nversion = 0.5.9"'))
    with pytest.raises(lockmod.UserError) as info:
        lockmod.check(path)
    assert "versions.lock" in str(info.value) and "line" in str(info.value), str(info.value)


def test_undeclared_conflict_with_sglang_is_an_error(tmp_path, sglang_requires):
    block = LOCK[LOCK.index('[[override]]\npackage = "cuda-python"') :]
    block = block[: block.index("\n\n") + 2]
    path = write(tmp_path, LOCK.replace(block, ""))
    problems = problems_of(path, sglang_requires=sglang_requires)
    assert any(
        p.startswith("versions.lock: cuda-python:") and "==12.9" in p and "13.1.1" in p for p in problems
    ), f"an undeclared override of cuda-python must be reported: {problems}"


def test_the_builds_check_cross_checks_sglangs_requirements_on_the_lock_it_parsed(tmp_path, sglang_wheel):
    """check_all (what `invoke build` runs) parses the lock once, then adds the cached wheel's Requires-Dist to the
    override check: the undeclared conflict is invisible to the check without the wheel, and found with it."""
    block = LOCK[LOCK.index('[[override]]\npackage = "cuda-python"') :]
    block = block[: block.index("\n\n") + 2]
    path = write(tmp_path, LOCK.replace(block, ""))
    lockmod.check(path)  # without sglang's own requirements the lock is consistent
    with pytest.raises(lockmod.LockProblems) as info:
        lockmod.check_all(path, download=False)
    assert any(p.startswith("versions.lock: cuda-python:") and "==12.9" in p for p in info.value.problems), info.value
    lock, cross_checked = lockmod.check_all(write(tmp_path), download=False)
    assert cross_checked and lock.path == tmp_path / "versions.lock"


def test_override_whose_declared_pin_is_stale_is_an_error(tmp_path, sglang_requires):
    path = write(tmp_path, LOCK.replace('declared = "==12.9"', 'declared = "==12.8"'))
    problems = problems_of(path, sglang_requires=sglang_requires)
    assert any("override[cuda-python].declared" in p and "'==12.8'" in p for p in problems), problems


def test_override_that_overrides_nothing_is_an_error(tmp_path, sglang_requires):
    extra = (
        '\n[[override]]\npackage = "transformers"\nversion = "4.57.1"\nof = "sglang"\n'
        'declared = "==4.57.1"\nreason = "no conflict at all, so this entry is stale"\n'
    )
    path = write(tmp_path, LOCK + extra)
    problems = problems_of(path, sglang_requires=sglang_requires)
    assert any("override[transformers]" in p and "remove the override" in p for p in problems), problems


def test_override_conflicting_with_a_wheel_requirement(tmp_path):
    block = LOCK[LOCK.index('[[override]]\npackage = "nvidia-nccl-cu13"') :]
    block = block[: block.index("\n\n") + 2]
    path = write(tmp_path, LOCK.replace(block, ""))
    problems = problems_of(path)
    assert any(p.startswith("versions.lock: nvidia-nccl-cu13:") and "torch declares" in p for p in problems), problems


def test_requirements_must_have_hashes(tmp_path):
    text = re.sub(r"(filelock==[^\n]*\\\n)(?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+", r"filelock==3.20.0\n", REQUIREMENTS)
    assert text != REQUIREMENTS, "test setup: filelock entry not found"
    path = write(tmp_path, requirements=text)
    problems = problems_of(path)
    assert any("requirements.lock.txt:" in p and "filelock has no valid --hash" in p for p in problems), problems


def test_requirements_must_not_pin_a_url_wheel_from_pypi(tmp_path):
    entry = f"sgl-kernel=={PIN['sgl-kernel'].split('+')[0]} \\\n    --hash=sha256:" + "ab" * 32 + "\n"
    path = write(tmp_path, requirements=REQUIREMENTS + entry)
    problems = problems_of(path)
    assert any("pins sgl-kernel from PyPI" in p for p in problems), problems


def test_omitted_package_must_not_be_pinned(tmp_path, sglang_requires):
    entry = "torchaudio==1.0 \\\n    --hash=sha256:" + "cd" * 32 + "\n"
    path = write(tmp_path, requirements=REQUIREMENTS + entry)
    problems = problems_of(path, sglang_requires=sglang_requires)
    assert any("override[torchaudio]" in p and "omit = true" in p for p in problems), problems


def test_missing_requirements_file(tmp_path):
    path = write(tmp_path)
    (tmp_path / "requirements.lock.txt").unlink()
    problems = problems_of(path)
    assert problems == ["requirements.lock.txt: missing (run `invoke lock` to generate it)"], problems


def test_a_resolver_clock_moved_without_a_resolution_is_named(tmp_path):
    """What a bump cut off between its two writes leaves: versions.lock's clock moved for one package, the requirement
    locks still those of the old clock. `lock --check` names both files and the clock each states."""
    moved = replace_once(LOCK, 'exclude_newer = "2026-02-24T00:00:00Z"\n',
                         'exclude_newer = "2026-02-24T00:00:00Z"\nexclude_newer_package = { packaging = "2026-04-02T00:00:00Z" }\n')
    problems = problems_of(write(tmp_path, lock_text=moved))
    want = 'Nothing newer than 2026-02-24T00:00:00Z; packaging as of 2026-04-02T00:00:00Z'
    assert [p.split(":")[0] for p in problems] == ["requirements.lock.txt", "requirements.router.lock.txt"], problems
    assert problems[0] == (f'requirements.lock.txt: resolved at "Nothing newer than 2026-02-24T00:00:00Z", but '
                           f'versions.lock [resolve] says "{want}" (a clock moved without a resolution): run `invoke lock`')
    lockmod.check(write(tmp_path))  # the committed pair agrees


def test_resolve_inputs_drop_url_wheels_and_apply_overrides():
    lock = lockmod.check()
    requirements_in, overrides = resolvemod.resolve_inputs(lock)
    assert requirements_in.splitlines()[0] == f"sglang=={lock.sglang.version}"
    assert f"nvidia-cuda-runtime=={PIN['nvidia-cuda-runtime']}" in requirements_in, "torch's own requirements are resolved from PyPI"
    for name in ("torch", "torchvision", "sgl-kernel", "flashinfer-jit-cache", "torchaudio"):
        assert f"{name} ; sys_platform == 'never'" in overrides, f"{name} must be kept out of the PyPI resolution"
    assert f"flashinfer-python=={PIN['flashinfer-python']}" in overrides and f"cuda-python=={PIN['cuda-python']}" in overrides


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A throwaway copy of the project, so CLI tests can break its files."""
    dest = tmp_path / "repo"
    shutil.copytree(
        ROOT,
        dest,
        ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", "bench-results", "tests"),
    )
    return dest


def invoke(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=repo, capture_output=True, text=True, timeout=300
    )


def test_a_second_writer_of_the_lock_is_refused_while_one_runs(repo_copy):
    """Two bumps at once both said done while one was lost. Now a bump or `invoke lock` holds the profile's lock for its
    whole run; a second one is refused in one line, before it reads or writes anything."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom pathlib import Path\nfrom sglang_stack.lock import exclusive\n"
         "with exclusive.writer(Path('versions.lock').resolve()):\n    print('held', flush=True)\n    sys.stdin.read()\n"],
        cwd=repo_copy, env={**os.environ, "PYTHONPATH": str(repo_copy)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = {p.name: p.read_bytes() for p in repo_copy.glob("*.lock*")}
        for args in (["lock"], ["bump", "packaging", "99.0"]):
            proc = invoke(repo_copy, *args)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            assert proc.stderr.strip() == ("error: versions.lock: another `invoke bump` or `invoke lock` is rewriting "
                                           "it now: wait for it to finish, then run this again (nothing was changed)"), \
                proc.stderr
        assert {p.name: p.read_bytes() for p in repo_copy.glob("*.lock*")} == before
    finally:
        holder.communicate("", timeout=30)


def test_cli_bad_lock_is_one_line_exit_2_no_traceback(repo_copy):
    lock = repo_copy / "versions.lock"
    lock.write_text(lock.read_text().replace('tag = "cu130"', 'tag = "cu129"'))
    proc = invoke(repo_copy, "render")
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "versions.lock: cuda.tag: 'cu129'" in proc.stderr, proc.stderr


def test_cli_lock_check_passes_on_the_committed_lock():
    proc = invoke(ROOT, "lock", "--check")
    assert proc.returncode == 0, proc.stderr
    assert "versions.lock: ok" in proc.stdout and "sglang's declared requirements not cross-checked" not in proc.stdout, proc.stdout


def test_the_declared_resolver_is_the_one_requirements_dev_installs():
    declared = lockmod.load()["resolve"]["resolver"]
    dev = re.search(r"^uv==(\S+)", (ROOT / "requirements-dev.txt").read_text(), re.M)
    assert dev, "requirements-dev.txt pins no uv"
    assert declared == f"uv=={dev.group(1)}", (
        f"versions.lock resolve.resolver is {declared!r} but requirements-dev.txt installs uv=={dev.group(1)}: "
        "`invoke lock` would refuse to run"
    )


def test_resolve_refuses_another_uv(tmp_path):
    path = write(tmp_path, replace_once(LOCK, 'resolver = "uv==0.13.9"', 'resolver = "uv==0.0.1"'))
    with pytest.raises(lockmod.UserError) as info:
        resolvemod.resolve(path, tmp_path / "out")
    message = str(info.value)
    assert message.startswith("versions.lock: resolve.resolver: 'uv==0.0.1', but "), message
    assert "requirements-dev.txt" in message and "\n" not in message, message
    assert not (tmp_path / "out").exists(), "nothing may be written when the resolver differs"


@pytest.mark.network
def test_relock_is_byte_identical(tmp_path, monkeypatch):
    """Two resolutions from different directories, with stray uv settings around, give the committed bytes."""
    monkeypatch.setenv("UV_PRERELEASE", "allow")  # must not reach uv: only versions.lock decides
    monkeypatch.setenv("UV_RESOLUTION", "lowest")
    outputs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        path = write(tmp_path / name)
        outputs.append([written.read_bytes() for written in resolvemod.resolve(path)])
    first, second = outputs
    assert first == second, "two resolutions of the same versions.lock differ"
    for data in first:
        assert str(tmp_path).encode() not in data and b"/tmp/" not in data, "a temporary path leaked into the lock"
    committed = [REQUIREMENTS.encode(), lockmod.ROUTER_REQUIREMENTS_PATH.read_bytes()]
    assert first == committed, (
        "requirements.lock.txt or requirements.router.lock.txt is not what `invoke lock` writes from versions.lock: "
        "run `invoke lock` and commit them"
    )


JINJA2 = f"jinja2=={PIN['jinja2']} \\\n"
FOREIGN_JINJA2 = "jinja2==3.1.5 \\\n"  # the pinned release's hashes follow unchanged in the committed file


@pytest.mark.network
def test_cli_lock_check_names_a_version_edited_against_foreign_hashes(repo_copy):
    requirements = repo_copy / "requirements.lock.txt"
    text = requirements.read_text()
    assert text.count(JINJA2) == 1 and JINJA2 != FOREIGN_JINJA2, "test setup: pick another foreign jinja2 release"
    requirements.write_text(text.replace(JINJA2, FOREIGN_JINJA2))
    line = text[: text.index(JINJA2)].count("\n") + 1
    proc = invoke(repo_copy, "lock", "--check")
    assert proc.returncode == 2, f"exit code {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [e for e in proc.stderr.splitlines() if e.startswith("error: ")]
    assert len(errors) == 1, f"one line for the one edited pin: {errors}"
    assert errors[0].startswith(f"error: requirements.lock.txt:{line}: jinja2==3.1.5: hash sha256:"), errors[0]
    assert "belongs to no file of that release" in errors[0], errors[0]
    readme = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("error: requirements.lock.txt:")]
    assert readme == [errors[0]], f"README.md's example is not what `invoke lock --check` prints today:\n{errors[0]}"


def test_a_lock_far_larger_than_any_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "versions.lock"
    with open(path, "wb") as handle:
        handle.truncate(200 << 20)  # sparse: 200 MB that cost no disk
    with pytest.raises(UserError, match=r"versions.lock: 209715200 bytes, more than the 4194304 such a file may hold"):
        lockmod.load(path)
