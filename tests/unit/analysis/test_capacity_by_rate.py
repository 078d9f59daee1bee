"""``allocator capacity --request-rate``: the SLO keys, the default number of prompts, the
search against brute force over candidates and replica counts (every candidate simulated
with ``bench`` at every replica count, no bound, no pruning), minimality, reproduction by
``bench``, the screening bounds as true bounds, workers and Ray giving the same answer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator import api
from allocator.analysis import replica as R
from allocator.analysis.capacity import rate_search as RS
from allocator.analysis.capacity import slo as S
from allocator.analysis.capacity.crossings import crossings
from allocator.analysis.request_source import request_source
from allocator.exceptions import InfeasibleError, ParameterError

from . import requests_problem as rp

FIXED = dict(input_len=200, output_len=40, num_prompts=200)


# ---------------------------------------------------------------- SLO keys
def test_slo_keys():
    got = S.parse_slos(
        ["p99_ttft_ms=500", "p99.9_itl_ms=120", "median_e2el_ms=9000", "mean_tpot_ms=30"]
    )
    assert [(s.key, s.latency, s.stat, s.percentile, s.ceiling_ms) for s in got] == [
        ("p99_ttft_ms", "ttft", "p99", 99.0, 500.0),
        ("p99.9_itl_ms", "itl", "p99.9", 99.9, 120.0),
        ("median_e2el_ms", "e2el", "median", 50.0, 9000.0),
        ("mean_tpot_ms", "tpot", "mean", None, 30.0),
    ]
    assert S.parse_slos({"p50_ttft_ms": 1.5})[0].percentile == 50.0


@pytest.mark.parametrize(
    "items, words",
    [
        (["p99_foo_ms=5"], "unknown SLO"),
        (["std_ttft_ms=5"], "unknown SLO"),
        (["p100_ttft_ms=5"], "(0, 100)"),
        (["p0_ttft_ms=5"], "(0, 100)"),
        (["p99_ttft_ms=abc"], "not a number"),
        (["p99_ttft_ms=-1"], "positive"),
        (["p99_ttft_ms=inf"], "positive"),
        (["p99_ttft_ms"], "KEY=MS"),
        (["p99_ttft_ms=1", "p99_ttft_ms=2"], "twice"),
        (["p99_ttft_ms=1", "p99.0_ttft_ms=2"], "twice (as p99_ttft_ms)"),
        (["median_tpot_ms=1", "p50_tpot_ms=2"], "twice (as median_tpot_ms)"),
        ([], "at least one"),
    ],
)
def test_bad_slos(items, words):
    with pytest.raises(ParameterError) as exc:
        S.parse_slos(items)
    assert exc.value.field == "slo" and words in exc.value.message


def test_default_prompts_leave_twenty_beyond_the_highest_percentile():
    def n(*items):
        return S.default_num_prompts(S.parse_slos(list(items)))[0]

    assert n("p99_ttft_ms=1") == 2000  # 20 beyond p99
    assert n("p99.9_ttft_ms=1", "p50_tpot_ms=1") == 20000
    assert n("p90_ttft_ms=1") == 1000  # 200 would do; at least 1000
    assert n("mean_ttft_ms=1", "median_itl_ms=1") == 1000
    count, why = S.default_num_prompts(S.parse_slos(["p99.99_ttft_ms=1"]))
    assert count == S.MAX_DEFAULT_PROMPTS and "capped" in why


# ---------------------------------------------------------------- candidates
def test_no_schedule_candidate_for_an_engine_that_takes_none():
    """SGLang takes no k by batch size: its candidates are chains and speculation off only,
    and a note says why; vLLM's include each drafter's schedule."""
    prob = rp.problem()
    vllm, _ = RS.candidates(prob, engine="vllm")
    sglang, notes = RS.candidates(prob, engine="sglang")
    assert any(c.config.is_schedule for c in vllm)
    assert sglang and not any(c.config.is_schedule for c in sglang)
    assert any("SGLang takes no k schedule" in n for n in notes)
    chains = {c.config.label() for c in vllm if not c.config.is_schedule}
    assert {c.config.label() for c in sglang} <= chains


# ---------------------------------------------------------------- against brute force
def configs(prob):
    """Every configuration the search claims for the test problem with search.k 1..2: off,
    each drafter at k 1 and 2, each drafter's schedule."""
    out = [R.Configuration.off(prob.names)]
    for name in prob.names:
        for k in (1, 2):
            out.append(R.configuration(prob, [name], k)[0])
        out.append(R.configuration(prob, [name], schedule=True, max_num_seqs=16)[0])
    return out


