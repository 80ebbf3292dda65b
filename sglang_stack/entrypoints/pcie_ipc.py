"""``PCIE_ALLREDUCE=auto|on|off``: whether SGLang's PCIe-IPC all-reduce is turned on, decided at start in the container.

SGLang 0.5.23 ships FlashInfer's PCIe-IPC all-reduce for boxes whose GPUs talk over PCIe only (8x RTX PRO 6000),
opt-in through ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE``; upstream asks deployers to validate it per box
(sgl-project/sglang#32330). This module turns the setting into that variable:

- ``off``: never.
- ``on``: always where the image's SGLang has it; SGLang's own ``eligible_group`` and workspace build still decide
  per group (TP 1 or 3 stays on NCCL there, as SGLang says in its log).
- ``auto`` (the default): only where the probe (``entrypoints/probe.py``, run by ``invoke probe`` / ``invoke up``)
  has recorded, for this topology, that SGLang's own code picks PCIe-IPC for the decode reductions and that it gave
  exact sums faster than NCCL at every decode size. The record lives in the cache volume
  (``~/.cache/sglang-stack/allreduce-verdict.json``) with the fingerprint of the topology it was measured on
  (``peers.read``); another topology, TP size, SGLang release or determinism setting needs a new one.

``SGLANG_PCIE_IPC_MAX_NUMEL`` (SGLang's override of the workspace bound) must be a positive whole number of
16-byte packs (a multiple of 8 bf16 elements); anything else is dropped with a warning, so SGLang derives the bound.
The autotune file FlashInfer keeps in ``FLASHINFER_AUTOTUNE_DIR`` is checked too: a corrupt one would make SGLang's
workspace build fail and leave every reduction on NCCL, so it is set aside; a directory that cannot be written is
named (the tuning then runs at every start). Each outcome is one ``serve:`` line, and where it is on, one more names
the autotune file this start reuses or will write. Stdlib only: it runs in the image.

    python3 -m sglang_stack.entrypoints.pcie_ipc

prints one line per autotune file in ``FLASHINFER_AUTOTUNE_DIR`` (``invoke status`` runs it in a running server).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SETTING = "PCIE_ALLREDUCE"
VALUES = ("auto", "on", "off")
SGLANG_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
MAX_NUMEL = "SGLANG_PCIE_IPC_MAX_NUMEL"
MAX_NUMEL_CEILING = 1 << 31  # 4 GiB of bf16 per rank, world-size times over: past any GPU's memory
AUTOTUNE_DIR = "FLASHINFER_AUTOTUNE_DIR"
SIZES = (2, 4, 8)  # the world sizes FlashInfer's kernels exist for
MODULE_FILE = ("srt", "distributed", "device_communicators", "pcie_ipc_ar.py")
PROFILE = "0.5.23"  # the profile of this checkout whose SGLang has it


def verdict_path() -> Path:
    """The probe's record, in the cache volume compose and Kubernetes mount at ~/.cache."""
    return Path(os.path.expanduser("~")) / ".cache" / "sglang-stack" / "allreduce-verdict.json"


def setting(environ) -> tuple[str, str]:
    """(auto|on|off, a warning line or ""): an unknown value is off, with the line saying so."""
    raw = str(environ.get(SETTING) or "auto")
    value = raw.strip().lower()
    if value in VALUES:
        return value, ""
    return "off", f"{SETTING}={_shown(raw)} is not one of {', '.join(VALUES)}: PCIe-IPC all-reduce stays off (NCCL)"


def _shown(text: str) -> str:
    """A value as a message shows it: as written when printable, else quoted with its escapes."""
    text = text[:40]
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def max_numel_problem(environ) -> str:
    """Why ``SGLANG_PCIE_IPC_MAX_NUMEL`` cannot be used as it is, or "" (unset or fine)."""
    raw = environ.get(MAX_NUMEL)
    if raw is None or str(raw).strip() in ("", "0"):
        return ""
    text = str(raw).strip()
    if not re.fullmatch(r"[0-9]{1,12}", text):
        return f"{MAX_NUMEL}={_shown(text)} is not a whole number of elements"
    value = int(text)
    if value % 8:
        return f"{MAX_NUMEL}={value} is not a multiple of 8 (FlashInfer's workspace holds whole 16-byte packs of bf16)"
    if value > MAX_NUMEL_CEILING:
        return f"{MAX_NUMEL}={value} is over {MAX_NUMEL_CEILING}, more than a GPU holds"
    return ""


