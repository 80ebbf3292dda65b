"""The EAGLE-3 audit's rules, one small synthetic tree each: the path, guards, receivers, refusals."""

from __future__ import annotations

import pytest

from sglang_stack.errors import UserError
from sglang_stack.audit import eagle3 as audit

from audit_trees import placed, sites, synthetic


def test_synthetic_baseline(tmp_path):
    report = audit.audit(synthetic(tmp_path), "Wrapped")
    assert report.passed, report.lines()
    assert sorted(report.required) == ["get_embed_and_head", "set_eagle3_layers_to_capture"], sorted(report.required)
    assert report.providers["get_embed_and_head"] == "Base.get_embed_and_head(self) (sglang/srt/models/base.py:6)", report.providers
    assert report.workers == ["sglang.srt.speculative.eagle_worker.EAGLEWorker"], f"EAGLE-3 workers: {report.workers}"
    assert report.flags == ["eagle_use_aux_hidden_state"], f"flags: {report.flags}"
    assert "standalone_only" not in report.required, "the standalone worker is not EAGLE-3"
    assert placed(report, "load_weights") == ["outside"], "an unconditional runner call is outside the EAGLE-3 path"
    assert set(report.draft) == {"set_embed_and_head", "own_model_is_the_draft"}, f"draft calls: {sorted(report.draft)}"


