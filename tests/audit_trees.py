"""Small synthetic SGLang trees for the audit's tests: the EAGLE-3 anchors, a runner, a worker, two models."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack.audit import eagle3 as audit


SPEC_INFO = '''
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    EAGLE = auto()
    EAGLE3 = auto()
    STANDALONE = auto()
    NONE = auto()

    def is_none(self):
        return self == SpeculativeAlgorithm.NONE

    def is_eagle(self):
        # NOTE: EAGLE3 is a variant of EAGLE
        return self == SpeculativeAlgorithm.EAGLE or self == SpeculativeAlgorithm.EAGLE3

    def is_eagle3(self):
        return self == SpeculativeAlgorithm.EAGLE3

    def is_standalone(self):
        return self == SpeculativeAlgorithm.STANDALONE

    def supports_spec_v2(self):
        return self.is_eagle() or self.is_standalone()

    def create_worker(self, server_args):
        if self.is_standalone():
            from sglang.srt.speculative.standalone_worker import StandaloneWorker

            return StandaloneWorker
        if self.is_eagle():
            from sglang.srt.speculative.eagle_worker import EAGLEWorker

            return EAGLEWorker
        raise ValueError("unreachable")
'''

WORKER = '''
from sglang.srt.speculative.spec_utils import helper


class EAGLEWorker:
    def __init__(self, target_worker, speculative_algorithm):
        self.target_worker = target_worker
        self.speculative_algorithm = speculative_algorithm
        embed, head = self.target_worker.model_runner.model.get_embed_and_head()
        self.draft_model_runner.model.set_embed_and_head(embed, head)
        self.model_runner.model.own_model_is_the_draft()
{worker}
{worker_methods}
'''

STANDALONE = '''
class StandaloneWorker:
    def __init__(self, target_worker):
        self.target_worker = target_worker
        self.target_worker.model_runner.model.standalone_only()
'''

RUNNER = '''
import contextlib
import functools
import importlib.util
from contextlib import nullcontext, suppress

from sglang.srt.layers.moe.utils import get_moe_a2a_backend
from sglang.srt.model_executor.runner_utils import configure
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class ModelRunner:
    def __init__(self, server_args, spec_algorithm, is_draft_worker):
        self.server_args = server_args
        self.spec_algorithm = spec_algorithm
        self.is_draft_worker = is_draft_worker
        self.eagle_use_aux_hidden_state = False
        if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:
            self.eagle_use_aux_hidden_state = True
        self.model.load_weights()
        if self.eagle_use_aux_hidden_state:
            self.model.set_eagle3_layers_to_capture([1, 2])
{runner}
{runner_methods}
'''

HELPERS = {
    "sglang/srt/layers/moe/utils.py": '''
class _Backend:
    def is_none(self):
        return True


def get_moe_a2a_backend():
    return _Backend()
''',
    "sglang/srt/speculative/spec_utils.py": '''
def helper(model, algo=None):
    return inner(target=model)


def inner(target):
    target.reached_two_calls_deep()
''',
    "sglang/srt/model_executor/runner_utils.py": '''
def configure(runner, enabled):
    if enabled:
        runner.model.configured_through_a_runner()
''',
}

MODELS = {
    "sglang/srt/models/base.py": '''
class Base:
    def __init__(self, config=None, quant_config=None):  # what SGLang's loader passes
        pass

    def get_embed_and_head(self):
        return None, None
''',
    "sglang/srt/models/wrapped.py": '''
from torch import nn

from sglang.srt.models.base import Base


class Wrapped(Base, nn.Module):
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass


EntryClass = [Wrapped]
''',
}


def synthetic(tmp_path: Path, *, runner: str = "", worker: str = "", extra: dict | None = None, runner_methods: str = "",
              worker_methods: str = "") -> Path:
    """A small tree: ``runner`` and ``worker`` are code added to ``ModelRunner.__init__`` and ``EAGLEWorker.__init__``,
    ``*_methods`` defs added to their classes, ``extra`` more files (path -> text)."""
    files = {
        "sglang/__init__.py": "",
        "sglang/_version.py": "__version__ = version = '9.9.9'\n",
        "sglang/srt/speculative/spec_info.py": SPEC_INFO,
        "sglang/srt/speculative/eagle_worker.py": WORKER.format(worker=indent(worker, 8), worker_methods=indent(worker_methods, 4)),
        "sglang/srt/speculative/standalone_worker.py": STANDALONE,
        "sglang/srt/model_executor/model_runner.py": RUNNER.format(runner=indent(runner, 8), runner_methods=indent(runner_methods, 4)),
        **HELPERS,
        **MODELS,
        **(extra or {}),
    }
    root = tmp_path / "site"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def indent(code: str, spaces: int) -> str:
    return textwrap.indent(textwrap.dedent(code), " " * spaces)


def groups(report: audit.Report) -> dict[str, dict]:
    return {"required": report.required, "optional": report.optional, "outside": report.outside, "draft": report.draft}


def placed(report: audit.Report, method: str) -> list[str]:
    return [name for name, group in groups(report).items() if method in group]



def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_stack.audit.eagle3", *args], capture_output=True, text=True, cwd=ROOT)



def sites(group: dict) -> dict[str, list[str]]:
    return {m: [str(s) for s in ss] for m, ss in group.items()}


