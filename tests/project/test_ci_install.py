"""`.ci/install` decides with apt's own simulation, never by reading the script.

Each test judges the installer's plan against a dpkg status file: this host's own, with every
container tool (and whatever depends on one) taken out, plus the stanzas of a scenario from
tests/fixtures/dpkg: Docker CE with the NVIDIA Container Toolkit, or Debian's docker.io.
`apt-get --simulate` against that file is the authority on what apt would install and remove.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need
from sglang_stack import ROOT

pytestmark = pytest.mark.apt  # apt-get --simulate, several times a test: minutes

FIXTURES = ROOT / "tests" / "fixtures" / "dpkg"
INSTALL = ROOT / ".ci" / "install"
# The container tools and everything of a Docker Engine: what a host "without them" lacks.
TAKE_OUT = {"docker.io", "docker-ce", "docker-ce-cli", "docker-ce-rootless-extras", "containerd.io", "containerd",
            "runc", "crun", "tini", "buildah", "podman", "debootstrap", "moby-engine", "moby-cli",
            "docker-compose-plugin", "docker-buildx-plugin", "nvidia-container-toolkit",
            "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"}


def stanzas(text: str) -> list[str]:
    return [s for s in re.split(r"\n\s*\n", text) if s.strip()]


def field(stanza: str, name: str) -> str:
    m = re.search(rf"^{name}: (.*(?:\n .*)*)", stanza, re.M)
    return m.group(1).replace("\n", " ") if m else ""


def without(status: str, names: set[str]) -> str:
    """``status`` without ``names`` and without every package whose dependencies then fail (by name or Provides)."""
    kept = [s for s in stanzas(status) if field(s, "Package") not in names and field(s, "Status").endswith(" installed")]
    while True:
        provided = {field(s, "Package") for s in kept}
        provided |= {p.split()[0] for s in kept for p in field(s, "Provides").split(",") if p.strip()}

        def satisfied(stanza: str, provided: set = provided) -> bool:
            for clause in (field(stanza, "Depends") + "," + field(stanza, "Pre-Depends")).split(","):
                options = [alt.split()[0].split(":")[0] for alt in clause.split("|") if alt.strip()]
                if options and not any(o in provided for o in options):
                    return False
            return True

        still = [s for s in kept if satisfied(s)]
        if len(still) == len(kept):
            return "\n\n".join(kept) + "\n\n"
        kept = still


@pytest.fixture(scope="module")
def bare_status(tmp_path_factory) -> str:
    if not shutil.which("apt-get") or not Path("/var/lib/dpkg/status").is_file():
        need("needs apt-get and dpkg (a Debian-like host)")
    policy = subprocess.run(["apt-cache", "policy", "docker.io", "buildah"], capture_output=True, text=True)
    if "Candidate: (none)" in policy.stdout or "Candidate:" not in policy.stdout:
        need("apt has no package lists with docker.io and buildah: run `apt-get update`")
    return without(Path("/var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace"), TAKE_OUT)


def scenario(tmp_path: Path, bare: str, *fixtures: str) -> Path:
    path = tmp_path / "status"
    path.write_text(bare + "".join((FIXTURES / f).read_text() for f in fixtures))
    return path


def plan(status: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(INSTALL), "--plan", "--dpkg-status", str(status)],
                          capture_output=True, text=True, timeout=300)


def planned(proc: subprocess.CompletedProcess) -> list[str]:
    m = re.search(r"^plan: install (.*?) \(\d+ packages", proc.stdout, re.M)
    return m.group(1).split() if m else []


def simulate(status: Path, packages: list[str]) -> str:
    argv = ["apt-get", "-o", f"Dir::State::status={status}", "-o", "Debug::NoLocking=1", "--simulate",
            "--no-install-recommends", "install", *packages]
    return subprocess.run(argv, capture_output=True, text=True, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}).stdout


def test_the_naive_install_would_remove_docker_ce(tmp_path, bare_status):
    """The hazard itself: Debian's docker.io on a Docker CE host removes Docker CE (what the old .ci/run did)."""
    status = scenario(tmp_path, bare_status, "docker-ce.status")
    removed = set(re.findall(r"^Remv (\S+)", simulate(status, ["docker.io"]), re.M))
    assert {"docker-ce", "docker-ce-cli"} <= removed, f"apt's simulation no longer removes Docker CE: {removed}"


def test_docker_ce_is_kept_and_the_rest_installed(tmp_path, bare_status):
    status = scenario(tmp_path, bare_status, "docker-ce.status")
    proc = plan(status)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    packages = planned(proc)
    assert "docker.io" not in packages, f"the plan installs docker.io over Docker CE: {packages}"
    assert "keep the Docker Engine that is here" in proc.stdout, proc.stdout
    assert {"buildah", "debootstrap"} <= set(packages), f"the tools that can go in are left out: {packages}"
    sim = simulate(status, packages)
    assert not re.findall(r"^Remv ", sim, re.M), f"the plan removes packages:\n{sim}"


def test_docker_io_is_kept(tmp_path, bare_status):
    status = scenario(tmp_path, bare_status, "docker.io.status")
    proc = plan(status)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "docker.io" not in planned(proc), proc.stdout
    assert "keep the Docker Engine that is here (installed packages docker.io)" in proc.stdout, proc.stdout
    assert not re.findall(r"^Remv ", simulate(status, planned(proc)), re.M)


def test_a_bare_host_gets_everything(tmp_path, bare_status):
    status = scenario(tmp_path, bare_status)
    proc = plan(status)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    packages = planned(proc)
    assert {"docker.io", "buildah", "podman", "debootstrap"} <= set(packages), f"missing from the plan: {packages}"
    assert not re.findall(r"^Remv ", simulate(status, packages), re.M)


def test_a_package_that_would_remove_something_is_skipped_by_name(tmp_path, bare_status):
    """A conflict the rules do not know by name (a locally built `podman` that conflicts) is caught by the simulation."""
    blocker = ("Package: local-podman-guard\nStatus: install ok installed\nPriority: optional\nSection: admin\n"
               "Installed-Size: 1\nMaintainer: Ops <ops@example.org>\nArchitecture: all\nVersion: 1.0\n"
               "Conflicts: podman\nDescription: site policy: no podman\n\n")
    status = tmp_path / "status"
    status.write_text(bare_status + blocker)
    proc = plan(status)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "podman" not in planned(proc), proc.stdout
    assert re.search(r"^skip podman: installing it would remove local-podman-guard", proc.stdout, re.M), proc.stdout


def test_a_missing_status_file_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(INSTALL), "--dpkg-status", str(tmp_path / "nope")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "nope" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
