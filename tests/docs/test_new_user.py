"""What a new user trips over: counts that disagree, options named wrongly, limits passed
in silence, seeds lost, examples that drift from the files, plots that hide things.
Expected values are computed by hand here, never read from the code under test."""

import json
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.cli import app
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.plots import boxes_overlap, plot_accepted, plot_front, plot_sweep
from tests.docs.pages import everything, section
from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: the README and every page of the documentation site, one text
DOCS = everything()


def write(tmp_path, spec: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def paper_s(a: float, rho_sum: float, k: int, nu: float = 1.0) -> float:
    """The paper's throughput for one (pooled) constant acceptance, summed term by term."""
    return sum(a**i for i in range(k)) / (nu + rho_sum * k)


# ------------------------------------------------------------------ counts agree
def test_table_and_note_agree_on_the_configurations_counted():
    r = run("solve", ROOT / "problems" / "paper-r2.yaml")
    assert r.exit_code == 0, r.output
    # 3 subsets ({a}, {b}, {a, b}) x k = 1..64 = 192; {b} ties {a} and is dropped: 2 x 64
    assert "192 configurations covered" in r.stdout
    note = " ".join(r.stderr.split())
    assert "the model evaluated 128 of the 192 configurations" in note
    assert "other 64 being proven dominated" in note


# ------------------------------------------------------------------ --robust alone
def test_robust_without_intervals_names_robust(tmp_path):
    r = run("solve", ROOT / "problems" / "paper-r2.yaml", "--robust", "0.1")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --robust: no drafter has an acceptance_interval")
    assert len(r.stderr.strip().splitlines()) == 1
    r = run("solve", ROOT / "problems" / "paper-r2.yaml", "--samples", "5")
    assert r.exit_code == 2 and r.stderr.startswith("error: --samples:")


# ------------------------------------------------------------------ limits
def notes_of(path) -> list[str]:
    r = run("solve", path, "--json", "-")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["notes"]


def test_best_point_at_k_max_says_a_longer_draft_may_pay(tmp_path):
    spec = {
        "name": "short",
        "drafters": [{"name": "a", "acceptance": 0.9, "unit_cost": 0.01}],
        "search": {"k": {"max": 3}},
    }
    notes = notes_of(write(tmp_path, spec))
    assert paper_s(0.9, 0.01, 4) > paper_s(0.9, 0.01, 3)  # the limit binds
    (note,) = [n for n in notes if "search.k.max" in n]
    assert "search.k.max = 3" in note and "a longer draft may pay" in note
    assert f"k=4 give throughput {paper_s(0.9, 0.01, 4):.6f}" in note
    gain = paper_s(0.9, 0.01, 4) / paper_s(0.9, 0.01, 3) - 1
    assert f"({gain:+.2%})" in note


def test_no_note_when_the_optimum_is_inside_the_range(tmp_path):
    spec = {
        "name": "inside",
        "drafters": [{"name": "a", "acceptance": 0.5, "unit_cost": 0.1}],
        "search": {"k": {"max": 20}},
    }
    best_k = max(range(1, 21), key=lambda k: paper_s(0.5, 0.1, k))
    assert best_k < 20
    assert not [n for n in notes_of(write(tmp_path, spec)) if "may pay" in n]


def test_binding_budget_and_m_max_are_named(tmp_path):
    spec = {
        "name": "capped",
        "drafters": [
            {"name": "a", "acceptance": 0.8, "unit_cost": 0.05},
            {"name": "b", "acceptance": 0.7, "unit_cost": 0.05},
        ],
        "search": {"m": {"max": 1}},
        "budget": {"draft_cost_per_round": 0.3},
    }
    notes = notes_of(write(tmp_path, spec))
    # a alone, k <= 6 within 0.3 = 0.05 k; k = 7 would give more
    assert paper_s(0.8, 0.05, 7) > paper_s(0.8, 0.05, 6)
    (cap,) = [n for n in notes if "budget.draft_cost_per_round" in n]
    assert "binds at the best point (a, k=6)" in cap
    assert f"{paper_s(0.8, 0.05, 7):.6f}" in cap and "0.35" in cap
    (m,) = [n for n in notes if "search.m.max" in n]
    assert "m = 1 = search.m.max" in m


# ------------------------------------------------------------------ Optuna
def test_optuna_keeps_every_seed_and_names_its_study_as_the_help_says():
    tour = ROOT / "docs" / "tour.yaml"
    exact = json.loads(run("solve", tour, "--strategy", "exact", "--json", "-").stdout)
    r = run("solve", tour, "--strategy", "optuna", "--trials", "20", "--seed", "0", "--json", "-")
    assert r.exit_code == 0, r.output
    heur = json.loads(r.stdout)
    key = lambda p: (tuple(p["drafters"]), p["k"])  # noqa: E731
    assert len(exact["front"]) == 21
    assert sorted(map(key, heur["front"])) == sorted(map(key, exact["front"]))
    # the study's note (other notes, e.g. k past the measured positions, may follow it)
    note = next(n for n in heur["notes"] if "study 'allocator-tour'" in n)
    assert "study 'allocator-tour' (in-memory)" in note
    # the 21 seed points are stored besides the 20 trials asked for, none dropped
    assert "20 trials run now, 41 finished in the study; seeded with 21 points" in note
    import typer

    solve = typer.main.get_command(app).commands["solve"]
    (study,) = [p for p in solve.params if "--study" in getattr(p, "opts", [])]
    assert "default allocator-<problem name>" in study.help


# ------------------------------------------------------------------ the docs and the files
def test_docs_paper_r2_is_the_file_and_the_longer_example_is_valid():
    blocks = re.findall(r"```yaml\n(.*?)```", section("The problem file"), re.S)
    assert blocks[0] == (ROOT / "problems" / "paper-r2.yaml").read_text()
    for block in blocks[1:]:
        raw = yaml.safe_load(block)
        assert raw["name"] != "paper-r2"
        problem_from_spec(parse_problem(raw))  # validates and builds
    assert all("name: paper-r2\n" not in b for b in blocks[1:])


def test_docs_python_api_example_runs_and_prints_hand_values(monkeypatch, capsys):
    (code,) = re.findall(r"```python\n(.*?)```", section("Python API"), re.S)
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/reference/api.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    # the pair at k = 5: E = (1 - 0.75^5) / 0.25, T = 1 + 0.2 * 5
    e5 = (1 - 0.75**5) / 0.25
    assert lines[0] == f"['weak-a', 'weak-b'] 5 {round(e5 / 2.0, 6)}"
    assert lines[1] == f"0.75 {e5} 2.0"
    # break-even: the pair's best equals one drafter's best, max_k (1 - 0.5^k)/0.5/(1 + 0.1k)
    single = max(paper_s(0.5, 0.1, k) for k in range(1, 65))
    assert lines[3] == str(round(single, 4))


def test_docs_define_the_words_they_use():
    text = section("Definitions")
    for word in (
        "draft_cost_per_round",
        "draft_cost_per_token",
        "hosting_cost",
        "`drafters`",
        "pooled_acceptance",
        "token_cost",
        "sequential drafting",
        "parallel drafting",
        "any-correct pooling",
        "longest-chain pooling",
    ):
        assert word in text, word


def test_the_paper_is_cited_by_its_title():
    paper = (ROOT.parent.parent / "shared" / "reference").glob("*.txt")
    title = (
        "Ensemble Drafting: A Draft-Then-Verify Framework Unifying Population-Level "
        "Ensemble Control and Speculative Inference"
    )
    for path in paper:  # where the reference copy is at hand, the title is its first line
        assert path.read_text(encoding="utf-8").splitlines()[0] == title
    assert title in " ".join(README.split())
    assert title in " ".join((ROOT / "docs" / "design.md").read_text(encoding="utf-8").split())


def test_notebook_tools_are_in_an_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in extras["notebooks"]}
    assert {"nbconvert", "jupyterlab"} <= names
    assert "pip install -e '.[notebooks]'" in README
    assert "pip install -e '.[notebooks]'" in DOCS


