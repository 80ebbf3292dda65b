"""Cold smoke time, warm rebuild after editing one patch, and the smoke image's size.

    python benchmarks/smoke_times.py [--keep-base]

Cold: make the Debian base with debootstrap (any existing smoke base is removed
first) and build the Dockerfile's sglang stage on it with buildah. Warm: edit the
description of one patch in a throwaway copy of the build context and build again;
only the patch step and what follows may re-run (target: at most 10% of cold).
Needs root, buildah, podman and debootstrap, and PyPI.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_stack.patching import patches  # noqa: E402
from sglang_stack.image import smoke  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-base", action="store_true", help="keep the base image afterwards")
    args = parser.parse_args()

    before = smoke.image_ids()
    smoke.remove_image(smoke.BASE_IMAGE)
    tag = "localhost/sglang-stack-bench:sglang"
    with tempfile.TemporaryDirectory(prefix="sglang-stack-bench-") as tmp:
        workdir = Path(tmp)
        ca, _, _, _ = smoke.smoke_secrets(workdir)
        context = smoke.copy_context(workdir / "context")

        start = time.monotonic()
        smoke.ensure_base_image()
        base_s = time.monotonic() - start
        smoke.build_sglang_stage(smoke.BASE_IMAGE, tag, ca=ca, token=None, context=context, capture=True)
        cold_s = time.monotonic() - start
        size = smoke.image_size(tag)

        patch = patches.read_series(context / "patches")[-1].path
        text = patch.read_text()
        patch.write_text(re.sub(r"^(Description: .*)$", r"\1 (edited)", text, count=1, flags=re.M))
        start = time.monotonic()
        proc = smoke.build_sglang_stage(smoke.BASE_IMAGE, tag, ca=ca, token=None, context=context, capture=True)
        warm_s = time.monotonic() - start
        reran = [line for line in proc.stdout.splitlines() if re.match(r"^\[\d+/\d+\] STEP|^STEP", line)]
        cached = sum("Using cache" in line for line in proc.stdout.splitlines())

    print(f"cold smoke: {cold_s:.1f} s (base image {base_s:.1f} s, sglang stage {cold_s - base_s:.1f} s)")
    print(f"warm rebuild after editing {patch.name}: {warm_s:.1f} s = {100 * warm_s / cold_s:.1f}% of cold "
          f"({cached} of {len(reran)} steps from cache)")
    print(f"smoke image ({tag}): {size / 1e6:.0f} MB")
    keep = {smoke.image_id(smoke.BASE_IMAGE)} if args.keep_base else set()
    smoke.remove_new_images(before | keep)


if __name__ == "__main__":
    main()
