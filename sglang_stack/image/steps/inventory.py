"""What an image holds, as JSON on stdout: run by ``invoke verify`` with the image's own python3.

    python3 -I inventory.py [--hash PATH]...

Prints the interpreter's version, every distribution its ``sys.path`` sees (name, version,
where), every Debian package dpkg's database says is installed (name, version), the sha256 of
each ``--hash`` path (null when absent), and the SBOM at /opt/sglang-stack/sbom.cdx.json and
/opt/sglang-stack/installed.txt (null when absent), and the verdicts the build recorded in
/opt/sglang-stack/verdicts (name -> the file's JSON, or "unreadable"). Standard library only, one file:
``invoke verify`` mounts this checkout's copy read-only, so no code of the image's decides.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

SBOM = Path("/opt/sglang-stack/sbom.cdx.json")
INSTALLED = Path("/opt/sglang-stack/installed.txt")  # the image's own list, `pip list --format=freeze`
VERDICTS = Path("/opt/sglang-stack/verdicts")  # what the build's checks recorded (steps/verdict.py)
DPKG_STATUS = Path("/var/lib/dpkg/status")


def _sha256(path: Path):
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def debs(status: Path = DPKG_STATUS) -> dict[str, str] | None:
    """Installed Debian packages, name -> version, read from dpkg's status file (no dpkg-query needed); None without one."""
    if not status.is_file():
        return None
    out = {}
    for stanza in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Status") == "install ok installed" and "Package" in fields:  # dpkg-query's "ii", as the SBOM
            out[fields["Package"]] = fields.get("Version", "")
    return out


def verdicts(directory: Path = VERDICTS) -> dict:
    out = {}
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            out[path.stem] = json.loads(path.read_text())
        except ValueError:
            out[path.stem] = "unreadable"
    return out


def main(argv: list[str]) -> int:
    paths = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--hash"]
    dists = sorted({(d.metadata["Name"], d.version, str(getattr(d, "_path", "")).rsplit("/", 1)[0])
                    for d in metadata.distributions()})
    try:
        sbom = json.loads(SBOM.read_text()) if SBOM.is_file() else None
    except ValueError:
        sbom = "unreadable"
    json.dump({"python": ".".join(map(str, sys.version_info[:3])), "distributions": dists,
               "debs": debs(), "files": {p: _sha256(Path(p)) for p in paths}, "sbom": sbom,
               "installed_txt": INSTALLED.read_text() if INSTALLED.is_file() else None,
               "verdicts": verdicts()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