def sustains(prob, config, size, rate, slos, seed, saturation):
    if rate > saturation * (1 + 1e-12):
        return False
    r = api.bench(
        prob,
        drafters=config.drafters or None,
        k=config.k,
        schedule=config.is_schedule,
        max_num_seqs=size,
        request_rate=rate,
        seed=seed,
        **FIXED,
    )
    return all(r.metrics[s.key] <= s.ceiling_ms * (1 + 1e-12) for s in slos)


def brute_force(prob, rate, slos, sizes, seed, speculative=None, top=40):
    """Every candidate at every replica count 1..top, simulated with ``bench``: the fewest
    replicas of each, then the cheapest by (replicas, simplest)."""
    best = None
    for config in configs(prob):
        if speculative is not None and config.speculative != speculative:
            continue
        for size in sizes:
            cfg = config.truncated(size)
            sat = api.bench(
                prob,
                drafters=cfg.drafters or None,
                k=cfg.k,
                schedule=cfg.is_schedule,
                max_num_seqs=size,
                seed=seed,
                **FIXED,
            ).metrics["request_throughput"]
            for n in range(1, top + 1):
                if sustains(prob, cfg, size, rate / n, slos, seed, sat):
                    key = (n, RS.Candidate(cfg, size).key())
                    if best is None or key < best[0]:
                        best = (key, cfg, size, sat)
                    break
    return best


@pytest.mark.parametrize(
    "seed, rate, items",
    [
        (0, 30.0, ["p99_ttft_ms=400", "p99_tpot_ms=14"]),
        (1, 60.0, ["p90_ttft_ms=300", "mean_tpot_ms=12.5"]),
        (2, 12.0, ["median_e2el_ms=900", "p99_itl_ms=25"]),
    ],
)
@pytest.mark.slow
def test_capacity_matches_brute_force(seed, rate, items):
    """On small seeded cases (200 requests, max_num_seqs 4 or 16), the answer and the
    baseline are brute force's: every candidate simulated at every replica count; and they
    are minimal: one replica fewer misses an SLO or runs above saturation."""
    d = rp.data()
    d["search"]["k"] = {"min": 1, "max": 2}
    prob = rp.build(d)
    slos = S.parse_slos(items)
    got = api.size_fleet_for_rate(
        prob, rate, items, seed=seed, max_num_seqs=[4, 16], workers=1, **FIXED
    )
    want = brute_force(prob, rate, slos, [4, 16], seed)
    assert want is not None
    (n, _), cfg, size, sat = want
    assert got.best.replicas == n
    assert got.best.candidate.config.label() == cfg.label()
    assert got.best.candidate.max_num_seqs == size
    # minimal: n - 1 replicas fail
    if n > 1:
        assert not sustains(prob, cfg, size, rate / (n - 1), slos, seed, sat)
    plain = brute_force(prob, rate, slos, [4, 16], seed, speculative=False)
    assert got.baseline is not None and plain is not None
    assert got.baseline.replicas == plain[0][0]
    assert got.baseline.candidate.max_num_seqs == plain[2]
    doc = got.to_dict()
    assert doc["cost_per_hour"] == n * 2.0 and doc["gpus"] == 2 * n
    assert doc["saving"] == pytest.approx(1 - n / plain[0][0])
    assert doc["per_replica_request_rate"] == pytest.approx(rate / n)
    # the highest sustained rate brackets the answer's share
    assert rate / n <= doc["max_request_rate_per_replica"] + 1e-12
    if n > 1:
        assert doc["max_request_rate_per_replica"] < rate / (n - 1)


