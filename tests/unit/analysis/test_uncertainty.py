"""`solve --samples/--robust`: Beta posteriors from intervals, draws, and the re-solved
decision, checked against brute force over every configuration with the independent
reference model."""

import itertools
import json

import numpy as np
import pytest
import yaml
from scipy import stats

from allocator import api
from allocator.analysis.uncertainty import analyse, beta_from_interval, posterior_draws
from allocator.exceptions import InputError
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem
from tests.support.cli_runner import run
from tests.support.reference import metrics as ref_metrics


def jeffreys(s, n):
    a, b = s + 0.5, n - s + 0.5
    return [
        float(round(stats.beta.ppf(0.025, a, b), 6)),
        float(round(stats.beta.ppf(0.975, a, b), 6)),
    ]


@pytest.mark.parametrize("s,n", [(0, 10), (3, 10), (10, 10), (50, 200), (990, 1000), (4500, 5000)])
def test_beta_from_interval_recovers_the_posterior(s, n):
    lo, hi = jeffreys(s, n)
    a, b = beta_from_interval(np.array([lo]), np.array([hi]))
    q = stats.beta.ppf([0.025, 0.975], a[0], b[0])
    np.testing.assert_allclose(q, [lo, hi], atol=2e-6)
    assert a[0] == pytest.approx(s + 0.5, rel=0.03)
    assert b[0] == pytest.approx(n - s + 0.5, rel=0.03)


def spec_of(drafters, **extra):
    return parse_problem({"name": "u", "convention": "bonus", "drafters": drafters, **extra})


def test_draws_follow_the_posterior_and_are_seeded():
    spec = spec_of(
        [
            {
                "name": "a",
                "acceptance": 0.7,
                "unit_cost": 0.1,
                "acceptance_interval": jeffreys(70, 100),
            },
            {"name": "b", "acceptance": 0.5, "unit_cost": 0.1},
        ]
    )
    d1, names = posterior_draws(problem_from_spec(spec), 20000, seed=1)
    d2, _ = posterior_draws(problem_from_spec(spec), 20000, seed=1)
    d3, _ = posterior_draws(problem_from_spec(spec), 20000, seed=2)
    np.testing.assert_array_equal(d1, d2)
    assert not np.array_equal(d1, d3)
    assert names == ["a"]
    assert np.all(d1[:, 1] == 0.5)  # no interval: fixed
    post = stats.beta(70.5, 30.5)
    x = d1[:, 0, 0]
    assert abs(x.mean() - post.mean()) < 4 * post.std() / np.sqrt(x.size)
    assert x.std() == pytest.approx(post.std(), rel=0.03)


def test_per_position_intervals_drawn_per_position():
    spec = spec_of(
        [
            {
                "name": "a",
                "acceptance": [0.9, 0.5],
                "unit_cost": 0.1,
                "acceptance_interval": [jeffreys(900, 1000), jeffreys(50, 100)],
            }
        ]
    )
    d, _ = posterior_draws(problem_from_spec(spec), 5000, seed=0)
    assert d.shape == (5000, 1, 2)
    assert d[:, 0, 0].mean() == pytest.approx(0.9, abs=0.005)
    assert d[:, 0, 1].mean() == pytest.approx(0.5, abs=0.01)
    assert d[:, 0, 1].std() > 3 * d[:, 0, 0].std()


PROBLEM = {
    "name": "unc",
    "convention": "bonus",
    "drafters": [
        {
            "name": "a",
            "acceptance": 0.72,
            "unit_cost": 0.05,
            "acceptance_interval": jeffreys(72, 100),
        },
        {
            "name": "b",
            "acceptance": 0.70,
            "unit_cost": 0.04,
            "acceptance_interval": jeffreys(35, 50),
        },
        {
            "name": "c",
            "acceptance": 0.55,
            "unit_cost": 0.01,
            "acceptance_interval": jeffreys(110, 200),
        },
    ],
    "search": {"k": {"max": 6}},
    "budget": {"draft_cost_per_round": 0.4},
}


