"""Plots: valid non-trivial images, the data behind them equal to the front, labels
that do not overlap, and bad plot paths refused like any other bad input."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from allocator import solve
from allocator.analysis.fronts import single_drafter_fronts
from allocator.cli import app
from allocator.core.problem import Problem
from allocator.io.build import problem_from_file, problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.accepted_pmf import accepted_distribution
from allocator.plots import (
    COST_LABELS,
    boxes_overlap,
    plot_accepted,
    plot_breakeven,
    plot_front,
    point_label,
)
from tests.support import reference

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[3]
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
    return problem_from_spec(parse_problem(spec))


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
    # every point labelled, every label inside the axes, no two labels overlapping
    np.testing.assert_array_equal(data["labelled"], np.arange(len(res.front)))
    assert boxes.shape == (len(res.front), 4)
    x0, y0, x1, y1 = data["axes_box"]
    assert np.all((boxes[:, 0] >= x0) & (boxes[:, 2] <= x1) & (boxes[:, 1] >= y0))
    assert np.all(boxes[:, 3] <= y1)
    for i in range(len(boxes)):
        others = np.delete(boxes, i, axis=0)
        assert not boxes_overlap(boxes[i], others).any(), data["labels"][i]
    assert_valid_png(tmp_path / "dense.png")


def test_labels_that_cannot_fit_are_left_out_never_overlapped():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from allocator.plots import place_labels

    fig = Figure(figsize=(3, 2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = np.linspace(0, 1, 60)
    y = np.sqrt(x)
    ax.plot(x, y, "o-")
    ax.set_xlim(-0.1, 1.1)
    ax.set_ylim(-0.1, 1.1)
    placed = place_labels(ax, x, y, [f"configuration {i}, k={i}" for i in range(60)])
    assert 0 < len(placed) < 60  # a 3x2 inch axes cannot hold 60 labels
    boxes = np.array([p.box for p in placed])
    for i in range(len(boxes)):
        assert not boxes_overlap(boxes[i], np.delete(boxes, i, axis=0)).any()
    assert len(ax.texts) == len(placed)  # nothing drawn for the labels left out


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


def test_import_stays_light():
    """``import allocator`` and ``import allocator.cli`` load none of the heavy libraries."""
    heavy = ["matplotlib", "cvxpy", "optuna", "scipy.stats"]
    code = f"import sys, allocator.cli; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- break-even
R2_CORRELATED = ROOT / "problems" / "paper-r2-correlated.yaml"
R2 = ROOT / "problems" / "paper-r2.yaml"
MIXED = ROOT / "problems" / "mixed-traffic.yaml"


def paper_throughput(alpha: float, cost_per_unit: float, k: int, nu: float = 1.0) -> float:
    """The paper's S for one (pooled) acceptance, written out: sum of alpha^(i-1)."""
    return sum(alpha**i for i in range(k)) / (nu + cost_per_unit * k)


def test_breakeven_plot_png_and_its_curve(tmp_path):
    png, js = tmp_path / "gain.png", tmp_path / "b.json"
    r = runner.invoke(
        app,
        ["breakeven", str(R2_CORRELATED), "-e", "weak-a,weak-b", "--baseline", "weak-a"]
        + ["--plot", str(png), "--json", str(js)],
    )
    assert r.exit_code == 0, r.output
    assert_valid_png(png)
    doc = json.loads(js.read_text())
    from allocator import load
    from allocator.analysis.breakeven import gain_curve

    grid = np.linspace(0.0, 1.0, 201)
    gain = gain_curve(load(R2_CORRELATED), ["weak-a", "weak-b"], ["weak-a"], grid)
    data = plot_breakeven(grid, gain, tmp_path / "again.png", breakeven=doc["latent_correlation"])
    np.testing.assert_allclose(data["correlation"], grid)
    # independent errors: the paper's R2 (pair alpha 0.75 at cost 0.2/unit, single 0.5)
    best_pair = max(paper_throughput(0.75, 0.2, k) for k in range(1, 65))
    best_one = max(paper_throughput(0.5, 0.1, k) for k in range(1, 65))
    assert data["gain_percent"][0] == pytest.approx(100 * (best_pair / best_one - 1), rel=1e-12)
    # identical errors: the pair accepts like one drafter but pays for two
    twin = max(paper_throughput(0.5, 0.2, k) for k in range(1, 65))
    assert data["gain_percent"][-1] == pytest.approx(100 * (twin / best_one - 1), rel=1e-9)
    # the curve crosses zero once, in the grid cell holding the marked break-even
    sign_change = np.flatnonzero(np.diff(np.sign(data["gain_percent"])) != 0)
    assert len(sign_change) == 1
    i = sign_change[0]
    assert grid[i] <= doc["latent_correlation"] <= grid[i + 1]
    assert "latent error correlation" in data["xlabel"] and "(%)" in data["ylabel"]


def test_breakeven_plot_svg_marks_the_break_even(tmp_path):
    svg = tmp_path / "gain.svg"
    r = runner.invoke(
        app,
        [
            "breakeven",
            str(R2_CORRELATED),
            "-e",
            "weak-a,weak-b",
            "--baseline",
            "weak-a",
            "--plot",
            str(svg),
        ],
    )
    assert r.exit_code == 0, r.output
    texts = "".join(ET.parse(svg).getroot().itertext())
    assert "break-even: latent r* = 0.4767" in texts
    assert "error correlation 0.3163" in texts


