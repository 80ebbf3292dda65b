"""The settings table: SGLang's own decisions at the settings compose.yaml and the Kubernetes render pass, per host.

For each host profile (8x H200, 8x RTX PRO 6000, one GPU) and each argument list we hand to
``sglang.launch_server`` (each server of compose.yaml, the Kubernetes render's server),
``services/settings.py`` runs SGLang's ``ServerArgs`` and ``PortArgs`` in the image (or in
any Python where that SGLang imports) with the container's environment, and reports what SGLang
chose. ``invoke settings --write`` keeps the result in docker/settings.json and docs/settings.md (read back by
``services/decisions.py``);
the image's ahead-of-time FlashInfer modules follow from it (``image.steps.aot.modules_of``), and the tests
fail when compose's arguments, a pin or a patch change what SGLang decides without a new table.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sglang_stack import ROOT
from sglang_stack.atomic import write as atomic_write
from sglang_stack import engine as enginemod
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.entrypoints.settings import DRAFT, PROFILES, TARGET
from sglang_stack.services.decisions import TABLE_JSON, TABLE_MD, load, tables
from sglang_stack.image.steps import aot

MODELS = ROOT / "deploy" / "models"
MODEL_DIR, DRAFT_DIR = MODELS / "Kimi-K2.5", MODELS / "Kimi-K2.5-eagle3"
FUSION_FLAG = "--enable-flashinfer-allreduce-fusion"
@dataclass(frozen=True)
class Run:
    """One argument list on one host profile, with the environment the container gives SGLang."""

    profile: str
    source: str
    argv: tuple[str, ...]
    env: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.profile} / {self.source}"


def runs(lock, profiles: tuple[str, ...] = tuple(PROFILES)) -> list[Run]:
    """Every (profile, argument list) of the table, read from compose.yaml (its defaults) and the k8s render."""
    from sglang_stack.services import k8s
    from sglang_stack.services import composefile
    from sglang_stack.services.variables import Environment

    out = []
    values = k8s.load_values()
    for name in profiles:
        gpus = PROFILES[name].gpus
        # compose.yaml's own defaults, the GPU count aside: not this host's .env or shell.
        env = Environment({"TP_SIZE": str(gpus)}, {"TP_SIZE": "profile"})
        proj = composefile.project(env, (composefile.COMPOSE_FILE,))
        for service in proj.names(composefile.SERVER):
            svc = composefile.service(service, env, (composefile.COMPOSE_FILE,))
            container_env = {k: str(v) for k, v in svc.environment.items() if v is not None}
            out.append(Run(name, f"compose {service}", tuple(svc.argv), container_env))
            if svc.speculative and PROFILES[name].capability[0] == 12:
                # What the flag our reference deployment passed does on SM120.
                out.append(Run(name, f"compose {service} {FUSION_FLAG}", (*svc.argv, FUSION_FLAG), container_env))
        ctx = k8s.context(lock, {**values, "tp_size": gpus, "nnodes": 1})
        out.append(Run(name, f"k8s {ctx.v['service']}", tuple(ctx.args), {e["name"]: e["value"] for e in ctx.env}))
    return out


class Runner:
    """Where ``python3 -m sglang_stack.entrypoints.settings`` runs: in an image, or with a given interpreter."""

    def __init__(self, *, image: str | None = None, engine: Engine = Engine("docker"), python: str | None = None,
                 model_dir: Path = MODEL_DIR, draft_dir: Path = DRAFT_DIR):
        if bool(image) == bool(python):
            raise UserError("settings: give an image or a Python to run SGLang in, not both")
        for path in (model_dir, draft_dir):
            if not (Path(path) / "config.json").is_file():
                raise UserError(f"{path}: no config.json (the model's, for ServerArgs)")
        self.image, self.engine, self.python = image, engine, python
        self.model_dir, self.draft_dir = Path(model_dir).resolve(), Path(draft_dir).resolve()
        self.where = f"image {image}" if image else f"python {python}"

    def argv(self, run: Run) -> tuple[list[str], dict[str, str]]:
        """The settings module for ``run``: its model and drafter mounted (or named) and the container's environment."""
        if self.image:
            where = ["--model-dir", TARGET, "--draft-dir", DRAFT]
            mounts = {self.model_dir: TARGET, self.draft_dir: DRAFT}
        else:
            where = ["--model-dir", str(self.model_dir), "--draft-dir", str(self.draft_dir)]
            mounts = {}
        return self.module(["sglang_stack.entrypoints.settings", "--profile", run.profile, *where, "--", *run.argv],
                           env=run.env, mounts=mounts)

    def module(self, args: list[str], env: dict[str, str] | None = None, mounts: dict[Path, str] | None = None,
               network: str = "none", secrets: dict[str, str] | None = None,
               interactive: bool = False) -> tuple[list[str], dict[str, str]]:
        """``python3 -m ARGS`` where SGLang is: the image (``network``: none unless it must reach a server,
        ``mounts`` read-only, ``env`` set in the container) or the given interpreter with ``env`` as the container's
        environment (only PATH and HOME of this shell pass through). ``secrets`` join ``env`` by name only, so their
        values never show in the command line; ``interactive`` keeps the container's stdin open."""
        env, secrets = env or {}, secrets or {}
        if self.image:
            cmd = [self.engine.runner, "run", "--rm", "--pull", "never", "--network", network, "--entrypoint", "python3"]
            if interactive:
                cmd.append("-i")
            for host, inside in (mounts or {}).items():
                cmd += ["-v", f"{host}:{inside}:ro"]
            for key, value in sorted(env.items()):
                cmd += ["-e", f"{key}={value}"]
            for key in sorted(secrets):
                cmd += ["-e", key]
            return [*cmd, self.image, "-m", *args], dict(os.environ) | secrets
        own = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ} | env | secrets | {"PYTHONPATH": str(ROOT)}
        return [self.python, "-m", *args], own

    def call(self, argv: list[str], env: dict[str, str], what: str, timeout: float, late: str = "no answer",
             ok: tuple[int, ...] = (0,)) -> str:
        """Run ``argv`` (from ``module``) and return its output; ``what`` names it in errors, ``late`` says what a
        timeout means, and an exit status outside ``ok`` is one line: the last line it wrote to stderr."""
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise UserError(f"{what}: {argv[0]}: not found") from None
        except subprocess.TimeoutExpired:
            raise UserError(f"{what}: {late} within {timeout:.0f} s") from None
        if proc.returncode not in ok:
            last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise UserError(f"{what} in {self.where}: {last}")
        return proc.stdout

    def json(self, args: list[str], what: str, timeout: float, mounts: dict[Path, str] | None = None,
             ok: tuple[int, ...] = (0,)) -> dict:
        """``python3 -m ARGS`` where SGLang is (``mounts`` as in ``module``); the last line of its output, a JSON
        object. ``what`` names it in the command line shown and in errors; an exit status outside ``ok`` is one."""
        argv, env = self.module(args, mounts=mounts)
        print(f"{what}: $ {shlex.join(argv)}", flush=True)
        stdout = self.call(argv, env, what, timeout, ok=ok)
        try:
            out = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = None
        if not isinstance(out, dict):
            raise UserError(f"{what}: no JSON: {stdout[-200:]!r}")
        return out

    def resolve(self, run: Run, timeout: float = 300) -> dict:
        """What SGLang resolves for ``run``: the settings module's JSON (indented, its whole output)."""
        argv, env = self.argv(run)
        print(f"settings: {run.key}: $ {shlex.join(argv[:12])} ...", flush=True)
        stdout = self.call(argv, env, f"settings: {run.key}", timeout, "SGLang did not resolve its settings")
        try:
            return json.loads(stdout)
        except json.JSONDecodeError:
            raise UserError(f"settings: {run.key}: no JSON from the settings module: {stdout[-200:]!r}") from None


