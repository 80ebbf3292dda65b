"""The Docker Engine figures: `invoke build --engine docker` of the sglang stage, cold and warm,
and the time from `docker compose up -d --wait eagle3` to healthy with the CPU stand-in.

    python benchmarks/engine_times.py [--rounds N]

Needs a Docker Engine with buildx and Compose v2, debootstrap and PyPI (as .ci/run has).
Everything it makes carries a name of this run's own and is removed at the end.
Cold is `--no-cache` (BuildKit's pip cache mount may still be warm); warm re-runs the same
build; "patch edited" changes one patch's description in a copy of the build context.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import engine  # noqa: E402  (tests/engine.py: the stand-in image and compose projects)
from sglang_stack import ROOT  # noqa: E402
from sglang_stack.smoke import container as smoke  # noqa: E402
from sglang_stack.image import build, store  # noqa: E402
from sglang_stack.patching import patches  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="compose up rounds (default 3)")
    args = parser.parse_args()
    run_id = store.run_id()
    base = f"localhost/sglang-stack-bench-{run_id}-base:bookworm"
    tag = f"sglang-stack-bench-{run_id}:sglang"
    standin = f"sglang-stack-bench-{run_id}:standin"
    made = [base, tag, tag + "-edited", standin]
    invoke = [*engine.INVOKE, "build", "--engine", "docker", "--target", "sglang", "--base-image", base, "--tag", tag]
    try:
        start = time.monotonic()
        store.make_debian_base("docker", base)
        base_s = time.monotonic() - start
        cold_s = engine.timed(invoke + ["--no-cache"])
        warm_s = engine.timed(invoke)
        with tempfile.TemporaryDirectory(prefix="sglang-stack-bench-") as tmp:
            context = smoke.copy_context(Path(tmp) / "context")
            patch = patches.read_series(context / "patches")[-1].path
            patch.write_text(re.sub(r"^(Description: .*)$", r"\1 (edited)", patch.read_text(), count=1, flags=re.M))
            request = build.BuildRequest(engine="docker", tag=tag + "-edited", target="sglang", base_image=base,
                                         context=context, dockerfile=context / "docker" / "Dockerfile")
            start = time.monotonic()
            build.build(request)
            edited_s = time.monotonic() - start
            engine.build_standin(tag, standin, Path(tmp))
            models = Path(tmp) / "models"
            for name, arch in (("target", "KimiK25ForConditionalGeneration"), ("draft", "LlamaForCausalLMEagle3")):
                (models / name).mkdir(parents=True)
                (models / name / "config.json").write_text(json.dumps({"architectures": [arch]}))
            ups = []
            for i in range(args.rounds):
                project = engine.ComposeProject(f"sgs-bench-{run_id}-{i}", [ROOT / "tests" / "compose.engine.yaml"], {
                    "SGLANG_STACK_IMAGE": standin, "MODEL_DIR": str(models / "target"), "DRAFT_MODEL_DIR": str(models / "draft")})
                try:
                    start = time.monotonic()
                    project.compose("up", "-d", "--wait", "eagle3")
                    ups.append(time.monotonic() - start)
                finally:
                    project.down()
    finally:
        store.remove("docker", *made)
    print(f"debian base (debootstrap + docker import): {base_s:.1f} s")
    print(f"invoke build --engine docker --target sglang: cold (--no-cache) {cold_s:.1f} s, warm {warm_s:.1f} s, "
          f"one patch edited {edited_s:.1f} s")
    print(f"docker compose up -d --wait eagle3 (stand-in, 2 s load) to healthy: median {statistics.median(ups):.1f} s "
          f"over {len(ups)} rounds ({', '.join(f'{u:.1f}' for u in ups)})")


if __name__ == "__main__":
    main()