# ------------------------------------------------------------------ gaussian accuracy
def test_gaussian_three_drafter_orthants_within_the_stated_accuracy():
    """P(Z1<0, Z2<0, Z3<0) = 1/8 + (asin r12 + asin r13 + asin r23) / (4π) exactly."""
    from allocator.model.errors.gaussian import gaussian_fail_prob

    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(8):
        r = rng.uniform(-0.3, 0.8, 3)
        matrix = np.array([[1, r[0], r[1]], [r[0], 1, r[2]], [r[1], r[2], 1]])
        if np.linalg.eigvalsh(matrix).min() < 0:
            continue
        got = gaussian_fail_prob(np.ones((1, 3), bool), np.full((3, 1), 0.5), matrix)[0, 0]
        exact = 0.125 + np.arcsin(r).sum() / (4 * math.pi)
        worst = max(worst, abs(got - exact))
    assert worst < 1e-6  # the correlated-errors guide and docs/design.md: about 1e-7
    assert "about 1e-7" in section("Correlated errors, simulation and the break-even correlation")


# ------------------------------------------------------------------ breakeven at the file's errors
def test_breakeven_reports_and_marks_the_files_own_correlation(tmp_path):
    png, js = tmp_path / "gain.png", tmp_path / "b.json"
    path = ROOT / "problems" / "paper-r2-correlated.yaml"
    r = run(
        "breakeven",
        path,
        "-e",
        "weak-a,weak-b",
        "--baseline",
        "weak-a",
        "--json",
        js,
        "--plot",
        png,
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(js.read_text())
    # error correlation 0.2 between two drafters at a = 0.5: φ = (2/π) asin(r)
    r_file = math.sin(math.pi * 0.2 / 2)
    assert doc["file_errors"] == "exchangeable"
    assert doc["file_latent_correlation"] == pytest.approx(r_file, abs=1e-9)
    # P(both fail) = 0.25 + 0.2 * 0.25: the pair accepts 0.7 at draft cost 0.2 per unit
    pair = max(paper_s(0.7, 0.2, k) for k in range(1, 65))
    one = max(paper_s(0.5, 0.1, k) for k in range(1, 65))
    assert doc["gain_at_file_errors"] == pytest.approx(pair / one - 1, rel=1e-9)
    assert "gain +4.5365%" in " ".join(r.stdout.split())
    from allocator import load
    from allocator.analysis.breakeven import gain_curve
    from allocator.plots import plot_breakeven

    data = plot_breakeven(
        np.linspace(0, 1, 11),
        gain_curve(load(path), ["weak-a", "weak-b"], ["weak-a"], np.linspace(0, 1, 11)),
        tmp_path / "again.svg",
        file_gain=doc["gain_at_file_errors"],
        file_correlation=doc["file_latent_correlation"],
        file_errors="exchangeable",
    )
    assert data["file_point"] == pytest.approx((r_file, 100 * (pair / one - 1)))
    assert "this file (exchangeable)" in (tmp_path / "again.svg").read_text()


def test_breakeven_under_factor_loadings_uses_their_product(tmp_path):
    raw = yaml.safe_load((ROOT / "problems" / "paper-r2.yaml").read_text())
    raw["errors"] = {"model": "factor", "loadings": {"weak-a": 0.6, "weak-b": 0.5}}
    r = run(
        "breakeven",
        write(tmp_path, raw),
        "-e",
        "weak-a,weak-b",
        "--baseline",
        "weak-a",
        "--json",
        "-",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["file_latent_correlation"] == pytest.approx(0.3)
    # latent r = 0.3 at a = 0.5: P(both fail) = 1/4 + asin(0.3)/(2π)
    a = 1 - (0.25 + math.asin(0.3) / (2 * math.pi))
    pair = max(paper_s(a, 0.2, k) for k in range(1, 65))
    one = max(paper_s(0.5, 0.1, k) for k in range(1, 65))
    assert doc["gain_at_file_errors"] == pytest.approx(pair / one - 1, rel=1e-7)


# ------------------------------------------------------------------ plots
def capped_result(cap: float):
    from allocator import solve

    spec = {
        "name": "capped",
        "drafters": [{"name": "a", "acceptance": 0.8, "unit_cost": 0.05}],
        "search": {"k": {"max": 10}},
        "budget": {"draft_cost_per_round": cap},
    }
    return solve(problem_from_spec(parse_problem(spec)))


def test_front_plot_draws_the_budget_line(tmp_path):
    res = capped_result(0.3)
    data = plot_front(res, tmp_path / "f.svg", budget=0.3)
    assert data["budget"] == 0.3
    assert "budget: draft_cost_per_round ≤ 0.3" in (tmp_path / "f.svg").read_text()
    far = plot_front(capped_result(100.0), tmp_path / "g.svg", budget=100.0)
    assert far["budget"] is None  # 200 times the front's width: named, not drawn
    assert "(off the axis)" in (tmp_path / "g.svg").read_text()


def test_solve_plot_passes_the_budget(tmp_path):
    spec = {
        "name": "capped",
        "drafters": [{"name": "a", "acceptance": 0.8, "unit_cost": 0.05}],
        "budget": {"draft_cost_per_round": 0.3},
    }
    svg = tmp_path / "front.svg"
    assert run("solve", write(tmp_path, spec), "--plot", svg).exit_code == 0
    assert "budget: draft_cost_per_round ≤ 0.3" in svg.read_text()


def test_plan_sweep_plot_is_the_sweep(tmp_path):
    png, js = tmp_path / "sweep.png", tmp_path / "sweep.json"
    problem = ROOT / "problems" / "mixed-traffic.yaml"
    r = run("plan", problem, "--sweep", "hosting_cost=0:1:3", "--plot", png, "--json", js)
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    doc = json.loads(js.read_text())
    data = plot_sweep(doc, tmp_path / "again.svg")
    np.testing.assert_array_equal(data["cost"], [p["hosting_cost"] for p in doc["front"]])
    np.testing.assert_array_equal(data["throughput"], [p["throughput"] for p in doc["front"]])
    bad = run("plan", problem, "--plot", tmp_path / "x.png")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --plot:")
    assert not (tmp_path / "x.png").exists()


def test_accepted_units_legend_stays_off_the_axes(tmp_path):
    sim = np.array([0.0, 0.30, 0.21, 0.15, 0.34])
    data = plot_accepted(sim, sim, tmp_path / "a.png", rounds=1000)
    assert not boxes_overlap(data["legend_box"], data["axes_box"][None, :])[0]


# ------------------------------------------------------------------ docs/design.md
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")


def design_sections() -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DESIGN, re.M))


