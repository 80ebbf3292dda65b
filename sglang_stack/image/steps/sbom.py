"""The image's bill of materials: CycloneDX 1.6 JSON at /opt/sglang-stack/sbom.cdx.json.

Runs inside the build, in two steps:

    python3 -m sglang_stack.image.steps.sbom record --stage S REPORT   after each pip install (its --report):
        adds every wheel pip installed, with the sha256 pip verified, to S.tsv
    python3 -m sglang_stack.image.steps.sbom write ...       last: the SBOM of what is installed

``write`` asks cyclonedx-py (CycloneDX's own generator, from the build tools) for every
Python distribution the image's interpreter sees, then adds what it cannot know: each
wheel's sha256 (from the .tsv files), the Debian/Ubuntu packages (dpkg's database), the
base image by reference and digest, and the patch series with each patch's sha256.
The output is reproducible: no serial number, no clock but SOURCE_DATE_EPOCH, sorted.
Standard library only, plus the build tools on PYTHONPATH (cyclonedx-py, packageurl).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

STATE = Path("/opt/sglang-stack/sbom")
SBOM = Path("/opt/sglang-stack/sbom.cdx.json")
PROPERTY = "sglang-stack"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def record(report: Path, stage: str, state: Path = STATE) -> int:
    """Add each item of a ``pip install --report`` to ``STAGE.tsv`` (sorted, one line per wheel).

    One file per stage: the runtime stage copies the sglang stage's in beside the deps stage's own.
    """
    data = json.loads(report.read_text())
    lines = set()
    table = state / f"{stage}.tsv"
    if table.is_file():
        lines.update(table.read_text().splitlines())
    for item in data.get("install", []):
        meta, info = item["metadata"], item.get("download_info", {}).get("archive_info", {})
        digest = info.get("hashes", {}).get("sha256") or info.get("hash", "").partition("sha256=")[2]
        if not digest:
            raise SystemExit(f"sbom: {meta['name']} {meta['version']}: pip's report has no sha256")
        lines.add(f"{canonical(meta['name'])}\t{meta['version']}\t{digest}")
    state.mkdir(parents=True, exist_ok=True)
    table.write_text("".join(f"{line}\n" for line in sorted(lines)))
    return len(data.get("install", []))


def python_components(python: str, tools: str) -> dict:
    """cyclonedx-py's SBOM of ``python``'s environment. The tools are put on the generator's own path
    only, so they are not in the environment it describes."""
    code = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'cyclonedx-py'; "
            "runpy.run_module('cyclonedx_py', run_name='__main__', alter_sys=True)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [python, "-I", "-c", code, tools, "environment", "--output-reproducible", "--no-validate",
            "--spec-version", "1.6", "--output-format", "JSON", "--output-file", "-", python]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/")
    if proc.returncode != 0:
        raise SystemExit(f"sbom: cyclonedx-py failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def dpkg_packages(root: Path = Path("/")) -> list[tuple[str, str, str]]:
    status = root / "var/lib/dpkg/status"
    if not status.is_file():
        return []
    proc = subprocess.run(["dpkg-query", "--admindir", str(root / "var/lib/dpkg"), "-W",
                           "-f", "${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n"],
                          capture_output=True, text=True, check=True)
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    return sorted((name, version, arch) for name, version, arch, state in rows if state.startswith("ii"))


def os_release(root: Path = Path("/")) -> dict[str, str]:
    out = {}
    for line in (root / "etc/os-release").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value.strip().strip('"')
    return out


def _purl(**parts) -> str:
    from packageurl import PackageURL  # from the build tools

    return PackageURL(**parts).to_string()


def _hash(digest: str) -> list[dict]:
    return [{"alg": "SHA-256", "content": digest}]


def base_component(ref: str) -> dict:
    """The base image as a container component, with its digest when the reference carries one."""
    name, _, digest = ref.partition("@")
    repo, tag = (name.rsplit(":", 1) + [""])[:2] if ":" in name.rsplit("/", 1)[-1] else (name, "")
    comp = {"type": "container", "bom-ref": "base-image", "name": repo, "version": tag or digest or "local"}
    if digest.startswith("sha256:"):
        comp["hashes"] = _hash(digest.removeprefix("sha256:"))
        qualifiers = {"repository_url": repo, **({"tag": tag} if tag else {})}
        comp["purl"] = _purl(type="oci", name=repo.rsplit("/", 1)[-1], version=digest, qualifiers=qualifiers)
    else:
        comp["properties"] = [{"name": f"{PROPERTY}:digest", "value": "none: a local image, named without a digest"}]
    return comp


def file_components(paths: list[Path]) -> list[dict]:
    """A ``file`` component with its sha256 for each file, or each file under a directory, that the build made
    outside any package (FlashInfer's modules built ahead of time, NVIDIA's link stub). A path the build did not
    make (the ahead-of-time step skipped) adds nothing."""
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*") if p.is_dir() else []) if f.is_file()})
    return [{"type": "file", "bom-ref": f"file:{f}", "name": str(f), "hashes": _hash(hashlib.sha256(f.read_bytes()).hexdigest())}
            for f in files]


def write(out: Path, *, base: str, patches: Path | None, name: str, version: str,
          tools: str, state: Path = STATE, root: Path = Path("/"), files: list[Path] = ()) -> dict:
    """Write the SBOM of this image to ``out``; returns it."""
    bom = python_components(sys.executable, tools)
    if tools not in sys.path:
        sys.path.append(tools)  # packageurl, for this process only: the SBOM above was taken without it
    bom.setdefault("components", [])
    hashes = {}
    for table in sorted(state.glob("*.tsv")):
        for line in table.read_text().splitlines():
            pkg, ver, digest = line.split("\t")
            hashes[(pkg, ver)] = digest
    for comp in bom["components"]:
        # A wheel installed by URL gets no purl from cyclonedx-py; a mirror build's file:///mirror
        # source says nothing about the wheel (its sha256 does), so it is left out.
        comp.setdefault("purl", _purl(type="pypi", name=canonical(comp["name"]), version=comp.get("version")))
        refs = [r for r in comp.get("externalReferences", []) if not r.get("url", "").startswith("file:")]
        if refs:
            comp["externalReferences"] = refs
        else:
            comp.pop("externalReferences", None)
        digest = hashes.get((canonical(comp["name"]), comp.get("version", "")))
        if digest:
            comp["hashes"] = _hash(digest)
        else:  # pip itself, from the interpreter's ensurepip: no hashed step installed it
            comp.setdefault("properties", []).append(
                {"name": f"{PROPERTY}:hash", "value": "none: not installed by a hash-checked pip step"})
    release = os_release(root)
    distro = release.get("ID", "debian")
    qualifier = f"{distro}-{release.get('VERSION_ID', '')}"
    for pkg, ver, arch in dpkg_packages(root):
        bom["components"].append({"type": "library", "bom-ref": f"deb:{pkg}@{ver}", "name": pkg, "version": ver,
                                  "purl": _purl(type="deb", namespace=distro, name=pkg, version=ver,
                                                qualifiers={"arch": arch, "distro": qualifier})})
    bom["components"].append(base_component(base))
    # The series the image applied, in its order: patches/ holds every profile's files, a profile's series names its own.
    # (Imported here: the stages that write an SBOM without patches do not carry the patching package.)
    if patches:
        from sglang_stack.patching.patches import read_series
    for patch in read_series(patches) if patches else []:
        bom["components"].append({"type": "file", "bom-ref": f"patch:{patch.name}", "name": f"patches/{patch.name}",
                                  "hashes": _hash(patch.sha256)})
    bom["components"] += file_components(list(files))
    bom["components"].sort(key=lambda c: (c["type"], c["name"].lower(), c.get("version", "")))
    meta = bom.setdefault("metadata", {})
    meta["component"] = {"type": "container", "bom-ref": "image", "name": name, "version": version}
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch.isdigit():
        meta["timestamp"] = datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(bom, indent=2, sort_keys=True) + "\n")
    return bom


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.image.steps.sbom", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="add a pip --report's wheels and their sha256 to STAGE.tsv")
    rec.add_argument("--stage", required=True, help="the Dockerfile stage that ran the install")
    rec.add_argument("report", type=Path)
    out = sub.add_parser("write", help="write the SBOM of what is installed")
    out.add_argument("--out", type=Path, default=SBOM)
    out.add_argument("--base", required=True, help="the base image reference the stage was built FROM")
    out.add_argument("--patches", type=Path, help="the patch series directory, if this image carries one")
    out.add_argument("--name", required=True)
    out.add_argument("--version", required=True)
    out.add_argument("--tools", default="/tmp/build-tools", help="where the build tools were installed")
    out.add_argument("--file", type=Path, action="append", default=[],
                     help="a file, or a directory of files, the build made outside any package (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "record":
        print(f"sbom: recorded {record(args.report, args.stage)} wheels and their sha256")
        return 0
    bom = write(args.out, base=args.base, patches=args.patches, name=args.name, version=args.version, tools=args.tools,
                files=args.file)
    print(f"sbom: {len(bom['components'])} components in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
