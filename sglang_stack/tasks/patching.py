"""The patch series and the EAGLE-3 audit: `invoke patch`, `invoke patch-check` and `invoke audit`."""

from __future__ import annotations

from invoke import Exit, task

from sglang_stack.errors import UserError
from sglang_stack.lock.profiles import HELP as PROFILE_HELP
from sglang_stack.tasks.boundary import user_errors

DEFAULTS = {"stack": {"patches_dir": "patches"}}


def _pinned_wheel(profile=None):
    """The sglang wheel the profile's versions.lock pins, fetched by URL and sha256 (cached)."""
    from sglang_stack import download
    from sglang_stack.lock import lockfile as lockmod
    from sglang_stack.lock import profiles

    table = lockmod.load(profiles.get(profile).lock)["sglang"]
    return download.fetch(table["url"], table["sha256"])


def _series_dir(c, patches_dir, profile):
    """--patches-dir, else the profile's series (a profile's patches/ holds its series; the files are the root's)."""
    from pathlib import Path

    from sglang_stack.lock import profiles

    if patches_dir and profile:
        raise UserError("--patches-dir and --profile: choose one")
    chosen = profiles.get(profile)
    return Path(patches_dir or (c.config.stack.patches_dir if chosen.default else chosen.series.parent))


def _audit_arch(arch):
    from sglang_stack.lock import lockfile as lockmod

    return arch or lockmod.load().get("image", {}).get("audit_arch") or "KimiK25ForConditionalGeneration"


@task(
    help={
        "sglang-src": "directory that contains sglang/: an unpacked wheel or a `pip install --target` tree (required)",
        "patches-dir": "the series to use (default: stack.patches_dir, 'patches')",
        "dry-run": "check every patch against the tree and write nothing (default: off)",
        "unpack": "first unpack the wheel versions.lock pins (hash-verified, cached) into --sglang-src, "
        "which must be new or empty (default: off)",
        "refresh": "regenerate each patch's diff from the edited tree at --sglang-src, keeping its header, "
        "and move the series' target to that release (default: off)",
        "pristine": "with --refresh: the unpatched tree to diff against "
        "(default: the pinned wheel, unpacked into a temporary directory)",
        "profile": PROFILE_HELP,
    }
)
@user_errors
def patch(c, sglang_src, patches_dir=None, dry_run=False, unpack=False, refresh=False, pristine=None, profile=None):
    """Apply the patch series to an unpacked sglang tree, all or nothing; or --refresh the series from one.

    Every hunk of every patch is checked first, without fuzz; one that does not
    match fails the task with the patch, file and hunk named, and the tree is left
    untouched. A series that is already (or partly) applied is an error too.
    Prints each patch's name and sha256, as the image build does.
    Rebasing onto a new SGLang: docs/patches.md.
    """
    import tempfile
    from pathlib import Path

    from sglang_stack.patching import patches as patchmod
    from sglang_stack.patching import refresh as refreshmod

    pdir = _series_dir(c, patches_dir, profile)
    src = Path(sglang_src)
    if refresh:
        if dry_run or unpack:
            raise UserError("--refresh regenerates the series from an edited tree: it takes no --dry-run or --unpack")
        if pristine:
            refreshmod.refresh(src, Path(pristine), pdir)
            return
        with tempfile.TemporaryDirectory(prefix="sglang-stack-pristine-") as tmp:
            base = patchmod.unpack_wheel(_pinned_wheel(profile), Path(tmp) / "site")
            refreshmod.refresh(src, base, pdir)
        return
    if pristine:
        raise UserError("--pristine goes with --refresh")
    if unpack:
        patchmod.unpack_wheel(_pinned_wheel(profile), src)
        print(f"unpacked the pinned sglang wheel into {src}")
    patchmod.apply_series(src, pdir, dry_run=dry_run)


@task(
    help={
        "patches-dir": "the series to check (default: stack.patches_dir, 'patches')",
        "arch": "model class the audit checks (default: versions.lock [image] audit_arch, KimiK25ForConditionalGeneration)",
        "keep": "keep the temporary patched tree and print where it is (default: off)",
        "profile": PROFILE_HELP,
    }
)
@user_errors
def patch_check(c, patches_dir=None, arch=None, keep=False, profile=None):
    """Prove the series on the pinned wheel: fetch it (hash-verified, cached), unpack, apply, audit.

    Needs only PyPI. Exits 0 only if every patch applies exactly (no fuzz, no
    offset) and the EAGLE-3 audit passes on the result; the image build runs the
    same two steps.
    """
    import shutil
    import tempfile
    from pathlib import Path

    from sglang_stack.audit import eagle3 as auditmod

    pdir = _series_dir(c, patches_dir, profile)
    wheel = _pinned_wheel(profile)
    tmp = Path(tempfile.mkdtemp(prefix="sglang-stack-patch-check-"))
    try:
        report = auditmod.check_wheel(wheel, pdir, _audit_arch(arch), tmp)
        for line in report.lines():
            print(line)
    finally:
        if keep:
            print(f"kept {tmp / 'site'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if not report.passed:
        raise Exit("error: patch-check failed: the audit found missing methods", code=1)
    print(f"patch-check passed in {report.seconds:.2f} s of audit")


@task(
    help={
        "sglang-src": "directory that contains sglang/ (required)",
        "arch": "model class to check, as in a config.json 'architectures' "
        "(default: versions.lock [image] audit_arch, KimiK25ForConditionalGeneration)",
        "model-config": "a model's config.json: check its first 'architectures' entry instead of --arch",
        "verbose": "also list every call site, guarded and draft calls, and which class provides each method (default: off)",
        "allow-undecided": "exit 0 when nothing is missing though some methods are undecided; the image build "
        "never passes this (default: off: undecided fails, exit 3)",
    }
)
@user_errors
def audit(c, sglang_src, arch=None, model_config=None, verbose=False, allow_undecided=False):
    """EAGLE-3 readiness check: does the model class have every method EAGLE-3 calls on the target?

    No GPU, no torch, a second: reads the SGLang source for every method the EAGLE-3
    path calls on the target model, and imports the model with stand-ins for its heavy
    dependencies to ask Python whether the class provides it (the source, where Python
    cannot tell; --model-config also builds it with that config.json). Exit 1 with one
    line per missing method and its call sites; exit 3, failing closed, when a method
    may be missing in a way the source cannot settle (one 'undecided' line each, with why);
    exit 0 with a one-line summary.
    """
    from pathlib import Path

    from sglang_stack.audit import eagle3 as auditmod

    if arch and model_config:
        raise UserError("--arch and --model-config: choose one")
    name, config = auditmod.model_config(Path(model_config)) if model_config else (_audit_arch(arch), None)
    report = auditmod.audit(Path(sglang_src), name, config)
    report.allow_undecided = allow_undecided
    for line in report.lines(verbose=verbose):
        print(line)
    if not report.passed:
        raise Exit(code=report.exit_code)