def test_design_document_is_the_repositorys_own():
    assert "../shared" not in DESIGN and "/work/" not in DESIGN and "DESIGN.md" not in DESIGN
    assert {str(i) for i in range(1, 9)} <= design_sections()
    for field in ("serving", "method", "acceptance_by_rank", "draft_ms", "memory_gb"):
        assert f"`{field}`" in section_of_design("8"), field


def section_of_design(number: str) -> str:
    return re.split(rf"^## {number}\. .*$", DESIGN, flags=re.M)[1].split("\n## ", 1)[0]


def test_every_pointer_names_a_section_that_exists():
    sections = design_sections()
    pointers = []
    for folder in ("allocator", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "DESIGN" + " §" not in text, path  # split: this file is scanned too
            for a, b in re.findall(r"docs/design\.md §(\d+(?:\.\d+)?)(?:–§(\d+(?:\.\d+)?))?", text):
                pointers += [a] + ([b] if b else [])
    assert len(pointers) >= 15
    assert set(pointers) <= sections, set(pointers) - sections


def test_design_example_file_builds():
    (block,) = re.findall(r"```yaml\n(.*?)```", section_of_design("5"), re.S)
    problem = problem_from_spec(parse_problem(yaml.safe_load(block)))
    assert problem.names == ("small-a", "small-b")


def test_docs_python_api_names_each_commands_functions():
    """Every command has a row in the Python API page's table of API functions, and the row
    names each ``api`` function the command's module calls (read from its source), each a
    public name of ``allocator.api``: a command that grows a new API call, or a renamed
    function, fails here until the page says so."""
    from allocator import api
    from allocator.cli import COMMANDS

    rows = {}
    for line in section("Python API").splitlines():
        cells = line.split("|")
        if len(cells) > 3 and cells[1].strip().startswith("`"):
            rows[cells[1].strip().strip("`")] = cells[2]
    for module in COMMANDS:
        name = module.replace("_", "-")
        assert name in rows, name
        source = (ROOT / "allocator" / "cli" / f"{module}.py").read_text()
        called = set(re.findall(r"\bapi\.(\w+)\(", source)) - {"load"}
        assert called, module
        for function in called:
            assert f"`api.{function}`" in rows[name], (name, function)
            assert function in api.__all__, function