def test_bench_reproduces_the_answers_metrics():
    """The notes print the ``bench`` command; run with those arguments it gives the same
    metrics, every key."""
    prob = rp.problem()
    got = api.size_fleet_for_rate(
        prob,
        20.0,
        ["p99_ttft_ms=400", "p99_tpot_ms=15"],
        seed=3,
        max_num_seqs=[8, 16],
        workers=1,
        **FIXED,
    )
    c = got.best.candidate
    again = api.bench(
        prob,
        drafters=c.config.drafters or None,
        k=c.config.k,
        schedule=c.config.is_schedule,
        max_num_seqs=c.max_num_seqs,
        request_rate=got.best.per_replica_request_rate,
        seed=3,
        **FIXED,
    )
    assert again.metrics == got.best.metrics
    line = next(n for n in got.notes if "reproduce:" in n)
    assert f"--max-num-seqs {c.max_num_seqs}" in line and "--seed 3" in line
    assert repr(got.best.per_replica_request_rate) in line


@pytest.mark.slow
def test_with_a_trace_the_replicas_share_slows_the_trace():
    trace = "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
    d = rp.data(prefill_ms={"tokens": [16, 20000], "ms": [4.0, 400.0]})
    prob = rp.build(d)
    got = api.size_fleet_for_rate(
        prob, 10.0, ["p99_ttft_ms=2000"], trace=trace, num_prompts=300, max_num_seqs=[16], workers=1
    )
    again = api.bench(
        prob,
        trace=trace,
        num_prompts=300,
        request_rate=got.best.per_replica_request_rate,
        drafters=got.best.candidate.config.drafters or None,
        k=got.best.candidate.config.k,
        schedule=got.best.candidate.config.is_schedule,
        max_num_seqs=16,
    )
    assert again.metrics == got.best.metrics
    assert any("split the requests evenly" in n for n in got.notes)


# ---------------------------------------------------------------- bounds
@pytest.mark.parametrize("size, config", [(1, ("eagle", 2)), (8, None), (16, ("ngram", 1))])
def test_screening_bounds_are_bounds(size, config):
    """The latency floors never exceed what a run gives at any rate, and the throughput
    ceiling is never below the saturation run's throughput."""
    prob = rp.problem()
    cfg = (
        R.Configuration.off(prob.names)
        if config is None
        else R.configuration(prob, [config[0]], config[1])[0]
    )
    slos = S.parse_slos(
        ["p99_ttft_ms=1", "p50_tpot_ms=1", "mean_itl_ms=1", "p90_e2el_ms=1", "mean_ttft_ms=1"]
    )
    source = request_source(300, input_len=400, output_len=30)
    bnd = RS.bounds(prob, RS.Candidate(cfg, size), source, slos)
    for rate in (0.5, 5.0, 50.0, math.inf):
        r = api.bench(
            prob,
            drafters=cfg.drafters or None,
            k=cfg.k,
            max_num_seqs=size,
            request_rate=rate,
            input_len=400,
            output_len=30,
            num_prompts=300,
        )
        for s in slos:
            assert bnd.floors[s.key] <= r.metrics[s.key] * (1 + 1e-9), (s.key, rate)
        if math.isinf(rate):
            assert r.metrics["request_throughput"] <= bnd.rate


def test_no_configuration_meets_the_slo_at_any_rate():
    """A TPOT ceiling below the fastest step over the most tokens per step: refused on
    ``slo``, naming it and the lowest value reached."""
    prob = rp.problem()
    with pytest.raises(InfeasibleError) as exc:
        api.size_fleet_for_rate(prob, 5.0, ["p99_tpot_ms=2"], workers=1, **FIXED)
    assert exc.value.field == "slo"
    assert "p99_tpot_ms <= 2" in exc.value.message and "lowest reached is" in exc.value.message


