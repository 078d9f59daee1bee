"""Plots: valid non-trivial images, the data behind them equal to the front, labels
that do not overlap, and bad plot paths refused like any other bad input."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import reference
from typer.testing import CliRunner

from allocator import solve
from allocator.cli import app
from allocator.plots import (
    COST_LABELS,
    boxes_overlap,
    plot_front,
    point_label,
    single_drafter_fronts,
)
from allocator.problem import Problem
from allocator.spec import parse_problem

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SMALL = {
    "name": "plot-small",
    "drafters": [
        {"name": "a", "acceptance": 0.55, "unit_cost": 0.1, "hosting_cost": 1},
        {"name": "b", "acceptance": [0.8, 0.6], "unit_cost": 0.15, "hosting_cost": 2},
        {"name": "c", "acceptance": 0.4, "unit_cost": 0.02, "hosting_cost": 1},
    ],
    "search": {"k": {"max": 10}},
}


def dense_spec(seed: int) -> dict:
    """Six drafters, k up to 24: fronts of 30 to 36 points for the seeds used below."""
    rng = np.random.default_rng(seed)
    return {
        "name": f"dense-{seed}",
        "drafters": [
            {
                "name": f"draft-{i}",
                "acceptance": round(float(rng.uniform(0.3, 0.9)), 3),
                "unit_cost": round(float(rng.uniform(0.01, 0.2)), 3),
            }
            for i in range(6)
        ],
        "search": {"k": {"max": 24}},
    }


def build(spec: dict) -> Problem:
    return Problem.from_spec(parse_problem(spec))


def assert_valid_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    from matplotlib.image import imread

    pixels = imread(path)
    h, w = pixels.shape[:2]
    assert w >= 600 and h >= 400
    # not blank: many distinct colours, and dark (drawn) pixels as well as white ones
    flat = pixels[..., :3].reshape(-1, 3)
    assert len(np.unique(flat.round(2), axis=0)) > 20
    lum = flat.mean(axis=1)
    assert (lum < 0.3).mean() > 0.002 and (lum > 0.95).mean() > 0.5


def write(tmp_path, spec, name="p.yaml"):
    p = tmp_path / name
    p.write_text(json.dumps(spec))
    return p


def test_solve_plot_png_is_valid_and_matches_json(tmp_path):
    prob = write(tmp_path, SMALL)
    png, js = tmp_path / "front.png", tmp_path / "front.json"
    r = runner.invoke(app, ["solve", str(prob), "--plot", str(png), "--json", str(js)])
    assert r.exit_code == 0, r.output
    assert_valid_png(png)
    doc = json.loads(js.read_text())
    # the same front, plotted through the API, carries exactly the JSON's points
    res = solve(build(SMALL))
    data = plot_front(res, tmp_path / "again.png")
    np.testing.assert_array_equal(data["cost"], [p["cost"] for p in doc["front"]])
    np.testing.assert_array_equal(data["throughput"], [p["throughput"] for p in doc["front"]])
    assert data["labels"] == [point_label(p["drafters"], p["k"]) for p in doc["front"]]


def test_plotted_front_equals_brute_force(tmp_path):
    res = solve(build(SMALL))
    data = plot_front(res, tmp_path / "f.png")
    expected, _ = reference.brute_front(SMALL)
    assert len(data["cost"]) == len(expected)
    for (c, t, subset, k), x, y, label in zip(
        expected, data["cost"], data["throughput"], data["labels"], strict=True
    ):
        assert reference.isclose(x, c) and reference.isclose(y, t)
        assert label == point_label([SMALL["drafters"][i]["name"] for i in subset], k)


def test_single_drafter_fronts_equal_one_drafter_problems(tmp_path):
    res = solve(build(SMALL))
    singles = single_drafter_fronts(build(SMALL))
    assert list(singles) == ["a", "b", "c"]
    data = plot_front(res, tmp_path / "f.png", singles=singles)
    for d in SMALL["drafters"]:
        alone = {**SMALL, "drafters": [d]}
        expected, _ = reference.brute_front(alone)
        x, y = data["singles"][d["name"]]
        assert reference.same_front(list(zip(x, y, strict=True)), [(c, t) for c, t, *_ in expected])
        assert len(x) == len(expected)


def test_single_drafter_fronts_respect_budget_and_exclusions():
    spec = {**SMALL, "budget": {"hosting_cost": 1}, "search": {"k": {"max": 10}, "exclude": ["c"]}}
    singles = single_drafter_fronts(build(spec))
    # b alone costs 2 to host (over budget); c is excluded by the problem
    assert list(singles) == ["a"]
    assert all(len(r.front) > 0 for r in singles.values())


def test_svg_parses_and_names_axes_with_units(tmp_path):
    res = solve(build(SMALL))
    svg = tmp_path / "front.svg"
    data = plot_front(res, svg)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    texts = "".join(root.itertext())
    for label in data["labels"]:
        assert label in texts
    assert "accepted units per verifier-unit of time" in data["ylabel"]
    assert data["xlabel"] == COST_LABELS["draft_cost_per_round"]
    assert "verifier-units of time" in data["xlabel"]
    assert data["format"] == "svg"


@pytest.mark.parametrize("metric", ["draft_cost_per_token", "hosting_cost", "drafters"])
def test_every_cost_metric_gets_its_axis_name(tmp_path, metric):
    spec = {**SMALL, "cost_metric": metric}
    data = plot_front(solve(build(spec)), tmp_path / "f.png")
    assert data["xlabel"] == COST_LABELS[metric]
    expected, _ = reference.brute_front(spec)
    assert reference.same_front(
        list(zip(data["cost"], data["throughput"], strict=True)), [(c, t) for c, t, *_ in expected]
    )


@pytest.mark.parametrize("seed", [0, 10])
def test_labels_do_not_overlap_on_a_dense_front(tmp_path, seed):
    prob = build(dense_spec(seed))
    res = solve(prob)
    assert len(res.front) >= 30
    data = plot_front(res, tmp_path / "dense.png", singles=single_drafter_fronts(prob))
    boxes = data["label_boxes"]
    assert boxes.shape == (len(res.front), 4)
    for i in range(len(boxes)):
        others = np.delete(boxes, i, axis=0)
        assert not boxes_overlap(boxes[i], others).any(), data["labels"][i]
    assert_valid_png(tmp_path / "dense.png")


def test_boxes_overlap_by_hand():
    a = np.array([0.0, 0.0, 10.0, 5.0])
    b = np.array(
        [
            [5.0, 2.0, 15.0, 8.0],  # overlaps
            [10.0, 0.0, 20.0, 5.0],  # touches the right edge only
            [0.0, 5.0, 10.0, 9.0],  # touches the top edge only
            [-5.0, -5.0, -1.0, -1.0],  # apart
            [2.0, 1.0, 3.0, 2.0],  # inside
        ]
    )
    assert boxes_overlap(a, b).tolist() == [True, False, False, False, True]


@pytest.mark.parametrize("name", ["front.jpg", "front"])
def test_bad_plot_extension_is_refused_before_any_work(tmp_path, name):
    prob = write(tmp_path, SMALL)
    target = tmp_path / name
    r = runner.invoke(app, ["solve", str(prob), "--plot", str(target)])
    assert r.exit_code == 2
    assert r.stderr.strip().startswith("error: --plot: unknown image format")
    assert len(r.stderr.strip().splitlines()) == 1
    assert not target.exists()


def test_plot_into_missing_folder_is_refused(tmp_path):
    prob = write(tmp_path, SMALL)
    r = runner.invoke(app, ["solve", str(prob), "--plot", str(tmp_path / "no" / "f.png")])
    assert r.exit_code == 2 and "error: --plot: folder does not exist" in r.stderr
    assert list(tmp_path.iterdir()) == [prob]


def test_plots_are_reproducible(tmp_path):
    res = solve(build(SMALL))
    plot_front(res, tmp_path / "1.svg")
    plot_front(res, tmp_path / "2.svg")
    assert (tmp_path / "1.svg").read_bytes() == (tmp_path / "2.svg").read_bytes()


def test_import_does_not_load_matplotlib():
    code = "import sys, allocator, allocator.cli; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
