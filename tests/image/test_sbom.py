"""The SBOM writer (sglang_stack/image/steps/sbom.py) on this host's own environment, with the real tools.

The build tools of versions.lock (cyclonedx-bom and the rest) are fetched by URL and sha256,
installed into a scratch directory as the Dockerfile does, and run against this checkout's
virtualenv; pip's own --report gives the hashes. The output must pass CycloneDX's own
JSON schema (cyclonedx-python-lib's strict validator) and come out byte-identical twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.download import fetch
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image.steps import sbom

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> tuple[Path, list[Path]]:
    """The build tools installed as the image installs them (--no-deps --target), and their wheels."""
    lock, _ = lockmod.check_all(download=False)
    wheels = [fetch(t.url, t.sha256) for t in lock.build_tools]
    target = tmp_path_factory.mktemp("build-tools")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--disable-pip-version-check",
                    "-q", "--target", str(target), *map(str, wheels)], check=True)
    return target, wheels


def pip_report(wheel: Path, tmp: Path) -> Path:
    """A real ``pip install --report`` of one wheel (a dry run: nothing installed)."""
    report = tmp / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--dry-run", "--disable-pip-version-check",
                    "-q", "--report", str(report), "--target", str(tmp / "unused"), str(wheel)], check=True)
    return report


def test_record_keeps_the_sha256_pip_verified_sorted_per_stage(tools, tmp_path):
    _, wheels = tools
    for wheel in reversed(wheels[:3]):
        assert sbom.record(pip_report(wheel, tmp_path), "router", tmp_path / "state") == 1
    rows = (tmp_path / "state" / "router.tsv").read_text().splitlines()
    assert rows == sorted(rows) and len(rows) == 3
    lock, _ = lockmod.check_all(download=False)
    by_name = {sbom.canonical(t.name): t for t in lock.build_tools}
    for row in rows:
        name, version, digest = row.split("\t")
        assert (by_name[name].version, by_name[name].sha256) == (version, digest)


def test_a_report_without_a_hash_is_refused(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": "x", "version": "1"}, "download_info": {}}]}))
    with pytest.raises(SystemExit, match="x 1: pip's report has no sha256"):
        sbom.record(report, "deps", tmp_path)


def test_the_sbom_is_valid_cyclonedx_complete_and_reproducible(tools, tmp_path, monkeypatch):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    target, wheels = tools
    state = tmp_path / "state"
    sbom.record(pip_report(wheels[0], tmp_path), "deps", state)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    base = "docker.io/nvidia/cuda:13.0.1-base-ubuntu24.04@sha256:" + "f" * 64
    outs = []
    for i in (1, 2):
        out = tmp_path / f"sbom{i}.json"
        sbom.write(out, base=base, patches=ROOT / "patches", name="sglang-stack", version="0.5.9-cu130",
                   tools=str(target), state=state)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1], "two SBOMs of one environment differ"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(outs[0].decode()) is None
    bom = json.loads(outs[0])
    comps = bom["components"]
    names = {sbom.canonical(c["name"]) for c in comps if c.get("purl", "").startswith("pkg:pypi/")}
    assert {"jinja2", "invoke", "docker", "requests"} <= names, "the environment's distributions are listed"
    hashed = {sbom.canonical(c["name"]): c["hashes"][0]["content"] for c in comps
              if c.get("hashes") and c.get("purl", "").startswith("pkg:pypi/")}
    lock, _ = lockmod.check_all(download=False)
    tool = lock.build_tools[0]  # pyelftools 0.33, which requirements-dev.txt pins too
    assert hashed == {sbom.canonical(tool.name): tool.sha256}, "the one recorded wheel, and only it, has its sha256"
    unhashed = next(c for c in comps if sbom.canonical(c["name"]) == "jinja2")
    assert unhashed["properties"][0]["value"].startswith("none: not installed by a hash-checked pip step")
    patches = {c["name"]: c["hashes"][0]["content"] for c in comps if c["type"] == "file"}
    from sglang_stack.patching.patches import read_series

    assert patches == {f"patches/{p.name}": p.sha256 for p in read_series(ROOT / "patches")}
    base_comp = next(c for c in comps if c["type"] == "container")
    assert base_comp["hashes"][0]["content"] == "f" * 64 and base_comp["purl"].startswith("pkg:oci/cuda@sha256:")
    if Path("/var/lib/dpkg/status").is_file():
        assert any(c.get("purl", "").startswith("pkg:deb/") for c in comps), "dpkg's packages are listed"
    assert bom["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"
    assert "serialNumber" not in bom, "a random serial number would make every SBOM differ"


def test_the_generator_does_not_describe_itself(tools, tmp_path):
    """The tools sit on the generator's path only: the SBOM lists this environment, not them."""
    target, _ = tools
    bom = sbom.python_components(sys.executable, str(target))
    names = {sbom.canonical(c["name"]) for c in bom["components"]}
    installed = subprocess.run([sys.executable, "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                               check=True).stdout
    here = {sbom.canonical(d["name"]) for d in json.loads(installed)}
    assert "cyclonedx-bom" not in names and "cyclonedx-bom" not in here
    assert names == here


def test_a_local_base_image_is_named_without_a_digest():
    comp = sbom.base_component("localhost/sglang-stack-smoke-base:bookworm")
    assert comp["name"] == "localhost/sglang-stack-smoke-base" and comp["version"] == "bookworm"
    assert "hashes" not in comp and comp["properties"][0]["value"].startswith("none")


def test_files_the_build_made_outside_any_package_are_listed_with_their_hashes(tools, tmp_path):
    """FlashInfer's ahead-of-time modules and the link stub are in no wheel: --file lists each with its sha256."""
    import hashlib

    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    target, _ = tools
    aot = tmp_path / "flashinfer" / "data" / "aot"
    (aot / "sampling").mkdir(parents=True)
    (aot / "sampling" / "sampling.so").write_bytes(b"\x7fELF sampling")
    stub = tmp_path / "stubs" / "libcuda.so"
    stub.parent.mkdir()
    stub.write_bytes(b"\x7fELF stub")
    out = tmp_path / "sbom.json"
    bom = sbom.write(out, base="localhost/base:1", patches=None, name="sglang-stack", version="0.5.9-cu130",
                     tools=str(target), state=tmp_path / "state", files=[stub, aot, tmp_path / "not-built"])
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(out.read_text()) is None
    files = {c["name"]: c["hashes"][0]["content"] for c in bom["components"] if c["type"] == "file"}
    assert files == {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in (stub, aot / "sampling" / "sampling.so")}
