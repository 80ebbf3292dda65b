"""What a forwarder really reaches, callables followed, and hooks bound at run time: the corpus of
tests/audit_reach.py, each case judged by the import-and-call oracle, in both directions."""

from __future__ import annotations

import pytest

from audit_reach import cases, judge


@pytest.mark.parametrize("kind, name, serves", cases(), ids=[f"{k}: {n}" for k, n, _ in cases()])
def test_the_audit_agrees_with_the_oracle(tmp_path, kind, name, serves):
    truth, said, lines = judge(kind, name, tmp_path)
    assert truth == serves, f"the oracle says the case {'serves' if truth else 'dies'}: it is not the case it claims to be"
    assert said == truth, f"{'false pass' if said else 'false reject'}: {lines}"


def test_the_corpus_holds_both_directions_of_each_form():
    directions = [serves for _, _, serves in cases()]
    assert directions.count(True) >= 10 and directions.count(False) >= 10, directions


PROVIDER_CASES = [(n, serves) for k, n, serves in cases() if k == "provider"]


@pytest.mark.parametrize("name, serves", PROVIDER_CASES, ids=[n for n, _ in PROVIDER_CASES])
def test_the_source_alone_never_passes_what_dies(tmp_path, name, serves):
    """Where the run cannot decide, the source decides (audit.provider): it may fail closed, never pass a crash."""
    from audit_reach import ORACLE_CALLS, PROVIDERS
    from audit_trees import synthetic
    from sglang_stack.audit import eagle3 as audit
    from sglang_stack.audit.source import CallSite, Tree

    module, extra, _ = PROVIDERS[name]
    tree = Tree(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module, **extra}))
    arch = audit.find_arch(tree, "Edited")
    said = []
    for method, args in ORACLE_CALLS:
        p = audit.provider(tree, arch, method)
        said.append(p.kind == "found" and not audit.binds(p, CallSite("x.py", 1, method, "model", args=args)))
    assert serves or not all(said), f"the source passes {name}, which dies"


def test_a_forwarder_reached_through_a_guess_is_left_undecided(tmp_path):
    """A property on the chain that takes the truth of a stand-in: the run's answer would rest on a guess, and the
    source cannot evaluate a property, so the method is undecided (fails closed) rather than passed or missed."""
    from audit_trees import synthetic
    from sglang_stack.audit import eagle3 as audit

    module = ("from torch import nn\nfrom vendor_flags import ENABLED\n\n\nclass Backbone(nn.Module):\n    pass\n\n\n"
              "class CausalLM(nn.Module):\n    def get_embed_and_head(self):\n        return None, None\n\n\n"
              "class Edited(nn.Module):\n    def __init__(self, config=None, quant_config=None):\n        super().__init__()\n"
              "        self._lm = CausalLM()\n        self._bare = Backbone()\n\n    @property\n"
              "    def language_model(self):\n        return self._bare if ENABLED else self._lm\n\n"
              "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        pass\n\n"
              "    def get_embed_and_head(self):\n        return self.language_model.get_embed_and_head()\n\n\n"
              "EntryClass = Edited\n")
    report = audit.audit(synthetic(tmp_path, extra={"sglang/srt/models/edited.py": module}), "Edited")
    assert report.exit_code == 3 and [m.method for m in report.undecided] == ["get_embed_and_head"], report.lines()
    assert "took the truth of vendor_flags.ENABLED" in report.decided["get_embed_and_head"], report.decided
    assert "a property whose value the source cannot evaluate" in report.undecided[0].reason, report.undecided[0]