def brute_force(problem_dict, draws):
    """Per draw: every (subset, k) with the reference model; returns
    {config: throughput array (D,)} for feasible configurations."""
    n = len(problem_dict["drafters"])
    cap = problem_dict["budget"]["draft_cost_per_round"]
    table = {}
    for size in range(1, n + 1):
        for subset in itertools.combinations(range(n), size):
            for k in range(1, problem_dict["search"]["k"]["max"] + 1):
                thr = []
                for d in draws:
                    p = dict(problem_dict)
                    p["drafters"] = [
                        {**dr, "acceptance": float(d[i, 0])}
                        for i, dr in enumerate(problem_dict["drafters"])
                    ]
                    m = ref_metrics(p, subset, k)
                    thr.append(m["throughput"])
                if ref_metrics(problem_dict, subset, k)["draft_cost_per_round"] <= cap + 1e-12:
                    table[(subset, k)] = np.array(thr)
    return table


def test_optimal_share_and_percentiles_match_brute_force(tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    prob = api.load(path)
    result = api.solve(prob)
    n_draws = 60
    rep = analyse(prob, result.front, n_draws, seed=5)
    draws, _ = posterior_draws(prob, n_draws, seed=5)
    table = brute_force(PROBLEM, draws)
    keys = list(table)
    thr = np.stack([table[k] for k in keys])  # (C, D)
    best = [keys[i] for i in np.argmax(thr, axis=0)]
    names = prob.names
    for i in range(len(rep.front)):
        subset = tuple(np.flatnonzero(rep.front.members[i]))
        key = (subset, int(rep.front.k[i]))
        assert rep.optimal_share[i] == pytest.approx(best.count(key) / n_draws)
        np.testing.assert_allclose(
            rep.percentiles["throughput_p05"][i], np.percentile(table[key], 5), rtol=1e-9
        )
        np.testing.assert_allclose(
            rep.percentiles["throughput_p95"][i], np.percentile(table[key], 95), rtol=1e-9
        )
    others = {
        (tuple(names.index(x) for x in o["drafters"]), o["k"]): o["optimal_share"]
        for o in rep.other_optima
    }
    for key, share in others.items():
        assert share == pytest.approx(best.count(key) / n_draws)
    assert rep.optimal_share.sum() + sum(others.values()) == pytest.approx(1.0)


def test_robust_front_matches_brute_force_quantiles(tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    prob = api.load(path)
    result = api.solve(prob)
    rep = analyse(prob, result.front, 40, seed=8, quantile=0.1)
    draws, _ = posterior_draws(prob, 40, seed=8)
    table = brute_force(PROBLEM, draws)
    # brute-force front of (cost, 10% quantile)
    pts = sorted(
        (
            (ref_metrics(PROBLEM, s, k)["draft_cost_per_round"], -np.quantile(t, 0.1), s, k)
            for (s, k), t in table.items()
        )
    )
    front, best = [], -np.inf
    for _cost, negq, s, k in pts:
        if -negq > best + 1e-12:
            front.append((s, k, -negq))
            best = -negq
    got = [
        (tuple(np.flatnonzero(m)), int(k))
        for m, k in zip(rep.front.members, rep.front.k, strict=True)
    ]
    assert got == [(s, k) for s, k, _ in front]
    np.testing.assert_allclose(rep.quantile_throughput, [q for _, _, q in front], rtol=1e-9)


def test_cli_samples_json_is_seeded_and_documented(tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    r1 = run("solve", path, "--samples", "40", "--seed", "3", "--json", "-")
    r2 = run("solve", path, "--samples", "40", "--seed", "3", "--json", "-")
    r3 = run("solve", path, "--samples", "40", "--seed", "4", "--json", "-")
    assert r1.exit_code == 0, r1.output
    d1, d2, d3 = (json.loads(r.stdout) for r in (r1, r2, r3))
    assert d1["uncertainty"] == d2["uncertainty"]
    assert d1["uncertainty"]["points"] != d3["uncertainty"]["points"]
    u = d1["uncertainty"]
    assert u["samples"] == 40 and u["seed"] == 3 and u["robust_quantile"] is None
    assert u["resampled"] == ["a", "b", "c"]
    assert len(u["points"]) == len(d1["front"])
    for p, f in zip(u["points"], d1["front"], strict=True):
        assert p["drafters"] == f["drafters"] and p["k"] == f["k"]
        assert p["throughput_p05"] <= p["throughput_p50"] <= p["throughput_p95"]
        assert 0.0 <= p["optimal_share"] <= 1.0
    human = run("solve", path, "--samples", "20")
    assert human.exit_code == 0 and "posterior draws" in human.stdout


def test_cli_robust(tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    r = run("solve", path, "--robust", "0.05", "--samples", "30", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    u = doc["uncertainty"]
    assert u["robust_quantile"] == 0.05 and doc["exact"] is False
    q = [p["throughput_quantile"] for p in u["points"]]
    assert q == sorted(q)  # a front: cost up, quantile throughput up


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--samples", "0"], "--samples"),
        (["--robust", "1.5"], "--robust"),
        (["--robust", "0"], "--robust"),
        (["--pick", "1"], "--pick"),
    ],
)
def test_cli_bad_options(tmp_path, args, needle):
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    r = run("solve", path, *args)
    assert r.exit_code == 2 and needle in r.stderr, r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_samples_without_intervals_is_refused(tmp_path):
    p = dict(PROBLEM)
    p["drafters"] = [
        {k: v for k, v in d.items() if k != "acceptance_interval"} for d in PROBLEM["drafters"]
    ]
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(p))
    r = run("solve", path, "--samples", "10")
    assert r.exit_code == 2 and "acceptance_interval" in r.stderr


def test_interval_list_must_match_positions(tmp_path):
    p = dict(PROBLEM)
    p["drafters"] = [dict(PROBLEM["drafters"][0], acceptance=[0.7, 0.6])] + PROBLEM["drafters"][1:]
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(p))
    r = run("solve", path, "--samples", "10")
    assert r.exit_code == 2 and "drafters[a].acceptance_interval" in r.stderr, r.output


def test_empirical_model_resamples_the_joint_log(tmp_path):
    """Under errors: empirical the draws come from the log's failure masks (Dirichlet
    posterior): each drafter's drawn acceptance at position 1 centres on its logged
    rate with the binomial spread, and pooled acceptance keeps the log's dependence."""
    rng = np.random.default_rng(12)
    n_rows = 400
    a_fail = rng.random(n_rows) < 0.3
    b_fail = np.where(rng.random(n_rows) < 0.8, a_fail, rng.random(n_rows) < 0.3)  # correlated
    log = tmp_path / "log.csv"
    rows = ["position,a,b"] + [
        f"1,{int(not x)},{int(not y)}" for x, y in zip(a_fail, b_fail, strict=True)
    ]
    log.write_text("\n".join(rows) + "\n")
    prob_dict = {
        "name": "emp",
        "convention": "bonus",
        "drafters": [
            {"name": "a", "acceptance": float(1 - a_fail.mean()), "unit_cost": 0.05},
            {"name": "b", "acceptance": float(1 - b_fail.mean()), "unit_cost": 0.05},
        ],
        "errors": {"model": "empirical", "outcomes": "log.csv"},
        "search": {"k": {"max": 4}},
    }
    path = tmp_path / "emp.yaml"
    path.write_text(yaml.safe_dump(prob_dict))
    prob = api.load(path)
    from allocator.analysis.uncertainty import draw_problems

    problems, names = draw_problems(prob, 3000, seed=0)
    assert names == ["a", "b"]
    acc_a = np.array([p.acceptance[0, 0] for p in problems])
    rate = 1 - a_fail.mean()
    assert acc_a.mean() == pytest.approx(rate, abs=0.005)
    assert acc_a.std() == pytest.approx(np.sqrt(rate * (1 - rate) / n_rows), rel=0.1)
    both = np.array(
        [p.errors.fail_prob(np.array([[True, True]]), 1 - p.acceptance)[0, 0] for p in problems]
    )
    assert both.mean() == pytest.approx((a_fail & b_fail).mean(), abs=0.005)
    r = run("solve", path, "--samples", "50", "--json", "-")
    assert r.exit_code == 0, r.output
    pts = json.loads(r.stdout)["uncertainty"]["points"]
    assert any(p["throughput_p95"] > p["throughput_p05"] for p in pts)


def test_workloads_take_drawn_acceptance_where_not_overridden(tmp_path):
    p = dict(PROBLEM)
    p["workloads"] = [
        {"name": "chat", "weight": 0.7, "acceptance": {"a": 0.9}},
        {"name": "code", "weight": 0.3, "acceptance": {"a": 0.5, "b": 0.6}},
    ]
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(p))
    prob = api.load(path)
    from allocator.analysis.uncertainty import draw_problems

    problems, names = draw_problems(prob, 200, seed=1)
    assert names == ["b", "c"]  # a is overridden everywhere
    chat = np.array([q.workloads[0].acceptance[:, 0] for q in problems])  # (D, N)
    code = np.array([q.workloads[1].acceptance[:, 0] for q in problems])
    assert np.all(chat[:, 0] == 0.9) and np.all(code[:, :2] == [0.5, 0.6])
    assert chat[:, 1].std() > 0.02 and code[:, 2].std() > 0.01  # b in chat, c everywhere
    np.testing.assert_array_equal(chat[:, 1], [q.acceptance[1, 0] for q in problems])


