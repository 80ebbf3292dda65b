"""EAGLE-3 acceptance on the user's host: a short fixed probe, SGLang's own figures, an expectation per drafter.

    invoke acceptance [SERVICE] [--url URL] [--accept-min X] [--out FILE]

Every silent EAGLE-3 loss upstream showed only as a drop in accept length, never as an error:
aux layers set after CUDA graph capture (sgl-project/sglang#22836, patch 0004: zero acceptance),
an aux-id offset (#25454, about -0.10), per-rank partial sums under the fused all-reduce
(#28343, patch 0006). So the check sends a fixed probe (six prompts of the shipped set, two per
category, greedy, 256 tokens each) through SGLang's native ``/generate`` and reads what SGLang
reports in ``meta_info``: completion tokens over verify passes (the accept length, pooled over
the probe, SGLang's own definition) and ``spec_accept_histogram`` (the share of verify passes
that accepted at least k draft tokens, per position k).

It compares the accept length with the drafter's expectation in models.lock: a value, the
tolerance below it that still passes, the speculative settings it was measured at, and its
source (a model card, or a first run the user accepted with ``invoke models-lock
--accept-baseline FILE``). Without an expectation, or at other settings, only the floor holds:
below 1.2 tokens per verify pass the drafter contributes nothing. Greedy decoding on the same
stack gives the same tokens every time, so a tight tolerance is meaningful.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from sglang_stack.bench import client, speedbench, stats
from sglang_stack.bench.promptset import DEFAULT_PROMPTS, load_prompts
from sglang_stack.errors import UserError, read_text
from sglang_stack.serverapi import RequestFailed
from sglang_stack.services.models import FLOOR, Expectation

CATEGORIES = ("chat", "code", "math")
PER_CATEGORY = 2
MAX_NEW_TOKENS = 256
TOLERANCE = {"acceptance": 0.15, "bench": 0.3}  # default tolerance of an accepted baseline, by what measured it
REPORT_KIND = "sglang-stack acceptance"
WHAT_TO_CHECK = ("check the all-reduce fusion (docs/settings.md; patch 0006), the patch series (invoke verify), "
                 "and the drafter's revision (invoke models-verify --role drafter)")


@dataclass
class Measurement:
    url: str
    requests: int = 0
    completion_tokens: int = 0
    verify_passes: int = 0
    accept_length: float | None = None
    accept_by_position: list[float] | None = None
    settings: str = ""  # "steps/topk/draft tokens" as the server reports them
    server: dict = field(default_factory=dict)
    seconds: float = 0.0
    dataset: str = "probe"  # what was sent: the fixed probe, or a dataset (speed-bench)

    def line(self) -> str:
        where = f" at {self.settings} (steps/top-k/draft tokens)" if self.settings else ""
        positions = ", ".join(f"P(>={k}) {p:.2f}" for k, p in enumerate(self.accept_by_position or [], 1))
        return (f"accept length {self.accept_length:.2f}{where}: {self.completion_tokens} tokens in "
                f"{self.verify_passes} verify passes over {self.requests} requests"
                + (f"; per position {positions}" if positions else "") + f" ({self.seconds:.1f} s)")


def probe_prompts(path: Path = DEFAULT_PROMPTS):
    """The fixed probe: the first two prompts of each category of the shipped set, in file order."""
    prompts = load_prompts(path).prompts
    chosen = [p for c in CATEGORIES for p in [q for q in prompts if q.category == c][:PER_CATEGORY]]
    if len(chosen) != len(CATEGORIES) * PER_CATEGORY:
        raise UserError(f"{path}: the probe needs {PER_CATEGORY} prompts of each of {', '.join(CATEGORIES)}")
    return chosen


def _settings(info: dict) -> str:
    numbers = [info.get(k) for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")]
    return "/".join(str(n) for n in numbers) if all(n is not None for n in numbers) else ""


@dataclass(frozen=True)
class Prompt:
    """One greedy request of a measurement."""

    id: str
    text: str
    max_new_tokens: int = MAX_NEW_TOKENS


def probe() -> list[Prompt]:
    return [Prompt(p.id, p.prompt) for p in probe_prompts()]


def measure(url: str, api_key: str | None, timeout: float = 300.0, name: str = "server",
            prompts: list[Prompt] | None = None, dataset: str = "probe") -> Measurement:
    """Send ``prompts`` (default: the probe) to ``url`` one request at a time; SGLang's own figures, pooled."""
    endpoint = client.Endpoint(name, url)
    if why := client.probe(endpoint, api_key, timeout=min(timeout, 30.0)):
        raise UserError(f"{name} at {url} {why}")
    info = client.server_info(endpoint, api_key, timeout=min(timeout, 30.0))
    m = Measurement(url=url, settings=_settings(info), server=info, dataset=dataset)
    histograms = []
    start = time.monotonic()
    for prompt in prompts or probe():
        body = {"text": prompt.text, "sampling_params": {"temperature": 0.0, "max_new_tokens": prompt.max_new_tokens}}
        try:
            sample = client.generate_once(url, body, api_key, timeout, client.Timing())
        except RequestFailed as err:
            raise UserError(f"{name} at {url}: the probe's request {prompt.id} failed: {err}") from None
        if not sample.spec_verify_ct:
            raise UserError(f"{name} at {url} reports no speculative figures (meta_info.spec_verify_ct) for {prompt.id}: "
                            "it does not run EAGLE-3 (is this baseline, or a server without --speculative-algorithm?)")
        m.requests += 1
        m.completion_tokens += sample.output_tokens
        m.verify_passes += sample.spec_verify_ct
        histograms.append(sample.spec_accept_histogram)
    m.seconds = time.monotonic() - start
    m.accept_length = m.completion_tokens / m.verify_passes
    # A drafter that never hits sends a histogram of one bucket: no draft position was ever accepted.
    m.accept_by_position = stats.accept_by_position(histograms) or ([0.0] if any(histograms) else None)
    return m


