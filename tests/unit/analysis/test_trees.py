"""The tree analyses: the programme over the ranks a tree can use (against brute force),
the bounded cost on drafters with thousands of measured ranks, seeds, and the setting
``tree --engine sglang`` exports for a stated batch size."""

from __future__ import annotations

import itertools
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator import api
from allocator.analysis import trees
from allocator.exceptions import ParameterError
from tests.support.cli_runner import run
from tests.support.engine_schemas import check_sglang

ROOT = Path(__file__).resolve().parents[3]
TREE = ROOT / "docs" / "tree.yaml"


def rank_weights(row: list[float]) -> list[float]:
    """q_r = p_r * prod_{s<r} (1 - p_s), written out."""
    out, miss = [], 1.0
    for x in row:
        out.append(x * miss)
        miss *= 1.0 - x
    return out


def brute_force_best(p: list[list[float]], nodes: int, depth: int) -> float:
    """The largest E = 1 + sum over nodes of the product of q along the path, over every
    tree (prefix-closed set of rank paths, distinct ranks under a parent) of at most
    ``nodes`` nodes and depth at most ``depth``."""
    width = len(p[0])
    q = [rank_weights(row) for row in p]

    def weight(path: tuple[int, ...]) -> float:
        w = 1.0
        for level, r in enumerate(path):
            w *= q[min(level, len(q) - 1)][r - 1]
        return w

    best = 1.0
    seen: set[frozenset] = set()
    frontier: list[frozenset] = [frozenset()]
    for _ in range(nodes):
        grown: list[frozenset] = []
        for tree in frontier:
            for parent in [(), *tree]:
                if len(parent) >= depth:
                    continue
                for r in range(1, width + 1):
                    child = (*parent, r)
                    if child in tree:
                        continue
                    new = tree | {child}
                    if new not in seen:
                        seen.add(new)
                        grown.append(new)
                        best = max(best, 1.0 + sum(weight(x) for x in new))
        frontier = grown
    return best


CASES = [
    # (rows of p, nodes, depth): more measured ranks than nodes, so ranks are cut
    ([[0.6, 0.3, 0.2, 0.15, 0.1, 0.08, 0.05]], 3, 3),
    ([[0.5, 0.4, 0.3, 0.2, 0.2, 0.1], [0.7, 0.2, 0.2, 0.1, 0.05, 0.05]], 4, 3),
    # q rising with rank: the best tree skips low ranks (docs/design.md §8.10)
    ([[0.05, 0.1, 0.7, 0.9, 0.2, 0.3]], 3, 2),
    ([[0.1, 0.05, 0.6, 0.3, 0.9, 0.5, 0.4], [0.3, 0.6, 0.2, 0.9, 0.1, 0.2, 0.5]], 4, 2),
    ([[0.9, 0.8, 0.7, 0.6, 0.5]], 2, 4),
]


@pytest.mark.parametrize(("p", "nodes", "depth"), CASES)
def test_the_ranks_a_tree_can_use_keep_the_optimum(p, nodes, depth):
    tree = trees.best_programme_tree(np.array(p), nodes, depth, None)
    assert tree.expected_accepted == pytest.approx(brute_force_best(p, nodes, depth), abs=1e-12)
    # the tree returned is in the drafter's own ranks: its E recomputed from p agrees
    q = [rank_weights(row) for row in p]
    paths: list[tuple[int, ...]] = [()]
    for v in range(1, tree.parents.size):
        paths.append(paths[int(tree.parents[v])] + (int(tree.ranks[v]),))
    e = 1.0
    for path in paths[1:]:
        w = 1.0
        for level, r in enumerate(path):
            w *= q[min(level, len(q) - 1)][r - 1]
        e += w
    assert e == pytest.approx(tree.expected_accepted, abs=1e-12)
    assert tree.nodes <= nodes and tree.depth <= depth


