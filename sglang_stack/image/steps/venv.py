"""The image's one venv, its path file and its user (runs in the image, standard library only).

    PYTHONPATH=/opt/sglang-stack python3 -B -m sglang_stack.image.steps.venv /opt/venv --path DIR... --epoch N [--python X.Y]

Every stage that runs Python starts here: a venv at the first argument, made by the base's ``python3``
(``--python``: refused unless it is that minor version, as a requirement file resolved for it needs); a
``.pth`` file that puts each ``--path`` on its path (the patched sglang tree, this project's in-image
tools); the venv's own files byte-compiled, hash-checked (``pyc.py``), so that two builds give the same
bytes; and the runtime user, uid 10001 (``sglang``), with its cache directory, dated ``--epoch`` (the
lock's date: not the build's clock, which would change the layer at every commit). A volume mounted on
the cache directory takes its owner.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import venv
from pathlib import Path

USER, UID = "sglang", 10001
CACHE = Path("/home/sglang/.cache")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -B -m sglang_stack.image.steps.venv", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="where the venv goes")
    parser.add_argument("--path", action="append", default=[], help="a directory the venv's .pth file names (repeatable)")
    parser.add_argument("--epoch", type=int, required=True, help="the account's date: versions.lock's, as a Unix time")
    parser.add_argument("--python", help="the Python minor version the requirement files were resolved for")
    args = parser.parse_args(argv)
    have = "%d.%d" % sys.version_info[:2]
    if args.python and have != args.python:
        print(f"unsupported: base python3 is {have}, versions.lock pins {args.python}", file=sys.stderr)
        return 1
    venv.create(args.root, with_pip=True)
    # The venv's own interpreter says where its site-packages is: the base's may use another scheme (Debian's
    # python3 puts its own packages in dist-packages).
    site = Path(subprocess.run([str(args.root / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "sglang-stack.pth").write_text("".join(f"{p}\n" for p in args.path))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run([sys.executable, "-B", "-m", "sglang_stack.image.steps.pyc", "--clean", "--tree", str(args.root)],
                   env=env, check=True)
    subprocess.run(["useradd", "--uid", str(UID), "--create-home", "--shell", "/bin/bash", USER],
                   env={**os.environ, "SOURCE_DATE_EPOCH": str(args.epoch)}, check=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    os.chown(CACHE, UID, UID)
    print(f"venv: {args.root} (python {have}), paths {' '.join(args.path) or 'none'}, user {USER} ({UID})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