# ---------------------------------------------------------------- accepted units
def test_simulate_plot_histogram_matches_the_run_and_the_model(tmp_path):
    png, js = tmp_path / "hist.png", tmp_path / "s.json"
    args = [
        "simulate",
        str(R2),
        "-d",
        "weak-a,weak-b",
        "-k",
        "5",
        "--rounds",
        "20000",
        "--seed",
        "7",
    ]
    r = runner.invoke(app, [*args, "--plot", str(png), "--json", str(js)])
    assert r.exit_code == 0, r.output
    assert_valid_png(png)
    doc = json.loads(js.read_text())

    prob = problem_from_file(R2, simulation=True)
    model = accepted_distribution(prob, prob.mask(["weak-a", "weak-b"]), 5)
    data = plot_accepted(
        np.array(doc["accepted_shares"]), model, tmp_path / "again.png", rounds=20000
    )
    # u = 6 cannot happen in the paper convention at k = 5: no empty bar is drawn for it
    np.testing.assert_array_equal(data["units"], np.arange(1, 6))
    # the bars are the very rounds simulate reported on
    assert data["units"] @ data["simulated"] == pytest.approx(doc["mean_accepted"], rel=1e-12)
    assert data["simulated"].sum() == pytest.approx(1.0)
    # the markers are the paper convention's distribution at pooled acceptance 0.75:
    # P(u) = a^(u-1) (1 - a) for u < k, P(k) = a^(k-1), nothing beyond k
    a = 0.75
    expected = [a ** (u - 1) * (1 - a) for u in range(1, 5)] + [a**4]
    np.testing.assert_allclose(data["model"], expected, rtol=1e-12)
    # and the simulation agrees with it: every share within 5 standard errors
    se = np.sqrt(np.maximum(data["model"] * (1 - data["model"]), 1e-12) / 20000)
    assert np.all(np.abs(data["simulated"] - data["model"]) <= 5 * se + 1e-12)


def test_simulate_plot_of_a_workload_mixture(tmp_path):
    from allocator.analysis.rounds import simulate

    prob = problem_from_file(MIXED, simulation=True)
    name = prob.names[0]
    report = simulate(prob, [name], 4, 4000, 1)
    simulated = np.array(report.accepted_shares)
    model = accepted_distribution(prob, prob.mask([name]), 4)
    u = np.arange(simulated.size)
    # rounds-weighted mixture: its mean is the harmonic mixture simulate reports
    assert u @ simulated == pytest.approx(report.mean_accepted, rel=1e-12)
    assert u @ model == pytest.approx(report.model_accepted, rel=1e-12)
    svg = tmp_path / "mix.svg"
    r = runner.invoke(
        app, ["simulate", str(MIXED), "-d", name, "-k", "4", "--rounds", "4000", "--plot", str(svg)]
    )
    assert r.exit_code == 0, r.output
    assert ET.parse(svg).getroot().tag.endswith("svg")


@pytest.mark.parametrize(
    "args",
    [
        ["breakeven", str(R2_CORRELATED), "-e", "weak-a,weak-b", "--baseline", "weak-a"],
        ["simulate", str(R2), "-d", "weak-a", "-k", "3", "--rounds", "100"],
    ],
)
def test_breakeven_and_simulate_refuse_bad_plot_paths(tmp_path, args):
    target = tmp_path / "out.gif"
    r = runner.invoke(app, [*args, "--plot", str(target)])
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --plot: unknown image format '.gif': use .png or .svg"
    assert not target.exists()


@pytest.mark.parametrize(
    "ensemble, baseline, note",
    [
        # a strong and a weak drafter against the weak one: ahead even with identical errors
        ("strong,weak", "weak", "the ensemble stays ahead even with identical errors"),
        # against the strong one alone, the pair never gains at all
        ("strong,weak", "strong", "the ensemble does not beat the baseline"),
    ],
)
def test_breakeven_plot_without_a_break_even_says_why(tmp_path, ensemble, baseline, note):
    problem = write(
        tmp_path,
        {
            "name": "no-break-even",
            "drafters": [
                {"name": "strong", "acceptance": 0.9, "unit_cost": 0.05},
                {"name": "weak", "acceptance": 0.3, "unit_cost": 0.05},
            ],
            "search": {"k": {"max": 32}},
        },
    )
    svg = tmp_path / "gain.svg"
    r = runner.invoke(
        app, ["breakeven", str(problem), "-e", ensemble, "--baseline", baseline, "--plot", str(svg)]
    )
    assert r.exit_code == 0, r.output
    texts = "".join(ET.parse(svg).getroot().itertext())
    assert "break-even: latent" not in texts
    assert note in texts


def test_a_long_front_labels_a_bounded_spread_of_points(tmp_path):
    """Labelling tried every point of the front: 2,000 points took 100 s. At most
    MAX_LABELS points are tried, spread from the first to the last, none overlapping."""
    from allocator.plots.labels import MAX_LABELS, label_candidates

    raw = {
        "name": "long",
        "drafters": [{"name": "a", "acceptance": 1.0, "unit_cost": 0.01}],
        "search": {"k": {"max": 2000}},
    }
    res = solve(problem_from_spec(parse_problem(raw)))
    assert len(res.front) == 2000
    drawn = plot_front(res, tmp_path / "long.png")
    assert 0 < len(drawn["labels"]) <= MAX_LABELS
    assert set(drawn["labelled"]) <= set(label_candidates(2000))
    boxes = drawn["label_boxes"]
    for i in range(len(boxes)):
        assert not boxes_overlap(boxes[i], np.delete(boxes, i, axis=0)).any()
    assert label_candidates(2000)[[0, -1]].tolist() == [0, 1999]
    assert label_candidates(5).tolist() == [0, 1, 2, 3, 4]
