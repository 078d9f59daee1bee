"""Plots that were misread (issue 20): raw mathtext tick labels on the schedule's log axis,
labels touching other lines, legend entries for lines drawn wholly under another, the
simulate histogram's mean lines on top of each other and an empty last bin with its
marker cut by the axis, the tree plot's unlabelled line and "<=", legends over marks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from allocator import api
from allocator.analysis.fronts import single_drafter_fronts
from allocator.cli import app
from allocator.plots import plot_accepted, plot_front
from allocator.plots.common import figure
from allocator.plots.labels import place_labels

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def svg_text(path: Path) -> str:
    """The SVG without its comments (matplotlib keeps each text's source there)."""
    import re

    return re.sub(r"<!--.*?-->", "", path.read_text(), flags=re.S)


def test_schedule_ticks_are_the_batch_sizes_written_as_numbers(tmp_path):
    """``save()`` turned mathtext off for every text, matplotlib's log-axis tick labels
    included: they printed as ``$\\mathdefault{2^{0}}$``."""
    svg = tmp_path / "s.svg"
    sched = api.schedule(ROOT / "problems" / "serving-eagle.yaml")
    from allocator.plots import plot_schedule

    drawn = plot_schedule(sched, svg)
    assert drawn["xticks"] == ["1", "4", "16", "32", "64"]
    text = svg_text(svg)
    assert "mathdefault" not in text and "$" not in text
    assert all(label.startswith("best k=") for label in drawn["labels"])


def test_a_log_axis_keeps_mathtext_while_names_stay_literal(tmp_path):
    """The other half: matplotlib's own ticks are drawn as mathtext (2⁰ …), a name with
    dollars is drawn as written."""
    from allocator.plots.common import save

    fig = figure(4, 3)
    ax = fig.add_subplot()
    ax.plot([1, 8], [1, 2], label="$x^$ drafter")
    ax.set_xscale("log", base=2)
    ax.legend()
    ax.set_title("cost in $/h")
    save(fig, tmp_path / "t.svg", "svg", "plot")
    text = svg_text(tmp_path / "t.svg")
    assert "$x^$ drafter" in text and "cost in $/h" in text
    assert "mathdefault" not in text


def test_labels_keep_off_other_lines():
    """A label beside a point must not touch another line drawn on the axes (it reads as
    that line's): with ``avoid``, no label box covers the other line's samples."""
    fig = figure(6, 4)
    ax = fig.add_subplot()
    x = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([1.0, 2.0, 3.0, 4.0])
    ox, oy = np.array([0.5, 4.5]), np.array([1.3, 4.3])  # runs just above the points
    ax.plot(x, y, "o-")
    ax.plot(ox, oy, "-")
    ax.set_xlim(0, 5)
    ax.set_ylim(0, 5)
    placed = place_labels(ax, x, y, [f"point {i}" for i in range(4)], line="straight",
                          avoid=[(ox, oy, "straight")])  # fmt: skip
    assert placed
    t = np.linspace(0, 1, 400)
    line = ax.transData.transform(np.column_stack([0.5 + 4 * t, 1.3 + 3 * t]))
    for p in placed:
        x0, y0, x1, y1 = p.box
        inside = (line[:, 0] > x0) & (line[:, 0] < x1) & (line[:, 1] > y0) & (line[:, 1] < y1)
        assert not inside.any(), p.text


def test_a_single_drafter_wholly_on_the_front_gets_no_legend_entry_of_its_own(tmp_path):
    """In the tour, "ngram alone" is drawn entirely under the front: its legend entry
    named a line nobody could see."""
    prob = api.load(ROOT / "docs" / "tour.yaml")
    res = api.solve(prob)
    drawn = plot_front(res, tmp_path / "f.png", singles=single_drafter_fronts(prob))
    assert set(drawn["singles"]) == {"ngram", "head", "tiny-68m", "small-1b"}
    fig_legend = drawn["legend"]
    assert "ngram alone" not in fig_legend
    assert "ngram alone: on the front itself" in fig_legend
    assert {"head alone", "tiny-68m alone", "small-1b alone"} <= set(fig_legend)


def test_the_histogram_separates_the_means_and_drops_impossible_bins(tmp_path):
    sim = np.array([0.0, 0.30, 0.21, 0.15, 0.34, 0.0])  # u = 5 never happens at k = 4
    mod = np.array([0.0, 0.30, 0.21, 0.147, 0.343, 0.0])
    drawn = plot_accepted(sim, mod, tmp_path / "h.png")
    np.testing.assert_array_equal(drawn["units"], [1, 2, 3, 4])
    (xs, ys_s), (xm, ys_m) = drawn["mean_lines"]["simulated"], drawn["mean_lines"]["model"]
    assert xs == pytest.approx(sim[1:] @ np.arange(1, 6)) and ys_s == (0.0, 0.5)
    assert xm == pytest.approx(mod[1:] @ np.arange(1, 6)) and ys_m == (0.5, 1.0)
    assert drawn["markers_clipped"] is False  # a share of 0 sits on the axis, whole


def test_tree_plot_names_its_best_size_line_and_writes_le(tmp_path):
    png = tmp_path / "t.png"
    r = runner.invoke(app, ["tree", str(ROOT / "docs" / "tree.yaml"), "-d", "eagle",
                            "--plot", str(png), "--json", str(tmp_path / "t.json")])  # fmt: skip
    assert r.exit_code == 0, r.output
    best = json.loads((tmp_path / "t.json").read_text())["best"]["nodes"]
    from allocator.plots import plot_tree_front

    doc = json.loads((tmp_path / "t.json").read_text())
    rows = doc["front"]
    drawn = plot_tree_front(
        [x["nodes"] for x in rows], [x["expected_accepted"] for x in rows],
        [x["throughput"] for x in rows], tmp_path / "again.png", best=best,
        title="eagle: optimal tree against size (depth ≤ 16)",
    )  # fmt: skip
    assert f"best throughput: {best} nodes" in drawn["legend"]


def test_the_break_even_line_is_clear_of_the_legend(tmp_path):
    from allocator.plots import plot_breakeven

    report = api.breakeven(ROOT / "problems" / "paper-r2-correlated.yaml", ["weak-a", "weak-b"],
                           ["weak-a"], curve_points=101)  # fmt: skip
    doc = report.to_dict()
    grid, gains = report.curve
    drawn = plot_breakeven(grid, gains, tmp_path / "g.png", breakeven=doc["latent_correlation"],
                           file_gain=doc["gain_at_file_errors"],
                           file_correlation=doc["file_latent_correlation"])  # fmt: skip
    x0, _, x1, _ = drawn["legend_box"]
    assert not x0 <= drawn["breakeven_px"] <= x1
