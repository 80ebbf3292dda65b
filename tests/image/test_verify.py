"""`invoke verify IMAGE` on real images: the sglang and router stages built here with buildah,
then derived images with one thing changed each, as a hand-edited or drifted image would be.

Each derived image must fail, and its line must name what differs: the patched file, the
package, the label. The untouched stages must pass every check, the digest included (a
fresh reproducible build of this commit gives the same image ID).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from sglang_stack.engine import BUILDAH
from sglang_stack import ROOT
from pins import PIN
from sglang_stack.download import ca_bundle
from sglang_stack.image import build as buildmod
from sglang_stack.image import store
from sglang_stack.image import verify as verify_image
from sglang_stack.shell import run

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def stages(smoke_base, run_id):
    """The sglang and router stages, built reproducibly (OCI) on the session's Debian base."""
    ca = ca_bundle()
    tags = {}
    try:
        for target in ("sglang", "router"):
            tag = f"localhost/sglang-stack-test-{run_id}:verify-{target}"
            buildmod.build(buildmod.BuildRequest(engine=BUILDAH, tag=tag, target=target, base_image=smoke_base,
                                                 ca_bundle=Path(ca) if ca else None, isolation="chroot", no_cache=True,
                                                 source_date_epoch=buildmod.commit_epoch(), oci=True))
            tags[target] = tag
        yield tags
    finally:
        store.remove(BUILDAH, *tags.values())


def derive(image: str, tag: str, *, shell: str = "", label: str = "") -> str:
    """``image`` with one change: a shell command run in it, or a label set."""
    name = run(["buildah", "from", "--pull-never", image], capture=True).stdout.strip()
    try:
        if shell:
            run(["buildah", "run", "--isolation", "chroot", "--user", "0", name, "--", "sh", "-c", shell], capture=True)
        if label:
            run(["buildah", "config", "--label", label, name], capture=True)
        run(["buildah", "commit", "--quiet", "--format", "oci", name, tag], capture=True)
    finally:
        run(["buildah", "rm", name], capture=True, check=False)
    return tag


def failing(report: verify_image.Report) -> dict[str, str]:
    return {c.name: c.detail for c in report.checks if c.ok is False}


def test_both_stages_verify_and_the_digest_is_reproduced(stages, smoke_base, tmp_path):
    sglang = verify_image.verify(BUILDAH, stages["sglang"], rebuild=True, base_image=smoke_base)
    assert sglang.ok and sglang.stage == "sglang", sglang.lines()
    assert [c.name for c in sglang.checks] == ["labels", "installed", "sbom", "patches", "digest"]
    assert all(c.ok for c in sglang.checks), "every check ran and passed, the digest too"
    router = verify_image.verify(BUILDAH, stages["router"])
    assert router.ok and router.stage == "router", router.lines()
    assert {c.name: c.ok for c in router.checks}["digest"] is None, "not compared without --rebuild"
    record = json.loads(verify_image.write_record(sglang, tmp_path).read_text())
    assert record["ok"] is True and record["id"] == sglang.image_id and len(record["checks"]) == 5
    assert verify_image.read_record(sglang.image_id, tmp_path)["stage"] == "sglang"


def test_a_changed_patched_file_is_named(stages, run_id):
    rel = "sglang/srt/models/kimi_k25.py"
    tag = derive(stages["sglang"], f"localhost/sglang-stack-test-{run_id}:verify-file", shell=f"echo '# edited' >> /opt/sglang/{rel}")
    try:
        bad = failing(verify_image.verify(BUILDAH, tag))
        assert set(bad) == {"patches"} and bad["patches"] == f"/opt/sglang/{rel}: differs from the patched wheel"
    finally:
        store.remove(BUILDAH, tag)


def test_a_changed_or_added_package_is_named(stages, run_id):
    version = PIN["aiohappyeyeballs"]
    meta = f"/opt/venv/lib/python3.11/site-packages/aiohappyeyeballs-{version}.dist-info/METADATA"
    extra = "/opt/venv/lib/python3.11/site-packages/leftpad-1.0.dist-info"
    shell = (f"sed -i 's/^Version: {version}$/Version: {version}.1/' {meta} && mkdir {extra} && "
             f"printf 'Metadata-Version: 2.1\\nName: leftpad\\nVersion: 1.0\\n' > {extra}/METADATA")
    tag = derive(stages["router"], f"localhost/sglang-stack-test-{run_id}:verify-package", shell=shell)
    try:
        bad = failing(verify_image.verify(BUILDAH, tag))
        assert set(bad) == {"installed", "sbom"}
        assert f"aiohappyeyeballs: installed {version}.1, the lock pins {version}" in bad["installed"]
        assert "leftpad==1.0: installed, but not in the lock" in bad["installed"]
        assert f"aiohappyeyeballs: SBOM says {version}, the image has {version}.1" in bad["sbom"]
    finally:
        store.remove(BUILDAH, tag)


