"""What became of each patch of the root's series on another profile's release, and the proof of each retirement.

A profile's ``patches/upstream.toml`` says, for every patch of the root's series that its own series does not
carry, whether another patch of its series replaces it (the release moved the code it fixed) or upstream fixed
it (the change, the first release that has it, and the name of a proof). Every proof named there runs here
against the profile's **unpatched** tree and must pass; a retirement without a proof that passes fails.

The proofs run the release's own code:

- ``kimi-delegation`` (0001): the EAGLE-3 audit, as the image build runs it, on the unpatched tree;
- ``aux-layers-before-graphs`` (0004): the scheduler's start-up, compiled from the tree (``Scheduler.
  init_model_worker``, ``TpModelWorker`` and ``ModelRunner``'s ``init_attention_backends`` and
  ``init_cuda_graphs``, ``configure_aux_hidden_state_capture``, Kimi-K2.5's delegation and DeepSeek-V2's
  ``set_eagle3_layers_to_capture``), with the graph capture standing in: it records the layers the target model
  would capture while each graph is recorded;
- ``capture-after-allreduce`` (0006): tests/patching/test_upstream_capture.py.
"""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
import types
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from sglang_source import Anything, Namespace, load_functions
from sglang_stack import ROOT
from sglang_stack.lock import profiles
from sglang_stack.patching.patches import read_series

ROOT_SERIES = [p.name for p in read_series(ROOT / "patches")]
RECORDS = {name: p for name, p in profiles.available().items() if not p.default}


def records(profile) -> dict:
    path = profile.series.parent / "upstream.toml"
    return tomllib.loads(path.read_text()) if path.is_file() else {}


def retirements():
    for name, profile in RECORDS.items():
        for entry in records(profile).get("retired", []):
            yield pytest.param(name, entry, id=f"{name}-{entry['patch'][:4]}")


# --- the records -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RECORDS))
def test_every_root_patch_is_carried_replaced_or_retired(name):
    profile = RECORDS[name]
    series = [p.name for p in read_series(profile.series.parent)]
    data = records(profile)
    said = {e["patch"]: kind for kind in ("retired", "replaced") for e in data.get(kind, [])}
    for patch in ROOT_SERIES:
        assert (patch in series) != (patch in said), \
            f"{name}: {patch} must be either in its series or in upstream.toml, once ({'both' if patch in series else 'neither'})"
    for entry in data.get("replaced", []):
        assert entry["by"] in series, f"{name}: {entry['patch']} is replaced by {entry['by']}, which its series does not apply"
        assert entry["by"] not in ROOT_SERIES, f"{name}: {entry['by']} is the root's own patch: carry {entry['patch']} instead"
        assert entry.get("says"), f"{name}: say why {entry['patch']} is replaced"
    for entry in data.get("retired", []):
        assert re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", entry.get("upstream", "")), f"{name}: {entry['patch']}: upstream PR as owner/repo#N"
        assert entry.get("release") and entry.get("says"), f"{name}: {entry['patch']}: the release that has the fix, and what it does"
        assert entry.get("proof") in PROOFS, f"{name}: {entry['patch']}: proof {entry.get('proof')!r} is not one of {sorted(PROOFS)}"


# --- the proofs ------------------------------------------------------------------------------


def kimi_delegation(tree: Path, python) -> None:
    """0001's own test: the EAGLE-3 audit on the tree as released."""
    from sglang_stack.audit import eagle3

    report = eagle3.audit(tree, "KimiK25ForConditionalGeneration")
    assert report.passed, f"the audit finds missing methods on the unpatched tree: {report.missing}"


SCHEDULER = "sglang/srt/managers/scheduler.py"
TP_WORKER = "sglang/srt/managers/tp_worker.py"
MODEL_RUNNER = "sglang/srt/model_executor/model_runner.py"
BACKEND_SETUP = "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py"
KIMI = "sglang/srt/models/kimi_k25.py"
DEEPSEEK = "sglang/srt/models/deepseek_v2.py"
DRAFTER_IDS = [1, 29, 57]  # an "output of layer X" drafter of Kimi-K2.5's 61 layers


class StartedUp(Exception):
    """Raised where start-up has captured its graphs and goes on to read the worker's sizes."""


class Torch(Anything):
    """torch as the start-up code uses it: ``torch.no_grad()`` decorates, everything else is inert."""

    def no_grad(self):
        return lambda fn: fn