def verdict(m: Measurement, expected: Expectation | None, accept_min: float | None,
            again: str = "invoke acceptance") -> tuple[bool, str]:
    """(passed, one line): the threshold is --accept-min, else the expectation at the same settings, else the floor.
    ``again`` is the command the user ran, which the hint repeats with ``--out``."""
    if accept_min is not None:
        if accept_min == 0:
            return True, "the check is off (--accept-min 0)"
        threshold, why = accept_min, f"--accept-min {accept_min:g}"
    elif expected is not None and (not expected.settings or not m.settings or expected.settings == m.settings):
        threshold = expected.minimum
        why = (f"models.lock expects {expected.accept_length:.2f} - {expected.tolerance:.2f} at {expected.settings or 'its settings'}"
               f" ({expected.source})")
    else:
        threshold = FLOOR
        why = (f"the floor {FLOOR} (models.lock's expectation is for {expected.settings}, the server runs {m.settings})"
               if expected else f"the floor {FLOOR}: models.lock records no expectation for the drafter yet "
               f"(accept a first run: {again} --out acceptance.json, then invoke models-lock --accept-baseline "
               "acceptance.json)")
    if m.accept_length < threshold:
        return False, (f"accept length {m.accept_length:.2f} is below {threshold:.2f} ({why}): {WHAT_TO_CHECK}")
    return True, f"accept length {m.accept_length:.2f} is at or above {threshold:.2f} ({why})"


def against_published(m: Measurement, published: tuple[dict, ...]) -> list[dict]:
    """Each accept length the drafter's publishers state, beside the measurement: comparable where it was measured on
    the same dataset at the same number of draft tokens (or an unstated one), with how far short the measurement
    falls; the others are listed for reference."""
    draft = m.server.get("speculative_num_draft_tokens")
    out = []
    for figure in published:
        comparable = figure["dataset"] == m.dataset and figure["draft_tokens"] in (0, draft)
        short = max(0.0, round(figure["accept_length"] - m.accept_length, 3)) if comparable else None
        out.append({**figure, "comparable": comparable, "short_by": short})
    return out


def published_line(figure: dict) -> str:
    at = f" at {figure['draft_tokens']} draft tokens" if figure["draft_tokens"] else ""
    head = f"published {figure['accept_length']:.2f} on {figure['dataset']}{at} ({figure['source']})"
    if not figure["comparable"]:
        return f"{head}: for reference, not measured like this run"
    if figure["short_by"]:
        return f"{head}: this run falls short by {figure['short_by']:.2f}"
    return f"{head}: this run is at or above it"


def report(m: Measurement, passed: bool, line: str, prompts: dict | None = None, published: list[dict] | None = None) -> dict:
    sent = prompts or {"prompts": [p.id for p in probe_prompts()], "max_new_tokens": MAX_NEW_TOKENS}
    return {"kind": REPORT_KIND, "passed": passed, "verdict": line, "probe": {**sent, "temperature": 0.0},
            "published": published or [], **asdict(m)}


# --- an accepted baseline, for models.lock ---------------------------------------------------------


