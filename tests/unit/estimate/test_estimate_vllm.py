"""`allocator estimate --format vllm-metrics|vllm-log`: vLLM's counters and log lines."""

import json
from pathlib import Path

import numpy as np
import pytest

from allocator.estimate import estimate
from allocator.io.spec import load_problem
from tests.support.cli_runner import run
from tests.support.synthetic_logs import (
    simulate_chain,
    simulate_short_drafts,
    vllm_exposition,
    vllm_log_line,
)

FIXTURES = Path(__file__).resolve().parents[2] / "support" / "fixtures"
TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def estimate_metrics(tmp_path, text: str, *options):
    """Write ``text`` to ``m.prom`` and ``estimate`` it as ``vllm-metrics`` into ``p.yaml``
    (both in ``tmp_path``), with any further ``options``."""
    path = tmp_path / "m.prom"
    path.write_text(text)
    return run("estimate", path, "--format", "vllm-metrics", "--out", tmp_path / "p.yaml", *options)


def estimate_fixture(out):
    """``estimate`` the metrics fixture into ``out``, with a cost and a serving model."""
    return run(
        "estimate",
        FIXTURES / "vllm_metrics.prom",
        "--format",
        "vllm-metrics",
        "--out",
        out,
        "--unit-cost",
        f"{TARGET}=0.05",
        "--model",
        f"{TARGET}=meta-llama/Llama-3.2-1B-Instruct",
    )


def test_metrics_fixture(tmp_path):
    """The fixture: two engines (summed), _created series, other families, histograms."""
    out = tmp_path / "m.yaml"
    res = estimate_fixture(out)
    assert res.exit_code == 0, res.output
    spec = load_problem(out)
    assert spec.convention == "bonus"
    assert spec.search.k.max == 3
    (d,) = spec.drafters
    assert d.name == TARGET and d.model == "meta-llama/Llama-3.2-1B-Instruct"
    # engine 0 + engine 1, from the fixture's numbers
    drafts = 6000 + 4000
    per_pos = [4500 + 2900, 3060 + 1950, 1836 + 1170]
    expected = [per_pos[0] / drafts, per_pos[1] / per_pos[0], per_pos[2] / per_pos[1]]
    np.testing.assert_allclose(d.acceptance, expected, atol=1e-6)
    for (lo, hi), a in zip(d.acceptance_interval, expected, strict=True):
        assert lo < a < hi and hi - lo < 0.05


def test_metrics_coverage_over_seeds(tmp_path):
    """Counters drawn from a known position-dependent chain: the intervals cover the
    truth at about the stated rate."""
    truth = np.array([0.8, 0.7, 0.6, 0.5])
    hits = []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        engines = [(n, simulate_chain(rng, truth, n, 4)) for n in (120, 80)]
        text = vllm_exposition({"m": engines})
        path = tmp_path / f"m{seed}.prom"
        path.write_text(text)
        try:
            est = estimate(path, "vllm-metrics", tmp_path / "x.yaml", min_trials=1)
        finally:
            path.unlink()
        lo, hi = est.drafters[0].interval
        hits.extend(((lo <= truth[: len(lo)]) & (truth[: len(lo)] <= hi)).tolist())
    rate = np.mean(hits)
    assert len(hits) >= 1100
    assert 0.925 <= rate <= 0.975, rate


def test_metrics_several_models_and_real_exposition(tmp_path):
    rng = np.random.default_rng(2)
    text = vllm_exposition(
        {
            "small": [(5000, simulate_chain(rng, [0.9, 0.8], 5000, 5))],
            "tiny": [(3000, simulate_chain(rng, [0.6], 3000, 2))],
        }
    )
    assert "_created" in text  # prometheus_client writes them; they must be ignored
    path = tmp_path / "m.prom"
    path.write_text(text)
    est = estimate(path, "vllm-metrics", tmp_path / "x.yaml")
    by = {d.name: d for d in est.drafters}
    assert set(by) == {"small", "tiny"} and est.k_max == 5
    assert by["small"].acceptance[0] == pytest.approx(0.9, abs=0.02)
    assert by["small"].acceptance[2] == pytest.approx(0.8, abs=0.03)
    assert len(by["tiny"].acceptance) == 2


