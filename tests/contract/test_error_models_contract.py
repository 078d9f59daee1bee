"""The error-model contract (docs/design.md §3.6), run on every model of the registry
``allocator.model.errors.ERROR_MODELS``: a model registered without an example here fails.

For marginal failure probabilities ``q (N, J)`` and every subset ``S`` of the drafters:

* Fréchet bounds: ``max(0, Σ_S q_i - (|S| - 1)) <= P(all of S fail) <= min_S q_i``;
* a superset fails together no more often than its subsets;
* ``fail_prob_all`` (bitmask order, row 0 the empty subset = 1) agrees with ``fail_prob``;
* a singleton's probability is its marginal;
* ``sample_failures`` (seeded) gives every subset's all-fail frequency within Monte Carlo
  error (5 standard errors) of ``fail_prob``;
* the limits each model has: no correlation is independence, full correlation is the
  comonotone ``min_S q_i``.

The references are the bounds and closed forms above, not the models' own code.
"""

from __future__ import annotations

import numpy as np
import pytest

from allocator.model.errors import (
    ERROR_MODELS,
    EmpiricalErrors,
    ExchangeableErrors,
    FactorErrors,
    GaussianErrors,
    IndependentErrors,
)

N = 4
Q = np.array([[0.30, 0.50], [0.45, 0.20], [0.60, 0.35], [0.25, 0.40]])
ROUNDS = 120_000
#: Integration error of the gaussian model's orthant probabilities (absolute 1e-6).
TOL = {"gaussian": 5e-6}


def subsets(n: int = N) -> np.ndarray:
    """Every non-empty subset as bool rows ``(2**n - 1, n)``, in bitmask order."""
    masks = np.arange(1, 1 << n)
    return ((masks[:, None] >> np.arange(n)) & 1).astype(bool)


