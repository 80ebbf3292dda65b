"""SGLang's own serving benchmark, which sends every request `invoke bench` measures.

``entrypoints/benchmark.py`` runs where SGLang is: the image of the current profile, the one the services run
(0.5.9's ``sglang.bench_serving`` or 0.5.23's ``sglang.benchmark.serving``), unless ``--profile``, ``--image`` or
``--python`` say otherwise, on the host's network so that it reaches the servers. Its import costs seconds (torch
comes with it), so one is started per (place, tokenizer, key) and kept for every round this process measures, the
sweep's included. Each round goes to it as one line; what SGLang recorded of each request comes back, and
``rounds.py`` works out the window, the concurrency held and the throughput from it.
"""

from __future__ import annotations

import atexit
import json
import queue
import shlex
import subprocess
import tempfile
import threading
from pathlib import Path

from sglang_stack.engine import Engine
from sglang_stack.entrypoints.prompts import PROFILE
from sglang_stack.errors import UserError
from sglang_stack.serverapi import RequestFailed

GENERATORS = ("sglang",)
BACKENDS = {"native": "sglang", "completions": "sglang-oai", "chat": "sglang-oai-chat"}  # --api: SGLang's --backend
TOKENIZER = "/models/tokenizer"  # where the tokenizer directory is mounted in the image
DATA = "/data/prompts"  # where a dataset's file is mounted in the image
READY_S = 600.0  # the import, and the image's start: minutes on a cold disk
MARGIN_S = 120.0  # past a round's own limit, which the benchmark enforces itself


