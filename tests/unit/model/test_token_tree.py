"""Token trees: E of a tree, Sequoia's programme against brute force over every tree shape,
the chain as the width-1 tree, tree rounds simulated, and the `tree` command's bad input."""

from __future__ import annotations

import functools
import itertools
import json
import math

import numpy as np
import pytest

from allocator.analysis.rounds import simulate_tree_rounds
from allocator.model.acceptance import expected_accepted
from allocator.model.token_tree import (
    TreeProgramme,
    check_tree,
    make_tree,
    tree_expected,
)
from tests.support.cli_runner import run


# ---------------------------------------------------------------- brute force, by hand
@functools.cache
def forests(n: int) -> tuple:
    """Every ordered forest of ``n`` nodes: a tuple of trees, each the forest of its children."""
    if n == 0:
        return ((),)
    out = []
    for s in range(1, n + 1):
        for sub in forests(s - 1):
            for rest in forests(n - s):
                out.append((sub, *rest))
    return tuple(out)


def q_row(p: list[list[float]], level: int) -> list[float]:
    """Unconditional weight of each rank at depth level + 1, written out by hand."""
    row = p[min(level, len(p) - 1)]
    out, miss = [], 1.0
    for x in row:
        out.append(x * miss)
        miss *= 1.0 - x
    return out


def forest_value(forest, p, level, depth, width) -> float:
    """Σ path probabilities of the forest hanging below a node at ``level`` (-inf if barred),
    best over every choice of distinct ranks ``<= width`` for its trees (in order: the
    forests are ordered, so every assignment of ranks to trees is some forest's)."""
    if not forest:
        return 0.0
    w = min(width, len(p[0]))
    if level >= depth or len(forest) > w:
        return -math.inf
    q = q_row(p, level)
    below = [1.0 + forest_value(c, p, level + 1, depth, width) for c in forest]
    return max(
        sum(q[r] * v for r, v in zip(chosen, below, strict=True))
        for chosen in itertools.combinations(range(w), len(forest))
    )


def to_arrays(forest) -> tuple[list[int], list[int]]:
    parents, ranks = [-1], [0]
    queue = [(0, forest)]
    while queue:
        node, f = queue.pop(0)
        for j, child in enumerate(f):
            parents.append(node)
            ranks.append(j + 1)
            queue.append((len(parents) - 1, child))
    return parents, ranks


@pytest.mark.parametrize("seed", range(6))
def test_programme_matches_brute_force_over_every_shape(seed):
    rng = np.random.default_rng(seed)
    levels, ranks = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    p = rng.uniform(0.05, 1.0, (levels, ranks)).round(3).tolist()
    for depth in (1, 2, 3, 6):
        for width in (1, 2, 3):
            prog = TreeProgramme(np.array(p), 7, depth, width)
            values = prog.values()
            for n in range(8):
                brute = max(1.0 + forest_value(f, p, 0, depth, width) for f in forests(n))
                got = values[depth - 1, n]
                if brute == -math.inf:
                    assert got == -np.inf, (n, depth, width)
                    continue
                assert got == pytest.approx(brute, abs=1e-12), (p, n, depth, width)
                # the rebuilt tree has that E, its shape respects the bounds
                tree = prog.tree(n, depth)
                check_tree(tree.parents.tolist(), tree.ranks.tolist())
                assert tree.nodes == n and tree.depth <= depth
                assert tree.expected_accepted == pytest.approx(brute, abs=1e-12)
            best = prog.best()
            top = max(
                1.0 + forest_value(f, p, 0, depth, width) for n in range(8) for f in forests(n)
            )
            assert best.expected_accepted == pytest.approx(top, abs=1e-12)


def test_expected_of_a_tree_by_hand():
    # root -> a (rank 1), b (rank 2); a -> c (rank 1); p = [0.6, 0.5]
    # q1 = 0.6, q2 = 0.4 * 0.5 = 0.2; E = 1 + 0.6 + 0.2 + 0.6 * 0.6
    parents, ranks = [-1, 0, 0, 1], [0, 1, 2, 1]
    e = tree_expected(np.array([parents]), np.array([ranks]), np.array([[0.6, 0.5]]))
    assert e[0] == pytest.approx(1 + 0.6 + 0.2 + 0.36)
    # per depth: depth 2 uses its own row
    e2 = tree_expected(np.array([parents]), np.array([ranks]), np.array([[0.6, 0.5], [0.9, 0.1]]))
    assert e2[0] == pytest.approx(1 + 0.6 + 0.2 + 0.6 * 0.9)