def test_rate_errors():
    prob = rp.problem()
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ParameterError) as exc:
            api.size_fleet_for_rate(prob, bad, ["p99_ttft_ms=100"], workers=1, **FIXED)
        assert exc.value.field == "request_rate"
    with pytest.raises(ParameterError) as exc:
        api.size_fleet_for_rate(prob, None, ["p99_ttft_ms=100"], workers=1, **FIXED)
    assert exc.value.field == "request_rate"


# ---------------------------------------------------------------- the sweep
@pytest.mark.slow
def test_the_sweep_prices_each_rate_from_each_candidates_highest_rate():
    """Each side's replicas at each rate are ``ceil(R / r*)`` of its cheapest candidate;
    costs never fall as the rate rises; the crossings list where the sign changes."""
    prob = rp.problem()
    got = api.size_fleet_for_rate(
        prob,
        20.0,
        ["p99_ttft_ms=400", "p99_tpot_ms=15"],
        sweep_rate="5:80:6",
        max_num_seqs=[16],
        workers=1,
        **FIXED,
    )
    sweep = got.to_dict()["sweep"]
    points = sweep["points"]
    assert [p["request_rate"] for p in points] == [5.0, 20.0, 35.0, 50.0, 65.0, 80.0]
    for side in ("with_speculation", "without_speculation"):
        costs = [p[side]["cost_per_hour"] for p in points if p[side] is not None]
        assert costs == sorted(costs)
        for p in points:
            f = p[side]
            if f is not None:
                share = p["request_rate"] / f["max_request_rate_per_replica"]
                need = math.ceil(share * (1 - 1e-12))
                assert f["replicas"] == max(1, need)

    def costs_of(side):
        return np.array([np.nan if p[side] is None else p[side]["cost_per_hour"] for p in points])

    rates = np.array([p["request_rate"] for p in points])
    a, b = costs_of("with_speculation"), costs_of("without_speculation")
    assert sweep["crossings"] == crossings(rates, a, b, "request_rate")


# ---------------------------------------------------------------- where it runs
@pytest.mark.slow
def test_the_answer_is_the_same_on_worker_processes():
    prob = rp.problem()
    args = dict(seed=1, max_num_seqs=[4, 16], **FIXED)
    here = api.size_fleet_for_rate(
        prob, 25.0, ["p99_ttft_ms=400", "p99_tpot_ms=14"], workers=1, **args
    )
    there = api.size_fleet_for_rate(
        prob, 25.0, ["p99_ttft_ms=400", "p99_tpot_ms=14"], workers=2, **args
    )

    def answer(doc: dict) -> dict:  # the count of runs depends on how many ran at once
        return {**doc, "notes": [n for n in doc["notes"] if "simulated runs" not in n]}

    assert answer(here.to_dict()) == answer(there.to_dict())


def _ray_or_skip():
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("Ray is not installed (the optional extra allocator[ray])")
    return ray


def test_the_answer_is_the_same_on_a_local_ray_instance():
    ray = _ray_or_skip()
    prob = rp.problem()
    args = dict(seed=1, max_num_seqs=[4, 16], **FIXED)
    here = api.size_fleet_for_rate(prob, 25.0, ["p99_ttft_ms=400"], workers=1, **args)
    try:
        on_ray = api.size_fleet_for_rate(prob, 25.0, ["p99_ttft_ms=400"], ray="local", **args)
    except ParameterError as exc:
        if exc.field == "ray":
            pytest.skip(f"a local Ray instance cannot start here: {exc.message}")
        raise
    finally:
        if ray.is_initialized():
            ray.shutdown()

    def answer(doc: dict) -> dict:  # the note on where the runs ran names the place
        return {**doc, "notes": [n for n in doc["notes"] if "simulated runs" not in n]}

    assert answer(here.to_dict()) == answer(on_ray.to_dict())


def test_ray_without_ray_installed_is_one_line(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ParameterError) as exc:
        api.size_fleet_for_rate(rp.problem(), 5.0, ["p99_ttft_ms=400"], ray="local", **FIXED)
    assert exc.value.field == "ray" and "allocator[ray]" in exc.value.message
