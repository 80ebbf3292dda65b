"""How long the doctor's readability walk takes on a model directory the size of Kimi-K2.5's (metadata only).

    python benchmarks/model_readable_speed.py [--shards 64] [--shard-gb 9.4] [--runs 5]

Lays out a directory like a Hugging Face download of Kimi-K2.5 (config, tokenizer, index,
64 safetensors shards of 9.4 GB each: about 600 GB) as sparse files, so it takes no disk,
then times ``inputs.unreadable`` over it: a stat per entry, no byte read. Prints each run
and the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sglang_stack.doctor import checks
from sglang_stack.doctor import inputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--shard-gb", type=float, default=9.4)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "Kimi-K2.5"
        root.mkdir()
        for name in ("config.json", "tokenizer_config.json", "tiktoken.model", "model.safetensors.index.json",
                     "configuration_kimi_k25.py", "modeling_kimi_k25.py", "generation_config.json"):
            (root / name).write_text("{}")
        for i in range(1, args.shards + 1):
            with open(root / f"model-{i:05d}-of-{args.shards:06d}.safetensors", "wb") as fh:
                fh.truncate(int(args.shard_gb * 1e9))  # sparse: the size is metadata
        (root / ".cache" / "huggingface").mkdir(parents=True)
        total = sum(p.stat().st_size for p in root.iterdir() if p.is_file())
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            bad, files, _ = inputs.unreadable(root)
            times.append(time.perf_counter() - start)
        print(f"{files} files, {total / 1e9:.0f} GB (sparse), {bad} unreadable by uid {checks.IMAGE_USER_UID}: "
              + ", ".join(f"{t * 1000:.2f} ms" for t in times))
        print(f"median {statistics.median(times) * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