def baseline_from(path: Path, tolerance: float | None = None) -> Expectation:
    """An expectation from an ``invoke acceptance --out`` report or an ``invoke bench`` bench.json."""
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: not JSON ({err.msg})") from None
    day = time.strftime("%Y-%m-%d", time.gmtime(path.stat().st_mtime))
    if isinstance(doc, dict) and doc.get("kind") == REPORT_KIND:
        if doc.get("dataset", "probe") != "probe":
            raise UserError(f"{path}: measured on {doc.get('dataset')}; the expectation is what the probe gives: "
                            "accept a run of `invoke acceptance` without --dataset")
        value, settings = doc.get("accept_length"), doc.get("settings") or ""
        source, kind = f"a first run accepted on {day}: {path.name}, the acceptance probe against {doc.get('url')}", "acceptance"
    elif isinstance(doc, dict) and isinstance(doc.get("summary"), dict):
        rows = [r for r in doc["summary"].get("rows", []) if isinstance(r, dict) and r.get("accept_length")]
        if not rows:
            raise UserError(f"{path}: no endpoint of this bench run reports an accept length (was eagle3 measured?)")
        row = min(rows, key=lambda r: r.get("level") or 0)
        value = row["accept_length"]
        info = next((e.get("server_info") or {} for e in (doc.get("metadata") or {}).get("endpoints", [])
                     if isinstance(e, dict) and e.get("name") == row.get("endpoint")), {})
        settings = _settings(info)
        source = (f"a first run accepted on {day}: {path.name}, invoke bench endpoint {row.get('endpoint')} at "
                  f"concurrency {row.get('level')} (its own prompt set)")
        kind = "bench"
    else:
        raise UserError(f"{path}: neither an `invoke acceptance --out` report nor an `invoke bench` bench.json")
    if not isinstance(value, (int, float)) or not 1.0 <= value <= 64:
        raise UserError(f"{path}: accept length {value!r} is not a number of tokens per verify pass")
    tol = TOLERANCE[kind] if tolerance is None else tolerance
    if not 0 <= tol < value:
        raise UserError(f"--accept-tolerance {tol:g}: must be at least 0 and below the accept length {value:.2f}")
    return Expectation(round(float(value), 3), round(float(tol), 3), settings, source)


def check(service: str | None = None, url: str | None = None, accept_min=None, out: str | None = None, timeout=None,
          say: Callable[[str], None] = lambda line: print(line, flush=True),
          speed_bench: "speedbench.Request | None" = None) -> tuple[bool, str]:
    """`invoke acceptance`: measure ``service`` (default: compose.yaml's default), judge it, write the report to
    ``out``; (passed, the verdict). With ``url``, that server is measured and ``service`` only labels it. With
    ``speed_bench``, SPEED-Bench's prompts (SGLang's own adapter) are sent instead of the probe, and the drafter's
    expectation (measured on the probe) gives way to the floor; the published figures are set beside it."""
    from sglang_stack.atomic import write as atomic_write
    from sglang_stack.flags import parse_seconds, parse_url
    from sglang_stack.services import composefile, models

    threshold = None
    if accept_min is not None:
        try:
            threshold = float(str(accept_min).strip())
        except ValueError:
            raise UserError(f"--accept-min {accept_min!r}: not a number (tokens per verify pass, e.g. 2.5; 0 turns it off)") \
                from None
        if not 0 <= threshold <= 64:
            raise UserError(f"--accept-min {accept_min!r}: between 0 (off) and 64 tokens per verify pass")
    # models.lock's drafter whose expectation applies: with --url, the default one (DRAFTER=mha); for a service, the
    # one its DRAFTER names, none where it mounts no drafter.
    role: str | None = "drafter"
    if url is None:
        proj = composefile.project()
        service = service or proj.default
        svc = composefile.service(service, proj.env)
        if not svc.speculative:
            raise UserError(f"{service!r}: its command in compose.yaml does not speculate (no --speculative-algorithm): "
                            f"acceptance measures speculative decoding; name a service that does "
                            f"({', '.join(n for n in proj.names(composefile.SERVER) if composefile.service(n, proj.env).speculative) or 'none'})")
        target, key, role = svc.url, proj.api_key(), svc.drafter_role if svc.draft_dir is not None else None
        model_dir = svc.model_dir
    else:
        model_dir = None
        service = service or "server"
        target = parse_url("--url", url)
        try:
            key = composefile.api_key()
        except UserError:  # no compose here: a server on another box, with no key known on this one
            key = None
    if out and not Path(out).resolve().parent.is_dir():
        raise UserError(f"--out {out}: {Path(out).resolve().parent} is not a directory")
    drafter = models.load().get(role) if role else None
    expected = Expectation(**drafter.acceptance) if drafter and drafter.acceptance else None
    prompts, sent, dataset = probe(), None, "probe"
    if speed_bench is not None:
        prompts, sent = speed_bench.prompts(model_dir)
        dataset, expected = speedbench.NAME, None  # the expectation was measured on the probe
    tokens = sorted({p.max_new_tokens for p in prompts})
    say(f"acceptance: {len(prompts)} greedy requests ({dataset}) of {'/'.join(map(str, tokens))} tokens to {target}")
    m = measure(target, key, parse_seconds("--timeout", timeout) if timeout else 300.0, service, prompts, dataset)
    # The hint's command is the one just run: with --url, the same URL (its credentials masked on the way out).
    again = f"invoke acceptance --url {shlex.quote(url)}" if url else f"invoke acceptance {shlex.quote(service)}"
    passed, line = verdict(m, expected, threshold, again)
    say(f"{service}: {m.line()}")
    published = against_published(m, drafter.published) if drafter else []
    for figure in published:
        say(f"{service}: {published_line(figure)}")
    if out:
        atomic_write(Path(out), json.dumps(report(m, passed, line, sent, published), indent=1) + "\n")
        say(f"wrote {out}")
    return passed, line
