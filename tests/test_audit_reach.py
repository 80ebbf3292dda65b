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
