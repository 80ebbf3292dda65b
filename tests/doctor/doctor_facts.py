"""What the doctor's tests judge: recorded nvidia-smi output, facts as ``doctor.host.gather`` makes them, services as
compose reads them, model directories shaped like a Hugging Face download.

GPU facts come from tests/fixtures/nvidia-smi/ (H200 recorded, 8x RTX PRO 6000 constructed; see its README).
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

from sglang_stack.doctor import host
from sglang_stack.doctor.host import Facts
from sglang_stack.services import composefile, variables

import fake_cli

GIB = 1 << 30
FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia-smi"
H200_QUERY = (FIXTURES / "h200-query.csv").read_text()
H200_SMI = (FIXTURES / "h200-nvidia-smi.txt").read_text()
H200_XML = (FIXTURES / "h200-nvidia-smi-q.xml").read_text()
RTX_QUERY = (FIXTURES / "rtxpro6000x8-query.csv").read_text()
RTX_SMI = (FIXTURES / "rtxpro6000x8-nvidia-smi.txt").read_text()
TARGET_ARCH = "KimiK25ForConditionalGeneration"
DRAFT_ARCH = "LlamaForCausalLMEagle3"


def env_of(**values: str) -> variables.Environment:
    return variables.Environment(values, {k: "shell" for k in values})


def svc_of(name: str = "eagle3", **values: str) -> composefile.Service:
    return composefile.service(name, env_of(**values))


def by_name(checks: list, name: str) -> list:
    return [c for c in checks if c.name == name]


def make_model(directory: Path, arch: str, shards: int = 2, drop: int = 0, index: bool = True) -> Path:
    """A model directory shaped like a Hugging Face download (tiny files)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "x"}))
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    for name in names[: shards - drop]:
        (directory / name).write_bytes(b"\0" * 8)
    if index:
        weight_map = {f"layer.{i}.weight": name for i, name in enumerate(names)}
        (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return directory


def facts_for(query: str, smi: str, **overrides) -> Facts:
    base = dict(
        docker_cli=True,
        docker_info=dict(fake_cli.NVIDIA_INFO),
        compose_version="2.40.3",
        ps_rows=[],
        gpus=host.parse_query_csv(query),
        cuda_version=host.parse_cuda_version(smi),
        shm_bytes=128 << 30,
        memlock=(resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        disk_path="/var/lib/docker",
        disk_free=500 << 30,
        image={"Config": {"Entrypoint": ["python3", "-m", "sglang.launch_server"], "User": "sglang"}, "Size": 31e9, "Created": "2026-11-29T07:00:00Z"},
        audit=(0, "KimiK25ForConditionalGeneration: all EAGLE-3 methods present"),
    )
    base.update(overrides)
    return Facts(**base)