def test_several_scrapes_take_the_last(tmp_path):
    rng = np.random.default_rng(3)
    first = simulate_chain(rng, [0.7], 1000, 3)
    later = first + simulate_chain(rng, [0.7], 1000, 3)
    text = vllm_exposition({"m": [(1000, first)]}) + vllm_exposition({"m": [(2000, later)]})
    # two scrapes of one run share their _created times; two registries do not, so drop them
    text = "".join(line for line in text.splitlines(True) if "_created" not in line)
    path = tmp_path / "m.prom"
    path.write_text(text)
    est = estimate(path, "vllm-metrics", tmp_path / "x.yaml")
    assert est.drafters[0].trials[0] == 2000
    assert est.drafters[0].successes[0] == later[0]


def test_log_fixture(tmp_path):
    out = tmp_path / "l.yaml"
    res = run(
        "estimate",
        FIXTURES / "vllm_spec.log",
        "--format",
        "vllm-log",
        "--out",
        out,
        "--drafter",
        "llama-1b",
        "--unit-cost",
        "llama-1b=0.1",
        "--min-count",
        "1",
        "--json",
        "-",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (d,) = doc["drafters"]
    # line 1: 200 drafts, per position 150, 104, 70; line 2: 173 drafts, 121, 88, 57
    assert d["successes"] == [150 + 121, 104 + 88, 70 + 57]
    assert d["trials"] == [200 + 173, 150 + 121, 104 + 88]
    spec = load_problem(out)
    assert spec.search.k.max == 3 and spec.convention == "bonus"


def test_log_reconstruction_within_rounding_and_coverage(tmp_path):
    truth = np.array([0.75, 0.65, 0.55])
    hits = []
    for seed in range(150):
        rng = np.random.default_rng(seed)
        lines, totals, drafts = [], np.zeros(3, int), 0
        for n in rng.integers(50, 400, size=4):
            per_pos = simulate_chain(rng, truth, int(n), 3)
            lines.append(vllm_log_line(int(n), per_pos))
            lines.append("INFO 06-03 14:05:22 [loggers.py:116] Engine 000: Avg prompt ...")
            totals += per_pos
            drafts += int(n)
        path = tmp_path / f"v{seed}.log"
        path.write_text("\n".join(lines) + "\n")
        try:
            est = estimate(path, "vllm-log", tmp_path / "x.yaml", min_trials=1)
        finally:
            path.unlink()
        d = est.drafters[0]
        assert d.trials[0] == drafts
        # per line at most 0.0005 * drafts + 1 off; summed over 4 lines
        assert np.all(np.abs(d.successes - totals) <= 0.0005 * drafts + 4)
        lo, hi = d.interval
        hits.extend(((lo <= truth) & (truth <= hi)).tolist())
    assert 0.92 <= np.mean(hits) <= 0.98, np.mean(hits)


def test_log_counts_sum_to_accepted_when_floors_already_do(tmp_path):
    """1999 drafts, 999 then 499 accepted: the rates 0.500, 0.250 give 999.5 and
    499.75, whose floors already sum to Accepted (1498); rounding each to the nearest
    would give 1000 + 500."""
    path = tmp_path / "v.log"
    path.write_text(vllm_log_line(1999, np.array([999, 499])) + "\n")
    assert "rate: 0.500, 0.250," in path.read_text()
    est = estimate(path, "vllm-log", tmp_path / "x.yaml", min_trials=1)
    np.testing.assert_array_equal(est.drafters[0].successes, [999, 499])


BAD_METRICS = [
    (
        "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 1.0\n',
        "no vllm:spec_decode_* counters",
    ),
    ('vllm:spec_decode_num_drafts_total{model_name="m"} 10\n', "missing"),
    ("this is { not prometheus\n", "not Prometheus text"),
    (  # past 2**53 the int64 counts wrapped: "only -9223372036854775808 round(s)"
        'vllm:spec_decode_num_drafts_total{model_name="m"} 1e30\n',
        "num_drafts_total has value 1e+30, too large to be a count",
    ),
]


@pytest.mark.parametrize("text,needle", BAD_METRICS)
def test_bad_metrics(tmp_path, text, needle):
    out = tmp_path / "p.yaml"
    res = estimate_metrics(tmp_path, text)
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
    assert not out.exists()


def test_metrics_partial_restart_refused(tmp_path):
    """One counter of a server goes down while the others do not: not a restart."""
    text = (FIXTURES / "vllm_metrics.prom").read_text()
    restarted = text.replace(
        'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 6000.0',
        'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 50.0',
    )
    out = tmp_path / "p.yaml"
    res = estimate_metrics(tmp_path, text + restarted)
    assert res.exit_code == 2 and "restart together" in res.stderr, res.stderr
    assert not out.exists()


def test_metrics_per_position_counts_that_increase(tmp_path):
    text = (
        (FIXTURES / "vllm_metrics.prom")
        .read_text()
        .replace('position="2"} 1836.0', 'position="2"} 4836.0')
    )
    res = estimate_metrics(tmp_path, text)
    assert res.exit_code == 2 and "cannot increase" in res.stderr, res.stderr


def test_metrics_without_drafts(tmp_path):
    text = vllm_exposition({"m": [(0, np.zeros(3, int))]})
    res = estimate_metrics(tmp_path, text)
    assert res.exit_code == 2 and "no drafts recorded" in res.stderr, res.stderr


LINE = (
    "SpecDecoding metrics: Mean acceptance length: 2.62, Accepted: 324 tokens, "
    "Drafted: 600 tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 54.0%"
)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("INFO nothing to see\n", "no 'SpecDecoding metrics:' lines"),
        (LINE.format(rates="0.350, 0.520, 0.750") + "\n", "increase with position"),
        (
            LINE.replace("Drafted: 600", "Drafted: 601").format(rates="0.750, 0.520, 0.350"),
            "no number of drafts",
        ),
        (
            LINE.replace("Accepted: 324", "Accepted: 900").format(rates="0.750, 0.520, 0.350"),
            "disagree",
        ),
        ("SpecDecoding metrics: Accepted: 3 tokens, Drafted: 6 tokens\n", "without"),
        (  # past 2**53: int64 overflow, a traceback before
            LINE.replace("Accepted: 324", "Accepted: 324" + "0" * 21)
            .replace("Drafted: 600", "Drafted: 600" + "0" * 21)
            .format(rates="0.750, 0.520, 0.350"),
            "too large to be a token count",
        ),
    ],
)
def test_bad_logs(tmp_path, text, needle):
    path = tmp_path / "v.log"
    path.write_text(text)
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--format", "vllm-log", "--out", out, "--min-count", "1")
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
    assert not out.exists()