def independent_reference(members: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``Π_S q_i``, written out."""
    return np.array([[np.prod(q[m, j]) for j in range(q.shape[1])] for m in members])


def _matrix() -> np.ndarray:
    a = np.array([[0.7, 0.2], [0.5, -0.4], [0.1, 0.8], [-0.3, 0.3]])
    cov = a @ a.T + np.diag([0.3, 0.4, 0.2, 0.5])
    d = np.sqrt(np.diag(cov))
    return cov / np.outer(d, d)


def _empirical() -> tuple[EmpiricalErrors, np.ndarray]:
    """A log drawn from a correlated model (seeded); its marginals are its own ``q``."""
    rng = np.random.default_rng(11)
    fail = GaussianErrors(_matrix()).sample_failures(np.arange(N), Q, 20_000, rng)
    rows = fail.transpose(1, 0, 2).reshape(-1, N)  # position-major
    position = np.repeat(np.arange(1, Q.shape[1] + 1), fail.shape[0])
    model = EmpiricalErrors.from_failures(rows, position)
    q = np.stack([fail[:, j, :].mean(axis=0) for j in range(Q.shape[1])], axis=1)
    return model, q


#: Examples of every registered model: ``(id, model, q)``.
EXAMPLES = {
    "independent": [("independent", lambda: (IndependentErrors(), Q))],
    "exchangeable": [
        ("latent r=0.4", lambda: (ExchangeableErrors(correlation=0.4), Q)),
        ("error correlation 0.15", lambda: (ExchangeableErrors(error_correlation=0.15), Q)),
    ],
    "factor": [("loadings", lambda: (FactorErrors(np.array([0.6, -0.3, 0.8, 0.2])), Q))],
    "gaussian": [("matrix", lambda: (GaussianErrors(_matrix()), Q))],
    "empirical": [("log", _empirical)],
}

CASES = [
    pytest.param(name, make, id=f"{name}: {label}")
    for name in sorted(ERROR_MODELS)
    for label, make in EXAMPLES.get(name, [])
]


def test_every_registered_model_has_an_example():
    assert set(EXAMPLES) == set(ERROR_MODELS)
    for name, cls in ERROR_MODELS.items():
        assert cls.name == name
        assert all(isinstance(make()[0], cls) for _, make in EXAMPLES[name])


@pytest.mark.parametrize(("name", "make"), CASES)
def test_frechet_bounds_and_supersets(name, make):
    model, q = make()
    tol = TOL.get(name, 1e-12)
    members = subsets()
    p = model.fail_prob(members, q)
    assert p.shape == (members.shape[0], q.shape[1])
    for row, m in zip(p, members, strict=True):
        lower = np.maximum(0.0, q[m].sum(axis=0) - (m.sum() - 1))
        upper = q[m].min(axis=0)
        assert np.all(row >= lower - tol) and np.all(row <= upper + tol), (m, row)
    index = {tuple(m): i for i, m in enumerate(members)}
    for i, m in enumerate(members):
        for extra in np.flatnonzero(~m):
            bigger = m.copy()
            bigger[extra] = True
            assert np.all(p[index[tuple(bigger)]] <= p[i] + tol)


@pytest.mark.parametrize(("name", "make"), CASES)
def test_fail_prob_all_agrees_with_fail_prob(name, make):
    model, q = make()
    every = model.fail_prob_all(q)
    assert every.shape == (1 << N, q.shape[1])
    np.testing.assert_array_equal(every[0], 1.0)
    np.testing.assert_allclose(every[1:], model.fail_prob(subsets(), q), atol=TOL.get(name, 1e-12))


@pytest.mark.parametrize(("name", "make"), CASES)
def test_singletons_give_the_marginals(name, make):
    model, q = make()
    np.testing.assert_allclose(
        model.fail_prob(np.eye(N, dtype=bool), q), q, atol=TOL.get(name, 1e-12)
    )


@pytest.mark.parametrize(("name", "make"), CASES)
def test_sampled_failures_agree_with_fail_prob(name, make):
    model, q = make()
    drawn = model.sample_failures(np.arange(N), q, ROUNDS, np.random.default_rng(2024))
    assert drawn.shape == (ROUNDS, q.shape[1], N) and drawn.dtype == bool
    members = subsets()
    p = model.fail_prob(members, q)
    for row, m in zip(p, members, strict=True):
        freq = drawn[:, :, m].all(axis=2).mean(axis=0)
        se = np.sqrt(np.maximum(row * (1 - row), 1e-12) / ROUNDS)
        assert np.all(np.abs(freq - row) <= 5 * se + TOL.get(name, 0.0)), (m, freq, row)


def test_sampling_is_seeded():
    for name in ERROR_MODELS:
        for _, make in EXAMPLES[name]:
            model, q = make()
            a = model.sample_failures(np.arange(N), q, 1000, np.random.default_rng(5))
            b = model.sample_failures(np.arange(N), q, 1000, np.random.default_rng(5))
            assert np.array_equal(a, b), name


# ------------------------------------------------------------------ limits
@pytest.mark.parametrize(
    "model",
    [
        ExchangeableErrors(correlation=0.0),
        ExchangeableErrors(error_correlation=0.0),
        FactorErrors(np.zeros(N)),
    ],
    ids=["exchangeable r=0", "exchangeable phi=0", "factor loadings 0"],
)
def test_no_correlation_is_independence(model):
    members = subsets()
    reference = independent_reference(members, Q)
    np.testing.assert_allclose(model.fail_prob(members, Q), reference, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(model.fail_prob_all(Q)[1:], reference, rtol=1e-12, atol=1e-15)


def test_gaussian_identity_is_independence():
    members = subsets()
    got = GaussianErrors(np.eye(N)).fail_prob(members, Q)
    np.testing.assert_allclose(got, independent_reference(members, Q), atol=TOL["gaussian"])


def test_empirical_product_log_is_independence():
    """A log whose masks are weighted by ``Π q_i^b (1 - q_i)^(1-b)`` is independence
    written out: the model reads back the products."""
    masks = np.arange(1 << N)
    bits = ((masks[:, None] >> np.arange(N)) & 1).astype(bool)
    counts = [np.prod(np.where(bits, Q[:, j], 1 - Q[:, j]), axis=1) for j in range(Q.shape[1])]
    model = EmpiricalErrors.from_counts(N, [masks] * Q.shape[1], counts)
    members = subsets()
    np.testing.assert_allclose(model.fail_prob(members, Q), independent_reference(members, Q),
                               rtol=1e-12)  # fmt: skip


def test_full_correlation_is_comonotone():
    members = subsets()
    comonotone = np.array([Q[m].min(axis=0) for m in members])
    np.testing.assert_allclose(
        ExchangeableErrors(correlation=1.0).fail_prob(members, Q), comonotone, atol=1e-12
    )
    np.testing.assert_allclose(
        ExchangeableErrors(correlation=1.0).fail_prob_all(Q)[1:], comonotone, atol=1e-12
    )