@dataclass(frozen=True)
class Service:
    """What the decision needs of the server's command line: its TP size, nodes, and determinism."""

    tp: int = 1
    nnodes: int = 1
    deterministic: bool = False

    @classmethod
    def of(cls, argv: list[str]) -> "Service":
        """Read from ``launch_server``'s arguments: ``--tp``/``--tp-size``/``--tensor-parallel-size``, ``--nnodes``,
        ``--enable-deterministic-inference`` (the last one given wins, as with argparse)."""
        values = {"tp": 1, "nnodes": 1}
        names = {"--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp", "--nnodes": "nnodes"}
        deterministic = False
        for i, arg in enumerate(argv):
            flag, _, inline = arg.partition("=")
            if flag in names:
                text = inline if inline else (argv[i + 1] if i + 1 < len(argv) else "")
                if text.isdigit():
                    values[names[flag]] = int(text)
            elif arg == "--enable-deterministic-inference":
                deterministic = True
        return cls(values["tp"], values["nnodes"], deterministic)


def key(svc: Service, topology: dict, version: str) -> dict:
    """What a verdict is valid for: this topology, TP size, SGLang release and determinism."""
    return {"fingerprint": topology.get("fingerprint"), "tp": svc.tp, "sglang": version,
            "deterministic": svc.deterministic}


def read_verdict(path: Path | None = None) -> tuple[dict | None, str]:
    """The recorded verdict, or None and why not (missing, unreadable, or not a record of ours)."""
    path = path or verdict_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "none recorded"
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, f"{path} is unreadable ({err.__class__.__name__})"
    if not isinstance(data, dict) or not isinstance(data.get("key"), dict) or data.get("verdict") not in ("pcie_ipc", "nccl", "custom"):
        return None, f"{path} is not a verdict of `invoke probe`"
    return data, ""


def write_verdict(record: dict, path: Path | None = None) -> Path:
    """Write the probe's record whole (a temporary file renamed over it)."""
    path = path or verdict_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def autotune_problem(environ, world: int) -> str:
    """Why FlashInfer's PCIe-IPC autotune file for ``world`` ranks will not serve, or "". A corrupt or truncated file
    (FlashInfer would raise reading it, and SGLang would leave every reduction on NCCL) is renamed aside."""
    directory = environ.get(AUTOTUNE_DIR)
    if not directory:
        return ""
    path = Path(directory) / f"pcie_ipc_all_reduce_ws{world}.json"
    try:  # as FlashInfer will: make the directory, write a file in it (a read-only volume refuses root too)
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as err:
        return (f"{AUTOTUNE_DIR}={directory} cannot be written ({err.strerror or err.__class__.__name__}): "
                "FlashInfer re-tunes at every start")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError, ValueError) as err:
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        try:
            os.replace(path, aside)
        except OSError:
            return f"{path} is unreadable ({err.__class__.__name__}) and could not be set aside: remove it"
        return f"{path} was unreadable ({err.__class__.__name__}): set aside as {aside.name}, FlashInfer tunes again"
    if not isinstance(data, dict):
        return f"{path} holds no table of tuned entries: FlashInfer keeps its seed configurations"
    return ""


def autotune_path(environ, world: int) -> Path | None:
    """Where FlashInfer keeps the PCIe-IPC tuning of ``world`` ranks, where the image sets the directory."""
    directory = environ.get(AUTOTUNE_DIR)
    return Path(directory) / f"pcie_ipc_all_reduce_ws{world}.json" if directory else None