class Benchmark:
    """One running ``entrypoints/benchmark.py``; ``round`` sends it a round and returns its answer."""

    def __init__(self, argv: list[str], env: dict[str, str], where: str, caller: str = "bench", tokenizer: str = ""):
        self.where, self.caller, self.tokenizer = where, caller, tokenizer
        self.log = tempfile.TemporaryFile(mode="w+")
        print(f"{caller}: SGLang's benchmark: $ {shlex.join(argv)}", flush=True)
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log, text=True, bufsize=1)
        except FileNotFoundError:
            raise UserError(f"{caller}: {argv[0]}: not found") from None
        self.lines: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._answer(READY_S, "did not start")
        self.version, self.module = str(ready.get("ready")), str(ready.get("module"))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _last_words(self) -> str:
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {self.proc.poll()}"

    def _answer(self, timeout: float, late: str) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise UserError(f"{self.caller}: SGLang's benchmark in {self.where} {late} within {timeout:.0f} s") from None
        if line is None:
            self.proc.wait()
            raise UserError(f"{self.caller}: SGLang's benchmark in {self.where}: {self._last_words()}")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise UserError(f"{self.caller}: SGLang's benchmark in {self.where} wrote {line[:200]!r}, not JSON")
        return answer

    def round(self, plan: dict) -> dict:
        """``{"outputs": [...], "metrics": {...}}`` for ``plan`` (entrypoints/benchmark.py's round); a round
        SGLang could not run raises ``RequestFailed`` with its one line."""
        if self.proc.poll() is not None:
            raise UserError(f"{self.caller}: SGLang's benchmark in {self.where} has exited: {self._last_words()}")
        self.proc.stdin.write(json.dumps(plan) + "\n")
        self.proc.stdin.flush()
        answer = self._answer(float(plan.get("timeout", 600)) + MARGIN_S, "did not answer a round")
        if "error" in answer:
            raise RequestFailed(f"SGLang's benchmark: {answer['error']}")
        if not isinstance(answer.get("outputs"), list) or len(answer["outputs"]) != len(plan["rows"]):
            raise UserError(f"{self.caller}: SGLang's benchmark answered {len(answer.get('outputs') or [])} requests "
                            f"for a round of {len(plan['rows'])}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # EOF: it ends after the round in hand
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


_RUNNING: dict[tuple, Benchmark] = {}


def command(runner, tokenizer: Path, api_key: str | None) -> tuple[list[str], dict[str, str]]:
    """``entrypoints/benchmark.py`` where ``runner`` (image.derive.Runner) runs SGLang: in an image, on the host's
    network (the servers are there), stdin open, the tokenizer mounted read-only and the key passed by name only;
    offline either way (the tokenizer is a directory)."""
    tok = TOKENIZER if runner.image else str(tokenizer.resolve())
    return runner.module(["sglang_stack.entrypoints.benchmark", "--tokenizer", tok], env={"HF_HUB_OFFLINE": "1"},
                         mounts={tokenizer.resolve(): TOKENIZER} if runner.image else None, network="host",
                         secrets={"OPENAI_API_KEY": api_key} if api_key else None, interactive=True)


def dataset(runner, name: str, tokenizer: Path, what: str, path: Path | None = None, **flags) -> list[dict]:
    """The requests SGLang's benchmark would send for its dataset ``name`` (``entrypoints/prompts.py``), where
    ``runner`` runs SGLang: ``[{"prompt", "prompt_len", "output_len"}, ...]``. ``path``, the dataset's file, and
    ``tokenizer`` are mounted read-only in an image; ``flags`` are the entrypoint's, by name (``num_prompts=32``,
    ``token_ids=True``), None for its default. ``what`` names the run in the command shown and in its errors."""
    tok, data = str(tokenizer.resolve()), path and str(path.resolve())
    mounts = None
    if runner.image:
        mounts = {tokenizer.resolve(): TOKENIZER, **({path.resolve(): DATA} if path else {})}
        tok, data = TOKENIZER, path and DATA
    args = ["sglang_stack.entrypoints.prompts", name, "--tokenizer", tok, *(["--dataset-path", data] if data else [])]
    for flag, value in flags.items():
        if value is not None and value is not False:
            args += [f"--{flag.replace('_', '-')}"] + ([] if value is True else [str(value)])
    rows = runner.json(args, what, 600, mounts=mounts).get("rows")
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{what} made no prompts")
    return rows


def start(runner, tokenizer: Path, api_key: str | None, caller: str = "bench") -> Benchmark:
    """The benchmark for ``runner`` and ``tokenizer`` (``command``): the one already running in this process, or a
    new one."""
    argv, env = command(runner, tokenizer, api_key)
    key = (tuple(argv), api_key)
    running = _RUNNING.get(key)
    if running is None or running.proc.poll() is not None:
        running = _RUNNING[key] = Benchmark(argv, env, runner.where, caller, str(tokenizer))
    return running


@atexit.register
def _stop_all() -> None:
    for running in _RUNNING.values():
        running.close()
    _RUNNING.clear()


def runner(image: str | None, python: str | None, engine: Engine, profile: str | None, caller: str,
           default: str = PROFILE):
    """Where SGLang's benchmark tools run on this host (image.derive.Runner): ``python``, ``image``, or the image of
    ``profile``, by default ``default``: ``PROFILE``, the first whose SGLang has SPEED-Bench's adapter, whatever
    release the servers run; for the load generator, the services' own profile."""
    from sglang_stack.image import derive
    from sglang_stack.lock import lockfile, profiles

    check_place(image, python)
    if python is not None:  # no image, so no profile's tag to look up; a --profile given is still checked
        if profile:
            profiles.get(profile)
        return derive.runner_for(derive.Request(python=python, engine=engine), "", "", caller)
    chosen = profiles.get(profile or default)
    lock, _ = lockfile.check_all(chosen.lock, download=False)
    return derive.runner_for(derive.Request(image=image, python=python, engine=engine, profile=profile or default),
                             lock.tag, chosen.name, caller)


def check_place(image: str | None, python: str | None, what: str = "SGLang's benchmark") -> None:
    """``--image`` and ``--python`` both given: refused, not resolved in favour of one."""
    if image is not None and python is not None:
        raise UserError(f"--image {image} and --python {python}: {what} runs in one of them; choose one")


def parse_generator(value: str | None) -> str:
    """``--generator``: SGLang's benchmark, the one generator; kept so that scripts that name it keep working."""
    name = (value or "sglang").strip()
    if name == "builtin":
        raise UserError("--generator builtin: this checkout no longer sends requests itself; SGLang's own benchmark "
                        "(--generator sglang, the default) sends every round")
    if name not in GENERATORS:
        raise UserError(f"--generator {value!r}: choose {', '.join(GENERATORS)}")
    return name