def derive(runner: Runner, lock, profiles: tuple[str, ...] = tuple(PROFILES)) -> dict:
    """The whole table: every run's arguments and what SGLang resolved, and the EAGLE-3 drafter architectures its
    model registry has (``DRAFTER``, entrypoints/drafter.py)."""
    results = []
    for run in runs(lock, profiles):
        result = runner.resolve(run)
        results.append({"profile": run.profile, "source": run.source, "argv": list(run.argv),
                        "environment": dict(sorted(run.env.items())), "resolved": result})
    registry = runner.json(["sglang_stack.entrypoints.drafter", "--registry"], "settings: drafter registry", 300)
    return {"sglang": results[0]["resolved"]["sglang"] if results else "", "runs": results,
            "drafter_architectures": registry.get("drafter_architectures", [])}


def stale(data: dict, lock) -> list[str]:
    """Runs whose arguments or environment differ from what compose.yaml and the k8s render pass today."""
    recorded = {(r["profile"], r["source"]): r for r in data["runs"]}
    problems = []
    for run in runs(lock):
        have = recorded.get((run.profile, run.source))
        if have is None:
            problems.append(f"{run.key}: not in the table")
        elif tuple(have["argv"]) != run.argv or have.get("environment") != dict(sorted(run.env.items())):
            problems.append(f"{run.key}: the table was derived from other arguments or another environment")
    return problems


