"""``allocator bench`` through the problem-file path, against queueing theory and closed
forms computed here by hand from the numbers of :mod:`requests_problem` (never from the
code under test): M/D/1, Little's law, the saturation throughput of the existing model,
TPOT and ITL at a very low rate, the emitted-token distribution of a chain, the schedule,
the KV slots by method, and the refusals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from allocator import api
from allocator.analysis import replica as R
from allocator.exceptions import InputError, ParameterError
from allocator.model.accepted_pmf import emitted_pmf
from allocator.model.under_load import predictor, serving_metrics

from . import requests_problem as rp


def batch_means_se(x: np.ndarray, batches: int = 40) -> float:
    means = x[: x.size - x.size % batches].reshape(batches, -1).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(batches))


# ---------------------------------------------------------------- queueing theory
def test_md1_mean_ttft_through_the_problem_file():
    """``max_num_seqs: 1``, speculation off, 200-token prompts, 4 output tokens, Poisson
    arrivals: one server with deterministic service ``D = prefill(200) + 3 · step(1, 0)``
    (9.0709 + 30 ms, from the file's tables by hand). The mean TTFT is M/D/1's
    ``W_q + prefill(200)``, ``W_q = ρD / (2(1 − ρ))``, within 4 standard errors by batch
    means (which the check requires under 5% of the expectation)."""
    prob = rp.problem(
        scheduler={"max_num_seqs": 1, "max_num_batched_tokens": 2048, "kv_cache_tokens": 10**6}
    )
    pre = rp.prefill_ms(200)
    d = (pre + 3 * rp.step_ms(None, 1, 0)) / 1000
    rho = 0.6
    r = api.bench(
        prob, input_len=200, output_len=4, request_rate=rho / d, num_prompts=20_000, seed=3
    )
    ttft = r.result.ttft_s
    expected = rho * d / (2 * (1 - rho)) + pre / 1000
    se = batch_means_se(ttft)
    assert se < 0.05 * expected
    assert abs(ttft.mean() - expected) < 4 * se
    assert r.metrics["max_running_seqs"] == 1
    # service is deterministic: the last token three decode steps after the first
    assert np.allclose(r.result.finish_s - r.result.first_token_s, 3 * 10.0 / 1000)


def little_runs():
    trace = "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"
    big = {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "kv_cache_tokens": 200_000}
    prefill = {"tokens": [16, 20000], "ms": [4.0, 400.0]}
    yield (
        "fixed, eagle k=3",
        dict(drafters=["eagle"], k=3, input_len=300, output_len=60, request_rate=8.0),
        {},
    )
    yield (
        "trace, schedule",
        dict(drafters=["eagle"], schedule=True, trace=trace, num_prompts=800, trace_speedup=0.5),
        {"prefill_ms": prefill},
    )
    yield "burst, off", dict(input_len=64, output_len=32, num_prompts=400), {}
    yield (
        "preempting, ngram k=2",
        dict(
            drafters=["ngram"],
            k=2,
            input_len=500,
            output_len=200,
            request_rate=40.0,
            num_prompts=600,
        ),
        {"scheduler": {**big, "kv_cache_tokens": 4000}},
    )
    yield (
        "client-limited",
        dict(input_len=100, output_len=50, request_rate=50.0, max_concurrency=3, num_prompts=300),
        {},
    )


@pytest.mark.parametrize(
    "name, kwargs, serving", list(little_runs()), ids=lambda x: x if isinstance(x, str) else ""
)
def test_littles_law_on_every_run(name, kwargs, serving):
    """``mean_concurrency`` (the simulator's time-average of requests in the server, counted
    step by step) equals ``request_throughput · mean_e2el_ms / 1000`` read from the same
    JSON: Little's law, from two independent bookkeepings."""
    r = api.bench(rp.problem(**serving), seed=1, **kwargs)
    doc = r.to_dict()
    assert doc["completed"] == doc["num_prompts"]
    little = doc["request_throughput"] * doc["mean_e2el_ms"] / 1000
    assert doc["mean_concurrency"] == pytest.approx(little, rel=1e-9)
    if name.startswith("preempting"):
        assert doc["preemptions"] > 0


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("drafters, k", [(None, 0), (["eagle"], 3), (["ngram"], 2)])
def test_far_above_capacity_output_throughput_is_the_existing_models(drafters, k, async_scheduling):
    """Every request at once, ``max_num_seqs`` 8, 500 output tokens, prefill made negligible
    (0.001 ms): the replica runs a full batch at almost every step, so its output
    throughput is the existing model's ``tokens_per_s`` at batch 8
    (:func:`allocator.model.under_load.serving_metrics`, ``8 · 1000 · E / step_ms(8, k)``),
    from below by the first tokens (from prefill steps) and the last batch draining (under
    0.5% here). Under async scheduling each request can cost two more of the run's
    ``8 · steps`` batch slots: the step scheduled for it after the step that finishes it
    by accepted drafts, and its successor's slot, admitted a step later; so the throughput
    lies within ``2 · N / (8 · steps)`` more below."""
    prob = rp.problem(
        scheduler={
            "max_num_seqs": 8,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 10**6,
            "async_scheduling": async_scheduling,
        },
        prefill_ms={"tokens": [16, 2048], "ms": [0.001, 0.001]},
    )
    r = api.bench(
        prob, drafters=drafters, k=k, input_len=16, output_len=500, num_prompts=1500, seed=5
    )
    assert r.scheduler.async_scheduling is async_scheduling
    members = prob.mask(drafters) if drafters else np.zeros(prob.n, bool)
    model = float(serving_metrics(prob, members[None], np.array([k]), 8)["tokens_per_s"][0])
    got = r.metrics["output_throughput"]
    assert got <= model * (1 + 1e-3)
    slack = 2 * 1500 / (8 * r.result.steps) if async_scheduling else 0.0
    assert got >= model * (1 - 0.005 - slack)
    if not async_scheduling:
        assert got == pytest.approx(model, rel=0.005)
    e = sum(math.prod(rp.ACCEPTANCE[:i]) for i in range(k + 1)) if drafters == ["eagle"] else None
    if e is not None:  # the model's E by hand: 1 + a1 + a1 a2 + a1 a2 a3
        assert model == pytest.approx(8 * 1000 * e / rp.step_ms("eagle", 8, k), rel=1e-12)


@pytest.mark.parametrize("k", [1, 3])
def test_at_a_very_low_rate_tpot_is_step_over_e_and_itl_the_step(k):
    """Requests 100 s apart, each alone: every ITL gap is one decode step at batch 1, so
    median ITL = ``step_ms(1, k)`` (11 or 13 ms, the table); mean TPOT tends to
    ``step_ms(1, k) / E(k)`` with ``E`` by hand from the acceptance: by Wald's identity the
    ratio lies in ``[1, 1 + k / (O − 1)]`` (here O = 2001)."""
    prob = rp.problem()
    r = api.bench(
        prob,
        drafters=["eagle"],
        k=k,
        input_len=32,
        output_len=2001,
        request_rate=0.01,
        burstiness=math.inf,
        num_prompts=200,
        seed=7,
    )
    step1 = rp.step_ms("eagle", 1, k)
    e = sum(math.prod(rp.ACCEPTANCE[:i]) for i in range(k + 1))
    assert r.metrics["max_running_seqs"] == 1
    # (times are seconds from the start, some 20,000 s in: gaps are exact to ~1e-10 ms)
    assert r.metrics["median_itl_ms"] == pytest.approx(step1, rel=1e-9)
    ratio = r.result.tpot_s * 1000 * e / step1
    se = ratio.std(ddof=1) / math.sqrt(ratio.size)
    assert 1 - 4 * se <= ratio.mean() <= 1 + k / 2000 + 4 * se
    assert r.metrics["mean_tpot_ms"] == pytest.approx(step1 / e, rel=0.005)


# ---------------------------------------------------------------- tokens per step
@pytest.mark.parametrize(
    "drafters, k, pooled, convention",
    [
        (["eagle"], 4, False, "bonus"),
        (["eagle"], 2, False, "paper"),
        (["eagle", "ngram"], 3, True, "bonus"),
    ],
)
def test_emitted_tokens_per_step_follow_the_closed_form(drafters, k, pooled, convention):
    """Over decode steps with at least ``k + 1`` tokens left, tokens per step are the
    configuration's own pmf, by hand: a chain's ``P(≥ j) = Π_{i<j} a(i)``; for a paper
    problem the same at ``k`` drafts (its round of ``k + 1`` units); pooled any-correct
    independent drafters accept position ``j`` with ``1 − (1 − a_e(j))(1 − 0.5)``.
    Chi-square goodness of fit; ``spec_decode_acceptance_length`` is the emitted tokens
    over decode steps."""
    d = rp.data()
    d["convention"] = convention
    if pooled:
        d["search"]["m"] = {"max": 2}
        d["serving"]["step_ms"].append(
            {
                "drafters": ["eagle", "ngram"],
                "by_batch": {1: {0: 10.0, 3: 15.0}, 16: {0: 16.0, 3: 34.0}},
            }
        )
    prob = rp.build(d)
    r = api.bench(
        prob,
        drafters=drafters,
        k=k,
        pooled=pooled,
        input_len=64,
        output_len=60,
        request_rate=20.0,
        num_prompts=2500,
        seed=11,
    )
    acc = rp.ACCEPTANCE
    if pooled:
        acc = [1 - (1 - a) * (1 - 0.5) for a in rp.ACCEPTANCE]
    pmf = np.array(rp.chain_pmf(acc, k))
    observed = r.result.uncut_decode_steps[k]
    total = observed.sum()
    assert total > 20_000
    assert stats.chisquare(observed[1:], total * pmf[1:]).pvalue > 1e-4
    np.testing.assert_allclose(emitted_pmf(prob, prob.mask(drafters), k), pmf, rtol=1e-12)
    dec = r.result.decode_steps
    emitted = (dec * np.arange(dec.shape[1])).sum()
    assert r.metrics["spec_decode_acceptance_length"] == pytest.approx(emitted / dec.sum())
    if pooled:
        doc = r.to_dict()
        assert "pooled" in doc["label"] and any("upper bound" in n for n in doc["notes"])


def test_the_schedule_runs_the_best_k_at_every_batch_size():
    """``--schedule``: at each decode batch size 1..16 the ``k`` (0..4) of most tokens/s,
    ``b · E(k) / step(b, k)`` by hand (ties to the smaller k), as vLLM's inclusive ranges;
    the run's decode steps at each batch size use that range's k."""
    prob = rp.problem()
    config, _ = R.configuration(prob, ["eagle"], schedule=True)
    want = []
    for b in range(1, 17):
        rates = [
            sum(math.prod(rp.ACCEPTANCE[:i]) for i in range(k + 1)) / rp.step_ms("eagle", b, k)
            for k in range(5)
        ]
        want.append(int(np.argmax(np.round(rates, 12))))
    got = config.k_by_batch(16)[1:].tolist()
    assert got == want
    assert config.ranges[0][0] == 1 and config.ranges[-1][1] == 16
    r = api.bench(
        prob,
        drafters=["eagle"],
        schedule=True,
        input_len=64,
        output_len=40,
        request_rate=60.0,
        num_prompts=500,
        seed=2,
    )
    assert r.to_dict()["label"].startswith("eagle, k by batch size")


# ---------------------------------------------------------------- step times
def test_step_times_are_the_predictors_at_every_point():
    """The simulator's step function is the problem's predictor: at random (decode batch,
    k, prefill tokens) the lookup equals ``predictor(problem).step_ms`` and the hand
    formula (decode step + prefill); a step with no decoding sequence is its prefill
    alone."""
    prob = rp.problem()
    config, _ = R.configuration(prob, ["eagle"], 3)
    step = R.ProblemStepTime(prob, config, 16, 2048)
    assert step.exact_lookup
    pred = predictor(prob)
    rng = np.random.default_rng(0)
    for _ in range(200):
        b, p = int(rng.integers(1, 17)), int(rng.integers(0, 2049))
        got = step(b, 3, 123.0, p)
        want = pred.step_ms(np.array([[True, False]]), [3], [4], [float(b)], [123.0], [float(p)])
        assert got == pytest.approx(float(want[0]), rel=1e-12)
        assert got == pytest.approx(rp.step_ms("eagle", b, 3) + rp.prefill_ms(p), rel=1e-12)
    assert step(0, 0, 0.0, 500) == pytest.approx(rp.prefill_ms(500), rel=1e-12)
    # the lone request's TTFT is its prefill step, exactly
    r = api.bench(prob, input_len=500, output_len=3, num_prompts=1)
    assert r.metrics["mean_ttft_ms"] == pytest.approx(rp.prefill_ms(500), rel=1e-12)


def test_a_roofline_problem_is_asked_at_every_step():
    """Without tables the roofline reads the context: the step function asks the predictor
    (no lookup) and gives its values."""
    d = rp.data()
    del d["serving"]["step_ms"]
    del d["serving"]["prefill_ms"]
    d["serving"]["hardware"] = {"gpu": "h100-sxm", "count": 1}
    d["serving"]["model"] = {
        "params_b": 8.0,
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "kv_heads": 8,
    }
    d["drafters"][0]["draft_ms"] = {1: 0.5, 64: 1.0}
    d["drafters"][1]["draft_ms"] = {1: 0.1, 64: 0.2}
    prob = rp.build(d)
    config, _ = R.configuration(prob, ["eagle"], 2)
    step = R.ProblemStepTime(prob, config, 16, 2048)
    assert not step.exact_lookup
    pred = predictor(prob)
    for b, ctx, p in [(1, 0.0, 0), (7, 900.0, 0), (16, 3000.0, 512), (0, 0.0, 300)]:
        row = np.array([[b > 0, False]])
        kk = 2 if b else 0
        want = pred.step_ms(row, [kk], [2 * (kk > 0) + 1], [float(b)], [ctx], [float(p)])
        assert step(b, kk, ctx, p) == pytest.approx(float(want[0]), rel=1e-12)
    r = api.bench(
        prob,
        drafters=["eagle"],
        k=2,
        input_len=200,
        output_len=30,
        request_rate=20.0,
        num_prompts=100,
    )
    assert r.metrics["completed"] == 100
    assert any("asked of the predictor at every step" in n for n in r.notes)


# ---------------------------------------------------------------- the replica
def test_kv_lookahead_slots_by_method():
    """vLLM 0.33 reserves ``num_speculative_tokens`` KV slots past the verified tokens for
    EAGLE-3 and none for n-gram. A request of prompt 100 and output 25 at k = 4 needs
    124 + 4 = 128 tokens (8 blocks of 16) for n-gram and 132 (9 blocks) for EAGLE-3: with a
    9-block cache (8 usable beside vLLM's null block) n-gram runs and EAGLE-3 is refused,
    naming the KV cache."""
    prob = rp.problem(
        scheduler={"max_num_seqs": 4, "max_num_batched_tokens": 2048, "kv_cache_tokens": 144}
    )
    eagle, _ = R.configuration(prob, ["eagle"], 4)
    ngram, _ = R.configuration(prob, ["ngram"], 4)
    assert R.lookahead_tokens(prob, eagle) == 4 and R.lookahead_tokens(prob, ngram) == 0
    ok = api.bench(prob, drafters=["ngram"], k=4, input_len=100, output_len=25, num_prompts=3)
    assert ok.metrics["completed"] == 3
    with pytest.raises(InputError) as exc:
        api.bench(prob, drafters=["eagle"], k=4, input_len=100, output_len=25, num_prompts=3)
    assert exc.value.field == "serving.scheduler.kv_cache_tokens"


def test_a_hosted_drafter_takes_its_share_of_the_kv_cache():
    d = rp.data(memory={"kv_cache_gb": 10.0, "kv_per_seq_gb": 0.1})
    d["drafters"][0]["memory_gb"] = 2.5
    prob = rp.build(d)
    eagle, _ = R.configuration(prob, ["eagle"], 2)
    assert R.kv_cache_tokens(prob, eagle) == 150_000  # 200,000 · (1 − 2.5 / 10)
    assert R.kv_cache_tokens(prob, R.Configuration.off(prob.names)) == 200_000


def test_max_num_seqs_past_the_measured_range_is_refused():
    prob = rp.problem(
        scheduler={"max_num_seqs": 17, "max_num_batched_tokens": 2048, "kv_cache_tokens": 10**5}
    )
    with pytest.raises(InputError) as exc:
        api.bench(prob, input_len=10, output_len=10, num_prompts=2)
    assert exc.value.field == "serving.scheduler.max_num_seqs"
    assert "up to decode batch size 16" in exc.value.message
    with pytest.raises(ParameterError) as exc:
        api.bench(rp.problem(), input_len=10, output_len=10, num_prompts=2, max_num_seqs=40)
    assert exc.value.field == "max_num_seqs"


def test_a_prefill_table_short_of_what_a_step_holds_is_refused():
    """Budget 4096 with a table to 2048: 16 requests of 1000 + 100 tokens could prefill
    4096 in one step; with max_num_seqs 1 a step holds at most 1099, covered."""
    big = rp.problem(
        scheduler={"max_num_seqs": 16, "max_num_batched_tokens": 4096, "kv_cache_tokens": 10**6}
    )
    with pytest.raises(InputError) as exc:
        api.bench(big, input_len=1000, output_len=100, num_prompts=20)
    assert exc.value.field == "serving.prefill_ms" and "4,096" in exc.value.message
    one = rp.problem(
        scheduler={"max_num_seqs": 1, "max_num_batched_tokens": 4096, "kv_cache_tokens": 10**6}
    )
    assert api.bench(one, input_len=1000, output_len=100, num_prompts=3).metrics["completed"] == 3
    d = rp.data()
    del d["serving"]["prefill_ms"]
    with pytest.raises(InputError) as exc:
        api.bench(rp.build(d), input_len=10, output_len=10, num_prompts=2)
    assert exc.value.field == "serving.prefill_ms" and "missing" in exc.value.message


def test_a_kv_cache_smaller_than_one_request_is_refused():
    prob = rp.problem(
        scheduler={"max_num_seqs": 4, "max_num_batched_tokens": 2048, "kv_cache_tokens": 256}
    )
    with pytest.raises(InputError) as exc:
        api.bench(prob, input_len=300, output_len=10, num_prompts=2)
    assert exc.value.field == "serving.scheduler.kv_cache_tokens"
    assert "does not fit" in exc.value.message


def test_no_scheduler_section_is_refused():
    d = rp.data()
    del d["serving"]["scheduler"]
    with pytest.raises(InputError) as exc:
        api.bench(rp.build(d), input_len=10, output_len=10)
    assert exc.value.field == "serving.scheduler"


# ---------------------------------------------------------------- configurations
def test_what_the_engine_serves_by_default():
    d = rp.data()
    d["search"]["m"] = {"max": 2}
    prob = rp.build(d)
    with pytest.raises(ParameterError) as exc:
        api.bench(prob, drafters=["eagle", "ngram"], k=2, input_len=8, output_len=8)
    assert exc.value.field == "drafters" and "pooled" in exc.value.message
    with pytest.raises(ParameterError) as exc:
        api.bench(prob, drafters=["eagle"], input_len=8, output_len=8)
    assert exc.value.field == "k"
    with pytest.raises(ParameterError) as exc:
        api.bench(prob, k=2, input_len=8, output_len=8)
    assert exc.value.field == "k"
    off = api.bench(prob, drafters=["eagle"], k=0, input_len=8, output_len=8, num_prompts=5)
    assert off.to_dict()["label"].startswith("speculation off")


# ---------------------------------------------------------------- the document
KEYS = [
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "spec_decode_acceptance_length",
    "mean_queue_ms",
    "preemptions",
    "max_concurrent_requests",
    "max_running_seqs",
    "mean_concurrency",
    "kv_cache_peak_fraction",
    "date",
    "notes",
] + [
    f"{s}_{m}_ms"
    for m in ("ttft", "tpot", "itl", "e2el")
    for s in ("mean", "median", "std", "p50", "p90", "p95", "p99")
]


def test_document_keys_and_seeding():
    prob = rp.problem()
    args = dict(
        drafters=["eagle"], k=2, input_len=100, output_len=40, request_rate=10.0, num_prompts=300
    )
    a = api.bench(prob, seed=4, **args).to_dict()
    b = api.bench(prob, seed=4, **args).to_dict()
    c = api.bench(prob, seed=5, **args).to_dict()
    assert set(KEYS) <= set(a)
    assert a["request_rate"] == 10.0 and a["num_prompts"] == 300
    a.pop("date")
    b.pop("date")
    c.pop("date")
    assert a == b
    assert a != c
    inf = api.bench(prob, input_len=10, output_len=5, num_prompts=4).to_dict()
    assert inf["request_rate"] == "inf"  # vLLM writes the string


def test_per_request_rows():
    prob = rp.problem()
    r = api.bench(prob, input_len=50, output_len=7, request_rate=5.0, num_prompts=20, seed=1)
    names, rows = r.per_request_rows()
    assert names[:2] == ["request", "arrival_s"] and len(rows) == 20
    text = r.per_request_csv()
    assert text.splitlines()[0].startswith("request,arrival_s,")
    assert len(text.splitlines()) == 21


def test_a_k_no_step_time_reaches_names_k_not_max_num_seqs():
    """The tables measure k = 0..4: k = 5 has no step time at any batch size, so the
    refusal names the draft length, not the batch the server may run."""
    from allocator.exceptions import NotModelledError

    with pytest.raises(NotModelledError) as exc:
        api.bench(rp.problem(), drafters=["eagle"], k=5, input_len=10, output_len=10,
                  num_prompts=2)  # fmt: skip
    assert exc.value.field == "k"


def test_a_queue_that_grows_through_the_run_is_said():
    """One sequence at a time, speculation off: each request is served in ``D = prefill(200) +
    3 · step(1, 0)`` ≈ 39 ms by hand, so a replica sustains about 25 requests/s. At 100
    requests/s the queue grows with every request (the last quarter waits seconds, the
    first far less) and a note says the rate is more than the replica sustains; at
    ``ρ = 0.2`` the queue stays short and no such note appears."""
    prob = rp.problem(
        scheduler={"max_num_seqs": 1, "max_num_batched_tokens": 2048, "kv_cache_tokens": 10**6}
    )
    d = (rp.prefill_ms(200) + 3 * rp.step_ms(None, 1, 0)) / 1000
    over = api.bench(prob, input_len=200, output_len=4, request_rate=4 / d, num_prompts=2000)
    said = [n for n in over.notes if n.startswith("the queue grew")]
    assert len(said) == 1 and "more than this replica sustains" in said[0]
    light = api.bench(prob, input_len=200, output_len=4, request_rate=0.2 / d, num_prompts=2000)
    assert not any(n.startswith("the queue grew") for n in light.notes)
    # all at once is a saturation run by design: no note
    burst = api.bench(prob, input_len=200, output_len=4, num_prompts=200)
    assert not any(n.startswith("the queue grew") for n in burst.notes)
