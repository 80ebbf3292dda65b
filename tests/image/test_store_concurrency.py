"""Two cold runs lease the same missing base at once: one base made, one image, nothing left behind.

Each lease runs in its own process, as two `invoke smoke` runs would, on a base name of this
test's own (so the store is cold for it whatever else is there). The image IDs each lease got
are read while they hold it; after both have ended, none of them, and neither name, remains.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import need
from sglang_stack.engine import BUILDAH
from sglang_stack import ROOT
from sglang_stack.image import store

pytestmark = pytest.mark.container

LEASE = """
import json, sys, time
from sglang_stack.engine import BUILDAH
from sglang_stack.image import store
ref, run = sys.argv[1], sys.argv[2]
with store.BaseLease(BUILDAH, ref, make=True, run=run) as lease:
    print(json.dumps({"lease": lease, "id": store.image_id(BUILDAH, lease)}), flush=True)
    time.sleep(2)  # both hold their lease at once
"""


def test_two_cold_leases_make_one_base_and_leave_nothing(run_id):
    if not (shutil.which("buildah") and shutil.which("podman") and shutil.which("debootstrap")):
        need("needs buildah, podman and debootstrap (.ci/run installs them)")
    ref = f"localhost/sglang-stack-test-{run_id}-base:bookworm"
    assert not store.exists(BUILDAH, ref)
    procs = [subprocess.Popen([sys.executable, "-c", LEASE, ref, f"{run_id}-{i}"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
             for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    try:
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, f"a lease failed:\n{out}\n{err[-2000:]}"
        text = "".join(out for out, _ in outs)
        assert text.count("created base image") == 1, f"the base must be made once, not per run:\n{text}"
        assert text.count("reusing base image") == 1, text
        leases = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
        assert len({lease["id"] for lease in leases}) == 1, f"both runs must build FROM the same image: {leases}"
        left = [x for x in [ref, *(lease["lease"] for lease in leases), *(lease["id"] for lease in leases)] if store.exists(BUILDAH, x)]
        assert not left, f"left in the shared store: {left}"
    finally:
        store.remove(BUILDAH, ref, *[f"{ref.rsplit(':', 1)[0]}:bookworm-lease-{run_id}-{i}" for i in range(2)])