# --- docs/settings.md --------------------------------------------------------------------------

ROWS = (
    ("attention backend", "attention", "attention_backend"),
    ("sampling backend", "sampling", "sampling_backend"),
    ("all-reduce fusion (the flag)", "all-reduce", "enable_flashinfer_allreduce_fusion"),
    ("all-reduce fusion runs", "all-reduce", "fusion_runs"),
    ("custom all-reduce disabled", "all-reduce", "disable_custom_all_reduce"),
    ("torch symmetric memory", "all-reduce", "enable_torch_symm_mem"),
    ("DP attention", "all-reduce", "enable_dp_attention"),
    ("PCIe-IPC workspace: decode rows / elements", "all-reduce", ("pcie_ipc_decode_rows", "pcie_ipc_max_numel")),
    ("MoE runner", "moe", "moe_runner_backend"),
    ("MoE all-to-all", "moe", "moe_a2a_backend"),
    ("CUDA graphs disabled", "cuda graphs", "disable_cuda_graph"),
    ("CUDA graph max batch", "cuda graphs", "cuda_graph_max_bs"),
    ("CUDA graph batch sizes", "cuda graphs", "cuda_graph_bs"),
    ("piecewise CUDA graphs", "cuda graphs", "enable_piecewise_cuda_graph"),
    ("static memory fraction", "memory", "mem_fraction_static"),
    ("chunked prefill", "memory", "chunked_prefill_size"),
    ("max running requests", "memory", "max_running_requests"),
    ("speculative algorithm", "speculative", "speculative_algorithm"),
    ("steps / top-k / draft tokens", "speculative", ("speculative_num_steps", "speculative_eagle_topk",
                                                     "speculative_num_draft_tokens")),
    ("overlap scheduler disabled", "speculative", "disable_overlap_schedule"),
    ("SPECULATIVE_ADAPTIVE=1 (--speculative-adaptive)", "speculative", "adaptive"),
)


def _cell(value) -> str:
    if isinstance(value, list):
        if len(value) > 6:
            return f"{len(value)} sizes, {value[0]}..{value[-1]}"
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return "—" if value is None else str(value).replace("|", "\\|")


