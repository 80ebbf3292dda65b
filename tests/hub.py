"""A loopback Hugging Face Hub for the tests that run huggingface_hub's own requests against it: one small repository,
``lightseekorg/kimi-k2.5-eagle3``, whose files the tests write, with metadata in the Hub's format. The hashes in it are
the real hashes of those files (an LFS sha256 for the weights, a git blob id for the small files), so what is checked
hashes real bytes against real records. A test may change ``FILES`` (what the Hub records), ``SERVED`` (the bytes
it sends) and ``BROKEN`` (what it lists but does not send); the fixture sets ``HF_ENDPOINT`` to the server.
"""

from __future__ import annotations

import contextlib
import hashlib
from urllib.parse import unquote, urlparse

from loopback import Handler, serving

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b'{"architectures": ["Eagle3DeepseekV2ForCausalLM"]}\n',
         "model.safetensors": bytes(range(256)) * 4096, "tokenizer_config.json": b"{}\n"}
LFS = {"model.safetensors"}


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_answer(repo: str) -> dict:
    """What the Hub answers for a model at a commit with ``blobs=True`` (its siblings with sizes and hashes)."""
    siblings = []
    for name, data in FILES.items():
        entry = {"rfilename": name, "size": len(data), "blobId": blob_id(data)}
        if name in LFS:
            entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        siblings.append(entry)
    return {"_id": "x", "id": repo, "sha": COMMIT, "private": False, "siblings": siblings, "tags": []}


SERVED: dict[str, bytes] = {}  # what the loopback Hub serves for a file download: FILES, unless a test swaps one
BROKEN: set[str] = set()  # files listed but not served (404): a fetch that fails part of the way


@contextlib.contextmanager
def serve(monkeypatch):
    """A loopback Hub (conftest's ``hub`` fixture): ``lightseekorg/kimi-k2.5-eagle3`` at ``main`` exists; every other
    repository does not. Yields the list of the paths asked for, as they come.

    It also serves what ``hf download REPO --revision COMMIT`` asks (the tree, then each file by HEAD and GET),
    with the bytes of ``SERVED``."""
    seen = []
    SERVED.clear()
    SERVED.update(FILES)
    BROKEN.clear()

    class Hub(Handler):
        def do_GET(self):
            url = urlparse(self.path)
            seen.append(url.path + "?" + url.query)
            parts = unquote(url.path).split("/")
            if parts[1] != "api":
                return self.send_file(parts, head=False)
            repo, rev = "/".join(parts[3:5]), parts[6] if len(parts) > 6 else "main"
            if repo != "lightseekorg/kimi-k2.5-eagle3":
                self.reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            elif rev not in ("main", COMMIT):
                self.reply(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
            elif parts[5] == "tree":
                self.reply(200, [{"type": "file", "path": n, "size": len(d), "oid": blob_id(d)} for n, d in SERVED.items()])
            else:
                self.reply(200, hub_answer(repo))

        def do_HEAD(self):
            self.send_file(unquote(urlparse(self.path).path).split("/"), head=True)

        def send_file(self, parts: list[str], head: bool) -> None:  # /OWNER/NAME/resolve/COMMIT/FILE
            name = "/".join(parts[5:])
            if name in BROKEN:
                return self.reply(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            data = SERVED[name]
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{blob_id(data)}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

    with serving(Hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield seen