def test_workloads_overriding_every_interval_are_refused(tmp_path):
    p = dict(PROBLEM)
    p["workloads"] = [{"name": "all", "weight": 1.0, "acceptance": {"a": 0.7, "b": 0.6, "c": 0.5}}]
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(p))
    r = run("solve", path, "--samples", "10")
    assert r.exit_code == 2 and "per-workload acceptance carries no interval" in r.stderr


def test_empirical_workloads_are_resampled_end_to_end(tmp_path):
    from tests.support.synthetic_logs import simulate_outcomes, write_outcomes_csv

    rng = np.random.default_rng(9)
    corr = np.array([[1.0, 0.6], [0.6, 1.0]])
    chat = simulate_outcomes(rng, [[0.85, 0.8], [0.7, 0.7]], corr, 800, 4)
    code = simulate_outcomes(rng, [[0.5], [0.35]], corr, 600, 4)
    r = np.concatenate([chat[0], code[0] + 800])
    p = np.concatenate([chat[1], code[1]])
    o = np.concatenate([chat[2], code[2]])
    w = ["chat"] * len(chat[0]) + ["code"] * len(code[0])
    log = tmp_path / "w.csv"
    write_outcomes_csv(log, ["x", "y"], r, p, o, workloads=w)
    out = tmp_path / "w.yaml"
    est = run("estimate", log, "--out", out, "--unit-cost", "x=0.1", "--unit-cost", "y=0.05")
    assert est.exit_code == 0, est.output
    res = run("solve", out, "--samples", "40", "--seed", "2", "--json", "-")
    assert res.exit_code == 0, res.output
    u = json.loads(res.stdout)["uncertainty"]
    assert u["resampled"] == ["x", "y"]
    assert all(q["throughput_p95"] > q["throughput_p05"] for q in u["points"])


