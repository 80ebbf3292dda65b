"""``DRAFTER=mha|mla``: which EAGLE-3 drafter the eagle3 service serves, checked at start; and SGLang's own loading
path for a drafter directory.

Kimi-K2.5 has two published EAGLE-3 drafters. ``mha`` (the default) is ``lightseekorg/kimi-k2.5-eagle3``, one Llama
decoder layer (``LlamaForCausalLMEagle3``). ``mla`` is ``lightseekorg/kimi-k2.5-eagle3-mla``: one layer with the
target's multi-latent attention (``Eagle3DeepseekV2ForCausalLM``), which SGLang's Kimi-K2.5 guide recommends since
sgl-project/sglang#27714 (its card: MT-Bench accept length 2.940 against 2.687). SGLang loads it through
``srt/models/kimi_k25_eagle3.py``, first shipped in 0.5.23: on 0.5.9 the server would load the 1T target for
minutes and only then find no class for the drafter.

At start (``at_start``, stdlib only, before any weight is read): ``mla`` is refused in one line where the image's
SGLang has no ``kimi_k25_eagle3.py``, and either value is refused where the mounted drafter's ``config.json``
names the other drafter's architecture.

    python3 -m sglang_stack.entrypoints.drafter DIR [--load]
    python3 -m sglang_stack.entrypoints.drafter --registry

run where SGLang imports (the image, or a profile's Python): SGLang's own model registry picks the class from DIR's
``config.json``; with ``--load``, SGLang's own model loader builds it on the CPU and feeds it every
``*.safetensors`` of DIR through the class's ``load_weights``. One JSON object on stdout: the class, the parameters
written and those left unwritten (uninitialised memory is filled with NaN first, so a parameter no weight reached
stays all NaN), and what SGLang warned while loading. Exit 1 where the registry has no class for the architecture
or a parameter stays unwritten. ``--registry`` lists the EAGLE-3 drafter architectures the registry has
(`invoke settings` records them per release).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SETTING = "DRAFTER"
ARCHITECTURES = {"mha": "LlamaForCausalLMEagle3", "mla": "Eagle3DeepseekV2ForCausalLM"}
ROLES = {"mha": "drafter", "mla": "drafter-mla"}  # models.lock's role for each
MODULE_FILE = ("srt", "models", "kimi_k25_eagle3.py")
PROFILE = "0.5.23"  # the first release of this checkout's profiles that loads the MLA drafter
DRAFT_DIR = Path("/models/draft")  # where compose mounts DRAFT_MODEL_DIR
EAGLE3 = re.compile(r"eagle-?3", re.I)  # how SGLang names its EAGLE-3 drafter classes


class Refused(Exception):
    """A drafter the image cannot serve: the server does not start."""


def choice(environ) -> str:
    """``DRAFTER``'s value, ``mha`` when unset; a value that is neither is refused."""
    value = str(environ.get(SETTING) or "mha").strip().lower()
    if value not in ARCHITECTURES:
        raise Refused(f"{SETTING}={value!r}: not one of {', '.join(ARCHITECTURES)}")
    return value


def draft_path(argv: list[str]) -> str | None:
    """``--speculative-draft-model-path`` of the command line (the last one wins)."""
    path = None
    for i, arg in enumerate(argv):
        if arg == "--speculative-draft-model-path" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--speculative-draft-model-path="):
            path = arg.split("=", 1)[1]
    return path


def architecture(directory: Path) -> str | None:
    """The first architecture ``config.json`` names, None where the file is missing or unreadable (SGLang then says
    why in its own words; this check only refuses what it can read)."""
    try:
        data = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    arches = data.get("architectures") if isinstance(data, dict) else None
    return str(arches[0]) if isinstance(arches, list) and arches else None


def mismatch(value: str, arch: str | None) -> str:
    """Why a drafter of architecture ``arch`` is not the one ``DRAFTER=value`` asks for ("" where it is, or cannot
    be told)."""
    if arch is None:
        return ""
    other = next((k for k, a in ARCHITECTURES.items() if a == arch and k != value), None)
    if other:
        return f"{SETTING}={value}, but the drafter's config.json names {arch}, the {other} drafter: set {SETTING}={other}"
    if value == "mla" and arch != ARCHITECTURES["mla"]:
        return f"{SETTING}=mla, but the drafter's config.json names {arch}, not {ARCHITECTURES['mla']}"
    return ""


