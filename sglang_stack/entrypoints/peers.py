"""How the GPUs this process sees reach each other, as ``nvidia-smi topo`` reports it: NVLink and peer-to-peer per pair.

The parser reads the formats ``nvidia-smi topo -h`` documents (``-m``: the links, ``-p2p r|w``: P2P reads and writes),
the way a recorded H200 prints them (tab-separated cells, an underlined header line). The host's doctor reads the
same matrices (``doctor/topology.py``); inside the image, the entrypoint and the probe read them to decide and to
fingerprint the topology a PCIe-IPC verdict was measured on. Stdlib only: it runs inside the image.
"""

from __future__ import annotations

import hashlib
import re
import subprocess

P2P_OK = "OK"
TIMEOUT_S = 20
GPU = re.compile(r"GPU\d+")


def parse_matrix(text: str, what: str) -> dict[tuple[int, int], str]:
    """A GPU-by-GPU matrix of ``nvidia-smi topo`` (``-m``, ``-p2p r|w``): (row GPU, column GPU) -> the cell."""
    columns: list[int] = []
    out: dict[tuple[int, int], str] = {}
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)  # nvidia-smi underlines the header line (recorded on an H200)
    for line in text.splitlines():
        cells = line.split("\t") if "\t" in line else line.split()
        cells = [c.strip() for c in cells]
        names = [c for c in cells if c]
        if not columns and names and all(re.fullmatch(r"GPU\d+|NIC\d+|CPU Affinity|NUMA Affinity|GPU NUMA ID", n)
                                          for n in names) and names[0].startswith("GPU"):
            columns = [int(n[3:]) for n in names if GPU.fullmatch(n)]
            continue
        if columns and names and GPU.fullmatch(names[0]):
            row = int(names[0][3:])
            values = names[1:1 + len(columns)]
            if len(values) < len(columns):
                raise ValueError(f"{what}: row GPU{row} has {len(values)} cells for {len(columns)} GPUs")
            for col, value in zip(columns, values):
                if not re.fullmatch(r"[A-Za-z0-9#]{1,8}", value):
                    raise ValueError(f"{what}: row GPU{row}: {value[:12]!r} is not a topology cell")
                out[(row, col)] = value
    if not columns:
        raise ValueError(f"{what}: no GPU header line")
    return out


def pairs(ids: list[int]) -> list[tuple[int, int]]:
    return [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]]


def linked(links: dict | None, p2p: list[dict | None], gpus: list[int]) -> tuple[bool, bool]:
    """(NVLink between every pair, P2P OK between every pair in every matrix given) of ``gpus``."""
    every = pairs(gpus)
    nvlink = bool(every) and all((links or {}).get(p, "").startswith("NV") for p in every)
    ok = bool(every) and all(m is not None and m.get(p) == P2P_OK for m in p2p for p in every)
    return nvlink, ok


def _smi(*args: str) -> str:
    """``nvidia-smi ARGS``'s output, decoded leniently; ValueError saying why it could not be read."""
    argv = ["nvidia-smi", *args]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ValueError(f"{' '.join(argv)}: {err.__class__.__name__}") from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ValueError(f"{' '.join(argv)}: {said[-1][:160] if said else f'exit {proc.returncode}'}")
    return proc.stdout.decode("utf-8", "replace")


def read(gpus: int) -> dict:
    """The first ``gpus`` GPUs this process sees: their UUIDs, NVLink and P2P between every pair, and a fingerprint of
    exactly what was read (the UUIDs and each pair's cells), which changes when the topology does. ValueError: unread."""
    uuids = [u.strip() for u in _smi("--query-gpu=uuid", "--format=csv,noheader").splitlines() if u.strip()]
    if len(uuids) < gpus:
        raise ValueError(f"nvidia-smi lists {len(uuids)} GPU(s) for {gpus} ranks")
    ids = list(range(gpus))
    links = parse_matrix(_smi("topo", "-m"), "nvidia-smi topo -m") if gpus > 1 else {}
    reads = parse_matrix(_smi("topo", "-p2p", "r"), "nvidia-smi topo -p2p r") if gpus > 1 else {}
    writes = parse_matrix(_smi("topo", "-p2p", "w"), "nvidia-smi topo -p2p w") if gpus > 1 else {}
    nvlink, p2p = linked(links, [reads, writes], ids)
    cells = [f"{a}-{b}:{links.get((a, b), '?')}/{reads.get((a, b), '?')}/{writes.get((a, b), '?')}" for a, b in pairs(ids)]
    digest = hashlib.sha256("\n".join([*uuids[:gpus], *cells]).encode()).hexdigest()[:16]
    return {"gpus": gpus, "uuids": uuids[:gpus], "nvlink": nvlink, "p2p": p2p, "fingerprint": digest}