def markdown(data: dict, table: str = "docker/settings.json") -> str:
    lines = ["<!-- GENERATED FILE: do not edit. Written by `invoke settings --write` from what SGLang "
             f"{data.get('sglang', '')} resolves; {table} holds the same, with every argument. -->",
             "", "# What SGLang decides at our settings", "",
             "SGLang picks its backends, fusions, graph sizes and ports itself, from the arguments, the model's",
             "config and the GPU. This table is not read from its source: `invoke settings` runs SGLang's own",
             "`ServerArgs` and `PortArgs` (and the tensor-parallel message queue, bound for real) with exactly the",
             "arguments and environment that compose.yaml and the Kubernetes render pass, on each host profile.",
             "Only the GPU is stood in for (torch's device queries and `nvidia-smi`); see",
             "`sglang_stack/entrypoints/settings.py`. Which all-reduce backend SGLang uses per GPU family and TP size,",
             "and `PCIE_ALLREDUCE`: [allreduce.md](allreduce.md). The image's ahead-of-time FlashInfer modules follow",
             "from this table:", ""]
    for module, archs in aot.modules_of(data):
        lines.append(f"- `{module}` for {', '.join(archs)}")
    lines += ["", "What ServerArgs leaves to the model load: a MoE runner of `auto` is picked when the weights load,",
              "by their quantization method (Kimi-K2.5's INT4 `compressed-tensors` experts: Marlin, repacked at load",
              "by SGLang's `jit_kernel`, docs/image.md)."]
    if "drafter_architectures" in data:
        lines += ["", "EAGLE-3 drafters SGLang's model registry loads (`DRAFTER`: `mha` is `LlamaForCausalLMEagle3`, `mla`",
                  f"`Eagle3DeepseekV2ForCausalLM`): {', '.join(f'`{a}`' for a in data['drafter_architectures']) or 'none'}."]
    stood = sorted({s.split(" (")[0] for r in data["runs"] for s in r["resolved"].get("stood_in", [])})
    if stood:
        lines += ["", f"Derived where these could not load, with stand-ins that nothing calls: {', '.join(stood)}."]
    by_profile: dict[str, list[dict]] = {}
    for r in data["runs"]:
        by_profile.setdefault(r["profile"], []).append(r)
    for profile, rs in by_profile.items():
        first = rs[0]["resolved"]
        lines += ["", f"## {first['profile']} ({first['arch']}, TP {first['tp_size']})", "",
                  "| | " + " | ".join(r["source"] for r in rs) + " |", "|---" * (len(rs) + 1) + "|"]
        for title, concern, names in ROWS:
            names = names if isinstance(names, tuple) else (names,)
            if not any(n in r["resolved"]["settings"][concern] for n in names for r in rs):
                continue  # a setting this release does not have (PCIe-IPC before 0.5.23)
            cells = [" / ".join(_cell(r["resolved"]["settings"][concern].get(n)) for n in names) for r in rs]
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        for title, key in (("API port", "api"), ("API port binds", "api_binds"),
                           ("TP message queue port", "tp_message_queue"), ("NCCL port", "nccl")):
            lines.append(f"| {title} | " + " | ".join(_cell(r["resolved"]["ports"].get(key)) for r in rs) + " |")
    return "\n".join(lines) + "\n"


def write(data: dict, paths: tuple[Path, Path] = (TABLE_JSON, TABLE_MD)) -> list[Path]:
    table_json, table_md = paths
    atomic_write(table_json, json.dumps(data, indent=1, sort_keys=True) + "\n")
    atomic_write(table_md, markdown(data, table_json.relative_to(ROOT).as_posix()))
    return [table_json, table_md]


def differences(old: dict, new: dict) -> list[str]:
    """One line per resolved value that changed: ``h200x8 / compose eagle3: all-reduce.enable_...: True -> False``."""
    before = {(r["profile"], r["source"]): r["resolved"] for r in old.get("runs", [])}
    out = []
    for r in new["runs"]:
        key = f"{r['profile']} / {r['source']}"
        was = before.get((r["profile"], r["source"]))
        if was is None:
            out.append(f"{key}: new")
            continue
        for concern, fields in r["resolved"]["settings"].items():
            for name, value in fields.items():
                if was["settings"].get(concern, {}).get(name) != value:
                    out.append(f"{key}: {concern}.{name}: {was['settings'].get(concern, {}).get(name)!r} -> {value!r}")
        for name, value in r["resolved"]["ports"].items():
            if was["ports"].get(name) != value:
                out.append(f"{key}: ports.{name}: {was['ports'].get(name)!r} -> {value!r}")
    was, now = old.get("drafter_architectures"), new.get("drafter_architectures")
    if was != now:
        out.append(f"drafter architectures (SGLang's model registry): {was!r} -> {now!r}")
    return out


@dataclass(frozen=True)
class Request:
    """`invoke settings`'s flags (its --help says what each one means)."""

    image: str | None = None
    python: str | None = None
    engine: Engine = Engine("docker")
    model_dir: str | None = None
    draft_dir: str | None = None
    host: str | None = None
    profile: str | None = None  # the SGLang profile (profiles/NAME), not a host
    write: bool = False
    check: bool = False
    all_reduce: bool = False


def all_reduce_argv(host: str, data: dict) -> list[str] | None:
    """The all-reduce entrypoint's arguments for ``host``: its TP size and links, and the widest decode reduction the
    table's runs on it size PCIe-IPC's workspace for; None for one GPU."""
    profile = PROFILES[host]
    if profile.gpus < 2:
        return None
    rows = [r["resolved"]["settings"].get("all-reduce", {}).get("pcie_ipc_decode_rows") for r in data["runs"]
            if r["profile"] == host]
    widest = max((r for r in rows if isinstance(r, int)), default=None)
    return ["sglang_stack.entrypoints.allreduce", "--tp", str(profile.gpus), "--nvlink", "yes" if profile.nvlink else "no",
            "--p2p", "yes", *(["--max-rows", str(widest)] if widest else [])]


