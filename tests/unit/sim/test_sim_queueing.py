"""The simulator against queueing theory and closed forms it does not use.

Every reference here is computed independently of the simulator: M/D/1's mean wait,
Little's law from per-request send and finish times, the saturation throughput of a full
batch, the expected decode steps of a request from a Markov chain over its remaining
tokens (and Wald's bounds), and the policy's pmf itself.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from allocator.io.trace import read_trace
from allocator.sim import (
    Requests,
    Scheduler,
    SpecPolicy,
    fixed_requests,
    metric,
    simulate,
    summary,
)
from allocator.sim.requests import arrival_times

A = 0.75  # per-position acceptance of the chain used below


def chain_pmf(k: int, a: float = A) -> np.ndarray:
    """Tokens emitted per step by a chain of ``k`` drafts with constant acceptance ``a``:
    ``P(emit >= j) = a^(j-1)``, ``j = 1..k+1``."""
    at_least = np.array([1.0] + [a ** (j - 1) for j in range(1, k + 2)] + [0.0])
    return at_least[:-1] - at_least[1:]


def expected_decode_steps(pmf: np.ndarray, tokens: int) -> float:
    """Expected steps to emit ``tokens`` when each step emits ``j`` with ``pmf[j]`` and the
    last is cut at the total: ``f(r) = 1 + Σ_j pmf[j] f(max(r - j, 0))``, ``f(0) = 0``."""
    f = np.zeros(tokens + 1)
    for r in range(1, tokens + 1):
        f[r] = 1.0 + sum(pmf[j] * f[max(r - j, 0)] for j in range(1, pmf.size))
    return float(f[tokens])


def batch_means_se(x: np.ndarray, batches: int = 40) -> float:
    """Standard error of the mean of a correlated series by batch means."""
    means = x[: x.size - x.size % batches].reshape(batches, -1).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(batches))


# ---------------------------------------------------------------- M/D/1
def test_md1_mean_ttft():
    """``max_num_seqs = 1``, speculation off, fixed lengths, Poisson arrivals: one server,
    deterministic service ``D = prefill + (O - 1) x decode``, FCFS. The mean wait in queue
    is ``W_q = ρD / (2(1 - ρ))``, and TTFT = wait + the prefill step.

    Tolerance: 4 standard errors by 40 batch means of consecutive requests (each batch of
    500 requests spans far more than the queue's relaxation time, about ``D / (1 - √ρ)²``
    ≈ 20 services at ρ = 0.6, so batch means are nearly independent); the check asserts
    that this error is under 5% of the expected TTFT, so a wrong prefill step (25% of it) or
    a wrong service time could not pass."""
    prefill_ms, decode_ms, P, out_len = 10.0, 10.0, 200, 4

    def step(b, k, ctx, pf):
        return decode_ms if b else 2.0 + 0.04 * pf  # 10 ms for the 200-token prompt

    D = (prefill_ms + (out_len - 1) * decode_ms) / 1000
    rho = 0.6
    reqs = fixed_requests(20_000, P, out_len, rho / D, burstiness=1.0, seed=7)
    r = simulate(
        reqs, SpecPolicy.off(), step, Scheduler(1, 2048, 10**6, async_scheduling=False), seed=0
    )
    ttft = r.ttft_s
    expected = rho * D / (2 * (1 - rho)) + prefill_ms / 1000
    se = batch_means_se(ttft)
    assert se < 0.05 * expected
    assert abs(ttft.mean() - expected) < 4 * se
    assert metric(r, "mean_ttft_ms") == pytest.approx(ttft.mean() * 1000)
    # service is deterministic: every request's last token D - prefill after its first
    assert np.allclose(r.finish_s - r.first_token_s, (out_len - 1) * decode_ms / 1000)
    assert r.max_running_seqs == 1


# ---------------------------------------------------------------- Little's law
def little_runs():
    trace = read_trace(
        Path(__file__).resolve().parents[3]
        / "problems/traces/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv",
        num_prompts=1500,
        speedup=4.0,
    )

    def step(b, k, ctx, pf):
        return 6.0 + 0.4 * b * (1 + k) + 0.0004 * b * ctx + 0.02 * pf

    pol = SpecPolicy.fixed(3, chain_pmf(3))
    yield (
        "trace",
        simulate(trace, pol, step, Scheduler(64, 2048, 200_000, async_scheduling=False), seed=1),
    )
    yield (
        "preempting",
        simulate(trace, pol, step, Scheduler(64, 2048, 20_000, async_scheduling=False), seed=2),
    )
    # async scheduling: stale output to preempted requests, extra steps, late frees
    tight = Scheduler(64, 2048, 20_000, async_scheduling=True)
    yield "preempting async", simulate(trace, pol, step, tight, seed=2)
    yield (
        "client-limited",
        simulate(
            trace,
            pol,
            step,
            Scheduler(64, 2048, 200_000, max_concurrency=5, async_scheduling=False),
            seed=3,
        ),
    )
    reqs = fixed_requests(400, 64, 32, math.inf)
    yield (
        "burst",
        simulate(
            reqs, SpecPolicy.off(), step, Scheduler(16, 512, 50_000, async_scheduling=False), seed=4
        ),
    )


@pytest.mark.parametrize(
    "name, run", list(little_runs()), ids=lambda x: x if isinstance(x, str) else ""
)
def test_littles_law(name, run):
    """``mean_concurrency`` is the simulator's own time-average of the requests in the
    server (waiting plus running, counted step by step); Little's law makes it equal to
    throughput x mean time in system computed from each request's send and last chunk. The
    two sides come from different bookkeeping: a request lost from the queues during a
    preemption, or a request counted from its arrival rather than its send under
    ``max_concurrency``, breaks the equality."""
    s = summary(run)
    sojourn = run.finish_s - run.sent_s
    assert s["mean_concurrency"] == pytest.approx(
        s["request_throughput"] * sojourn.mean(), rel=1e-9
    )
    assert s["mean_concurrency"] == pytest.approx(
        s["request_throughput"] * s["mean_e2el_ms"] / 1000, rel=1e-9
    )
    if name.startswith("preempting"):
        assert s["preemptions"] > 0
    if name == "client-limited":
        assert np.any(run.sent_s > run.requests.arrival_s + 1e-9)


# ---------------------------------------------------------------- saturation
@pytest.mark.parametrize("k", [0, 3])
def test_throughput_at_saturation(k):
    """All requests at once, ``max_num_seqs = B``, prefill nearly free: the replica runs a
    full batch at almost every step, so output throughput tends to ``B · E / step_ms(B, k)``
    from below. What keeps it below: each request's first token comes from its prefill
    step (1 token, not E: a share ≈ (E - 1) / O of its tokens) and the last batch drains
    (≈ B / (2N) of the steps); with O = 500 and N = 1,500 both are under 0.4%."""
    B, P, out_len, N = 8, 16, 500, 1500
    pmf = chain_pmf(k)
    E = float(pmf @ np.arange(pmf.size))

    def step(b, kk, ctx, pf):
        return 20.0 + 1.5 * b * (1 + kk) + 1e-6 * pf

    reqs = fixed_requests(N, P, out_len, math.inf)
    r = simulate(
        reqs,
        SpecPolicy.fixed(k, pmf),
        step,
        Scheduler(B, 8192, 10**7, async_scheduling=False),
        seed=5,
    )
    limit = 1000 * B * E / step(B, k, 0, 0)
    got = summary(r)["output_throughput"]
    assert got <= limit * (1 + 1e-3)
    assert got == pytest.approx(limit, rel=0.005)


# ---------------------------------------------------------------- one request at a time
def lone_requests(k: int, out_len: int, n: int):
    """Requests 100 s apart (constant gaps): each is alone on the replica."""

    def step(b, kk, ctx, pf):
        return 12.0 + 3.0 * kk + 0.5 * b * (1 + kk) + 0.02 * pf

    pmf = chain_pmf(k)
    reqs = fixed_requests(n, 128, out_len, 0.01, burstiness=math.inf)
    r = simulate(
        reqs,
        SpecPolicy.fixed(k, pmf),
        step,
        Scheduler(8, 2048, 10**6, async_scheduling=False),
        seed=9,
    )
    assert r.max_running_seqs == 1
    return r, pmf, step(1, k, 0, 0)


@pytest.mark.parametrize("k", [1, 4])
def test_tpot_and_itl_at_low_rate(k):
    """Alone, a request's TPOT is ``step_ms(1, k) · D / (O - 1)`` with ``D`` its decode
    steps: the mean is checked against ``E[D]`` from the Markov chain over remaining
    tokens, within 4 standard errors; every ITL gap is one step, so the median ITL is
    ``step_ms(1, k)`` exactly."""
    out_len, n = 64, 2000
    r, pmf, step1 = lone_requests(k, out_len, n)
    tpot = r.tpot_s * 1000
    exact = step1 * expected_decode_steps(pmf, out_len - 1) / (out_len - 1)
    se = tpot.std(ddof=1) / math.sqrt(n)
    assert se < 0.01 * exact
    assert abs(tpot.mean() - exact) < 4 * se
    s = summary(r)
    assert s["median_itl_ms"] == pytest.approx(step1, rel=1e-9)
    assert s["p99_itl_ms"] == pytest.approx(step1, rel=1e-9)
    # chunks: one per decode step plus the first token's
    assert (r.chunks - 1).mean() == pytest.approx(
        expected_decode_steps(pmf, out_len - 1), abs=4 * se / step1 * (out_len - 1)
    )


def test_tpot_tends_to_step_over_e():
    """For long outputs mean TPOT → ``step_ms(1, k) / E``: by Wald's identity the decode
    steps ``D`` to emit ``r`` tokens satisfy ``r / E ≤ E[D] ≤ (r + k) / E`` (the last step
    overshoots by at most ``k``), so ``E[TPOT] · E / step_ms(1, k)`` lies in
    ``[1, 1 + k / (O - 1)]``."""
    k, out_len, n = 4, 3000, 300
    r, pmf, step1 = lone_requests(k, out_len, n)
    E = float(pmf @ np.arange(pmf.size))
    ratio = r.tpot_s * 1000 * E / step1
    se = ratio.std(ddof=1) / math.sqrt(n)
    assert 1 - 4 * se <= ratio.mean() <= 1 + k / (out_len - 1) + 4 * se
    assert ratio.mean() == pytest.approx(1.0, abs=0.005)


# ---------------------------------------------------------------- the pmf
def test_emitted_tokens_follow_the_pmf():
    """Over decode steps with at least ``k + 1`` tokens left (nothing to cut), tokens per
    step are draws from the policy's pmf: chi-square goodness of fit, and the decode steps
    account for every token after the first."""
    k = 4
    pmf = chain_pmf(k)

    def step(b, kk, ctx, pf):
        return 10.0 + b

    reqs = fixed_requests(3000, 64, 40, 30.0, seed=2)
    r = simulate(
        reqs,
        SpecPolicy.fixed(k, pmf),
        step,
        Scheduler(32, 4096, 10**6, async_scheduling=False),
        seed=13,
    )
    observed = r.uncut_decode_steps[k]
    total = observed.sum()
    assert total > 20_000
    chi2 = stats.chisquare(observed[1:], total * pmf[1:])
    assert chi2.pvalue > 1e-4
    assert observed[0] == 0 and r.decode_steps[:k].sum() == 0
    emitted = (r.decode_steps * np.arange(k + 2)).sum()
    assert emitted == (r.output_tokens - 1).sum()
    assert summary(r)["spec_decode_acceptance_length"] == pytest.approx(
        emitted / r.decode_steps.sum()
    )


def test_schedule_uses_each_batch_sizes_pmf():
    """A k-by-batch-size schedule: steps at batch sizes 1-3 play k = 4's pmf, larger ones
    k = 2's; each row of the histogram fits its own pmf."""
    p4, p2 = chain_pmf(4, 0.8), chain_pmf(2, 0.5)
    pol = SpecPolicy.by_batch_size([(1, 3, 4, p4), (4, 64, 2, p2)])

    def step(b, kk, ctx, pf):
        return 10.0 + 2 * b

    reqs = Requests(arrival_times(3000, 8.0, 0.5, seed=4), np.full(3000, 32), np.full(3000, 60))
    r = simulate(reqs, pol, step, Scheduler(64, 4096, 10**6, async_scheduling=False), seed=3)
    for k, pmf in ((4, p4), (2, p2)):
        observed = r.uncut_decode_steps[k]
        assert observed.sum() > 5000
        assert stats.chisquare(observed[1 : k + 2], observed.sum() * pmf[1:]).pvalue > 1e-4