@pytest.mark.parametrize("k", [1, 2, 5, 9])
def test_width_one_tree_is_the_chain(k):
    rows = np.array([[0.9, 0.4], [0.7, 0.2], [0.55, 0.3]])  # per depth; the last repeats
    parents, ranks = list(range(-1, k)), [0] + [1] * k
    e = tree_expected(np.array([parents]), np.array([ranks]), rows)[0]
    chain = expected_accepted(rows[:, 0][None], k, "bonus")[0, k - 1]
    assert e == pytest.approx(chain)
    # and the programme held to width 1 finds exactly that chain
    prog = TreeProgramme(rows, k, k, width=1)
    assert prog.values()[k - 1, k] == pytest.approx(chain)


def test_monotone_in_size_and_depth():
    prog = TreeProgramme(np.array([[0.7, 0.5, 0.3]]), 40, 6)
    v = prog.values()
    finite = np.where(np.isfinite(v), v, 0.0)
    assert np.all(np.diff(finite, axis=0) >= -1e-12)  # deeper never worse
    assert np.all(np.diff(v[-1]) > 0)  # every extra node adds its path probability


@pytest.mark.parametrize("seed", [3, 11])
def test_simulated_tree_inside_its_interval(seed):
    p = np.array([[0.7, 0.4, 0.3], [0.6, 0.35, 0.2]])
    tree = TreeProgramme(p, 20, 5).best()
    rounds = 200_000
    units = simulate_tree_rounds(tree.parents, tree.ranks, p, rounds, seed)
    half = 2.576 * units.std(ddof=1) / np.sqrt(rounds)
    assert abs(units.mean() - tree.expected_accepted) < half
    # and it plays the tree, not a chain: some steps pass through rank-2 nodes
    assert units.max() <= tree.depth + 1


def test_simulation_is_reproducible():
    p = np.array([[0.8, 0.5]])
    tree = make_tree([-1, 0, 0, 1], [0, 1, 2, 1], p)
    a = simulate_tree_rounds(tree.parents, tree.ranks, p, 1000, 5)
    b = simulate_tree_rounds(tree.parents, tree.ranks, p, 1000, 5)
    assert np.array_equal(a, b)


def test_benchmark_size_is_exact_against_a_greedy_lower_bound():
    # the exact optimum at N=256 is at least the best chain and at least any greedy tree
    p = np.array([[0.7, 0.4, 0.3, 0.2, 0.2, 0.1, 0.1, 0.1]])
    tree = TreeProgramme(p, 256, 16, 8).best()
    chain = expected_accepted(p[:, :1], 16, "bonus")[0, -1]
    assert tree.expected_accepted > chain
    assert tree.nodes <= 256 and tree.depth <= 16


# ---------------------------------------------------------------- command line
PROBLEM = """\
name: tree-cli
convention: bonus
verifier: {pass_cost: 1.0, token_cost: 0.01}
drafters:
  - name: eagle
    acceptance: 0.75
    unit_cost: 0.05
    method: eagle3
    model: org/EAGLE3-demo
    acceptance_by_rank: [0.75, 0.3, 0.15, 0.1]
  - name: plain
    acceptance: 0.6
    unit_cost: 0.1
"""


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM)
    return path


