"""`allocator estimate --format outcomes`: joint outcome logs → acceptance, intervals,
error correlations, factor loadings and workloads, checked against seeded synthetic
logs from drafters whose statistics are known."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.estimate import estimate
from allocator.estimate.correlation import (
    fit_loadings,
    latent_correlations,
    phi_correlations,
)
from allocator.io.spec import load_problem
from tests.support.cli_runner import run
from tests.support.synthetic_logs import simulate_outcomes, write_outcomes_csv, write_outcomes_jsonl

ACC = np.array([[0.8, 0.7, 0.55], [0.6, 0.5, 0.45]])  # position-dependent
CORR = np.array([[1.0, 0.5], [0.5, 1.0]])  # correlated errors
NAMES = ["small", "tiny"]


def costs(tiny=0.05):
    """``--unit-cost`` options for both drafters (small costs 0.1)."""
    return ["--unit-cost", "small=0.1", "--unit-cost", f"tiny={tiny}"]


def make_log(tmp_path, seed, rounds=300, k=3, acc=ACC, corr=CORR, names=NAMES, name="log.csv"):
    rng = np.random.default_rng(seed)
    r, p, o = simulate_outcomes(rng, acc, corr, rounds, k)
    path = tmp_path / name
    write_outcomes_csv(path, names, r, p, o)
    return path, (r, p, o)


def test_interval_covers_truth_at_stated_rate(tmp_path):
    """Over 200 seeded logs, the 95% intervals hold the true a_i(j) about 95% of the time."""
    hits = []
    for seed in range(200):
        path, _ = make_log(tmp_path, seed, rounds=150)
        est = estimate(path, "outcomes", tmp_path / "p.yaml", errors="independent")
        for i, d in enumerate(est.drafters):
            lo, hi = d.interval
            j = len(lo)
            truth = ACC[i, :j]
            hits.extend(((lo <= truth) & (truth <= hi)).tolist())
    rate = np.mean(hits)
    assert len(hits) >= 1000
    assert 0.925 <= rate <= 0.975, rate


def test_estimates_converge_to_truth(tmp_path):
    path, (r, p, o) = make_log(tmp_path, 7, rounds=20000)
    est = estimate(path, "outcomes", tmp_path / "p.yaml", errors="independent")
    for i, d in enumerate(est.drafters):
        assert len(d.acceptance) == 3
        se = np.sqrt(ACC[i] * (1 - ACC[i]) / d.trials)
        assert np.all(np.abs(d.acceptance - ACC[i]) < 4 * se)
        # counts straight from the rows, by position
        for j in (1, 2, 3):
            rows = p == j
            assert d.trials[j - 1] == rows.sum()
            assert d.successes[j - 1] == o[rows, i].sum()


def test_positions_trimmed_where_data_run_out(tmp_path):
    # with low acceptance few rounds reach the late positions
    acc = np.array([[0.3], [0.2]])
    path, (r, p, o) = make_log(tmp_path, 3, rounds=200, k=8, acc=acc)
    est = estimate(path, "outcomes", tmp_path / "p.yaml", errors="independent", min_trials=30)
    counts = np.bincount(p)[1:]
    keep = int(np.argmax(counts < 30)) if (counts < 30).any() else len(counts)
    assert len(est.drafters[0].trials) == keep
    assert np.all(est.drafters[0].trials >= 30)


def test_phi_is_pearson_of_error_indicators():
    rng = np.random.default_rng(1)
    e = (rng.random((500, 3)) < [0.3, 0.4, 0.5]).astype(int)
    e[:, 2] = np.where(rng.random(500) < 0.5, e[:, 0], e[:, 2])
    np.testing.assert_allclose(phi_correlations(e), np.corrcoef(e.T), atol=1e-12)


def test_latent_correlation_and_factor_loadings_recovered():
    beta = np.array([0.8, 0.6, 0.3])
    corr = np.outer(beta, beta)
    np.fill_diagonal(corr, 1.0)
    acc = np.array([[0.7, 0.6], [0.6, 0.5], [0.5, 0.5]])
    rng = np.random.default_rng(11)
    r, p, o = simulate_outcomes(rng, acc, corr, 30000, 4)
    latent = latent_correlations(1 - o, p - 1, int(p.max()))
    iu = np.triu_indices(3, 1)
    np.testing.assert_allclose(latent[iu], corr[iu], atol=0.05)
    np.testing.assert_allclose(fit_loadings(latent), beta, atol=0.07)


def test_factor_fit_exact_on_a_one_factor_matrix():
    beta = np.array([0.9, -0.5, 0.4, 0.7])
    r = np.outer(beta, beta)
    np.fill_diagonal(r, 1.0)
    b = fit_loadings(r)
    b = b * np.sign(b[0])
    np.testing.assert_allclose(b, beta, atol=1e-5)


def test_cli_writes_problem_with_intervals_and_correlations(tmp_path):
    path, _ = make_log(tmp_path, 5, rounds=2000)
    out = tmp_path / "est.yaml"
    res = run(
        "estimate",
        path,
        "--out",
        out,
        *costs(),
        "--json",
        "-",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    spec = load_problem(out)  # valid problem file
    assert spec.convention == "bonus"
    assert spec.errors.model == "empirical" and spec.errors.outcomes == "log.csv"
    assert [d.name for d in spec.drafters] == NAMES
    for d in spec.drafters:
        assert len(d.acceptance) == len(d.acceptance_interval) == 3
        for a, (lo, hi) in zip(d.acceptance, d.acceptance_interval, strict=True):
            assert lo < a < hi
    text = out.read_text()
    assert "small ~ tiny: phi" in text and "latent" in text
    phi = doc["report"]["phi_correlation"][0][1]
    assert phi > 0.1  # errors were drawn positively correlated
    assert doc["missing_costs"] == []


def test_empirical_path_is_relative_to_the_output(tmp_path):
    path, _ = make_log(tmp_path, 5, rounds=300)
    sub = tmp_path / "plans"
    sub.mkdir()
    out = sub / "p.yaml"
    assert run("estimate", path, "--out", out).exit_code == 0
    data = yaml.safe_load(out.read_text())
    assert data["errors"]["outcomes"] == "../log.csv"
    assert (out.parent / data["errors"]["outcomes"]).resolve() == path.resolve()


def test_factor_errors_written(tmp_path):
    path, _ = make_log(tmp_path, 6, rounds=3000)
    out = tmp_path / "f.yaml"
    res = run(
        "estimate",
        path,
        "--out",
        out,
        "--errors",
        "factor",
        *costs(tiny=0.1),
    )
    assert res.exit_code == 0, res.output
    spec = load_problem(out)
    assert spec.errors.model == "factor"
    b = spec.errors.loadings
    # two drafters: only the product is identified, and it is the latent r = 0.5
    assert abs(b["small"] * b["tiny"] - 0.5) < 0.1


def test_missing_costs_are_flagged_and_file_does_not_validate(tmp_path):
    path, _ = make_log(tmp_path, 5, rounds=300)
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--out", out, "--unit-cost", "small=0.1")
    assert res.exit_code == 0
    assert "costs must be filled in" in res.stderr and "tiny" in res.stderr
    text = out.read_text()
    assert "FILL IN" in text
    solved = run("solve", out)
    assert solved.exit_code == 2
    assert "drafters[tiny].unit_cost" in solved.stderr


def test_costs_file(tmp_path):
    path, _ = make_log(tmp_path, 5, rounds=300)
    costs = tmp_path / "costs.yaml"
    costs.write_text(
        "unit_cost: {small: 0.1, tiny: 0.04}\nhosting_cost: {small: 2}\n"
        "verifier: {pass_cost: 1.0, token_cost: 0.01}\n"
    )
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--out", out, "--costs", costs, "--unit-cost", "tiny=0.05")
    assert res.exit_code == 0, res.output
    spec = load_problem(out)
    assert [d.unit_cost for d in spec.drafters] == [0.1, 0.05]  # the option wins
    assert spec.drafters[0].hosting_cost == 2.0
    assert spec.verifier.token_cost == 0.01


def test_workloads_get_their_own_acceptance_and_row_share(tmp_path):
    rng = np.random.default_rng(9)
    chat = simulate_outcomes(rng, [[0.85], [0.7]], CORR, 3000, 3)
    code = simulate_outcomes(rng, [[0.5], [0.3]], CORR, 2000, 3)
    r = np.concatenate([chat[0], code[0] + 3000])
    p = np.concatenate([chat[1], code[1]])
    o = np.concatenate([chat[2], code[2]])
    w = ["chat"] * len(chat[0]) + ["code"] * len(code[0])
    path = tmp_path / "w.csv"
    write_outcomes_csv(path, NAMES, r, p, o, workloads=w)
    out = tmp_path / "w.yaml"
    res = run("estimate", path, "--out", out, *costs(tiny=0.1))
    assert res.exit_code == 0, res.output
    spec = load_problem(out)
    by = {wl.name: wl for wl in spec.workloads}
    assert set(by) == {"chat", "code"}
    assert by["chat"].weight == pytest.approx(len(chat[0]) / len(p), abs=1e-6)
    assert by["chat"].weight + by["code"].weight == pytest.approx(1.0, abs=1e-5)
    assert np.mean(by["chat"].acceptance["small"]) == pytest.approx(0.85, abs=0.03)
    assert np.mean(by["code"].acceptance["tiny"]) == pytest.approx(0.3, abs=0.04)


def test_jsonl_gives_the_same_estimate(tmp_path):
    rng = np.random.default_rng(4)
    r, p, o = simulate_outcomes(rng, ACC, CORR, 500, 3)
    write_outcomes_csv(tmp_path / "a.csv", NAMES, r, p, o)
    write_outcomes_jsonl(tmp_path / "a.jsonl", NAMES, r, p, o)
    e1 = estimate(tmp_path / "a.csv", "outcomes", tmp_path / "x.yaml", errors="independent")
    e2 = estimate(tmp_path / "a.jsonl", "outcomes", tmp_path / "x.yaml", errors="independent")
    for a, b in zip(e1.drafters, e2.drafters, strict=True):
        np.testing.assert_array_equal(a.successes, b.successes)
        np.testing.assert_array_equal(a.trials, b.trials)


def test_round_trip_estimate_then_solve(tmp_path):
    path, _ = make_log(tmp_path, 5, rounds=2000)
    out = tmp_path / "p.yaml"
    res = run(
        "estimate",
        path,
        "--out",
        out,
        "--errors",
        "independent",
        *costs(tiny=0.05),
    )
    assert res.exit_code == 0, res.output
    solved = run("solve", out, "--json", "-")
    assert solved.exit_code == 0, solved.output
    doc = json.loads(solved.stdout)
    spec = load_problem(out)
    # the best single-drafter, k=1 point equals 1 + a(1) over 1 + rho (bonus convention)
    # (the cheapest point, so always on the front)
    (one,) = [p for p in doc["front"] if p["k"] == 1 and p["drafters"] == ["tiny"]]
    a1 = spec.drafters[1].acceptance[0]
    assert one["throughput"] == pytest.approx((1 + a1) / (1 + 0.05), rel=1e-9)
    assert doc["front"]


def test_round_trip_with_the_empirical_model(tmp_path):
    """The default output (errors: empirical, pointing at the log) solves as written."""
    path, _ = make_log(tmp_path, 5, rounds=2000)
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--out", out, *costs())
    assert res.exit_code == 0, res.output
    solved = run("solve", out, "--json", "-")
    assert solved.exit_code == 0, solved.output
    assert json.loads(solved.stdout)["front"]


BAD = [
    ("round,position,a\n1,1,2\n", "is not 0 or 1"),
    ("round,position,a\n1,1,yes\n", "is not 0 or 1"),
    ("round,a\n1,1\n", "missing column(s) position"),
    ("position,a\n1,1\n3,0\n", "no rows at position 2"),
    ("position,a\n0,1\n", "position 0 is below 1"),
    ("round,position\n1,1\n", "no drafter columns"),
    ("round,position,a\n1,2,1\n", "position 2 where 1 was expected"),
    ("round,position,a\n1,1,1\n1,3,0\n", "position 3 where 2 was expected"),
    ("round,position,a\n1,1,1\n2,1,0\n1,1,1\n", "appears in two places"),
    ("round,position,a\n1,x,1\n", "is not an integer"),
    ("round,position,a\n1,1\n", "values for 3 columns"),
    ("round,position,a\n", "holds no rows"),
    ("round,position,workload,a\n1,1,chat,1\n1,2,code,1\n", "changes workload"),
]


@pytest.mark.parametrize("text,needle", BAD)
def test_bad_logs_one_line_exit_2_nothing_written(tmp_path, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--out", out, "--min-count", "1")
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert needle in lines[0]
    assert not out.exists()
    assert "Traceback" not in res.output


def test_bad_options(tmp_path):
    path, _ = make_log(tmp_path, 5, rounds=100)
    out = tmp_path / "p.yaml"
    for args, needle in [
        (["--format", "csv"], "--format"),
        (["--errors", "gaussian"], "--errors"),
        (["--unit-cost", "small"], "--unit-cost"),
        (["--unit-cost", "nobody=0.1"], "unknown drafter 'nobody'"),
        (["--unit-cost", "small=-1"], ">= 0"),
        (["--min-count", "100000", "--errors", "independent"], "at least 100000"),
        (["--costs", tmp_path / "none.yaml"], "--costs"),
    ]:
        res = run("estimate", path, "--out", out, *args)
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not out.exists()
    res = run("estimate", tmp_path / "missing.csv", "--out", out)
    assert res.exit_code == 2 and "file not found" in res.stderr
    res = run("estimate", path, "--out", tmp_path / "nodir" / "p.yaml")
    assert res.exit_code == 2 and "--out" in res.stderr


def test_jsonl_with_the_empirical_model_is_refused(tmp_path):
    rng = np.random.default_rng(4)
    r, p, o = simulate_outcomes(rng, ACC, CORR, 100, 3)
    write_outcomes_jsonl(tmp_path / "a.jsonl", NAMES, r, p, o)
    out = tmp_path / "p.yaml"
    res = run("estimate", tmp_path / "a.jsonl", "--out", out)
    assert res.exit_code == 2 and "reads CSV logs" in res.stderr
    assert not out.exists()
    assert run("estimate", tmp_path / "a.jsonl", "--out", out, "--errors", "factor").exit_code == 0


def test_empirical_keeps_every_logged_position(tmp_path):
    path, (r, p, o) = make_log(tmp_path, 3, rounds=100, k=8, acc=np.array([[0.5], [0.4]]))
    est = estimate(path, "outcomes", tmp_path / "p.yaml")
    assert len(est.drafters[0].trials) == p.max()
    np.testing.assert_array_equal(est.drafters[0].trials, np.bincount(p)[1:])


def test_log_without_rounds_is_read_by_position(tmp_path):
    """A harness logging a fixed number of rows per position, in any order."""
    rng = np.random.default_rng(21)
    truth = [0.8, 0.6, 0.4]
    rows = ["position,a"]
    succ = []
    for j, a in enumerate(truth, start=1):
        x = rng.random(400) < a
        succ.append(int(x.sum()))
        rows += [f"{j},{int(v)}" for v in x]
    order = [rows[0]] + [rows[1:][i] for i in rng.permutation(len(rows) - 1)]
    path = tmp_path / "byposition.csv"
    path.write_text("\n".join(order) + "\n")
    est = estimate(path, "outcomes", tmp_path / "p.yaml", errors="independent")
    np.testing.assert_array_equal(est.drafters[0].trials, [400, 400, 400])
    np.testing.assert_array_equal(est.drafters[0].successes, succ)


def test_factor_round_trip_reproduces_the_logged_joint_failures(tmp_path):
    """estimate --errors factor, then evaluate the pair: its pooled acceptance at
    position 1 matches the log's own rate of rows where someone was right."""
    path, (r, p, o) = make_log(tmp_path, 13, rounds=20000)
    out = tmp_path / "f.yaml"
    res = run(
        "estimate", path, "--out", out, "--errors", "factor",
        *costs(tiny=0.1),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    ev = run("evaluate", out, "--drafters", "small,tiny", "--k", "1", "--json", "-")
    assert ev.exit_code == 0, ev.output
    pooled = json.loads(ev.stdout)["pooled_acceptance"]
    first = p == 1
    logged = o[first].max(axis=1).mean()
    se = np.sqrt(logged * (1 - logged) / first.sum())
    assert abs(pooled - logged) < 4 * se + 0.003
    # and independence would have been visibly wrong here
    a = o[first].mean(axis=0)
    assert abs((1 - (1 - a[0]) * (1 - a[1])) - logged) > 8 * se


def test_log_round_trip_with_samples(tmp_path):
    out = tmp_path / "l.yaml"
    fixture = Path(__file__).resolve().parents[2] / "support" / "fixtures" / "vllm_spec.log"
    res = run(
        "estimate", fixture, "--format", "vllm-log", "--out", out,
        "--drafter", "d", "--unit-cost", "d=0.1",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    solved = run("solve", out, "--samples", "50", "--json", "-")
    assert solved.exit_code == 0, solved.output
    doc = json.loads(solved.stdout)
    assert [q["k"] for q in doc["uncertainty"]["points"]] == [f["k"] for f in doc["front"]]
