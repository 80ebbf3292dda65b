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
    assert len(fig.axes) == len(plot.PANELS), f"{len(fig.axes)} panels"
    for ax, (key, title) in zip(fig.axes, plot.PANELS):
        assert ax.get_title() == title, f"panel title {ax.get_title()!r}"
        lines = {line.get_label(): list(line.get_ydata()) for line in ax.lines}
        want = {n: [r[key] for r in doc["summary"]["rows"] if r["endpoint"] == n] for n in ("baseline", "eagle3")}
        assert lines == want, f"panel {key}: drawn {lines}, summary {want}"
        assert [int(t) for t in ax.get_xticks()] == [1, 4], f"x ticks are the levels: {ax.get_xticks()}"


def test_png_is_a_png_and_says_incomplete():
    doc = document([], [], complete=False)
    fig = plot.figure(doc)
    assert "INCOMPLETE" in fig._suptitle.get_text(), "an incomplete run's plot must say so"
    assert all("no measurements" in [t.get_text() for t in ax.texts] for ax in fig.axes), "empty panels must say so"
    data = plot.png(doc)
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1500, 460), f"PNG size {width}x{height}"
