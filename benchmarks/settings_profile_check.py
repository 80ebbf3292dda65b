"""On a GPU host: does `invoke settings`' host profile answer as this GPU does, where SGLang reads it?

    python benchmarks/settings_profile_check.py --profile h200x1 [--json FILE]

``sglang_stack/entrypoints/settings.py`` stands in for the GPU only: torch's device queries and
``nvidia-smi``'s memory line. SGLang's own predicates (``is_sm90_supported``,
``get_device_memory_capacity``, ``get_device_name``, ...) are functions of exactly those answers.
This script asks the real torch and nvidia-smi of the host the same questions, asks the profile,
and prints both side by side; exit 1 when any answer differs. Needs torch with CUDA and a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def answers() -> dict:
    """What SGLang's device predicates read, from whatever torch and nvidia-smi say now."""
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout.split()
    return {
        "is_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count(),
        "capability": list(torch.cuda.get_device_capability()),
        "name": torch.cuda.get_device_name(0),
        "props.name": props.name,
        "props.major.minor": [props.major, props.minor],
        "props.multi_processor_count": props.multi_processor_count,
        "cuda_major": str(torch.version.cuda).split(".")[0],
        "nvidia-smi memory.total MiB": [int(float(x)) for x in smi],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="h200x1")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from sglang_stack.entrypoints import settings

    real = answers()
    with tempfile.TemporaryDirectory() as tmp:
        settings.install_profile(settings.PROFILES[args.profile], Path(tmp))
        stood = answers()
    rows = [{"question": k, "gpu": real[k], "profile": stood[k], "same": real[k] == stood[k]} for k in real]
    for r in rows:
        print(f"{'same' if r['same'] else 'DIFF'}  {r['question']:30} gpu {r['gpu']!r:45} profile {r['profile']!r}")
    if args.json:
        args.json.write_text(json.dumps({"profile": args.profile, "rows": rows}, indent=1))
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
