"""The shared evaluation loop (allocator.model.evaluator): the chunking never changes what
is kept, the keepers break ties as documented, and the budget rules of core/budget."""

from __future__ import annotations

import numpy as np
import pytest

from allocator.core.budget import BUDGET_RTOL, budget_limit, feasible_mask, infeasible_error, within
from allocator.core.space import count_subsets
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from allocator.model.evaluator import (
    BestPerKey,
    FeasibleCells,
    FrontKeeper,
    GridMax,
    evaluate_space,
    mask_score,
)
from allocator.model.metrics import evaluate_subsets
from tests.support.random_problems import random_problem


def build(seed: int):
    return problem_from_spec(parse_problem(random_problem(seed)), check_search=False)


def same_front(a, b) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    assert np.array_equal(a.members, b.members) and np.array_equal(a.k, b.k)
    assert a.metrics.keys() == b.metrics.keys()
    for m in a.metrics:
        assert np.array_equal(a.metrics[m], b.metrics[m])


@pytest.mark.parametrize("seed", range(12))
def test_chunk_size_changes_nothing_kept(seed):
    problem = build(seed)
    ks = problem.k_values
    fronts, cells, bests = [], [], []
    for rows in (1, 3, 10_000):
        front = FrontKeeper(problem.cost_metric, ks)
        kept = FeasibleCells(ks)
        seen = evaluate_space(problem, [front, kept], rows=rows, lowest=True)
        assert seen.subsets == count_subsets(problem)
        assert seen.cells == seen.subsets * ks.size
        fronts.append(front.front())
        cells.append((kept.members(problem.n), kept.k(), kept.left_out, seen.lowest))
        best = BestPerKey(1, problem.n, ks)  # a key axis of one: the evaluation's own mask

        def one_key(members):
            met = evaluate_subsets(problem, members)
            ok = feasible_mask(met, problem.budget)
            return {"throughput": met["throughput"][None], "feasible": ok[None]}

        evaluate_space(problem, best, evaluate=one_key, rows=rows)
        bests.append((best.score.copy(), best.members.copy(), best.k.copy()))
    for f in fronts[1:]:
        same_front(f, fronts[0])
    for c in cells[1:]:
        assert np.array_equal(c[0], cells[0][0]) and np.array_equal(c[1], cells[0][1])
        assert c[2] == cells[0][2] and c[3] == cells[0][3]
    for b in bests[1:]:
        assert all(np.array_equal(x, y) for x, y in zip(b, bests[0], strict=True))


def test_best_per_key_breaks_ties_by_the_given_values_then_enumeration_order():
    rng = np.random.default_rng(0)
    score = rng.integers(0, 3, size=(40, 4)).astype(float)  # many ties
    tb = rng.integers(0, 2, size=(40, 4))
    ok = rng.random((40, 4)) < 0.8
    ks = np.array([1, 2, 3, 4])
    members = np.eye(40, dtype=bool)
    want = min(
        (-score[r, j], int(tb[r, j]), int(ks[j]), r * 4 + j)
        for r in range(40)
        for j in range(4)
        if ok[r, j]
    )
    best = BestPerKey(1, 40, ks, tiebreak=[(99, 99)])
    for lo in range(0, 40, 7):  # offered in chunks
        part = slice(lo, lo + 7)
        if ok[part].any():
            best.offer(0, members[part], mask_score(score[part], ok[part]), (tb[part], ks[None, :]))
    r, j = divmod(want[3], 4)
    assert best.score[0] == score[r, j] and best.k[0] == ks[j]
    assert np.array_equal(best.members[0], members[r])
    assert best.tiebreak[0] == (int(tb[r, j]), int(ks[j]))


def test_a_starting_point_wins_its_ties():
    ks = np.array([1, 2])
    best = BestPerKey(1, 2, ks, score=[5.0], tiebreak=[(0,)])
    masked = np.array([[5.0, 1.0]])
    assert best.offer(0, np.array([[True, False]]), masked, (ks[None, :],)) is None
    assert best.k[0] == 0 and not best.members.any()
    assert best.offer(0, np.array([[True, False]]), masked + 1, (ks[None, :],)) == (0, 0)


def test_offer_all_takes_the_first_of_equal_bests():
    ks = np.array([1, 2, 3])
    masked = np.array([[[1.0, 2.0, 2.0], [2.0, -np.inf, 0.0]], [[-np.inf] * 3, [-np.inf] * 3]])
    members = np.array([[True, False], [False, True]])
    best = BestPerKey(2, 2, ks)
    changed = best.offer_all(members, masked)
    assert changed.tolist() == [True, False]
    assert best.k[0] == 2 and best.members[0].tolist() == [True, False]
    assert np.isneginf(best.score[1])
    # a later chunk must beat it strictly
    best.offer_all(members[::-1], masked)
    assert best.members[0].tolist() == [True, False]


def test_grid_max_and_feasible_cells():
    grid = GridMax(2, 3)
    ok = np.array([[True, False, False], [True, True, False]])
    score = np.array([[1.0, 5.0, 7.0], [3.0, 2.0, 9.0]])
    grid.offer(1, mask_score(score, ok), ok)
    assert np.isnan(grid.values[0]).all()
    assert grid.values[1, :2].tolist() == [3.0, 2.0] and np.isnan(grid.values[1, 2])


def test_lowest_per_key_and_the_budget_rules():
    problem = build(3)
    budget = {"drafters": 0.5}  # nothing meets it
    seen = evaluate_space(problem, [], budget=budget, lowest=True)
    error = infeasible_error(budget, seen.lowest)
    assert error.field == "budget.drafters" and "lowest in the search space is 1" in error.message
    assert budget_limit(1.0) == 1.0 + BUDGET_RTOL
    assert within(3 * 0.05 * 4, 0.6)
    assert not within(0.61, 0.6)