def test_round_trip_metrics_then_solve_and_export(tmp_path):
    out = tmp_path / "m.yaml"
    res = estimate_fixture(out)
    assert res.exit_code == 0, res.output
    solved = run("solve", out, "--json", "-")
    assert solved.exit_code == 0, solved.output
    front = json.loads(solved.stdout)["front"]
    best = max(front, key=lambda p: p["throughput"])
    exported = run("solve", out, "--export", "vllm")
    assert exported.exit_code == 0, exported.output
    cfg = json.loads(exported.stdout)
    assert cfg == {
        "method": "draft_model",
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": best["k"],
    }


@pytest.mark.parametrize(
    "fmt,args,needle",
    [
        ("vllm-metrics", ["--errors", "factor"], "--errors: applies to --format outcomes only"),
        ("vllm-log", ["--convention", "paper"], "--convention: applies to --format outcomes"),
        ("vllm-metrics", ["--topk", "2"], "--topk: applies to --format sglang-requests only"),
        ("vllm-log", ["--adaptive"], "--adaptive: applies to --format sglang-requests only"),
        ("vllm-metrics", ["--model", "nobody=x"], "unknown drafter 'nobody'"),
    ],
)
def test_options_of_other_formats_refused(tmp_path, fmt, args, needle):
    src = FIXTURES / ("vllm_metrics.prom" if fmt == "vllm-metrics" else "vllm_spec.log")
    out = tmp_path / "p.yaml"
    res = run("estimate", src, "--format", fmt, "--out", out, *args)
    assert res.exit_code == 2 and needle in res.stderr, res.output
    assert not out.exists()


def test_older_log_format_with_rates_last(tmp_path):
    """vLLM 0.8's line puts the acceptance rate first and the per-position rates last."""
    drafts, per_pos = 550, np.array([442, 352, 247, 158, 88])
    line = (
        "INFO 04-02 18:23:33 [metrics.py:87] SpecDecoding metrics: Draft acceptance rate: "
        f"{100 * per_pos.sum() / (5 * drafts):.1f}%, Mean acceptance length: "
        f"{1 + per_pos.sum() / drafts:.2f}, Accepted: {per_pos.sum()} tokens, Drafted: "
        f"{5 * drafts} tokens, Per-position acceptance rate: "
        + ", ".join(f"{c / drafts:.3f}" for c in per_pos)
    )
    path = tmp_path / "old.log"
    path.write_text(line + "\n")
    est = estimate(path, "vllm-log", tmp_path / "x.yaml", min_trials=1)
    np.testing.assert_array_equal(est.drafters[0].successes, per_pos)
    np.testing.assert_array_equal(est.drafters[0].trials, [drafts, *per_pos[:-1]])


