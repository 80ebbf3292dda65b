"""``SPECULATIVE_ADAPTIVE=0|1``: SGLang's runtime-adaptive speculation, decided at start in the container.

SGLang 0.5.23 adapts the number of draft steps to the batch at run time (``--speculative-adaptive``,
``srt/speculative/adaptive_spec_params.py``; sgl-project/sglang#21599), down to none at large batches, where
speculation costs more than it gives. ``1`` passes the flag to a server that speculates, where the image's SGLang
has it; SGLang itself then applies its own rules at start (``adaptive_unsupported_reason``: only EAGLE/EAGLE3,
top-k 1, no attention DP, ...) and, where they refuse, warns and keeps the static steps. `invoke settings` runs
those rules at our settings and records the answer per host. On a release without it, ``1`` is refused in one line
naming the profile that has it: the user asked for a behaviour the image cannot give. Stdlib only: it runs in the
image.
"""

from __future__ import annotations

from sglang_stack.entrypoints import installed

SETTING = "SPECULATIVE_ADAPTIVE"
FLAG = "--speculative-adaptive"
MODULE_FILE = ("srt", "speculative", "adaptive_spec_params.py")
PROFILE = "0.5.23"  # the first release of this checkout's profiles that has it


class Refused(Exception):
    """A setting the image cannot honour: the server does not start."""


def speculates(argv: list[str]) -> bool:
    """Whether the command line turns speculative decoding on (``--speculative-algorithm X``, the last one wins)."""
    algorithm = None
    for i, arg in enumerate(argv):
        if arg == "--speculative-algorithm" and i + 1 < len(argv):
            algorithm = argv[i + 1]
        elif arg.startswith("--speculative-algorithm="):
            algorithm = arg.split("=", 1)[1]
    return bool(algorithm) and algorithm.lower() != "none"


def setting(environ) -> str:
    """``SPECULATIVE_ADAPTIVE``'s value, ``0`` when unset; a value that is neither 0 nor 1 is refused."""
    value = str(environ.get(SETTING) or "0").strip()
    if value not in ("0", "1"):
        raise Refused(f"{SETTING}={value!r}: not 0 or 1")
    return value


def at_start(argv: list[str], environ) -> tuple[list[str], list[str]]:
    """(arguments to add, lines to print); raises ``Refused`` where the setting cannot be honoured."""
    if setting(environ) == "0":
        return [], []
    if not speculates(argv):
        return [], [f"{SETTING}=1: this server does not speculate; nothing to adapt"]
    has_it, version = installed.sglang_has(MODULE_FILE)
    if not has_it:
        raise Refused(f"{SETTING}=1: SGLang {version} has no adaptive speculation ({FLAG}); profile {PROFILE} has it "
                      f"(SGLANG_PROFILE={PROFILE}), or set {SETTING}=0")
    if FLAG in argv:
        return [], [f"{SETTING}=1: {FLAG} is on the command line already"]
    return [FLAG], [f"{SETTING}=1: {FLAG} (SGLang keeps it where its rules allow at these settings, else its log "
                    "says `speculative_adaptive disabled: ...` and the static steps run; `invoke settings` shows which)"]
