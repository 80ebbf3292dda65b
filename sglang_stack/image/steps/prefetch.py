"""Bake models of models.lock into the image, each at its locked commit and checked file by file (build time).

    python3 -m sglang_stack.image.steps.prefetch --lock models.lock --dest /opt/models REPO@COMMIT ...

Each REPO@COMMIT must be a model models.lock pins, with its files recorded (``invoke build`` turns the
roles of ``PREFETCH_MODELS`` into these). ``hf download`` fetches that commit; then every file must
have the size and hash models.lock records and no other file may be there, or the step fails naming
the file: a repository changed upstream, or a download that went wrong, never reaches a layer.
Standard library only (with ``sglang_stack.hubfile``); ``hf`` is huggingface_hub's CLI of the image.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from sglang_stack.hubfile import digest


def problems(directory: Path, files: list[dict]) -> list[str]:
    """What differs between ``directory`` and the files models.lock records for it."""
    out = []
    listed = {f["name"] for f in files}
    for f in files:
        path = directory / f["name"]
        if not path.is_file() or path.is_symlink():
            out.append(f"{f['name']}: missing")
        elif path.stat().st_size != f["size"]:
            out.append(f"{f['name']}: {path.stat().st_size} bytes, models.lock records {f['size']}")
        elif digest(path, f.get("sha256", ""), f.get("git_sha1", "")) != (f.get("sha256") or f.get("git_sha1")):
            out.append(f"{f['name']}: other bytes than models.lock records")
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.relative_to(directory).as_posix() not in listed:
            out.append(f"{path.relative_to(directory).as_posix()}: not a file of the locked commit")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, required=True, help="models.lock")
    parser.add_argument("--dest", type=Path, required=True, help="where each repository goes, as DEST/OWNER/NAME")
    parser.add_argument("models", nargs="*", help="REPO@COMMIT, each as models.lock pins it")
    args = parser.parse_args(argv)
    if not args.models:
        print("prefetch: PREFETCH_MODELS is empty: no model is baked in")
        return 0
    pinned = {f"{m.get('repo')}@{m.get('revision')}": m for m in tomllib.loads(args.lock.read_text()).get("model", [])}
    for ref in args.models:
        model = pinned.get(ref)
        if model is None or not model.get("files"):
            print(f"error: prefetch: {ref}: models.lock pins no such model with its files", file=sys.stderr)
            return 1
        dest = args.dest / model["repo"]
        argv = ["hf", "download", model["repo"], "--revision", model["revision"], "--local-dir", str(dest)]
        print(f"$ {shlex.join(argv)}", flush=True)
        if subprocess.run(argv).returncode != 0:
            print(f"error: prefetch: hf download {ref} failed", file=sys.stderr)
            return 1
        shutil.rmtree(dest / ".cache", ignore_errors=True)  # hf's own download metadata, not the model's
        found = problems(dest, model["files"])
        if found:
            print(f"error: prefetch: {ref}: {'; '.join(found[:5])}" + (f" (and {len(found) - 5} more)" if len(found) > 5 else ""),
                  file=sys.stderr)
            return 1
        print(f"prefetch: {ref}: {len(model['files'])} files as models.lock records them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
