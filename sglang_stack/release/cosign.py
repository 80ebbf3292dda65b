"""cosign, the one tool that signs and checks: each call shown before it runs, each failure one line.

Keys: a cosign key file or any key reference cosign takes (``awskms://``, ``k8s://``, ...); a key file's
password comes from COSIGN_PASSWORD, as cosign reads it. Without Sigstore's network (loopback tests, air gaps)
nothing is uploaded to the transparency log and nothing is looked up there (``--tlog-upload=false``,
``--insecure-ignore-tlog``): the signature alone is the proof, checked with the public key.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from pathlib import Path

from sglang_stack import shell
from sglang_stack.errors import UserError

HINT = "install cosign 2.x (https://docs.sigstore.dev/cosign/system_config/installation/; .ci/install brings it)"


@dataclass(frozen=True)
class Signer:
    key: str = ""  # a key file or reference; "" with keyless
    keyless: bool = False
    tlog: bool = False  # upload to / check against Rekor (needs Sigstore's network)
    insecure: bool = False  # a registry over plain HTTP that is not on loopback

    def flags(self) -> list[str]:
        out = [] if self.keyless else ["--key", self.key]
        if not self.tlog:
            out.append("--tlog-upload=false")
        return out + (["--allow-insecure-registry"] if self.insecure else []) + ["--yes"]


def key_ref(value: str, flag: str) -> str:
    """A key file that exists, or a KMS-style reference (``scheme://...``); else one line naming ``flag``."""
    if re.match(r"^[a-z0-9-]+://", value) or Path(value).is_file():
        return value
    raise UserError(f"{flag} {value}: no such key file (or a key reference such as awskms://...)")


def _cosign() -> str:
    return shell.require("cosign", HINT)


def ready(signer: Signer) -> None:
    """Everything signing needs, checked before anything is pushed: cosign on PATH, and for a key file a key that
    COSIGN_PASSWORD opens and that is a private key (``cosign public-key`` derives the public half from it)."""
    cosign = _cosign()
    if signer.keyless or re.match(r"^[a-z0-9-]+://", signer.key):
        return  # keyless, or a KMS key: cosign asks its service at signing time
    text = Path(signer.key).read_text(errors="replace")
    if "PRIVATE KEY" not in text:
        raise UserError(f"--key {signer.key}: not a private key (a public key verifies; signing needs the cosign.key "
                        "that `cosign generate-key-pair` wrote beside it)")
    proc = shell.run([cosign, "public-key", "--key", signer.key], capture=True, check=False, what="cosign public-key",
                     timeout=60)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise UserError(f"--key {signer.key}: cosign cannot open it ({said[-1][:160] if said else 'exit ' + str(proc.returncode)}; "
                        "COSIGN_PASSWORD is its password)")


def sign(signer: Signer, ref: str) -> None:
    shell.run([_cosign(), "sign", *signer.flags(), ref], capture=True, what="cosign sign")


def attest(signer: Signer, ref: str, predicate_type: str, predicate: Path) -> None:
    shell.run([_cosign(), "attest", *signer.flags(), "--type", predicate_type, "--predicate", str(predicate), ref],
              capture=True, what=f"cosign attest --type {predicate_type}")


def _verify_flags(key: str, tlog: bool, insecure: bool) -> list[str]:
    return ["--key", key, *([] if tlog else ["--insecure-ignore-tlog=true"]),
            *(["--allow-insecure-registry"] if insecure else [])]


def _why(stderr: str) -> str:
    """cosign's failure, in the words `invoke verify` prints (cosign 2.5's messages)."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    said = next((line.split("error during command execution: ", 1)[1] for line in reversed(lines)
                 if "error during command execution: " in line), lines[-1] if lines else "cosign said nothing")
    if said.startswith("no signatures found"):
        return "unsigned"
    if said.rstrip(": ") == "no matching attestations":
        return "none"
    if said.startswith("none of the attestations matched the predicate type"):
        return "none of this type (" + said.split(", found: ", 1)[-1] + " only)"
    if said.startswith(("no matching signatures", "no matching attestations")):
        return "signed, but not by this key"
    return said[:200]


def verify(key: str, target: list[str], tlog: bool = False, insecure: bool = False) -> tuple[bool, str]:
    """``cosign verify`` of ``target`` (a reference, or ``--local-image DIR``): (ok, detail)."""
    proc = shell.run([_cosign(), "verify", *_verify_flags(key, tlog, insecure), *target], capture=True, check=False,
                     what="cosign verify")
    if proc.returncode != 0:
        return False, _why(proc.stderr or "")
    try:
        count = len(json.loads(proc.stdout or "[]"))
    except (ValueError, TypeError):
        count = 1
    return True, f"signed by this key ({count} signature{'s' if count != 1 else ''})"


def attestations(key: str, target: list[str], predicate_type: str, tlog: bool = False,
                 insecure: bool = False) -> tuple[list[dict], str]:
    """The predicates of ``predicate_type`` that ``key`` signed on ``target``; ([], why) where there is none."""
    proc = shell.run([_cosign(), "verify-attestation", *_verify_flags(key, tlog, insecure), "--type", predicate_type,
                      *target], capture=True, check=False, what="cosign verify-attestation")
    if proc.returncode != 0:
        return [], _why(proc.stderr or "")
    found = []
    for line in (proc.stdout or "").splitlines():
        try:
            envelope = json.loads(line)
            statement = json.loads(base64.b64decode(envelope["payload"]))
        except (ValueError, KeyError, TypeError):
            continue
        if statement.get("predicateType") in (predicate_type, CYCLONEDX_URI if predicate_type == "cyclonedx" else None):
            found.append(statement.get("predicate"))
    return found, "" if found else f"cosign accepted no {predicate_type} statement"


CYCLONEDX_URI = "https://cyclonedx.org/bom"


def save(ref: str, directory: Path, insecure: bool = False) -> None:
    shell.run([_cosign(), "save", *(["--allow-insecure-registry"] if insecure else []), "--dir", str(directory), ref],
              capture=True, what="cosign save")