def test_tree_json_document(problem):
    r = run("tree", problem, "-d", "eagle", "--nodes", "6", "--depth", "4", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {"expected_accepted", "nodes", "depth", "parents", "ranks"} <= set(doc)
    assert doc["parents"][0] == -1 and len(doc["parents"]) == doc["nodes"] + 1
    assert doc["depth"] <= 4
    e = tree_expected(
        np.array([doc["parents"]]), np.array([doc["ranks"]]), np.array([[0.75, 0.3, 0.15, 0.1]])
    )[0]
    assert doc["expected_accepted"] == pytest.approx(e)


def test_tree_front_and_simulation(problem, tmp_path):
    r = run("tree", problem, "-d", "eagle", "--max-nodes", "12", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [row["nodes"] for row in doc["front"]] == list(range(1, 13))
    # verifier cost by hand: depth * 0.05 + 1 + 0.01 * n
    for row in doc["front"]:
        t = row["depth"] * 0.05 + 1.0 + 0.01 * row["nodes"]
        assert row["round_time"] == pytest.approx(t)
        assert row["throughput"] == pytest.approx(row["expected_accepted"] / t)
    r = run("tree", problem, "-d", "eagle", "--nodes", "5", "--rounds", "20000", "--json", "-")
    sim = json.loads(r.stdout)["simulation"]
    assert sim["ci_low"] <= sim["model_accepted"] <= sim["ci_high"]


BAD = [
    (["--nodes", "0"], "--nodes"),
    (["--nodes", "100000"], "--nodes"),
    (["--nodes", "3", "--depth", "0"], "--depth"),
    (["--nodes", "3", "--width", "0"], "--width"),
    (["--rounds", "10"], "--rounds"),
]


@pytest.mark.parametrize(("extra", "field"), BAD)
def test_bad_options(problem, tmp_path, extra, field):
    out = tmp_path / "out.json"
    r = run("tree", problem, "-d", "eagle", *extra, "--json", out)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), r.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("drafters", "message"), [("eagle,plain", "name one drafter"), ("plain", "acceptance_by_rank")]
)
def test_bad_drafters(problem, drafters, message):
    r = run("tree", problem, "-d", drafters, "--nodes", "3")
    assert r.exit_code == 2
    assert r.output.startswith("error: --drafters:") and message in r.output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[0.8, 1.2]", "rank 2: 1.2 is outside (0, 1]"),
        ("[0.8, 0.0]", "rank 2: 0.0 is outside (0, 1]"),
        ("[[0.8, 0.1], [0.7]]", "every depth needs the same number of ranks"),
        ("[0.8, [0.1]]", "mixes numbers and lists"),
        ("[]", "non-empty"),
        ("[[0.8, 0.1], []]", "empty"),
    ],
)
def test_bad_rank_acceptance(tmp_path, value, message):
    path = tmp_path / "bad.yaml"
    path.write_text(PROBLEM.replace("[0.75, 0.3, 0.15, 0.1]", value))
    r = run("tree", path, "-d", "eagle", "--nodes", "3")
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: drafters[eagle].acceptance_by_rank:") and message in lines[0]


# ---------------------------------------------------------------- estimation from per-rank logs
def rank_log(path, p_by_depth, rounds, seed, depth=4):
    """A CSV log of tree rounds: at each position the drafter's ranks are tried in order
    (rank r matches with the conditional p_r of that depth); the round goes on while some
    rank matched. Returns the path."""
    rng = np.random.default_rng(seed)
    width = len(p_by_depth[0])
    lines = ["round,position," + ",".join(f"eagle@{r + 1}" for r in range(width))]
    for i in range(rounds):
        for j in range(depth):
            row = p_by_depth[min(j, len(p_by_depth) - 1)]
            cells = [0] * width
            for r in range(width):
                if rng.random() < row[r]:
                    cells[r] = 1
                    break
            lines.append(f"{i},{j + 1}," + ",".join(map(str, cells)))
            if not any(cells):
                break
    path.write_text("\n".join(lines) + "\n")
    return path


def test_estimate_writes_rank_acceptance_with_intervals(tmp_path):
    truth = [[0.7, 0.4, 0.3], [0.5, 0.3, 0.2]]
    log = rank_log(tmp_path / "ranks.csv", truth, 3000, seed=4)
    out = tmp_path / "est.yaml"
    r = run("estimate", log, "--out", out, "--errors", "independent", "--unit-cost", "eagle=0.05")
    assert r.exit_code == 0, r.output
    import yaml

    d = yaml.safe_load(out.read_text())["drafters"][0]
    acc = np.array(d["acceptance_by_rank"])
    iv = np.array(d["acceptance_by_rank_interval"])
    assert acc.shape == (4, 3) and iv.shape == (4, 3, 2)  # per depth: four positions logged
    want = np.array([truth[0]] + [truth[1]] * 3)
    covered = (iv[..., 0] <= want) & (want <= iv[..., 1])
    assert covered.mean() >= 0.75  # 95% intervals: most of the 12 hold the truth
    # a 95% interval spans about 4 standard errors: an unbiased estimate stays within
    # 1.5 widths (6 standard errors) of the truth; a bias of a few percent does not
    assert np.all(np.abs(acc - want) < 1.5 * (iv[..., 1] - iv[..., 0]))
    # the chain acceptance is rank 1's
    assert d["acceptance"][0] == pytest.approx(acc[0, 0], abs=1e-6)
    # the JSON report carries the counts behind them
    r = run(
        "estimate",
        log,
        "--out",
        tmp_path / "again.yaml",
        "--errors",
        "independent",
        "--unit-cost",
        "eagle=0.05",
        "--json",
        "-",
    )
    doc = json.loads(r.stdout)["drafters"][0]
    trials, succ = np.array(doc["rank_trials"]), np.array(doc["rank_successes"])
    assert np.allclose(succ / trials, acc, atol=1e-6)
    # and the file plans a tree
    r = run("tree", out, "-d", "eagle", "--nodes", "10", "--json", "-")
    assert r.exit_code == 0, r.output


