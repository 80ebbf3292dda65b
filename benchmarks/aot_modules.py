"""The ahead-of-time FlashInfer modules as the image build makes them on a CPU-only builder, copied out for a GPU host.

    python benchmarks/aot_modules.py --profile 0.5.23 --arch-list 9.0a --out DIR [--keep]

Builds the profile's ``deps`` stage (where ``sglang_stack.image.steps.aot`` runs) with ``invoke build``'s own code on
the Docker Engine, on the stand-in base and devel images the runtime smoke uses (docker/standins.toml; a profile
whose every Python byte is on PyPI has only the two images stood in), with ``FLASHINFER_CUDA_ARCH_LIST`` set to
``--arch-list``. The AOT step's own log gives each module's nvcc time and size. Then copies
``site-packages/flashinfer/data/aot`` out of the image into ``--out`` and prints, per module, its size and the
architectures its SASS is for (``cuobjdump --list-elf`` where it is installed), with the build's wall time. What
the modules do on a GPU is ``benchmarks/aot_load.py``'s job, on the device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglang_stack.image import build as buildmod
from sglang_stack.image import store
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock import profiles
from sglang_stack.smoke import substitutes, whole_image
from sglang_stack.shell import run

SITE = "/opt/venv/lib/python3.12/site-packages"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="the profile (default: the root's)")
    parser.add_argument("--arch-list", default="9.0a", help="FLASHINFER_CUDA_ARCH_LIST (default 9.0a)")
    parser.add_argument("--out", type=Path, required=True, help="where the aot directory is copied")
    parser.add_argument("--keep", action="store_true", help="keep the built image")
    args = parser.parse_args()
    chosen = profiles.get(args.profile)
    standins = substitutes.load().for_lock(lockmod.load(chosen.lock))
    wheels = whole_image.standin_wheels(standins)
    base, devel = substitutes.make_images("docker", standins, wheels,
                                         substitutes.header_text(standins, chosen.requirements))
    tag = f"localhost/sglang-stack-aot-modules:{chosen.name}-{store.run_id()}"
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglang-stack-aot-") as tmp:
        context, _ = whole_image.prepare_context(Path(tmp), standins, wheels, chosen.prefix)
        request = whole_image.request(context, tag, base, devel, chosen.prefix)
        request = dataclasses.replace(request, target="deps",
                                      build_args={**request.build_args, "FLASHINFER_CUDA_ARCH_LIST": args.arch_list})
        try:
            _, image_id = buildmod.build(request)
            seconds = time.monotonic() - start
            container = run(["docker", "create", tag, "true"], capture=True, check=True, what="docker create").stdout.strip()
            try:
                if args.out.exists():
                    shutil.rmtree(args.out)
                run(["docker", "cp", f"{container}:{SITE}/flashinfer/data/aot", str(args.out)], check=True,
                    what="docker cp")
            finally:
                run(["docker", "rm", container], capture=True, check=False)
        finally:
            if not args.keep:
                store.remove("docker", tag)
    modules = {}
    for so in sorted(args.out.rglob("*.so")):
        archs = ""
        if shutil.which("cuobjdump"):
            listed = subprocess.run(["cuobjdump", "--list-elf", str(so)], capture_output=True, text=True).stdout
            archs = " ".join(sorted(set(re.findall(r"sm_\d+a?", listed))))
        modules[so.parent.name] = {"mb": round(so.stat().st_size / 1e6, 1), "sass": archs}
        print(f"aot_modules: {so.parent.name}: {so.stat().st_size / 1e6:.1f} MB {archs}")
    print(json.dumps({"profile": chosen.name, "arch_list": args.arch_list, "image": image_id,
                      "build_s": round(seconds, 1), "modules": modules}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