PATH = [
        ("if self.eagle_use_aux_hidden_state:\n    self.model.flagged()", "flagged", "required"),
        ("if not self.spec_algorithm.is_none():\n    self.model.any_spec()", "any_spec", "required"),
        # Whatever happens without speculation, EAGLE3 can take these:
        ("if self.spec_algorithm.is_eagle3() or self.server_args.enable_lora:\n    self.model.either()", "either", "required"),
        ("if self.server_args.speculative_algorithm is not None:\n    self.model.not_none()", "not_none", "required"),
        ("if self.spec_algorithm.supports_spec_v2():\n    self.model.v2()", "v2", "required"),
        ("if self.spec_algorithm.is_none():\n    pass\nelse:\n    self.model.in_else()", "in_else", "required"),
        ("if self.spec_algorithm == SpeculativeAlgorithm.EAGLE3:\n    self.model.compared()", "compared", "required"),
        ("if self.server_args.speculative_algorithm in ('EAGLE', 'EAGLE3'):\n    self.model.by_string()", "by_string", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    m.aliased()", "aliased", "required"),
        ("if not self.spec_algorithm.is_eagle3():\n    return\nself.model.after_exit()", "after_exit", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    getattr(self.model, 'by_name')()", "by_name", "required"),
        ("self.aux = False\nif self.spec_algorithm.is_eagle3():\n    self.aux = True\nif self.aux:\n    self.model.own_flag()", "own_flag", "required"),
        # every form of alias, and a method named by a constant or read by functools.partial
        ("if self.spec_algorithm.is_eagle3():\n    if (m := self.model) is not None:\n        m.walrused()", "walrused", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    (m := self.model).walrused_inline()", "walrused_inline", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m: object = self.model\n    m.annotated()", "annotated", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    m, n = self.model, None\n    m.unpacked()", "unpacked", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    for m in (self.model,):\n        m.looped()", "looped", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with nullcontext(self.model) as m:\n        m.held()", "held", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with open(__file__) as m:\n        m.read()", "read", None),
        ("if self.spec_algorithm.is_eagle3():\n    m, *rest = self.model, None, None\n    m.star_first()", "star_first", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    *rest, m = None, None, self.model\n    m.star_last()", "star_last", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    fn = lambda: self.model.in_lambda()\n    fn()", "in_lambda", "required"),
        # every form of condition
        ("if self.spec_algorithm.is_standalone():\n    pass\nelif self.spec_algorithm.is_eagle3():\n    self.model.in_elif()", "in_elif", "required"),
        ("self.model.ternary() if self.spec_algorithm.is_eagle3() else None", "ternary", "required"),
        ("self.model.ternary_else() if self.spec_algorithm.is_none() else None", "ternary_else", None),
        ("while self.spec_algorithm.is_eagle3():\n    self.model.in_while()\n    break", "in_while", "required"),
        ("self.spec_algorithm.is_eagle3() and self.model.anded()", "anded", "required"),
        ("self.spec_algorithm.is_none() or self.model.ored()", "ored", "required"),
        ("self.spec_algorithm.is_eagle3() or self.model.ored_away()", "ored_away", None),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    m += 1\n    m.augmented()", "augmented", None),
        ("if self.spec_algorithm.is_eagle3():\n    NAME = 'by_constant'\n    getattr(self.model, NAME)()", "by_constant", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    fn = functools.partial(self.model.partialled, 1)\n    fn()", "partialled", "required"),
        # match/case on the algorithm
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE3:\n        self.model.matched()", "matched", "required"),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE | SpeculativeAlgorithm.EAGLE3:\n        self.model.either_case()", "either_case", "required"),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.STANDALONE:\n        self.model.other_case()", "other_case", None),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE3:\n        pass\n    case _:\n        self.model.fallthrough()", "fallthrough", None),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.EAGLE3 if self.is_draft_worker:\n        self.model.guarded_case()", "guarded_case", None),
        ("match self.spec_algorithm:\n    case SpeculativeAlgorithm.NONE:\n        pass\n    case _:\n        self.model.any_spec()", "any_spec", "required"),
        # ... and these it cannot:
        ("if self.spec_algorithm.is_eagle3():\n    pass\nelse:\n    self.model.not_eagle3()", "not_eagle3", None),
        ("if self.spec_algorithm.is_standalone():\n    self.model.standalone()", "standalone", None),
        ("if self.spec_algorithm.is_eagle3() and self.is_draft_worker:\n    self.model.draft_only()", "draft_only", None),
        ("if self.server_args.speculative_algorithm is None:\n    self.model.no_spec()", "no_spec", None),
        ("if not self.spec_algorithm.is_none():\n    return\nself.model.no_spec_after_exit()", "no_spec_after_exit", None),
        # Conditions that do not mention speculation are not the EAGLE-3 path:
        ("if get_moe_a2a_backend().is_none():\n    self.model.moe_thing()", "moe_thing", "outside"),
        ("self.sometimes = True\nif self.sometimes:\n    self.model.sometimes_on()", "sometimes_on", "outside"),
        ("if importlib.util.find_spec('torch') is None:\n    self.model.no_torch()", "no_torch", "outside"),
        ("if self.server_args.enable_lora:\n    self.model.lora_only()", "lora_only", "outside"),
        ("if self.spec_aux_config.dflash_capture:\n    self.model.dflash_only()", "dflash_only", "outside"),
        ("if self.aux_config.eagle_capture:\n    self.model.eagle_flag()", "eagle_flag", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    self.draft_model_runner.model.drafty()", "drafty", "draft"),
]


@pytest.mark.parametrize("runner, method, where", PATH, ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,)
def test_rule_the_eagle3_path(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert placed(report, method) == ([where] if where else []), f"{method}: expected in {where}, found in {placed(report, method)}"


# Predicates the runner reads through its own methods, a property or a function: the test inside decides.
PREDICATES = [
    ("def uses_eagle3(self):\n    return self.spec_algorithm.is_eagle3() and not self.is_draft_worker",
     "if self.uses_eagle3():\n    self.model.by_method()", "by_method", "required"),
    ("@property\ndef eagle3_on(self):\n    return self.spec_algorithm.is_eagle3()",
     "if self.eagle3_on:\n    self.model.by_property()", "by_property", "required"),
    ("def no_spec(self):\n    return self.spec_algorithm.is_none()",
     "if self.no_spec():\n    self.model.without_spec()", "without_spec", None),
    ("def draft_side(self):\n    return self.is_draft_worker",
     "if self.spec_algorithm.is_eagle3() and self.draft_side():\n    self.model.draft_side_only()", "draft_side_only", None),
    ("def nested(self):\n    return self.uses()\ndef uses(self):\n    return self.spec_algorithm.is_eagle3()",
     "if self.nested():\n    self.model.two_deep()", "two_deep", "required"),
    ("", "from sglang.srt.model_executor.spec_checks import eagle3_enabled\nif eagle3_enabled(self.server_args):\n"
     "    self.model.by_function()", "by_function", "required"),
    ("", "from sglang.srt.model_executor.spec_checks import spec_off\nif spec_off(self.server_args):\n"
     "    self.model.spec_off_only()", "spec_off_only", None),
]
SPEC_CHECKS = {"sglang/srt/model_executor/spec_checks.py": (
    "def eagle3_enabled(server_args):\n    return server_args.speculative_algorithm == 'EAGLE3'\n\n\n"
    "def spec_off(server_args):\n    return server_args.speculative_algorithm is None\n")}


@pytest.mark.parametrize("methods, runner, method, where", PREDICATES, ids=[p[2] for p in PREDICATES])
def test_rule_predicates_are_read_through(tmp_path, methods, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner, runner_methods=methods, extra=SPEC_CHECKS), "Wrapped")
    assert placed(report, method) == ([where] if where else []), f"{method}: expected in {where}, found in {placed(report, method)}"


GUARDS = [
        ("if self.spec_algorithm.is_eagle3() and hasattr(self.model, 'guarded'):\n    self.model.guarded()", "guarded", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    if callable(getattr(self.model, 'maybe', None)):\n        self.model.maybe()", "maybe", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    getattr(self.model, 'defaulted', lambda: None)()", "defaulted", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    m = self.model\n    if not hasattr(m, 'early'):\n        return\n    self.model.early()", "early", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.tried()\n    except AttributeError:\n        pass", "tried", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        x = self.model.bound()\n    except AttributeError:\n        x = None\n    print(x)", "bound", "optional"),
        # A broad except catches the AttributeError too, and recovers; so does contextlib.suppress.
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.broad()\n    except Exception:\n        pass", "broad", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.bare()\n    except:\n        pass", "bare", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    with contextlib.suppress(AttributeError):\n        self.model.suppressed()", "suppressed", "optional"),
        ("if self.spec_algorithm.is_eagle3():\n    with suppress(Exception):\n        self.model.suppressed_broadly()", "suppressed_broadly", "optional"),
        # Not guards: another receiver, a check that raises, a handler that does not catch it or calls again,
        # a result left unset.
        ("if self.spec_algorithm.is_eagle3() and hasattr(self.draft_model_runner.model, 'other'):\n    self.model.other()", "other", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if not hasattr(self.model, 'loud'):\n        raise ValueError('needs loud')\n    self.model.loud()", "loud", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.narrow()\n    except ValueError:\n        pass", "narrow", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with contextlib.suppress(KeyError):\n        self.model.wrong_kind()", "wrong_kind", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.again(1)\n    except Exception:\n        self.model.again()", "again", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    with contextlib.suppress(AttributeError):\n        w = self.model.kept()\n    print(w)", "kept", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        y = self.model.unset()\n    except AttributeError:\n        pass\n    print(y)", "unset", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    try:\n        self.model.reraised()\n    except AttributeError:\n        raise", "reraised", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if hasattr(self.model, 'half'):\n        z = self.model.half()\n    print(z)", "half", "required"),
        ("if self.spec_algorithm.is_eagle3():\n    if hasattr(self.model, 'local'):\n        z = self.model.local()\n        print(z)", "local", "optional"),
]


@pytest.mark.parametrize("runner, method, where", GUARDS, ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,)
def test_rule_guards(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert placed(report, method) == [where], f"{method}: expected in {where}, found in {placed(report, method)}"


SHARE = "def share(self, model):\n    model.in_a_method()\n"
RECEIVERS = [
        # the target, however it is reached
        ("self.verifier = target_worker\nself.verifier.model_runner.model.renamed()", "renamed", "required"),
        ("runner = self.target_worker.model_runner\nrunner.model.via_runner()", "via_runner", "required"),
        ("self.target_model = self.target_worker.model_runner.model\nself.target_model.via_attribute()", "via_attribute", "required"),
        # into the functions and methods it is passed to
        ("helper(self.target_worker.model_runner.model)", "reached_two_calls_deep", "required"),
        ("self.share(model=self.target_worker.model_runner.model)", "in_a_method", "required"),
        ("if hasattr(self.target_worker.model_runner.model, 'in_a_method'):\n    self.share(self.target_worker.model_runner.model)", "in_a_method", "optional"),
        ("if self.speculative_algorithm.is_standalone():\n    helper(self.target_worker.model_runner.model)", "reached_two_calls_deep", None),
        ("self.mtp_model_runner(0).model.mtp_thing()", "mtp_thing", "draft"),
        # data flow, not names: what an attribute holds decides, not what it is called
        ("self.draft_view = self.target_worker.model_runner.model\nself.draft_view.target_under_a_draft_name()",
         "target_under_a_draft_name", "required"),
        ("self.target_copy = self.draft_model_runner.model\nself.target_copy.draft_under_a_target_name()",
         "draft_under_a_target_name", "draft"),
]


@pytest.mark.parametrize("worker, method, where", RECEIVERS, ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,)
def test_rule_receivers_and_calls_followed(tmp_path, worker, method, where):
    report = audit.audit(synthetic(tmp_path, worker=worker, worker_methods=SHARE), "Wrapped")
    assert placed(report, method) == ([where] if where else []), f"{method}: expected in {where}, found in {placed(report, method)}"


def test_rule_the_target_is_followed_into_a_function_that_gets_its_runner(tmp_path):
    """ModelRunner passes itself, and the EAGLE-3 flag, to a helper in another module."""
    runner = "configure(self, self.eagle_use_aux_hidden_state)\nconfigure(runner=self, enabled=self.server_args.enable_lora)"
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert [str(s) for s in report.required["configured_through_a_runner"]] == [
        "sglang/srt/model_executor/runner_utils.py:4"
    ], sites(report.required)


def test_rule_a_speculative_base_of_a_worker_class_is_on_the_path(tmp_path):
    base = "class WorkerBase:\n    def share(self):\n        self.target_worker.model_runner.model.from_the_base()\n"
    tree = synthetic(tmp_path, worker="self.share()", extra={"sglang/srt/speculative/worker_base.py": base})
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    text = worker.read_text().replace("class EAGLEWorker:", "class EAGLEWorker(WorkerBase):")
    worker.write_text("from sglang.srt.speculative.worker_base import WorkerBase\n" + text)
    report = audit.audit(tree, "Wrapped")
    assert [str(s) for s in report.required.get("from_the_base", ())] == ["sglang/srt/speculative/worker_base.py:3"], sites(report.required)


def test_rule_a_renamed_anchor_is_an_error_not_a_draft_call(tmp_path):
    tree = synthetic(tmp_path)
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    worker.write_text(worker.read_text().replace("target_worker", "verifier"))
    with pytest.raises(UserError) as err:
        audit.audit(tree, "Wrapped")
    assert "eagle_worker.py:9" in str(err.value) and "target or the draft" in str(err.value), str(err.value)


def test_rule_torch_module_methods_are_known(tmp_path):
    runner = "if self.eagle_use_aux_hidden_state:\n    self.model.named_modules()\n    self.model.not_in_torch()"
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert report.providers["named_modules"] == "torch.nn.Module", report.providers
    assert [m.method for m in report.missing] == ["not_in_torch"], report.lines()


def test_a_tree_without_the_anchors_is_refused_not_passed(tmp_path):
    root = tmp_path / "site"
    (root / "sglang/srt/models").mkdir(parents=True)
    (root / "sglang/srt/models/m.py").write_text("class M:\n    pass\n\nEntryClass = [M]\n")
    with pytest.raises(UserError) as err:
        audit.audit(root, "M")
    assert "sglang.srt.speculative.spec_info" in str(err.value), str(err.value)


def test_a_tree_whose_eagle3_path_has_no_target_call_is_refused_not_passed(tmp_path):
    tree = synthetic(tmp_path)
    for rel in ("sglang/srt/speculative/eagle_worker.py", "sglang/srt/model_executor/model_runner.py"):
        path = tree / rel
        text = path.read_text()
        text = text.replace("self.target_worker.model_runner.model.get_embed_and_head()", "(None, None)")
        text = text.replace("            self.model.set_eagle3_layers_to_capture([1, 2])", "            pass")
        path.write_text(text)
    with pytest.raises(UserError) as err:
        audit.audit(tree, "Wrapped")
    assert "cannot pass it" in str(err.value), str(err.value)


def test_a_factory_without_an_eagle3_worker_is_refused(tmp_path):
    tree = synthetic(tmp_path)
    spec = tree / "sglang/srt/speculative/spec_info.py"
    spec.write_text(spec.read_text().replace("if self.is_eagle():", "if self.is_standalone() and False:"))
    with pytest.raises(UserError) as err:
        audit.audit(tree, "Wrapped")
    assert "returns no in-tree worker class for EAGLE3" in str(err.value), str(err.value)


def test_self_model_in_a_model_runner_mixin_is_the_target(tmp_path):
    mixin = "class RunnerMixin:\n    def init_extra(self):\n        if self.spec_algorithm.is_eagle3():\n            self.model.mixin_hook()\n"
    tree = synthetic(tmp_path, runner="self.init_extra()", extra={"sglang/srt/model_executor/mixin.py": mixin})
    runner = tree / "sglang/srt/model_executor/model_runner.py"
    text = runner.read_text().replace("class ModelRunner:", "class ModelRunner(RunnerMixin):")
    runner.write_text("from sglang.srt.model_executor.mixin import RunnerMixin\n" + text)
    report = audit.audit(tree, "Wrapped")
    assert "mixin_hook" in report.required, f"a ModelRunner mixin's self.model is the target: {sorted(report.required)}"


# --------------------------------------------------------------------------
# Guards judged by the path's evaluator; the MRO as Python computes it
# --------------------------------------------------------------------------


ALGORITHM_GUARDS = [
        # Under EAGLE3 is_standalone() is false, so the call runs only where the method exists.
        ("if self.spec_algorithm.is_standalone() or hasattr(self.model, 'or_guarded'):\n    self.model.or_guarded()", "or_guarded", "optional"),
        ("if self.spec_algorithm.is_eagle3() or hasattr(self.model, 'or_eagle3'):\n    self.model.or_eagle3()", "or_eagle3", "required"),
        # A guard on the draft model guards nothing on the target, whatever the algorithm.
        ("if self.spec_algorithm.is_standalone() or hasattr(self.draft_model_runner.model, 'draft_or'):\n    self.model.draft_or()", "draft_or", "required"),
]


@pytest.mark.parametrize("runner, method, where", ALGORITHM_GUARDS, ids=lambda v: v if isinstance(v, str) and v.isidentifier() else None,)
def test_rule_guards_are_judged_with_the_algorithm(tmp_path, runner, method, where):
    report = audit.audit(synthetic(tmp_path, runner=runner), "Wrapped")
    assert placed(report, method) == [where], f"{method}: expected in {where}, found in {placed(report, method)}"


def test_rule_providers_follow_the_real_mro_across_modules(tmp_path):
    """The same base reached through two modules, once under another name, is one class in the MRO."""
    extra = {
        "sglang/srt/models/base_two.py": "class Base:\n    def get_embed_and_head(self, wrong):\n        pass\n",
        "sglang/srt/models/left.py": "from sglang.srt.models.base_two import Base\n\n\nclass Left(Base):\n    pass\n",
        "sglang/srt/models/right.py": (
            "from sglang.srt.models.base_two import Base as SharedBase\n\n\nclass Right(SharedBase):\n"
            "    def get_embed_and_head(self):\n        return None, None\n\n"
            "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n"
        ),
        "sglang/srt/models/edited.py": (
            "from sglang.srt.models.left import Left\nfrom sglang.srt.models.right import Right\n\n\n"
            "class Edited(Left, Right):\n    pass\n\n\nEntryClass = [Edited]\n"
        ),
    }
    report = audit.audit(synthetic(tmp_path, extra=extra), "Edited")
    assert report.passed, f"Python finds Right's method before Base's: {report.lines()}"
    assert report.providers["get_embed_and_head"].startswith("Right.get_embed_and_head(self)"), report.providers


def test_rule_a_method_borrowed_from_a_class_that_inherits_it_is_found_through_that_class(tmp_path):
    """sglang 0.5.10's Kimi class: ``get_embed_and_head = DeepseekV3ForCausalLM.get_embed_and_head``, where V3 has it
    from V2. Python finds V2's function through V3's MRO; so does the audit (it crashed walking None before)."""
    extra = {
        "sglang/srt/models/v2.py": ("class V2:\n    def get_embed_and_head(self):\n        return None, None\n\n"
                                    "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n"),
        "sglang/srt/models/v3.py": "from sglang.srt.models.v2 import V2\n\n\nclass V3(V2):\n    pass\n",
        "sglang/srt/models/borrower.py": (
            "from torch import nn\nfrom sglang.srt.models.v3 import V3\n\n\nclass Borrower(nn.Module):\n"
            "    get_embed_and_head = V3.get_embed_and_head\n    set_eagle3_layers_to_capture = V3.set_eagle3_layers_to_capture\n"
            "\n\nEntryClass = [Borrower]\n"),
    }
    site = synthetic(tmp_path, extra=extra)
    report = audit.audit(site, "Borrower")
    assert "get_embed_and_head" in report.required and report.passed, report.lines()
    tree = audit.Tree(site)  # the source's own verdict, where a run cannot build the class
    p = audit.provider(tree, audit.find_arch(tree, "Borrower"), "get_embed_and_head")
    assert p.kind == "found" and p.where.startswith("Borrower.get_embed_and_head(self)"), p


@pytest.mark.parametrize("imported", ["from sglang.srt.speculative import spec_utils", "import sglang.srt.speculative.spec_utils as spec_utils"])
def test_rule_the_target_is_followed_into_a_function_of_an_imported_module(tmp_path, imported):
    tree = synthetic(tmp_path, worker="spec_utils.helper(self.target_worker.model_runner.model)")
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    worker.write_text(f"{imported}\n" + worker.read_text())
    report = audit.audit(tree, "Wrapped")
    assert placed(report, "reached_two_calls_deep") == ["required"], f"not followed through {imported!r}: {sites(report.required)}"


# A helper in any module handed the EAGLE-3 worker itself; methods that nothing calls are not on the path.
HOOKS = {"sglang/srt/utils/eagle_hooks.py": (
    "def hook(worker):\n    worker.target_worker.model_runner.model.hooked()\n\n\n"
    "def hook_draft(worker):\n    worker.model_runner.model.draft_hooked()\n")}
REACH = [
    ("from sglang.srt.utils.eagle_hooks import hook\nhook(self)", "", "hooked", "required"),
    ("from sglang.srt.utils.eagle_hooks import hook_draft\nhook_draft(worker=self)", "", "draft_hooked", "draft"),
    ("", "def _legacy_path(self):\n    self.target_worker.model_runner.model.never_called()", "never_called", None),
    ("self._set_up()", "def _set_up(self):\n    self.target_worker.model_runner.model.called_from_init()",
     "called_from_init", "required"),
    ("self._dispatch()", "def _by_name(self):\n    self.target_worker.model_runner.model.by_name()\n"
     "def _dispatch(self):\n    getattr(self, '_by_name')()", "by_name", "required"),
]


@pytest.mark.parametrize("worker, methods, method, where", REACH, ids=[r[2] for r in REACH])
def test_rule_helpers_handed_the_worker_and_dead_methods(tmp_path, worker, methods, method, where):
    report = audit.audit(synthetic(tmp_path, worker=worker, worker_methods=methods, extra=HOOKS), "Wrapped")
    assert placed(report, method) == ([where] if where else []), f"{method}: expected in {where}, found in {placed(report, method)}"
