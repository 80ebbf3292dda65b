"""What `invoke build` produced, by image ID: the record `invoke publish` requires before it attests an image's verdicts.

The verdict files in an image (``/opt/sglang-stack/verdicts``) are written by the build's own checks, but any image can
carry such files: written by hand, or kept by a ``FROM`` of a real build with a layer added. The image ID (the config
digest, which names every layer) is what binds them to a build: `invoke build` records each ID it produced in
``build/built/ID.json`` with the stage, profile, revision and the verdicts it saw pass there, and `invoke publish`
attests only an ID recorded here (or, with ``--foreign``, says the verdicts are the image's own claim).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from sglang_stack import ROOT

RECORDS = ROOT / "build" / "built"


def normal(image_id: str) -> str:
    """``sha256:HEX``, whichever way the engine prints it (buildah and podman leave the algorithm off)."""
    image_id = image_id.strip()
    return image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"


def path_of(image_id: str, records: Path = RECORDS) -> Path:
    return records / f"{normal(image_id).removeprefix('sha256:')}.json"


def record(image_id: str, ref: str, stage: str, labels: dict[str, str], verdicts: dict,
           records: Path = RECORDS) -> Path:
    """Write the record of one build's output (whole, or not at all)."""
    from sglang_stack.atomic import write as atomic_write

    passed = sorted(name for name, v in verdicts.items() if isinstance(v, dict) and v.get("result") == "pass")
    data = {"image_id": normal(image_id), "tag": ref, "stage": stage,
            "profile": labels.get("io.sglang-stack.profile", ""),
            "revision": labels.get("org.opencontainers.image.revision", ""),
            "dockerfile_sha256": labels.get("io.sglang-stack.dockerfile.sha256", ""),
            "verdicts": passed, "built": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    path = path_of(image_id, records)
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def find(image_id: str, records: Path = RECORDS) -> dict | None:
    """The record of ``image_id``, or None: none written, or one that does not name this ID."""
    try:
        data = json.loads(path_of(image_id, records).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("image_id") == normal(image_id) else None