@pytest.mark.parametrize(("p", "nodes", "depth"), CASES)
def test_the_front_values_keep_the_optimum(p, nodes, depth):
    values = trees.programme_values(np.array(p), nodes, depth, None)
    for d, n in itertools.product(range(1, depth + 1), range(1, nodes + 1)):
        best_up_to = max(v for v in values[d - 1, : n + 1] if np.isfinite(v))
        assert best_up_to == pytest.approx(brute_force_best(p, n, d), abs=1e-12)


def test_the_programme_sees_at_most_as_many_ranks_as_nodes(monkeypatch, tmp_path):
    """5,000 measured ranks ran past a minute at the default width (every rank): the
    programme now gets the ranks a tree of that size can use (cost O(L·D·min(W, n)·n²))."""
    data = yaml.safe_load(TREE.read_text())
    rng = np.random.default_rng(7)
    ranks = np.sort(rng.uniform(0.001, 0.3, 5000))[::-1]
    ranks[0] = 0.78
    rows = [ranks.round(5).tolist()] + [(ranks * 0.9).round(5).tolist()] * 7
    data["drafters"][0]["acceptance_by_rank"] = rows
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(data))
    prob = api.load(path)
    seen: list[tuple[int, ...]] = []
    original = trees.TreeProgramme

    def spy(p, *args, **kwargs):
        seen.append(np.shape(p))
        return original(p, *args, **kwargs)

    monkeypatch.setattr(trees, "TreeProgramme", spy)
    best = api.best_tree(prob, "eagle", 12, 6)
    front = api.tree_front(prob, "eagle", 10, 6)
    assert seen and all(shape[1] <= 12 for shape in seen), seen
    # the trailing rows repeat: the programme keeps two rows, the last repeating
    assert all(shape[0] == 2 for shape in seen), seen
    assert best.tree.nodes <= 12 and max(best.tree.ranks) <= 5000
    assert front.best.nodes <= 10


def test_a_seed_outside_the_seeds_is_one_line():
    for args in (
        ["--nodes", "4", "--rounds", "100", "--seed", "-1"],
        ["--engine", "sglang", "--rounds", "100", "--seed", "-1"],
        ["--nodes", "4", "--rounds", "100", "--seed", str(2**63)],
    ):
        r = run("tree", TREE, "-d", "eagle", *args)
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1, r.output
        assert lines[0].startswith("error: --seed:"), r.output
    prob = api.load(TREE)
    for call in (
        lambda: api.best_tree(prob, "eagle", 4, rounds=100, seed=-1),
        lambda: api.engine_tree(prob, "eagle", 4, rounds=100, seed=-1),
    ):
        with pytest.raises(ParameterError) as info:
            call()
        assert info.value.field == "seed"


def test_the_engine_export_is_the_setting_for_the_batch_size_stated():
    doc = json.loads(run("tree", TREE, "-d", "eagle", "--engine", "sglang", "--json", "-").stdout)
    rows = {r["batch"]: r for r in doc["serving"]}
    assert any("verifier-units" in n and "--batch" in n for n in doc["notes"])
    for batch in (1, 16, 64):
        r = run("tree", TREE, "-d", "eagle", "--engine", "sglang", "--batch", batch, "--export",
                "sglang")  # fmt: skip
        assert r.exit_code == 0, r.output
        settings = check_sglang(shlex.split(r.stdout))
        row = rows[batch]
        assert (settings.steps, settings.topk, settings.draft_tokens) == (
            row["num_steps"],
            row["topk"],
            row["num_draft_tokens"],
        )
        # 64 concurrent sequences need more than SGLang's speculative default of 48
        assert settings.max_running_requests == max(48, batch)
    # without --batch the export says what its setting is optimal for
    r = run("tree", TREE, "-d", "eagle", "--engine", "sglang", "--export", "sglang")
    assert r.exit_code == 0 and "verifier-units" in r.stderr and "at most 48" in r.stderr
    for args, field in (
        (["--batch", "8", "--export", "sglang"], "--batch"),  # not a planned batch size
        (["--batch", "16"], "--batch"),  # applies to the engine search and exports only
        (["--eagle", "3,2,5", "--batch", "16", "--export", "sglang"], "--batch"),
    ):
        r = run("tree", TREE, "-d", "eagle", *args)
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {field}:")