def at_start(argv: list[str], environ, has_module=None) -> list[str]:
    """The lines to print; raises ``Refused`` where the drafter cannot be served. Only a server with a drafter path
    is checked; ``has_module`` answers "does the image's SGLang ship MODULE_FILE" (default: on disk)."""
    value = choice(environ)
    path = draft_path(argv)
    if path is None:
        return [f"{SETTING}={value}: this server has no drafter; nothing to check"] if value == "mla" else []
    if value == "mla":
        from sglang_stack.entrypoints import installed

        has_it, version = (has_module or installed.sglang_has)(MODULE_FILE)
        if not has_it:
            raise Refused(f"{SETTING}=mla: SGLang {version or '(not installed)'} cannot load the MLA drafter (no "
                          f"sglang/{'/'.join(MODULE_FILE)}); profile {PROFILE} can (SGLANG_PROFILE={PROFILE}), or set "
                          f"{SETTING}=mha with the MHA drafter")
    if problem := mismatch(value, architecture(Path(path))):
        raise Refused(f"{path}: {problem}")
    return [f"{SETTING}={value}: {ARCHITECTURES[value]} from {path}"] if value == "mla" else []


# --- SGLang's own registry and loader (where SGLang imports) ----------------------------------


def _sglang():
    """Import SGLang's model code on a host without a GPU: the kernels stood in (entrypoints/settings.py; nothing
    here calls them), the rotary embedding's vLLM fallback import included."""
    from sglang_stack.entrypoints.settings import OPTIONAL_IMPORTS, stand_in_missing

    return stand_in_missing((*OPTIONAL_IMPORTS, "vllm"))


def registry() -> dict:
    """The EAGLE-3 drafter architectures SGLang's model registry has, and SGLang's version."""
    stood = _sglang()
    import importlib.metadata

    from sglang.srt.models.registry import ModelRegistry

    names = sorted(n for n in ModelRegistry.get_supported_archs() if EAGLE3.search(n))
    return {"sglang": importlib.metadata.version("sglang"), "drafter_architectures": names, "stood_in": stood}


def _publish(directory: Path) -> None:
    """One CPU rank of tensor-parallel size 1, as a launcher would set it up, with SGLang's server arguments for
    this directory: the layers ask both while they are built."""
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path=str(directory), device="cpu")
    try:  # 0.5.23 on: a published runtime context
        from sglang.srt.runtime_context import SpawnRanks, publish
    except ImportError:
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
        publish = None
    if publish is not None:
        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}",
                                 local_rank=0, backend="gloo")
    if publish is not None:
        initialize_model_parallel(backend="gloo")
    else:
        initialize_model_parallel(tensor_model_parallel_size=1)


def load(directory: Path, weights: bool) -> dict:
    """SGLang's registry (and with ``weights``, its loader) on ``directory``: the result ``main`` prints."""
    import logging

    stood = _sglang()
    import importlib.metadata

    from sglang.srt.models.registry import ModelRegistry

    out = {"sglang": importlib.metadata.version("sglang"), "directory": str(directory), "stood_in": stood,
           "architecture": architecture(directory)}
    try:
        cls, _ = ModelRegistry.resolve_model_cls([out["architecture"] or "?"])
    except ValueError as err:
        return {**out, "error": f"SGLang {out['sglang']} has no model class for {out['architecture']}: "
                                f"{str(err).splitlines()[0][:200]}"}
    out["class"] = f"{cls.__module__}.{cls.__qualname__}"
    if out["architecture"] not in ModelRegistry.get_supported_archs():
        # 0.5.9 hands an architecture it lacks to its generic Transformers backend, which is no EAGLE-3 drafter.
        return {**out, "error": f"SGLang {out['sglang']} has no model class for {out['architecture']} (it would "
                                f"fall back to {cls.__qualname__})"}
    if not weights:
        return out
    import torch

    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    _publish(directory)
    # torch fills what torch.empty hands out with NaN in deterministic mode: a parameter no weight reached stays NaN.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING and record.name.startswith("sglang"):
                said.append(record.getMessage()[:300])

    handler = Keep()
    logging.getLogger().addHandler(handler)
    try:
        model = get_model(model_config=ModelConfig(str(directory), is_draft_model=True, dtype="auto"),
                          load_config=LoadConfig(), device_config=DeviceConfig("cpu"))
    finally:
        logging.getLogger().removeHandler(handler)
    written, unwritten = [], []
    for name, param in model.named_parameters():
        (unwritten if bool(torch.isnan(param.detach()).all()) else written).append(name)
    return {**out, "parameters": len(written) + len(unwritten), "written": len(written), "unwritten": unwritten,
            "warnings": said}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.entrypoints.drafter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", type=Path, help="a drafter directory (config.json, *.safetensors)")
    parser.add_argument("--load", action="store_true", help="build the class on the CPU and load every weight")
    parser.add_argument("--registry", action="store_true", help="list the registry's EAGLE-3 drafter architectures")
    args = parser.parse_args(argv)
    if args.registry:
        print(json.dumps(registry(), sort_keys=True))
        return 0
    if args.directory is None or not (args.directory / "config.json").is_file():
        print(f"error: {args.directory}: no config.json", file=sys.stderr)
        return 2
    result = load(args.directory, args.load)
    print(json.dumps(result, sort_keys=True))
    return 1 if result.get("error") or result.get("unwritten") else 0


if __name__ == "__main__":
    sys.exit(main())