# ----------------------------------------------------------------- drafts shorter than k


def _coverage_short(tmp_path, lengths_of, seeds=200):
    """Coverage of the intervals (and of the old ratio's intervals) over seeded scrapes."""
    from scipy.stats import beta

    truth = np.array([0.8, 0.7, 0.6, 0.5])
    hits, old_hits, first = [], [], []
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        engines = []
        for n in (1500, 1000):
            per_pos, tokens = simulate_short_drafts(rng, truth, n, 4, lengths_of(rng, n))
            engines.append((n, per_pos, tokens))
        path = tmp_path / f"s{seed}.prom"
        path.write_text(vllm_exposition({"m": engines}))
        try:
            est = estimate(path, "vllm-metrics", tmp_path / "x.yaml", min_trials=1)
        finally:
            path.unlink()
        d = est.drafters[0]
        lo, hi = d.interval
        hits.append((lo <= truth) & (truth <= hi))
        s = sum(e[1] for e in engines)
        n = sum(e[0] for e in engines)
        naive_trials = np.concatenate(([n], s[:-1]))
        olo = beta.ppf(0.025, s + 0.5, naive_trials - s + 0.5)
        ohi = beta.ppf(0.975, s + 0.5, naive_trials - s + 0.5)
        old_hits.append((olo <= truth) & (truth <= ohi))
        # position 1: reached by at most the n drafts, bounded below like the others
        first.append(d.trials[0] == n and d.trials_low[0] <= n)
    return np.array(hits), np.array(old_hits), all(first)


def test_short_drafts_heavy_intervals_hold_the_truth(tmp_path):
    """Prompt-lookup-like drafts of 1 to 4 tokens: the old per_pos ratio misses the truth
    at later positions almost always; the bounded intervals hold it at every position."""
    hits, old, first_exact = _coverage_short(tmp_path, lambda rng, n: rng.integers(1, 5, n))
    assert first_exact
    assert old[:, 1:].mean() < 0.1  # the bias the issue reported
    rates = hits.mean(axis=0)
    assert np.all(rates >= 0.95), rates  # every position, the first included, is bounded


def test_short_drafts_few_keep_tight_intervals(tmp_path):
    """2% of drafts truncated: the intervals stay close to nominal and narrow."""

    def lengths(rng, n):
        out = np.full(n, 4)
        cut = rng.random(n) < 0.02
        out[cut] = rng.integers(1, 4, cut.sum())
        return out

    hits, _, _ = _coverage_short(tmp_path, lengths, seeds=150)
    rates = hits.mean(axis=0)
    assert np.all(rates >= 0.92), rates


