"""The PNG plot: one line per endpoint in each panel, drawn from the summary."""

from __future__ import annotations

import struct

from sglang_stack.bench import plot
from test_report import document, round_, sample


def test_one_line_per_endpoint_in_every_panel():
    samples = [sample(n, lvl, 0, decode=d * lvl) for n, d in (("baseline", 90.0), ("eagle3", 96.0)) for lvl in (1, 4)]
    rounds = [round_(n, lvl, 0, a * lvl) for n, a in (("baseline", 80.0), ("eagle3", 85.0)) for lvl in (1, 4)]
    doc = document(samples, rounds, levels=(1, 4))
    fig = plot.figure(doc)
    assert len(fig.axes) == len(plot.PANELS) + 1, f"{len(fig.axes)} panels"
    for ax, (key, title) in zip(fig.axes, plot.PANELS):
        assert ax.get_title() == title, f"panel title {ax.get_title()!r}"
        lines = {line.get_label(): list(line.get_ydata()) for line in ax.lines if not line.get_label().startswith("_")}
        want = {n: [r[key] for r in doc["summary"]["rows"] if r["endpoint"] == n] for n in ("baseline", "eagle3")}
        assert lines == want, f"panel {key}: drawn {lines}, summary {want}"
        assert [int(t) for t in ax.get_xticks()] == [1, 4], f"x ticks are the levels: {ax.get_xticks()}"
        top = max(v for values in lines.values() for v in values)
        assert ax.get_ylim()[1] > top * 1.05, f"panel {key}: the top series touches the frame ({ax.get_ylim()}, {top})"
    assert fig.axes[-1].get_title() == plot.ACCEPT_TITLE


def test_acceptance_panel_and_error_bars():
    samples = [sample("eagle3", 1, 0, decode=90.0)]
    for s in samples:
        s.update(spec_verify_ct=4, spec_accept_histogram=[1, 1, 2], spec_accept_length=2.0)
    rounds = [round_("eagle3", 1, 0, 80.0), round_("eagle3", 1, 1, 100.0)]
    doc = document(samples, rounds, names=("eagle3",))
    fig = plot.figure(doc)
    (line,) = fig.axes[-1].lines
    assert list(line.get_ydata()) == [0.75, 0.5], "P(>=1) = 3/4, P(>=2) = 2/4 from the histogram [1, 1, 2]"
    data = plot.series(doc["summary"])
    assert data["aggregate_range"] == {"eagle3": [[1, 80.0, 100.0]]}, data["aggregate_range"]
    assert fig.axes[0].collections, "the aggregate panel carries the rounds' range as error bars"


def test_a_sweep_puts_each_setting_at_its_own_place():
    samples = [sample(n, 1, 0, decode=d) for n, d in (("eagle3 s1 k1 d2", 90.0), ("eagle3 s2 k1 d3", 90.0))]
    rounds = [round_(n, 1, 0, 80.0) for n in ("eagle3 s1 k1 d2", "eagle3 s2 k1 d3")]
    doc = document(samples, rounds, names=("eagle3 s1 k1 d2", "eagle3 s2 k1 d3"))
    doc["sweep"] = {"level": 1, "points": [{"label": "eagle3 s1 k1 d2"}, {"label": "eagle3 s2 k1 d3"}]}
    ax = plot.figure(doc).axes[0]
    xs = sorted(x for line in ax.lines if not line.get_label().startswith("_") for x in line.get_xdata())
    assert xs == [0, 1], f"equal points at one x hide each other: {xs}"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["s1 k1 d2", "s2 k1 d3"]


def test_png_is_a_png_and_says_incomplete():
    doc = document([], [], complete=False)
    fig = plot.figure(doc)
    assert "INCOMPLETE" in fig._suptitle.get_text(), "an incomplete run's plot must say so"
    assert all("no measurements" in [t.get_text() for t in ax.texts] for ax in fig.axes[:-1]), "empty panels must say so"
    data = plot.png(doc)
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (2000, 460), f"PNG size {width}x{height}"