def describe_autotune(path: Path) -> str:
    """One line naming the file: its tuned entries and when it was written, or that the first start writes it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        written = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
    except FileNotFoundError:
        return f"none yet: FlashInfer tunes at this start and keeps it in {path}"
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return f"{path}: unreadable ({err.__class__.__name__})"
    entries = len(data) if isinstance(data, dict) else 0
    return f"{path}: {entries} tuned entr{'y' if entries == 1 else 'ies'}, written {written}"


def autotune_files(environ) -> list[str]:
    """One line per PCIe-IPC autotune file present in ``FLASHINFER_AUTOTUNE_DIR``."""
    directory = environ.get(AUTOTUNE_DIR)
    if not directory:
        return []
    return [describe_autotune(path) for path in sorted(Path(directory).glob("pcie_ipc_all_reduce_ws*.json"))]


def decide(value: str, svc: Service, has_it: bool, version: str, topology: dict | None, topology_error: str,
           verdict: dict | None, verdict_why: str) -> tuple[bool, str]:
    """(turn it on, the one line that says what was decided and why): a pure function of what was read."""
    head = f"PCIe-IPC all-reduce ({SETTING}={value})"
    if value == "off":
        return False, f"{head}: off; every all-reduce SGLang's usual way"
    if not has_it:
        where = f"SGLang {version} has none; profile {PROFILE} has it (SGLANG_PROFILE={PROFILE})"
        return False, f"{head}: off: {where}"
    if svc.tp < 2:
        return False, f"{head}: off: TP {svc.tp}, no all-reduce"
    if value == "on":
        note = "" if svc.tp in SIZES else f"; SGLang keeps TP {svc.tp} on NCCL (kernels for {', '.join(map(str, SIZES))} ranks)"
        return True, f"{head}: on{note}"
    if svc.nnodes > 1:
        return False, f"{head}: off: {svc.nnodes} nodes (its IPC buffers are within one node)"
    if svc.tp not in SIZES:
        return False, f"{head}: off: TP {svc.tp} (FlashInfer's kernels exist for {', '.join(map(str, SIZES))} ranks)"
    if topology is None:
        return False, f"{head}: off: the topology could not be read ({topology_error})"
    how = "`invoke probe SERVICE` (or `invoke up`) measures it and records one"
    if verdict is None:
        return False, f"{head}: off until a probe confirms it on this host: {verdict_why}; {how}"
    wanted = key(svc, topology, version)
    if verdict.get("key") != wanted:
        changed = ", ".join(k for k in wanted if (verdict.get("key") or {}).get(k) != wanted[k])
        return False, f"{head}: off: the recorded probe was for another {changed}; {how}"
    if verdict["verdict"] != "pcie_ipc":
        return False, f"{head}: off: the probe of {verdict.get('when', '?')} chose {verdict['verdict']}: {verdict.get('why', '')}"
    return True, f"{head}: on: the probe of {verdict.get('when', '?')} on this topology: {verdict.get('why', '')}"


def at_start(argv: list[str], environ) -> tuple[bool, list[str]]:
    """Everything ``serve`` needs: (set SGLANG_ENABLE_PCIE_IPC_ALLREDUCE, the lines to print). Drops an unusable
    ``SGLANG_PCIE_IPC_MAX_NUMEL`` from ``environ``."""
    from sglang_stack.entrypoints import installed, peers

    lines = []
    value, warning = setting(environ)
    if warning:
        lines.append(f"warning: {warning}")
    if problem := max_numel_problem(environ):
        environ.pop(MAX_NUMEL, None)
        lines.append(f"warning: {problem}: dropped, SGLang sizes the workspace itself")
    svc = Service.of(argv)
    has_it, version = installed.sglang_has(MODULE_FILE)
    topology, topology_error, verdict, verdict_why = None, "", None, ""
    if value == "auto" and has_it and svc.tp in SIZES and svc.nnodes == 1:
        try:
            topology = peers.read(svc.tp)
        except ValueError as err:
            topology_error = str(err)
        verdict, verdict_why = read_verdict()
    enable, line = decide(value, svc, has_it, version, topology, topology_error, verdict, verdict_why)
    tuned = []
    if enable and (problem := autotune_problem(environ, svc.tp)):
        lines.append(f"warning: {problem}")
    elif enable and (path := autotune_path(environ, svc.tp)):
        tuned.append(f"PCIe-IPC autotune: {describe_autotune(path)}")
    return enable, [*lines, line, *tuned]


def main() -> int:
    for line in autotune_files(os.environ):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
