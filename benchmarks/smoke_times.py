"""Cold smoke time, warm rebuild after editing one patch, and the smoke image's size (buildah).

    python benchmarks/smoke_times.py [--keep-base]

Cold: make the Debian base with debootstrap (under a name of this run's own, so a
shared base is neither reused nor touched) and build the Dockerfile's sglang stage on
it with buildah. Warm: edit the description of one patch in a throwaway copy of the
build context and build again. The smoke build keeps no layer cache (``--layers=false``:
it must leave exactly the image it names), so warm is cold minus the base.
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

from sglang_stack.smoke import container as smoke
from sglang_stack.image import store
from sglang_stack.patching import patches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-base", action="store_true", help="keep the base image afterwards")
    args = parser.parse_args()

    run_id = store.run_id()
    base = f"localhost/sglang-stack-bench-{run_id}-base:bookworm"
    tag = f"localhost/sglang-stack-bench-{run_id}:sglang"
    edited = f"localhost/sglang-stack-bench-{run_id}:sglang-edited"
    with tempfile.TemporaryDirectory(prefix="sglang-stack-bench-") as tmp:
        workdir = Path(tmp)
        ca, _, _, _ = smoke.smoke_secrets(workdir)
        context = smoke.copy_context(workdir / "context")
        try:
            start = time.monotonic()
            store.make_debian_base("buildah", base)
            base_s = time.monotonic() - start
            smoke.build_sglang_stage(base, tag, ca=ca, token=None, context=context, capture=True)
            cold_s = time.monotonic() - start
            size = store.size("buildah", tag)

            patch = patches.read_series(context / "patches")[-1].path
            text = patch.read_text()
            patch.write_text(re.sub(r"^(Description: .*)$", r"\1 (edited)", text, count=1, flags=re.M))
            start = time.monotonic()
            # Under a name of its own: a rebuild under the same name would leave the first image nameless.
            smoke.build_sglang_stage(base, edited, ca=ca, token=None, context=context, capture=True)
            warm_s = time.monotonic() - start
        finally:
            store.remove("buildah", tag, edited, *([] if args.keep_base else [base]))

    print(f"cold smoke: {cold_s:.1f} s (base image {base_s:.1f} s, sglang stage {cold_s - base_s:.1f} s)")
    print(f"rebuild after editing {patch.name}: {warm_s:.1f} s (no layer cache in a smoke build)")
    print(f"smoke image: {size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
