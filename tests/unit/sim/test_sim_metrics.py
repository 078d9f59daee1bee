"""Aggregate metrics as ``vllm bench serve`` computes them, on hand-made timelines.

The reference is vLLM 0.33.0's ``calculate_metrics`` and ``process_one_metric``
(``vllm/benchmarks/serve.py``) transcribed loop for loop, run on the same requests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator.exceptions import InputError
from allocator.sim import (
    Requests,
    Scheduler,
    SimResult,
    SpecPolicy,
    fixed_requests,
    max_concurrent_requests,
    metric,
    simulate,
    summary,
)

VLLM_KEYS = ["completed", "duration", "request_throughput", "output_throughput"]
VLLM_KEYS += ["total_token_throughput"]
VLLM_KEYS += [
    f"{s}_{m}_ms"
    for m in ("ttft", "tpot", "itl", "e2el")
    for s in ("mean", "median", "std", "p50", "p90", "p95", "p99")
]
EXTRA_KEYS = [
    "spec_decode_acceptance_length",
    "mean_queue_ms",
    "preemptions",
    "max_concurrent_requests",
    "max_running_seqs",
    "mean_concurrency",
    "kv_cache_peak_fraction",
]


def hand_result(sent, chunk_times, prompts):
    """A timeline given each request's send and chunk times (s); one token per chunk
    except where ``chunk_times`` holds (time, tokens) pairs."""
    n = len(sent)
    first, finish, out, chunks, gaps, who = [], [], [], [], [], []
    for i, ct in enumerate(chunk_times):
        times = [c if isinstance(c, float) else c[0] for c in ct]
        tokens = [1 if isinstance(c, float) else c[1] for c in ct]
        first.append(times[0])
        finish.append(times[-1])
        out.append(sum(tokens))
        chunks.append(len(times))
        gaps += list(np.diff(times))
        who += [i] * (len(times) - 1)
    reqs = Requests(np.asarray(sent, float), np.asarray(prompts), np.asarray(out))
    hist = np.zeros((3, 4), dtype=np.int64)
    return SimResult(
        requests=reqs,
        sent_s=np.asarray(sent, float),
        first_scheduled_s=np.asarray(sent, float) + 0.001,
        first_token_s=np.asarray(first),
        finish_s=np.asarray(finish),
        output_tokens=np.asarray(out),
        chunks=np.asarray(chunks),
        preemptions=np.zeros(n, dtype=np.int64),
        itl_s=np.asarray(gaps, float),
        itl_request=np.asarray(who, dtype=np.int64),
        decode_steps=hist,
        uncut_decode_steps=hist,
        duration_s=float(max(finish)),
        steps=0,
        time_in_system_s=float(np.sum(np.asarray(finish) - np.asarray(sent))),
        max_running_seqs=2,
        kv_cache_peak_fraction=0.5,
        scheduler=Scheduler(4, 64, 1024, async_scheduling=False),
        policy=SpecPolicy.off(),
        seed=0,
    )


def vllm_reference(res: SimResult, percentiles=(50, 90, 95, 99)) -> dict:
    """vLLM's calculate_metrics + process_one_metric, transcribed (times in s)."""
    ttfts, tpots, itls, e2els = [], [], [], []
    outputs = []
    for i in range(len(res.requests)):
        start = res.sent_s[i]
        ttft = res.first_token_s[i] - start
        latency = res.finish_s[i] - start
        itl = list(res.itl_s[res.itl_request == i])
        output_len = int(res.output_tokens[i])
        if output_len > 1:
            tpots.append((latency - ttft) / (output_len - 1))
        itls += itl
        ttfts.append(ttft)
        e2els.append(latency)
        outputs.append((start, ttft, itl, latency))
    min_start = min(o[0] for o in outputs)
    max_end = max(o[0] + o[3] for o in outputs)
    duration_seconds = int(np.ceil(max_end - min_start)) + 1
    concurrent = np.zeros(duration_seconds)
    for start, _, _, latency in outputs:
        for second in range(int(start - min_start), int(start + latency - min_start) + 1):
            concurrent[second] += 1
    dur = res.duration_s
    total_out = int(res.output_tokens.sum())
    out = {
        "completed": len(outputs),
        "duration": dur,
        "request_throughput": len(outputs) / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (int(res.requests.prompt_tokens.sum()) + total_out) / dur,
        "max_concurrent_requests": int(concurrent.max()),
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        out[f"mean_{name}_ms"] = np.mean(values or 0) * 1000
        out[f"median_{name}_ms"] = np.median(values or 0) * 1000
        out[f"std_{name}_ms"] = np.std(values or 0) * 1000
        for p in percentiles:
            p_word = str(int(p)) if int(p) == p else str(p)
            out[f"p{p_word}_{name}_ms"] = np.percentile(values or 0, p) * 1000
    return out


def three_requests():
    return hand_result(
        sent=[0.0, 0.4, 2.5],
        chunk_times=[
            [0.2, 0.3, (0.45, 3), 0.6],  # 4 chunks, 6 tokens
            [0.9, (1.5, 2), 3.2],  # 3 chunks, 4 tokens, spans three seconds
            [2.7],  # one token: no TPOT, no ITL
        ],
        prompts=[100, 30, 7],
    )


def test_summary_matches_vllms_formulas():
    res = three_requests()
    got = summary(res)
    ref = vllm_reference(res)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    # by hand, too: TPOT of request 0 is (0.6 - 0.2) / 5, of request 1 (3.2 - 0.9) / 3
    assert got["mean_tpot_ms"] == pytest.approx(1000 * (0.4 / 5 + 2.3 / 3) / 2)
    assert got["max_concurrent_requests"] == 2  # requests 1 and 2 share second 2
    assert got["duration"] == 3.2
    assert got["mean_queue_ms"] == pytest.approx(1.0)


def test_key_names():
    got = summary(three_requests())
    for key in VLLM_KEYS + EXTRA_KEYS:
        assert key in got
    custom = summary(three_requests(), percentiles=(99.9, 25))
    assert "p99.9_ttft_ms" in custom and "p25_itl_ms" in custom and "p99_ttft_ms" not in custom


def test_std_is_population_std():
    got = summary(three_requests())
    ttfts = np.array([0.2, 0.5, 0.2])
    assert got["std_ttft_ms"] == pytest.approx(1000 * np.sqrt(np.mean((ttfts - ttfts.mean()) ** 2)))


def test_no_tpot_no_itl_is_undefined():
    """Where vLLM writes 0 (``values or 0``), a latency with no sample is undefined: NaN."""
    res = hand_result([0.0, 1.0], [[0.5], [1.5]], [10, 10])
    got = summary(res)
    assert all(math.isnan(got[k]) for k in ("mean_tpot_ms", "p99_itl_ms", "std_tpot_ms"))
    assert math.isnan(metric(res, "p99_tpot_ms")) and got["mean_ttft_ms"] > 0


def test_metric_keys():
    res = three_requests()
    ttfts = np.array([0.2, 0.5, 0.2])
    assert metric(res, "p99.9_ttft_ms") == pytest.approx(np.percentile(ttfts, 99.9) * 1000)
    assert metric(res, "median_e2el_ms") == pytest.approx(np.median([0.6, 2.8, 0.2]) * 1000)
    assert metric(res, "mean_tpot_ms") == pytest.approx(summary(res)["mean_tpot_ms"])
    assert metric(res, "p50_itl_ms") == pytest.approx(summary(res)["p50_itl_ms"])
    assert metric(res, "request_throughput") == pytest.approx(3 / 3.2)
    for bad in ("p100_ttft_ms", "p0_ttft_ms", "p99_ttfb_ms", "max_ttft_ms", "p99_ttft", "ttft", 99):
        with pytest.raises(InputError) as err:
            metric(res, bad)
        assert err.value.field == "key"


def test_bad_percentiles():
    with pytest.raises(InputError) as err:
        summary(three_requests(), percentiles=(100,))
    assert err.value.field == "percentiles"


def test_max_concurrent_requests_counts_one_second_buckets():
    """vLLM's count: a request occupies every whole second its send-to-last-chunk span
    touches, so two requests in the same second count as concurrent though they never
    overlap."""
    res = hand_result([0.0, 0.6], [[0.1, 0.2], [0.7, 0.8]], [5, 5])
    assert max_concurrent_requests(res) == 2
    assert np.all(res.finish_s[0] < res.sent_s[1])


def test_acceptance_length_over_speculative_steps():
    """Tokens per decode step of a sequence over the steps that verified drafts, bonus
    included, cut steps counting what they emitted; plain steps (k = 0) left out, as
    vLLM counts drafts."""
    pol = SpecPolicy.by_batch_size([(1, 1, 2, [0.0, 0.0, 0.0, 1.0]), (2, 8, 0, [0.0, 1.0])])
    # one request alone: 11 tokens = 1 (prefill) + 3 + 3 + 3 + 1 (a step cut at the end)
    r = simulate(
        Requests([0.0], [5], [11]),
        pol,
        lambda *a: 1.0,
        Scheduler(8, 64, 1024, async_scheduling=False),
    )
    assert r.decode_steps[2].tolist() == [0, 1, 0, 3]
    assert summary(r)["spec_decode_acceptance_length"] == pytest.approx((1 + 9) / 4)
    off = simulate(
        fixed_requests(3, 5, 5, 1.0),
        SpecPolicy.off(),
        lambda *a: 1.0,
        Scheduler(8, 64, 1024, async_scheduling=False),
    )
    assert summary(off)["spec_decode_acceptance_length"] == 1.0