def test_a_changed_label_and_a_missing_sbom_are_named(stages, run_id):
    tag = derive(stages["sglang"], f"localhost/sglang-stack-test-{run_id}:verify-label",
                 shell="rm /opt/sglang-stack/sbom.cdx.json", label="io.sglang-stack.sglang.version=0.5.8")
    try:
        bad = failing(verify_image.verify(BUILDAH, tag))
        assert set(bad) == {"labels", "sbom"}
        assert bad["labels"] == "io.sglang-stack.sglang.version: image has '0.5.8', the checkout gives '0.5.9'"
        assert bad["sbom"] == "no CycloneDX SBOM at /opt/sglang-stack/sbom.cdx.json"
    finally:
        store.remove(BUILDAH, tag)


def test_a_debian_package_changed_after_the_sbom_is_named(stages, run_id):
    """apt run in a later layer (or a hand-edited image) leaves dpkg's database unlike the SBOM's Debian packages."""
    shell = "sed -i '/^Package: patch$/,/^$/ s/^Version: .*/Version: 9.9-drifted/' /var/lib/dpkg/status"
    tag = derive(stages["sglang"], f"localhost/sglang-stack-test-{run_id}:verify-deb", shell=shell)
    try:
        bad = failing(verify_image.verify(BUILDAH, tag))
        assert set(bad) == {"sbom"}, bad
        assert re.search(r"deb patch: SBOM says \S+, dpkg has 9\.9-drifted", bad["sbom"]), bad["sbom"]
    finally:
        store.remove(BUILDAH, tag)


def test_invoke_verify_exits_1_with_one_line_per_check(stages, run_id, tmp_path):
    import engine

    tag = derive(stages["sglang"], f"localhost/sglang-stack-test-{run_id}:verify-cli",
                 shell="echo '# edited' >> /opt/sglang/sglang/srt/server_args.py")
    image_id = store.image_id(BUILDAH, tag)
    try:
        proc = subprocess.run([*engine.INVOKE, "verify", "--engine", "buildah", "--image", tag], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    finally:
        store.remove(BUILDAH, tag)
    record_file = verify_image.record_path(image_id)
    record = verify_image.read_record(image_id)
    record_file.unlink(missing_ok=True)
    assert record and record["ok"] is False and [c["name"] for c in record["checks"] if c["ok"] is False] == ["patches"]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line[:4] in ("ok  ", "FAIL", "skip")]
    assert [line.split(":")[0] for line in lines] == ["ok   labels", "ok   installed", "ok   sbom", "FAIL patches", "skip digest"]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {tag}: patches: /opt/sglang/sglang/srt/server_args.py"), \
        "the last line names the first failed check and what differs"


def test_an_unknown_image_is_one_line():
    import engine

    proc = subprocess.run([*engine.INVOKE, "verify", "--engine", "buildah", "--image", "localhost/no-such-image:1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: localhost/no-such-image:1: no such image in the buildah store (pull or build it first, or pass --engine)"


def test_an_installed_txt_that_predates_sglang_is_named():
    """The runtime's installed.txt was written in deps, before /opt/sglang joined the path: verify compares it."""
    installed = {"sglang": "1.0", "torch": "2.0+cu130"}
    must = dict(installed)
    stale = verify_image.recorded("torch==2.0+cu130\n")
    check = verify_image.check_installed(installed, must, {}, stale)
    assert check.ok is False and check.detail == "installed.txt says sglang absent, Python sees 1.0", check.detail
    fresh = verify_image.recorded("sglang==1.0\ntorch==2.0+cu130\n")
    assert verify_image.check_installed(installed, must, {}, fresh).ok
    assert verify_image.check_installed(installed, must, {}, None).ok, "an image without the list (the sglang stage)"