def test_beta_from_extreme_intervals():
    lo = np.array([0.0, 0.999, 0.0, 0.1, 0.3, 0.01])
    hi = np.array([1.0, 1.0, 0.001, 0.9, 0.31, 0.99])
    a, b = beta_from_interval(lo, hi)
    q = stats.beta.ppf([[0.025], [0.975]], a, b)
    np.testing.assert_allclose(q[0], np.clip(lo, 1e-9, 1), atol=1e-8)
    np.testing.assert_allclose(q[1], np.clip(hi, 0, 1 - 1e-9), atol=1e-8)


def test_batched_draws_agree_with_the_full_model_per_draw(tmp_path):
    from allocator.analysis.uncertainty import _looped_throughput, batched_throughput, draw_problems
    from allocator.core.space import iter_subsets

    p = dict(PROBLEM)
    p["drafters"] = [
        dict(
            PROBLEM["drafters"][0],
            acceptance=[0.9, 0.72],
            acceptance_interval=[jeffreys(90, 100), jeffreys(65, 90)],
        ),
        PROBLEM["drafters"][1],
        dict(PROBLEM["drafters"][2], acceptance=1.0, acceptance_interval=jeffreys(30, 30)),
    ]
    p["budget"] = {"draft_cost_per_token": 0.06}
    p["verifier"] = {"pass_cost": 1.0, "token_cost": 0.02}
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(p))
    prob = api.load(path)
    problems, _ = draw_problems(prob, 25, seed=3)
    acc = np.stack([q.acceptance for q in problems])
    acc[0, 2] = 1.0  # a draw at exactly 1 (the limit, no 0 * log 0)
    problems[0] = prob.replace(acceptance=acc[0])
    for members in iter_subsets(prob, 100):
        t1, f1 = batched_throughput(prob, members, acc)
        t2, f2 = _looped_throughput(prob, problems, members)
        np.testing.assert_allclose(t1, t2, rtol=1e-12)
        np.testing.assert_array_equal(f1, f2)
        assert 0 < f1.mean() < 1  # the budget binds somewhere