def start_up(tree: Path) -> tuple[list, list]:
    """The layers each captured graph records, and the order in which start-up steps ran."""
    steps: list = []
    graphs: list = []
    text = NS(pp_group=NS(is_last_rank=True), config=NS(num_hidden_layers=61), model=NS(layers_to_capture=[]))
    text.set_eagle3_layers_to_capture = lambda ids=None: deepseek["set_eagle3_layers_to_capture"](text, ids)
    kimi_fns = load_functions(tree / KIMI, ["KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture"], Namespace())
    deepseek = load_functions(tree / DEEPSEEK, ["DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"], Namespace())
    model = type("KimiK25ForConditionalGeneration", (), kimi_fns)()
    model.language_model = text

    def capture_cuda_graphs(model_runner, **kwargs):
        steps.append("capture graphs")
        graphs.append(list(text.model.layers_to_capture))
        return Anything("capture")

    setup = load_functions(tree / BACKEND_SETUP, ["configure_aux_hidden_state_capture"], Namespace())
    runner_ns = Namespace(capture_cuda_graphs=capture_cuda_graphs,
                          configure_aux_hidden_state_capture=setup["configure_aux_hidden_state_capture"],
                          resolve_attention_backend_strs=lambda **kw: NS(prefill="fa3", decode="fa3"),
                          build_attention_backends=lambda **kw: steps.append("attention backends") or Anything("backends"))
    runner_fns = load_functions(tree / MODEL_RUNNER, ["ModelRunner.init_attention_backends", "ModelRunner.init_cuda_graphs"],
                                runner_ns)
    runner = type("ModelRunner", (Anything,), runner_fns)("model_runner")
    runner.model = model
    runner.is_draft_worker = False
    runner.spec_aux_config = NS(eagle_use_aux_hidden_state=True, eagle_aux_hidden_state_layer_ids=DRAFTER_IDS,
                                dflash_use_aux_hidden_state=False, dflash_target_layer_ids=None, is_dspark=False)
    worker_fns = load_functions(tree / TP_WORKER, ["TpModelWorker.init_attention_backends", "TpModelWorker.init_cuda_graphs"],
                                Namespace())
    worker = type("TpModelWorker", (Anything,), worker_fns)("tp_worker")
    worker.model_runner, worker.model_runner_list = runner, [runner]

    def get_worker_info():  # past the graphs: the rest of start-up sizes the scheduler from the worker
        raise StartedUp

    worker.get_worker_info = get_worker_info
    sched_fns = load_functions(tree / SCHEDULER, ["Scheduler.init_model_worker", "Scheduler.init_all_attention_backends",
                                                  "Scheduler.init_all_cuda_graphs"],
                               Namespace(get_model=lambda: NS(is_startup_weight_load_overlap=False), torch=Torch("torch")))
    scheduler = type("Scheduler", (Anything,), sched_fns)("scheduler")
    scheduler.tp_worker, scheduler.draft_worker, scheduler.enable_unified_memory = worker, None, False
    scheduler.init_tp_model_worker = lambda: steps.append("load weights")
    scheduler.maybe_init_draft_worker = lambda: None
    scheduler.init_memory_pools = lambda: steps.append("memory pools")
    # The one module init_model_worker imports inside itself: the DeepGEMM budget refresh after capture.
    late = "sglang.srt.model_executor.model_runner_components.cuda_graph_setup"
    parts = late.split(".")
    modules = {".".join(parts[:i]): types.ModuleType(".".join(parts[:i])) for i in range(1, len(parts) + 1)}
    modules[late].refresh_deep_gemm_layout_memory_budget = lambda *a, **k: steps.append("deep_gemm budget")
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        scheduler.init_model_worker()
    except StartedUp:
        pass
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return graphs, steps


def aux_layers_before_graphs(tree: Path, python) -> None:
    """0004's own question, on this release's start-up: every captured graph records the drafter's layers."""
    graphs, steps = start_up(tree)
    assert graphs, f"no graph was captured at start-up: {steps}"
    want = [i + 1 for i in DRAFTER_IDS]
    assert all(g == want for g in graphs), f"graphs record layers {graphs}, the drafter's are {want} (steps: {steps})"


def capture_after_allreduce(tree: Path, python) -> None:
    """0006's own question, on the release's layer boundary, in a Python of the profile's pins."""
    from test_upstream_capture import prove

    prove(python(), tree)


PROOFS = {"kimi-delegation": kimi_delegation, "aux-layers-before-graphs": aux_layers_before_graphs,
          "capture-after-allreduce": capture_after_allreduce}


@pytest.mark.sglang_env
@pytest.mark.network
@pytest.mark.parametrize(("name", "entry"), list(retirements()))
def test_each_retirement_is_proved_on_the_unpatched_tree(name, entry, profile_trees, profile_python):
    pristine, _ = profile_trees(name)
    PROOFS[entry["proof"]](pristine, lambda: profile_python(name))


@pytest.mark.network
def test_the_start_up_proof_fails_where_graphs_are_captured_first(profile_trees, tmp_path):
    """The proof can fail: the same tree with the two start-up steps swapped captures graphs before the layers are set."""
    name = next(n for n, p in RECORDS.items() if any(e["proof"] == "aux-layers-before-graphs" for e in records(p).get("retired", [])))
    pristine, _ = profile_trees(name)
    tree = tmp_path / "site"
    (tree / Path(SCHEDULER).parent).mkdir(parents=True)
    for rel in (SCHEDULER, TP_WORKER, MODEL_RUNNER, BACKEND_SETUP, KIMI, DEEPSEEK):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pristine / rel, tree / rel)
    source = (tree / SCHEDULER).read_text()
    both = "        self.init_all_attention_backends()\n        self.init_all_cuda_graphs()\n"
    assert source.count(both) == 1, "the start-up steps moved: update this test"
    (tree / SCHEDULER).write_text(source.replace(both, "        self.init_all_cuda_graphs()\n        self.init_all_attention_backends()\n"))
    with pytest.raises(AssertionError, match="graphs record layers"):
        aux_layers_before_graphs(tree, None)
