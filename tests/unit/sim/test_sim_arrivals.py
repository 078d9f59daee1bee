"""Arrival times as vLLM's benchmark client draws them, against the gamma distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator.exceptions import InputError
from allocator.sim import arrival_times, fixed_requests

N = 200_000


def cv_standard_error(burstiness: float, n: int) -> float:
    """Standard error of a sample coefficient of variation of ``n`` gamma(``burstiness``)
    draws, by the delta method: ``Var(s / m) ≈ CV² (Var(s²) / (4 σ⁴) + Var(m) / μ² -
    Cov(s², m) / (σ² μ))`` with the gamma's moments (skewness ``2 / sqrt(b)``, excess
    kurtosis ``6 / b``)."""
    b = burstiness
    cv2 = 1.0 / b
    kurt = 3.0 + 6.0 / b  # μ4 / σ⁴
    skew = 2.0 / math.sqrt(b)  # μ3 / σ³
    var_rel = (kurt - 1.0) / 4.0 + cv2 - skew * math.sqrt(cv2)
    return math.sqrt(cv2 * var_rel / n)


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_gamma_gaps_mean_and_cv(burstiness):
    rate = 4.0
    t = arrival_times(N, rate, burstiness, seed=11)
    gaps = np.diff(np.concatenate(([0.0], t)))
    # vLLM rescales the gaps so the last arrival is at N / rate: the mean gap is exact
    assert t[-1] == pytest.approx(N / rate, rel=1e-12)
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=1e-12)
    cv = gaps.std() / gaps.mean()
    se = cv_standard_error(burstiness, N)
    assert se < 0.01  # the check resolves the CV to about 1%
    assert abs(cv - 1.0 / math.sqrt(burstiness)) < 5 * se
    assert np.all(gaps >= 0)


def test_poisson_counts_have_unit_dispersion():
    """Burstiness 1 is a Poisson process: counts in unit windows have variance = mean."""
    rate = 5.0
    t = arrival_times(N, rate, 1.0, seed=3)
    counts = np.bincount(t.astype(np.int64))[:-1]  # the last window is cut at N / rate
    ratio = counts.var() / counts.mean()
    # the dispersion of Poisson counts over w windows has standard error sqrt(2 / w)
    assert abs(ratio - 1.0) < 5 * math.sqrt(2 / counts.size)


def test_infinite_rate_and_burstiness():
    assert np.array_equal(arrival_times(5, math.inf), np.zeros(5))
    t = arrival_times(4, 2.0, math.inf)
    assert np.allclose(t, [0.5, 1.0, 1.5, 2.0])


def test_first_request_waits_for_its_own_gap():
    t = arrival_times(1000, 10.0, 1.0, seed=0)
    assert t[0] > 0


def test_seeded():
    a = arrival_times(100, 3.0, 0.7, seed=5)
    assert np.array_equal(a, arrival_times(100, 3.0, 0.7, seed=5))
    assert not np.array_equal(a, arrival_times(100, 3.0, 0.7, seed=6))


def test_fixed_requests():
    r = fixed_requests(7, 128, 64, 2.0, 1.0, seed=1)
    assert len(r) == 7
    assert np.all(r.prompt_tokens == 128) and np.all(r.output_tokens == 64)
    assert np.array_equal(r.arrival_s, arrival_times(7, 2.0, 1.0, seed=1))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_prompts": 0, "request_rate": 1.0}, "num_prompts"),
        ({"num_prompts": 10, "request_rate": 0.0}, "request_rate"),
        ({"num_prompts": 10, "request_rate": -2.0}, "request_rate"),
        ({"num_prompts": 10, "request_rate": math.nan}, "request_rate"),
        ({"num_prompts": 10, "request_rate": 1.0, "burstiness": 0.0}, "burstiness"),
        ({"num_prompts": 10, "request_rate": 1.0, "burstiness": -1.0}, "burstiness"),
    ],
)
def test_bad_arrivals(kwargs, field):
    with pytest.raises(InputError) as err:
        arrival_times(**kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(
    "args, field",
    [
        ((5, 0, 10, 1.0), "input_len"),
        ((5, 10, 0, 1.0), "output_len"),
        ((5, 10, -3, 1.0), "output_len"),
    ],
)
def test_bad_fixed_lengths(args, field):
    with pytest.raises(InputError) as err:
        fixed_requests(*args)
    assert err.value.field == field
