"""The doctor's checks of what the server is handed: the model and drafter directories, and the API key.

Each check is a pure function of the service's settings and the files' metadata (one stat per
entry), so a 600 GB model directory takes milliseconds.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sglang_stack.errors import UserError
from sglang_stack.services import variables
from sglang_stack.services import composefile
from sglang_stack.doctor.checks import FAIL, IMAGE_USER_UID, OK, SKIP, WARN, Check
from sglang_stack.doctor import host
from sglang_stack.doctor.catalog import check


def readable_by(st, uid: int, gid: int, directory: bool = False) -> bool:
    """Whether ``uid``:``gid`` may read a file (or list and enter a directory) with this stat, by its mode bits."""
    need = 0o5 if directory else 0o4
    if st.st_uid == uid:
        return (st.st_mode >> 6) & need == need
    if st.st_gid == gid:
        return (st.st_mode >> 3) & need == need
    return st.st_mode & need == need


def unreadable(directory: Path, uid: int = IMAGE_USER_UID, gid: int = IMAGE_USER_UID) -> tuple[int, int, str]:
    """(files the container user cannot read, files in all, the first such path with its mode and owner).

    Metadata only (one stat per entry), so a 600 GB model directory takes milliseconds. Dot
    directories (a download's .cache) are not served and not walked; ACLs are not read.
    """
    bad, total, first = 0, 0, ""
    for root, dirs, files in os.walk(directory):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        st = here.stat()
        if not readable_by(st, uid, gid, directory=True):
            count = sum(len(f) for _, _, f in os.walk(here))
            bad, total = bad + count, total + count
            first = first or f"{here}/ (directory, mode {st.st_mode & 0o777:o}, owner {st.st_uid})"
            dirs[:] = []
            continue
        for name in files:
            total += 1
            try:
                fst = (here / name).stat()
            except OSError:
                bad += 1
                first = first or f"{here / name} (a broken link)"
                continue
            if not readable_by(fst, uid, gid):
                bad += 1
                first = first or f"{here / name} (mode {fst.st_mode & 0o777:o}, owner {fst.st_uid})"
    return bad, total, first


def _model_dir_check(name: str, var: str, directory: Path, env: variables.Environment, svc_name: str,
                     svc: composefile.Service | None = None) -> tuple[Check, str]:
    shown = env.where(var) if var in env.values else f"{var} unset, default {directory}"
    what = "the model" if name == "model" else "the EAGLE-3 drafter"
    fix = f"set {var} in .env to the directory that holds {what}'s config.json"
    if not directory.is_dir():
        return Check(name, FAIL, f"{shown}: no such directory", fix), ""
    config = directory / "config.json"
    if not config.is_file():
        return Check(name, FAIL, f"{shown}: no config.json in {directory}", fix), ""
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError, RecursionError) as err:
        return Check(name, FAIL, f"{config}: not readable JSON ({err.__class__.__name__})", "download the model again"), ""
    arch = str((data.get("architectures") or ["?"])[0]) if isinstance(data, dict) else "?"
    index = directory / "model.safetensors.index.json"
    shards = sorted(p.name for p in directory.glob("*.safetensors"))
    if index.is_file():
        try:
            wanted = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError):
            wanted = set()
        missing = sorted(wanted - set(shards))
        if missing:
            return Check(name, FAIL, f"{directory}: {arch}, {len(missing)} of {len(wanted)} shards missing (first: {missing[0]})",
                         "finish the download (huggingface-cli download resumes)"), arch
        weights = f"{len(wanted)} of {len(wanted)} shards"
    elif shards:
        weights = f"{len(shards)} *.safetensors"
    else:
        return Check(name, WARN, f"{directory}: {arch}, but no *.safetensors", "finish the download"), arch
    detail = f"{directory}: {arch}, {weights}"
    bad, total, first = unreadable(directory)
    if bad:
        return Check(name, FAIL, f"{detail}; {bad} of {total} files are not readable by uid {IMAGE_USER_UID}, the image's user "
                     f"(first: {first})", f"chmod -R a+rX {directory}, or chown -R {IMAGE_USER_UID} {directory}"), arch
    if name == "drafter" and not re.search(r"eagle-?3", arch, re.I):  # LlamaForCausalLMEagle3 and the like
        return Check(name, WARN, f"{detail}: does not look like an EAGLE-3 drafter",
                     "point DRAFT_MODEL_DIR at an EAGLE-3 drafter for Kimi-K2.5"), arch
    if name == "drafter" and svc is not None and (refusal := _drafter_refusal(svc, arch)):
        return Check(name, FAIL, f"{detail}: {refusal[0]}", refusal[1]), arch
    return _pin_check(name, directory, detail, svc.drafter_role if name == "drafter" and svc else None), arch


def _drafter_refusal(svc: composefile.Service, arch: str) -> tuple[str, str] | None:
    """(why, fix) where the service cannot serve this drafter: ``DRAFTER`` names the other one, or the SGLang of the
    profile compose runs has no model class for its architecture (SGLang's own model registry, recorded in the
    profile's settings table by `invoke settings`)."""
    from sglang_stack.entrypoints import drafter
    from sglang_stack.lock import profiles
    from sglang_stack.services import decisions

    try:
        value = drafter.choice(svc.environment)
    except drafter.Refused as err:
        return f"{svc.env.where(drafter.SETTING)}: {err}", f"set {drafter.SETTING}=mha or mla in .env"
    if problem := drafter.mismatch(value, arch):
        return problem, f"set {drafter.SETTING} in .env to the drafter DRAFT_MODEL_DIR holds, or point it at the other"
    name, _ = composefile.built_profile(svc)
    try:
        known = profiles.available()
    except UserError:
        return None  # the image check names what is wrong with the profiles
    if name not in known:
        return None  # compose builds no profile of this checkout: the image check says which it runs
    has: dict[str, list | None] = {}
    for n, profile in known.items():
        table = decisions.tables(profile)[0]
        regenerate = f"regenerate it: invoke settings --write{'' if profile.default else f' --profile {n}'}"
        try:
            archs = decisions.load(table).get("drafter_architectures")
        except UserError as err:
            if n == name:  # fail closed: what this profile's SGLang loads is unknown
                return str(err), regenerate
            continue
        if n == name and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
            return f"{profiles.display(table)} records no drafter architectures (SGLang's model registry)", regenerate
        has[n] = archs
    if arch in has[name]:
        return None
    others = [n for n, archs in has.items() if archs and arch in archs]
    fix = (f"set SGLANG_PROFILE={others[0]} in .env and `invoke build --profile {others[0]}`" if others else
           "point DRAFT_MODEL_DIR at a drafter this SGLang loads")
    if value == "mla":
        fix += f", or {drafter.SETTING}=mha with the MHA drafter"
    return f"SGLang {name} has no model class for {arch} (its model registry, as `invoke settings` recorded it)", fix


def _pin_check(name: str, directory: Path, detail: str, role: str | None = None) -> Check:
    """The directory against models.lock's commit for ``role`` (default: the target, or the MHA drafter): every file
    by name and size, and the code, configs and tokenizer (every file but the weight shards) by hash: the Python
    `--trust-remote-code` runs is what was pinned."""
    from sglang_stack.services import models

    role = role or ("target" if name == "model" else "drafter")
    try:
        pin = models.load().get(role)
    except UserError as err:
        return Check(name, FAIL, f"{detail}; {err}", "fix models.lock, or restore it with git")
    if pin is None or not pin.pinned:
        repo = f" {pin.repo}" if pin else ""
        return Check(name, OK, f"{detail}; models.lock does not pin{repo} yet (`invoke models-lock` on a networked host)")
    problems = models.quick_check(directory, pin)
    if problems:
        return Check(name, FAIL, f"{detail}; {len(problems)} of {len(pin.files)} files differ from {pin.repo}@{pin.revision[:12]} "
                     f"(first: {problems[0]})", f"hf download {pin.repo} --revision {pin.revision} --local-dir {directory} "
                     "(it resumes); to serve another revision, edit models.lock and run `invoke models-lock`")
    return Check(name, OK, f"{detail}; {len(pin.files)} files match {pin.repo}@{pin.revision[:12]} by name and size, "
                 "every file but the weights by hash")


LOOPBACK = ("127.0.0.1", "::1", "localhost")


# The container (uid 10001) reads the bind-mounted file itself, so the file is readable by all and
# the directory private: other users of the host cannot reach it.
KEY_FIX = ("mkdir -m 700 secrets; openssl rand -base64 32 > secrets/sglang_api_key; chmod 644 secrets/sglang_api_key, "
           "then SGLANG_API_KEY_FILE=secrets/sglang_api_key in .env")


@check(needs=("service",))
def check_api_key(svc: composefile.Service) -> Check:
    """The file ``SGLANG_API_KEY_FILE`` names exists, the image's user can read it and it holds one word, read as the
    entrypoint reads it; no ``SGLANG_API_KEY``/``HF_TOKEN`` value is left in .env (it would reach nothing) or in the
    service's environment; an API published beyond loopback, or on the host's network, with no key fails unless
    ``ALLOW_UNAUTHENTICATED=1``. The key itself is never printed.

    Fix: ``mkdir -m 700 secrets; openssl rand -base64 32 > secrets/sglang_api_key; chmod 644
    secrets/sglang_api_key``, then name the file in .env; or ``BIND_ADDRESS=127.0.0.1``.
    """
    for legacy in variables.LEGACY_SECRETS:
        if svc.env.get(legacy):
            file_var = f"{legacy}_FILE"
            return Check("api-key", FAIL, f"{legacy} ({svc.env.origin.get(legacy, 'shell')}) is no longer read: compose "
                         f"takes secrets from files, so this value reaches no container",
                         f"write it to a file in a directory only you can enter (mkdir -m 700 secrets; chmod 644 the "
                         f"file: the container's user reads it) and set {file_var} to that file in .env, then remove {legacy}")
    for name, value in svc.environment.items():
        if variables.SECRET_NAME.search(str(name)) and value not in (None, ""):
            return Check("api-key", FAIL, f"{name} is set in the service's environment ({', '.join(p.name for p in svc.files)}): "
                         "docker inspect and every process of the container show it; SGLang reads no key from there",
                         f"remove {name} from the override's environment: and set SGLANG_API_KEY_FILE (compose mounts the file)")
    from sglang_stack.entrypoints.serve import key_on_command_line

    if flag := key_on_command_line(svc.argv):
        return Check("api-key", FAIL, f"the command line holds {flag}, which SGLang takes as a key flag: the key would "
                     "show in docker inspect and every process list, and the entrypoint refuses it",
                     f"remove {flag} from SGLANG_EXTRA_ARGS; set SGLANG_API_KEY_FILE instead")
    where = svc.env.where("SGLANG_API_KEY_FILE")
    try:
        key = composefile.api_key(svc.env)
    except UserError as err:
        return Check("api-key", FAIL, str(err), KEY_FIX)
    if not key and (svc.host_network or svc.bind_address not in LOOPBACK):
        exposed = (f"network_mode: host ({', '.join(p.name for p in svc.files)}) puts the API on every interface of the host"
                   if svc.host_network else f"BIND_ADDRESS={svc.bind_address} publishes the API beyond this host")
        if svc.env.get("ALLOW_UNAUTHENTICATED") == "1":
            return Check("api-key", WARN, f"{exposed}, with no key: ALLOW_UNAUTHENTICATED=1 ({svc.env.where('ALLOW_UNAUTHENTICATED')}) "
                         "starts it anyway", KEY_FIX)
        return Check("api-key", FAIL, f"{exposed}, and no SGLANG_API_KEY_FILE is set: anyone who reaches it may use it",
                     KEY_FIX + ("" if svc.host_network else ", or BIND_ADDRESS=127.0.0.1")
                     + "; or ALLOW_UNAUTHENTICATED=1 in .env to start it without a key on purpose")
    if key:
        st = svc.api_key_file.stat()
        if not readable_by(st, IMAGE_USER_UID, IMAGE_USER_UID):
            return Check("api-key", FAIL, f"{where}: mode {st.st_mode & 0o777:o}, owner {st.st_uid}: the container's user "
                         f"(uid {IMAGE_USER_UID}) cannot read it, so SGLang would not start",
                         "chmod 644 it, in a directory only you can enter (mkdir -m 700 secrets)")
        return Check("api-key", OK, f"set ({where}); clients send it as a Bearer token")
    return Check("api-key", OK, f"none; the API listens on {svc.bind_address} only")


@check(needs=("service",))
def check_hub_token(svc: composefile.Service) -> Check:
    """The Hub token reaches a container only where it may go online: with ``HF_HUB_OFFLINE=1`` (compose.yaml's
    default: the model is local) a token file set in .env fails, since it would sit in a container that never
    uses it. The token is never read or printed.

    Fix: unset ``HF_TOKEN_FILE`` in .env, or set ``HF_HUB_OFFLINE=0`` for a server that downloads.
    """
    offline = str(svc.environment.get("HF_HUB_OFFLINE", "")).strip().lower() in ("1", "true", "yes")
    if svc.hub_token_file is None:
        return Check("hub-token", OK, "none mounted")
    if offline:
        return Check("hub-token", FAIL, f"{svc.env.where('HF_TOKEN_FILE')}: the Hub token would be mounted into a "
                     "container that never goes online (HF_HUB_OFFLINE=1)",
                     "unset HF_TOKEN_FILE in .env, or set HF_HUB_OFFLINE=0 for a server that downloads from the Hub")
    return Check("hub-token", OK, f"mounted ({svc.env.where('HF_TOKEN_FILE')}): HF_HUB_OFFLINE=0, the server may "
                 "download from the Hub")


@check("speculation", needs=("service",))
def check_speculation(facts, svc: composefile.Service) -> Check:
    """``DRAFTER`` is mha or mla and ``SPECULATIVE_ADAPTIVE`` is 0 or 1; on a server that speculates, ``mla`` and
    ``1`` name an image whose SGLang has them (the MLA drafter and adaptive speculation: the 0.5.23 profile). The
    container's entrypoint refuses the same before SGLang starts; this says it before a start.

    Fix: the value to set in .env: ``DRAFTER=mha``, ``SPECULATIVE_ADAPTIVE=0``, or ``SGLANG_PROFILE=0.5.23`` and
    its build for a release that has them.
    """
    from sglang_stack.entrypoints import adaptive, drafter

    chosen = {}
    for module, choose, allowed in ((drafter, drafter.choice, "mha or mla"), (adaptive, adaptive.setting, "0 or 1")):
        try:
            chosen[module.SETTING] = choose(svc.environment)
        except (drafter.Refused, adaptive.Refused):
            return Check("speculation", FAIL, f"{svc.env.where(module.SETTING)}: not {allowed}",
                         f"set {module.SETTING} to {allowed} in .env")
    said = f"{drafter.SETTING}={chosen[drafter.SETTING]}, {adaptive.SETTING}={chosen[adaptive.SETTING]}"
    if not svc.speculative:
        return Check("speculation", OK, f"{said}: {svc.name} does not speculate, so neither applies")
    release = host.release(facts, svc)
    wanted = [(drafter.SETTING, "mla", drafter.PROFILE, "cannot load the MLA drafter", "can", f"{drafter.SETTING}=mha"),
              (adaptive.SETTING, "1", adaptive.PROFILE, "has no adaptive speculation (--speculative-adaptive)",
               "has it", f"{adaptive.SETTING}=0")]
    for setting, value, first, lacks, has, instead in wanted:
        # Fail closed: a release that cannot be read (no label, an unreadable lock) is not taken to have it.
        if chosen[setting] == value and not host.release_has(release, first):
            return Check("speculation", FAIL, f"{svc.env.where(setting) if setting in svc.env.values else said}: "
                         f"SGLang {release or '(release unknown)'} {lacks}; profile {first} {has}",
                         f"set SGLANG_PROFILE={first} and build it (invoke build --profile {first}), or {instead}")
    return Check("speculation", OK, f"{said} ({svc.speculative}, SGLang {release})")


@check("model", "drafter", needs=("service",))
def check_models(svc: composefile.Service) -> list[Check]:
    """The model directory (and the drafter's, where the service mounts one) holds ``config.json`` and every shard
    its index lists; uid 10001, the image's user, can read every file and enter every directory (judged from each
    entry's owner and mode, one stat each, no byte read; dot directories are skipped, ACLs not read); a drafter
    looks like EAGLE-3, is the one ``DRAFTER`` names (``mha``, ``mla``), and has a model class in the SGLang of the
    profile compose runs (its model registry, recorded by `invoke settings`); where models.lock pins a commit
    (the role ``DRAFTER`` picks for the drafter), every file it lists is there with the size the Hub records.

    Fix: set MODEL_DIR or DRAFT_MODEL_DIR; finish the download (``hf download ... --revision COMMIT`` resumes);
    ``chmod -R a+rX`` the directory; set ``DRAFTER`` to the drafter you downloaded; the MLA drafter needs
    ``SGLANG_PROFILE=0.5.23``.
    """
    model, _ = _model_dir_check("model", "MODEL_DIR", svc.model_dir, svc.env, svc.name)
    if svc.draft_dir is None:
        drafter = Check("drafter", SKIP, f"{svc.name} uses no drafter")
    else:
        drafter, _ = _model_dir_check("drafter", "DRAFT_MODEL_DIR", svc.draft_dir, svc.env, svc.name, svc)
    return [model, drafter]
