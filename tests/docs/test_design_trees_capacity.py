"""Claims of docs/design.md §8.10 (token trees) and §8.11 (capacity) checked against
hand-computed values and brute force: why an edge weighs ``q`` and not ``p``, the tree's
step time, SGLang's tree against the programme (also when a tree must skip a rank), the
memory cap at an exact fit, and why a load sweep shows no strict
crossing."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from allocator.analysis.capacity.by_load import sweep_load
from allocator.analysis.capacity.grid import serving_grid
from allocator.engines.sglang import sglang_tree
from allocator.io.build import problem_from_file
from allocator.model.memory_fit import MemoryModel
from allocator.model.token_tree import TreeProgramme, tree_expected, tree_serving, tree_step_ms

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- §8.10 the model
def test_two_children_count_once_not_twice():
    # p = (0.5, 0.5): one of the two children is the verifier's token with probability
    # 1 - 0.5 * 0.5 = 0.75, so E = 1.75; a product of p along edges would give 2.
    e = tree_expected(np.array([[-1, 0, 0]]), np.array([[0, 1, 2]]), np.array([[0.5, 0.5]]))
    assert e[0] == pytest.approx(1.75)
    # by enumeration of the verifier's choice: rank 1 right (0.5), rank 2 right (0.25)
    outcomes = {"rank 1": 0.5, "rank 2": 0.5 * 0.5, "neither": 0.25}
    assert sum(outcomes.values()) == pytest.approx(1.0)
    assert e[0] == pytest.approx(1 + outcomes["rank 1"] + outcomes["rank 2"])


def test_tree_step_time_by_hand():
    # docs/tree.yaml at batch 1: verify_ms(1, 8) = 7.2, draft 0.45 ms, overhead 0.3 ms
    prob = problem_from_file(ROOT / "docs" / "tree.yaml")
    serving = tree_serving(prob, 0)
    assert serving is not None
    ms = tree_step_ms(serving, 0, 1.0, np.array([7]), np.array([3]))
    assert ms[0] == pytest.approx(7.2 + 3 * 0.45 + 0.3)
    # between batch sizes 1 and 16 and token counts 8 and 16: bilinear
    ms = tree_step_ms(serving, 0, 8.5, np.array([11]), np.array([2]))
    w = (8.5 - 1) / 15
    v = (1 - w) * (7.2 + (7.4 - 7.2) * 4 / 8) + w * (8.4 + (9.6 - 8.4) * 4 / 8)
    assert ms[0] == pytest.approx(v + 2 * ((1 - w) * 0.45 + w * 0.6) + 0.3)


def _hand_expected(p: np.ndarray, parents: np.ndarray, ranks: np.ndarray) -> float:
    """1 + Σ_v Π q along the path, from the definition: at depth d a rank-r edge weighs
    p_r·Π_{s<r}(1 − p_s) with row min(d, rows) − 1 of ``p`` (the last row repeats)."""
    total = 1.0
    for v in range(1, parents.size):
        weight, u = 1.0, v
        while u != 0:
            d, w = 0, u
            while w != 0:
                d, w = d + 1, int(parents[w])
            row = p[min(d, p.shape[0]) - 1]
            r = int(ranks[u])
            weight *= row[r - 1] * math.prod(1.0 - row[: r - 1])
            u = int(parents[u])
        total += weight
    return total


def _check_engine_tree(p: np.ndarray, s: int, k: int, t: int) -> float:
    """SGLang keeps exactly t − 1 drafted nodes, of depth ≤ s, and its E is the tree's own
    sum of path weights; returns that E."""
    tree = sglang_tree(p, s, k, t)
    assert tree.nodes == t - 1 and tree.depth <= s, (s, k, t)
    assert tree.expected_accepted == pytest.approx(
        _hand_expected(p, tree.parents, tree.ranks), rel=1e-12
    ), (s, k, t)
    return tree.expected_accepted


def _all_triples(steps_max: int, topk_max: int, tokens_max: int):
    for s, k in itertools.product(range(1, steps_max + 1), range(1, topk_max + 1)):
        most = k + (s - 1) * k * k + 1
        for t in range(2, min(most, tokens_max) + 1):
            if k == 1 and t != s + 1:
                continue
            yield s, k, t


@pytest.mark.parametrize("seed", range(4))
def test_sglang_tree_never_beats_the_programme_when_q_falls_with_rank(seed):
    # decreasing p makes q non-increasing in rank (q_{r+1}/q_r = p_{r+1}(1 - p_r)/p_r),
    # so SGLang's tree is in the programme's class: E_SGLang <= the optimal tree of at
    # most as many nodes and depth <= num_steps
    rng = np.random.default_rng(seed)
    p = np.sort(rng.uniform(0.05, 0.95, (2, 3)), axis=1)[:, ::-1].copy()
    for s, k, t in _all_triples(4, 3, 10):
        engine = _check_engine_tree(p, s, k, t)
        best = TreeProgramme(p, t - 1, s).values()[-1]
        assert engine <= np.max(best[np.isfinite(best)]) + 1e-12, (s, k, t)


def test_programme_covers_trees_that_skip_a_rank():
    # p = (0.3, 0.6): q = (0.3, 0.42). One node: the rank-2 candidate alone gives 1.42;
    # SGLang (1 step, topk 2, 2 tokens) keeps exactly that node, and so must the programme
    p = np.array([[0.3, 0.6]])
    engine = sglang_tree(p, 1, 2, 2)
    assert engine.ranks.tolist() == [0, 2]
    assert engine.expected_accepted == pytest.approx(1.42)
    best = TreeProgramme(p, 1, 1).best()
    assert best.ranks.tolist() == [0, 2]
    assert best.expected_accepted == pytest.approx(1.42)


@pytest.mark.parametrize("seed", range(4))
def test_sglang_tree_never_beats_the_programme_whatever_the_ranks(seed):
    rng = np.random.default_rng(100 + seed)
    p = rng.uniform(0.05, 0.95, (2, 3))  # q may rise with rank
    for s, k, t in _all_triples(4, 3, 10):
        engine = _check_engine_tree(p, s, k, t)
        best = TreeProgramme(p, t - 1, s).values()[-1]
        assert engine <= np.max(best[np.isfinite(best)]) + 1e-12, (s, k, t)


# ---------------------------------------------------------------- §8.11 capacity
def test_memory_cap_keeps_an_exact_fit():
    # (10 - 0.3) / 0.1 = 97 exactly, which is 96.999... in floating point
    model = MemoryModel(10.0, 0.1, np.array([0.3, 9.9]))
    got = model.max_batch(np.array([[False, False], [True, False], [False, True]]))
    assert got.tolist() == [100, 97, 1]
    assert math.floor((10.0 - 0.3) / 0.1) == 96  # what a plain floor would lose


@pytest.mark.parametrize("itl", [None, 60.0, 40.0, 30.0, 20.0])
def test_a_load_sweep_shows_no_strict_crossing(itl):
    prob = problem_from_file(ROOT / "problems" / "capacity-70b.yaml")
    grid = serving_grid(prob)
    loads = np.linspace(300.0, 60_000.0, 160)
    sweep = sweep_load(prob, loads, itl, grid=grid)
    price = float(prob.serving.gpu_cost_per_hour)
    target = np.inf if itl is None else itl
    ok = grid.fits() & (grid.tpot_ms <= target)
    for spec, costs in ((True, sweep.with_speculation), (False, sweep.without_speculation)):
        side = ok & ((grid.k > 0) == spec)[None, :]
        if not side.any():
            assert np.isnan(costs).all()
            continue
        t_star = grid.tokens_per_s[side].max()
        # price * ceil(X / T*), by brute force over every candidate of the side
        brute = np.array([min(math.ceil(x / t) for t in grid.tokens_per_s[side]) for x in loads])
        assert np.array_equal(costs, brute * price)
        assert np.array_equal(brute, np.ceil(loads / t_star))
    both = np.isfinite(sweep.with_speculation) & np.isfinite(sweep.without_speculation)
    sign = np.sign(sweep.without_speculation[both] - sweep.with_speculation[both])
    assert not ({1.0, -1.0} <= set(sign.tolist()))  # one side never strictly dearer