def test_short_drafts_range_is_reported_and_point_is_inside(tmp_path):
    rng = np.random.default_rng(7)
    per_pos, tokens = simulate_short_drafts(rng, [0.8, 0.7, 0.6], 4000, 3, rng.integers(1, 4, 4000))
    out = tmp_path / "p.yaml"
    res = estimate_metrics(
        tmp_path, vllm_exposition({"m": [(4000, per_pos, tokens)]}), "--json", "-"
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rep = doc["report"]["models"]["m"]
    assert rep["short_drafts"] is True
    # hand-computed: deficit = 3 * 4000 - tokens; position 2's trials lie in
    # [per_pos[0] - min(deficit // 2, per_pos[0] - per_pos[1]), per_pos[0]]
    deficit = 3 * 4000 - tokens
    low2 = per_pos[0] - min(deficit // 2, per_pos[0] - per_pos[1])
    lo, hi = rep["acceptance_range"][1]
    assert lo == pytest.approx(per_pos[1] / per_pos[0]) and hi == pytest.approx(per_pos[1] / low2)
    # position 1 too: a draft of no token (grammar-rejected whole) is a draft, so the drafts
    # reaching it lie in [4000 - min(deficit // 3, 4000 - per_pos[0]), 4000]
    low1 = 4000 - min(deficit // 3, 4000 - per_pos[0])
    lo1, hi1 = rep["acceptance_range"][0]
    assert lo1 == pytest.approx(per_pos[0] / 4000) and hi1 == pytest.approx(per_pos[0] / low1)
    (d,) = doc["drafters"]
    assert lo1 <= d["acceptance"][0] <= hi1 and lo <= d["acceptance"][1] <= hi
    assert d["bounded_positions"] == rep["bounded_positions"] == [1, 2, 3]
    text = out.read_text()
    assert "shorter than the 3 positions" in text and "the first included" in text
    assert any("positions 1-3 of m are only bounded" in n for n in doc["notes"])
    assert "vllm-requests" in text


def _grammar_rejected(rng, n, k=4, share=0.3):
    """vLLM 0.33.0 under asynchronous scheduling: a draft the grammar rejects whole counts
    as a draft of 0 tokens (scheduler.py make_spec_decoding_stats); the rest draft k."""
    return np.where(rng.random(n) < share, 0, k)


def test_grammar_rejected_drafts_bound_position_one(tmp_path):
    """30% of drafts rejected whole by the grammar read 0.56 at position 1 for a true 0.8
    ("position 1 is exact" held only on the synchronous path): the bound holds the truth."""
    hits, _, _ = _coverage_short(tmp_path, _grammar_rejected, seeds=120)
    rates = hits.mean(axis=0)
    assert np.all(rates >= 0.95), rates
    rng = np.random.default_rng(11)
    per_pos, tokens = simulate_short_drafts(rng, [0.8] * 4, 20000, 4, _grammar_rejected(rng, 20000))
    assert per_pos[0] / 20000 == pytest.approx(0.56, abs=0.01)  # what the ratio reads
    path = tmp_path / "g.prom"
    path.write_text(vllm_exposition({"m": [(20000, per_pos, tokens)]}))
    d = estimate(path, "vllm-metrics", tmp_path / "x.yaml", min_trials=1).drafters[0]
    lo, hi = d.interval
    assert lo[0] <= 0.8 <= hi[0]


def test_log_grammar_rejected_drafts_bound_position_one(tmp_path):
    hits = []
    for seed in range(80):
        rng = np.random.default_rng(seed)
        lines = []
        for n in rng.integers(300, 600, size=3):
            per_pos, tokens = simulate_short_drafts(rng, [0.8, 0.7, 0.6], int(n), 3,
                                                    _grammar_rejected(rng, n, 3))  # fmt: skip
            lines.append(vllm_log_line(int(n), per_pos, drafted=tokens))
        path = tmp_path / f"g{seed}.log"
        path.write_text("\n".join(lines) + "\n")
        try:
            est = estimate(path, "vllm-log", tmp_path / "x.yaml", min_trials=1)
        finally:
            path.unlink()
        lo, hi = est.drafters[0].interval
        hits.append((lo <= [0.8, 0.7, 0.6]) & ([0.8, 0.7, 0.6] <= hi))
    assert np.all(np.mean(hits, axis=0) >= 0.95), np.mean(hits, axis=0)


def test_log_short_drafts_no_longer_refused_and_cover(tmp_path):
    """vllm-log lines whose Drafted is not drafts x k: read, not refused; intervals hold."""
    truth = np.array([0.7, 0.6, 0.5])
    hits = []
    for seed in range(120):
        rng = np.random.default_rng(seed)
        lines = []
        for n in rng.integers(200, 500, size=4):
            per_pos, tokens = simulate_short_drafts(rng, truth, int(n), 3, rng.integers(1, 4, n))
            lines.append(vllm_log_line(int(n), per_pos, drafted=tokens))
        path = tmp_path / f"l{seed}.log"
        path.write_text("\n".join(lines) + "\n")
        try:
            est = estimate(path, "vllm-log", tmp_path / "x.yaml", min_trials=1)
        finally:
            path.unlink()
        lo, hi = est.drafters[0].interval
        hits.append((lo <= truth) & (truth <= hi))
    rates = np.mean(hits, axis=0)
    assert rates[0] >= 0.9 and np.all(rates[1:] >= 0.95), rates


# ----------------------------------------------------------------- names and restarts


def test_openmetrics_underscore_names_read_like_colon_names(tmp_path):
    rng = np.random.default_rng(11)
    engines = [(3000, simulate_chain(rng, [0.8, 0.6], 3000, 3))]
    colon = vllm_exposition({"m": engines})
    om = vllm_exposition({"m": engines}, openmetrics=True).replace("vllm:", "vllm_")
    assert "# EOF" in om and "vllm_spec_decode_num_drafts_total" in om
    a, b = tmp_path / "a.prom", tmp_path / "b.txt"
    a.write_text(colon)
    b.write_text(om + om)  # two OpenMetrics scrapes of one run
    ea = estimate(a, "vllm-metrics", tmp_path / "x.yaml")
    eb = estimate(b, "vllm-metrics", tmp_path / "x.yaml")
    np.testing.assert_array_equal(ea.drafters[0].successes, eb.drafters[0].successes)
    np.testing.assert_array_equal(ea.drafters[0].trials, eb.drafters[0].trials)


def test_openmetrics_exactly_as_prometheus_client_writes_it(tmp_path):
    """prometheus_client's OpenMetrics exposition of vLLM's counters (no edits): TYPE
    lines keep the colon, samples use underscores. It used to fail as 'Clashing name'."""
    rng = np.random.default_rng(12)
    engines = [(2000, simulate_chain(rng, [0.8, 0.6], 2000, 3))] * 2
    om = vllm_exposition({"m": engines}, openmetrics=True)
    assert "# EOF" in om and "vllm:spec_decode_num_drafts" in om
    a, b = tmp_path / "a.prom", tmp_path / "b.txt"
    a.write_text(vllm_exposition({"m": engines}))
    b.write_text(om)
    ea = estimate(a, "vllm-metrics", tmp_path / "x.yaml")
    eb = estimate(b, "vllm-metrics", tmp_path / "x.yaml")
    np.testing.assert_array_equal(eb.drafters[0].trials, ea.drafters[0].trials)
    np.testing.assert_array_equal(eb.drafters[0].successes, ea.drafters[0].successes)
    # hand-computed from the simulated counters, summed over both engines
    per_pos = 2 * np.asarray(engines[0][1])
    np.testing.assert_array_equal(eb.drafters[0].successes, per_pos)
    np.testing.assert_array_equal(eb.drafters[0].trials, [4000, *per_pos[:-1]])


def test_restarted_server_segments_are_summed(tmp_path):
    """Two runs under one served model name: the second counts from zero (a value goes
    down) or past the first (only _created changes); either way both runs are summed."""
    rng = np.random.default_rng(5)
    first = simulate_chain(rng, [0.7], 1000, 3)
    second = simulate_chain(rng, [0.7], 1500, 3)
    run1 = vllm_exposition({"m": [(1000, first)]})
    import time

    time.sleep(0.01)  # a later registry: a later _created time
    run2 = vllm_exposition({"m": [(1500, second)]})
    path = tmp_path / "m.prom"
    path.write_text(run1 + run2)
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "--format", "vllm-metrics", "--out", out, "--min-count", "1")
    assert res.exit_code == 0, res.output
    est = estimate(path, "vllm-metrics", tmp_path / "x.yaml")
    assert est.drafters[0].trials[0] == 2500
    np.testing.assert_array_equal(est.drafters[0].successes, first + second)
    assert any("restarted 1 time" in n for n in est.notes)
    assert "restarted 1 time" in out.read_text()


def test_metrics_without_per_position_counter(tmp_path):
    text = vllm_exposition({"m": [(100, np.array([80, 60]))]})
    text = "".join(line for line in text.splitlines(True) if "per_pos" not in line)
    out = tmp_path / "p.yaml"
    res = estimate_metrics(tmp_path, text)
    assert res.exit_code == 2
    assert res.stderr.startswith("error: m.prom: ")
    assert len(res.stderr.strip().splitlines()) == 1
    assert "missing vllm:spec_decode_num_accepted_tokens_per_pos_total" in res.stderr
    assert not out.exists()


def test_metrics_more_draft_tokens_than_positions_refused(tmp_path):
    text = vllm_exposition({"m": [(100, np.array([80, 60]), 201)]})
    res = estimate_metrics(tmp_path, text)
    assert res.exit_code == 2 and "exceeds num_drafts x 2 positions" in res.stderr, res.stderr


def test_huge_counters_still_write_a_valid_interval(tmp_path):
    """2e15 drafts (a very long-lived deployment): the interval is narrower than the
    file's 6 decimals; rounded to nearest it was written lo == hi and the file did not
    validate. Rounded outward it holds the computed interval and stays lo < hi."""
    drafts = 2 * 10**15
    per_pos = np.array([1.6 * 10**15, 1.152 * 10**15])  # 0.8, then 0.72
    out = tmp_path / "p.yaml"
    res = estimate_metrics(
        tmp_path, vllm_exposition({"m": [(drafts, per_pos)]}), "--unit-cost", "m=0.1"
    )
    assert res.exit_code == 0, res.output
    d = load_problem(out).drafters[0]
    for (lo, hi), a in zip(d.acceptance_interval, [0.8, 0.72], strict=True):
        assert lo < a < hi and hi - lo <= 2.1e-6