@pytest.mark.parametrize("quantile", [None, 0.1])
def test_sampling_reports_progress_to_a_callback(tmp_path, quantile):
    """PROBLEM has 3 drafters: 7 subsets x 6 draft lengths = 42 configurations, each
    evaluated under every draw, then every configuration of the reported front under
    every draw; the callback sees that count rise to the total, never past it."""
    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    prob = api.load(path)
    result = api.solve(prob)
    n_draws = 30
    calls = []
    rep = analyse(
        prob,
        result.front,
        n_draws,
        seed=2,
        quantile=quantile,
        progress=lambda d, t, f: calls.append((d, t, f)),
    )
    want = 42 * n_draws + len(rep.front) * n_draws
    assert calls[-1] == (want, want, None)
    done = [d for d, _, _ in calls]
    assert done == sorted(done) and done[0] == 0
    assert all(d <= t for d, t, _ in calls)
    assert 42 * n_draws in done  # the search over, the front's scoring begins


def test_samples_bar_is_drawn_on_a_terminal_only(tmp_path, monkeypatch):
    """`solve --samples` draws the project's rich bar on stderr when stderr is a terminal
    (and not with --json -, whose stdout must hold only JSON)."""
    import io

    from rich.console import Console

    from allocator.cli import progress as progress_module

    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    screen = io.StringIO()
    monkeypatch.setattr(
        progress_module, "err", Console(file=screen, force_terminal=True, width=120)
    )
    r = run("solve", path, "--samples", 50, "--json", tmp_path / "out.json")
    assert r.exit_code == 0, r.output
    drawn = screen.getvalue()
    assert "sampling 50 draws" in drawn
    screen.truncate(0)
    screen.seek(0)
    r = run("solve", path, "--samples", 50, "--json", "-")
    assert r.exit_code == 0, r.output
    assert "sampling" not in screen.getvalue()


def test_a_replaced_problem_is_sampled_as_replaced(tmp_path):
    """`Problem` is what is sampled, not the file it came from: intervals, point values
    and workload overrides changed with `Problem.replace` are the ones drawn under."""
    from dataclasses import replace

    from allocator.analysis.uncertainty import draw_problems

    path = tmp_path / "u.yaml"
    path.write_text(yaml.safe_dump(PROBLEM))
    prob = api.load(path)
    # a's interval replaced by the Jeffreys interval of 20 successes in 100 trials: its
    # draws follow Beta(20.5, 80.5), not the file's Beta(72.5, 28.5)
    iv = prob.acceptance_interval.copy()
    iv[0, :, :] = jeffreys(20, 100)
    moved = prob.replace(acceptance_interval=iv)
    d, names = posterior_draws(moved, 20000, seed=4)
    post = stats.beta(20.5, 80.5)
    assert d[:, 0, 0].mean() == pytest.approx(post.mean(), abs=4 * post.std() / np.sqrt(2e4))
    assert d[:, 0, 0].std() == pytest.approx(post.std(), rel=0.03)
    # c's interval removed: c keeps a replaced point value in every draw
    iv[2] = np.nan
    acc = prob.acceptance.copy()
    acc[2] = 0.33
    d, names = posterior_draws(prob.replace(acceptance_interval=iv, acceptance=acc), 50, seed=4)
    assert names == ["a", "b"] and np.all(d[:, 2] == 0.33)
    # no interval left: nothing to sample
    with pytest.raises(InputError, match="no drafter has an acceptance_interval"):
        analyse(prob.replace(acceptance_interval=None), api.solve(prob).front, 10)
    # a workload's override of a removed: a is drawn there too
    p = dict(PROBLEM)
    p["workloads"] = [{"name": "chat", "weight": 1.0, "acceptance": {"a": 0.9}}]
    path.write_text(yaml.safe_dump(p))
    prob = api.load(path)
    problems, names = draw_problems(prob, 200, seed=1)
    assert names == ["b", "c"]
    freed = prob.replace(
        workloads=tuple(
            replace(w, overrides=np.zeros(prob.n, bool), acceptance=prob.acceptance)
            for w in prob.workloads
        )
    )
    problems, names = draw_problems(freed, 200, seed=1)
    assert names == ["a", "b", "c"]
    chat_a = np.array([q.workloads[0].acceptance[0, 0] for q in problems])
    np.testing.assert_array_equal(chat_a, [q.acceptance[0, 0] for q in problems])
    assert chat_a.std() > 0.02