def all_reduce_line(host: str, decided: dict | None) -> str:
    """One line: what SGLang's own start-up and dispatch pick for the ``tp`` group on ``host``."""
    profile = PROFILES[host]
    if decided is None:
        return f"all-reduce, {profile.title}: TP {profile.gpus}, none"
    link = "NVLink" if profile.nvlink else "PCIe with P2P"
    why = f" (SGLang: {decided['why']})" if decided.get("why") and decided.get("custom_all_reduce") == "off" else ""
    pcie = decided.get("pcie_ipc") or {}
    bound = f", workspace {pcie['max_numel']} elements" if pcie.get("built") and pcie.get("max_numel") else ""
    return (f"all-reduce, {profile.title}: TP {decided.get('tp')} over {link}: custom all-reduce "
            f"{decided.get('custom_all_reduce')}{why}; a decode reduction takes {decided.get('backend')} with "
            f"PCIE_ALLREDUCE on{bound} ({decided.get('backend_off')} with it off), the widest decode "
            f"({decided.get('widest_rows')} rows) {decided.get('backend_widest')}, a prefill chunk "
            f"{decided.get('backend_prefill')}")


def all_reduce(runner: "Runner", hosts: tuple[str, ...], data: dict, say: Callable[[str], None]) -> None:
    """Run SGLang's all-reduce start-up and dispatch (entrypoints/allreduce.py) for each host; a line each."""
    for host in hosts:
        args = all_reduce_argv(host, data)
        if args is None:
            say(all_reduce_line(host, None))
            continue
        say(all_reduce_line(host, runner.json(args, f"settings: {host} / all-reduce", 900)))


def runner_for(request: Request, tag: str, profile: str, what: str = "settings") -> Runner:
    """Where ``request`` runs SGLang: ``--python``, else ``--image`` or the profile's own tag, which must exist in
    the engine's store (``docker run`` would pull a missing name from Docker Hub and fail with "See 'docker run
    --help'")."""
    image = None
    if not request.python:
        image = request.image or tag  # a reference the task has checked (engine.image_reference)
        if request.engine.daemon:
            enginemod.reachable()
        if subprocess.run([request.engine.runner, "image", "inspect", image], capture_output=True).returncode != 0:
            flag = f" --profile {profile}" if request.profile else ""
            raise UserError(f"{what}: {image}: no such image in the {request.engine} store: build it first "
                            f"(`invoke build{flag}`), or name one with --image, or run SGLang with --python")
    return Runner(image=image, engine=request.engine, python=request.python,
                  model_dir=Path(request.model_dir) if request.model_dir else MODEL_DIR,
                  draft_dir=Path(request.draft_dir) if request.draft_dir else DRAFT_DIR)


def settings(request: Request, say: Callable[[str], None] = print) -> list[str]:
    """`invoke settings`: run SGLang's own code at our settings; print the table, write it, or compare it with
    docker/settings.json. Returns what changed (``check``), which the task turns into exit 1."""
    from sglang_stack.lock import lockfile as lockmod

    if request.write and request.check:
        raise UserError("--write and --check: choose one")
    from sglang_stack.lock import profiles

    if request.host and request.host not in PROFILES:
        raise UserError(f"--host {request.host!r}: choose {', '.join(PROFILES)}")
    if request.all_reduce and request.write:
        raise UserError("--all-reduce: the table does not keep it (it depends on the host's links); drop --write")
    if request.host and (request.write or request.check):
        raise UserError("--host: the table has every host; --write and --check take them all")
    chosen = profiles.get(request.profile)
    paths = tables(chosen)
    lock, _ = lockmod.check_all(chosen.lock, download=False)
    runner = runner_for(request, lock.tag, chosen.name)
    data = derive(runner, lock, (request.host,) if request.host else tuple(PROFILES))
    if request.write:
        for path in write(data, paths):
            say(f"wrote {path.relative_to(ROOT)}")
        return []
    say(markdown(data))
    if request.all_reduce:
        all_reduce(runner, (request.host,) if request.host else tuple(PROFILES), data, say)
    if not request.check:
        return []
    changed = differences(load(paths[0]), data)
    for line in changed:
        say(f"changed: {line}")
    if not changed:
        say(f"settings: as {paths[0].relative_to(ROOT)} records")
    return changed