def test_estimated_rank_intervals_cover_at_the_stated_rate(tmp_path):
    from allocator.estimate import estimate

    truth = [[0.6, 0.35]]
    hits = []
    for seed in range(120):
        log = rank_log(tmp_path / "r.csv", truth, 60, seed=seed, depth=1)
        est = estimate(log, "outcomes", tmp_path / "p.yaml", errors="independent", min_trials=5)
        lo, hi = est.drafters[0].ranks.interval
        hits.extend(((lo[0] <= truth[0]) & (np.array(truth[0]) <= hi[0])).tolist())
    assert 0.9 <= np.mean(hits) <= 0.99, np.mean(hits)


@pytest.mark.parametrize(
    ("header", "row", "errors", "field", "needle"),
    [
        ("position,eagle@1,eagle@2", "1,1,1", "independent", "ranks.csv", "several"),
        ("position,eagle@1,eagle@3", "1,1,0", "independent", "ranks.csv", "1..R"),
        ("position,eagle,eagle@1", "1,1,1", "independent", "ranks.csv", "rank columns"),
        ("position,eagle@1,eagle@2", "1,1,0", "empirical", "--errors", "NAME@r"),
        # the bad cell quoted as the file has it, not as numpy's repr np.str_('2')
        ("position,eagle@1,eagle@2", "1,2,0", "independent", "ranks.csv line 2", "'2' is not"),
    ],
)
def test_bad_rank_logs(tmp_path, header, row, errors, field, needle):
    log = tmp_path / "ranks.csv"
    log.write_text(header + "\n" + "\n".join([row] * 40) + "\n")
    out = tmp_path / "est.yaml"
    r = run("estimate", log, "--out", out, "--errors", errors, "--unit-cost", "eagle=0.05")
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:") and needle in lines[0]
    assert not out.exists()


def test_simulate_command_plays_a_tree(problem):
    r = run(
        "simulate", problem, "-d", "eagle", "--nodes", "12", "--rounds", "100000", "--json", "-"
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["ci_low"] <= doc["model_accepted"] <= doc["ci_high"]
    p = np.array([[0.75, 0.3, 0.15, 0.1]])
    tree = doc["tree"]
    e = tree_expected(np.array([tree["parents"]]), np.array([tree["ranks"]]), p)[0]
    assert doc["model_accepted"] == pytest.approx(e)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--nodes", "5", "--k", "3"], "--k"),
        (["--rounds", "10"], "--k"),
        (["--nodes", "0"], "--nodes"),
        (["--nodes", "5", "--rounds", "1"], "--rounds"),
        # --depth bounds a tree; on a chain it was ignored without a word
        (["--k", "3", "--depth", "2"], "--depth"),
        (["--nodes", "5", "--depth", "0"], "--depth"),
    ],
)
def test_simulate_tree_bad_input(problem, extra, field):
    args = ["simulate", problem, "-d", "eagle", *extra]
    if "--rounds" not in extra:
        args += ["--rounds", "100"]
    r = run(*args)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), r.output


def test_rank_acceptance_of_one_leaves_later_ranks_worthless():
    # p1 = 1: rank 1 is always the accepted one, so rank 2 never is (q2 = 0)
    p = np.array([[1.0, 0.5]])
    prog = TreeProgramme(p, 6, 3)
    assert prog.best().expected_accepted == pytest.approx(4.0)  # the chain of 3, all kept
    assert prog.values()[-1, 6] == pytest.approx(4.0)  # extra nodes add nothing


@pytest.mark.parametrize(
    ("acceptance", "noted"), [(0.72, True), ([0.7, 0.6], True), ([0.78, 0.72], False)]
)
def test_chain_acceptance_against_rank_one_is_noted(tmp_path, acceptance, noted):
    # chains read `acceptance`, trees rank 1 of `acceptance_by_rank`: when they disagree
    # the two kinds of answer are not of one drafter, and tree says so
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: t\nconvention: bonus\ndrafters:\n"
        f"  - {{name: e, acceptance: {acceptance}, unit_cost: 0.05,\n"
        "     acceptance_by_rank: [[0.78, 0.3], [0.72, 0.3]]}\n"
    )
    r = run("tree", path, "-d", "e", "--nodes", "3", "--json", "-")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout).get("notes", [])
    assert any("drafters.0.acceptance" in n for n in notes) == noted, notes
