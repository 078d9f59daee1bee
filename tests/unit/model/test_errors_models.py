"""Each error model against direct numerical integration, scipy's multivariate normal,
Monte Carlo or brute-force counting; the exact limits; the Fréchet bounds."""

import itertools

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import multivariate_normal, norm

from allocator.model.errors import (
    EmpiricalErrors,
    ExchangeableErrors,
    FactorErrors,
    GaussianErrors,
    IndependentErrors,
)
from allocator.model.errors.empirical import zeta_superset
from allocator.model.errors.latent import bvn_cdf, latent_from_error_correlation


def all_members(n):
    return np.array([[(s >> i) & 1 for i in range(n)] for s in range(1, 1 << n)], bool)


def quad_factor(t, beta):
    """∫ Π Φ((t_i - β_i z)/√(1-β_i²)) φ(z) dz by adaptive quadrature (one subset, one position)."""
    t, beta = np.asarray(t, float), np.asarray(beta, float)

    def f(z):
        return np.prod(norm.cdf((t - beta * z) / np.sqrt(1 - beta**2))) * norm.pdf(z)

    steps = sorted(t[beta != 0] / beta[beta != 0])
    val, _ = integrate.quad(f, -12, 12, points=steps or None, limit=500, epsabs=1e-14)
    return val


def mvn_orthant(t, cov):
    return multivariate_normal.cdf(t, cov=cov, abseps=1e-7, releps=0, rng=1)


@pytest.mark.parametrize("r", [0.15, 0.6, 0.97])
@pytest.mark.slow
def test_exchangeable_matches_integration_and_mvn(r):
    q = np.array([[0.3, 0.2], [0.5, 0.45], [0.2, 0.25], [0.4, 0.1]])
    got = ExchangeableErrors(correlation=r).fail_prob(all_members(4), q)
    for row, members in enumerate(all_members(4)):
        idx = np.flatnonzero(members)
        for j in range(2):
            t = norm.ppf(q[idx, j])
            expect = quad_factor(t, np.full(idx.size, np.sqrt(r)))
            assert got[row, j] == pytest.approx(expect, abs=1e-9)
            if idx.size > 1:
                cov = np.full((idx.size, idx.size), r) + (1 - r) * np.eye(idx.size)
                assert got[row, j] == pytest.approx(mvn_orthant(t, cov), abs=2e-6)


@pytest.mark.parametrize("r", [0.3, 0.9])
def test_exchangeable_equal_marginals_depends_on_size_only(r):
    q = np.full((5, 3), 0.35)
    q[:, 1] = 0.2
    model = ExchangeableErrors(correlation=r)
    got = model.fail_prob(all_members(5), q)
    table = model.fail_prob_all(q)
    by_size = {
        (m, j): quad_factor(np.full(m, norm.ppf(q[0, j])), np.full(m, np.sqrt(r)))
        for m in range(1, 6)
        for j in range(3)
    }
    for row, members in enumerate(all_members(5)):
        m = int(members.sum())
        for j in range(3):
            assert got[row, j] == pytest.approx(by_size[m, j], abs=1e-10)
    np.testing.assert_allclose(table[1:], got, atol=1e-14)


def test_factor_matches_integration_with_negative_loadings():
    beta = np.array([0.8, -0.4, 0.0, 0.6, 0.95])
    q = np.array([[0.3], [0.5], [0.2], [0.4], [0.25]])
    got = FactorErrors(beta).fail_prob(all_members(5), q)
    for row, members in enumerate(all_members(5)):
        idx = np.flatnonzero(members)
        expect = quad_factor(norm.ppf(q[idx, 0]), beta[idx])
        assert got[row, 0] == pytest.approx(expect, abs=1e-9)


def test_factor_pairs_are_bivariate_normal_with_product_correlation():
    beta = np.array([0.7, -0.5, 0.9])
    q = np.array([[0.3], [0.4], [0.15]])
    model = FactorErrors(beta)
    for i, j in itertools.combinations(range(3), 2):
        members = np.zeros((1, 3), bool)
        members[0, [i, j]] = True
        rho = beta[i] * beta[j]
        expect = mvn_orthant(norm.ppf([q[i, 0], q[j, 0]]), [[1, rho], [rho, 1]])
        assert model.fail_prob(members, q)[0, 0] == pytest.approx(expect, abs=1e-9)


def test_bivariate_cdf_matches_scipy():
    rng = np.random.default_rng(3)
    h, k = rng.normal(0, 1.5, 40), rng.normal(0, 1.5, 40)
    r = np.concatenate([rng.uniform(-0.999, 0.999, 36), [0.0, 0.9999, -0.9999, 0.5]])
    got = bvn_cdf(h, k, r)
    for i in range(40):
        assert got[i] == pytest.approx(mvn_orthant([h[i], k[i]], [[1, r[i]], [r[i], 1]]), abs=1e-9)
    assert bvn_cdf(0.3, -0.2, 1.0) == pytest.approx(norm.cdf(-0.2), abs=1e-15)


def test_gaussian_matches_factor_integral_and_monte_carlo():
    beta = np.array([0.6, 0.3, 0.8, 0.5])
    matrix = np.outer(beta, beta)
    np.fill_diagonal(matrix, 1.0)
    q = np.array([[0.3], [0.45], [0.2], [0.35]])
    got = GaussianErrors(matrix).fail_prob(all_members(4), q)
    for row, members in enumerate(all_members(4)):
        idx = np.flatnonzero(members)
        expect = quad_factor(norm.ppf(q[idx, 0]), beta[idx])
        assert got[row, 0] == pytest.approx(expect, abs=5e-6)
    # a matrix with no factor structure, against plain Monte Carlo
    general = np.array([[1.0, 0.5, -0.2], [0.5, 1.0, 0.3], [-0.2, 0.3, 1.0]])
    q3 = np.array([[0.4], [0.3], [0.5]])
    z = np.random.default_rng(7).multivariate_normal(np.zeros(3), general, size=1_000_000)
    fails = z < norm.ppf(q3[:, 0])
    got = GaussianErrors(general).fail_prob(all_members(3), q3)[:, 0]
    for row, members in enumerate(all_members(3)):
        p = fails[:, members].all(axis=1).mean()
        assert abs(got[row] - p) < 5 * np.sqrt(p * (1 - p) / fails.shape[0]) + 1e-12


def random_log(rng, rows, n, positions):
    latent = rng.standard_normal((rows, 1))
    z = 0.7 * latent + 0.7 * rng.standard_normal((rows, n))
    fail = z < rng.uniform(-0.8, 0.5, n)
    pos = rng.integers(1, positions + 1, rows)
    return fail, pos


def test_empirical_equals_direct_row_counting():
    rng = np.random.default_rng(11)
    fail, pos = random_log(rng, 3000, 5, 3)
    members = all_members(5)
    with_pos = EmpiricalErrors.from_failures(fail, pos)
    pooled = EmpiricalErrors.from_failures(fail)
    got, got_all = (
        with_pos.fail_prob(members, np.zeros((5, 1))),
        pooled.fail_prob(members, np.zeros((5, 1))),
    )
    for row, m in enumerate(members):
        idx = np.flatnonzero(m)
        count_all = sum(all(fail[r, i] for i in idx) for r in range(fail.shape[0]))
        assert got_all[row, 0] == count_all / fail.shape[0]
        for p in range(3):
            rows = [r for r in range(fail.shape[0]) if pos[r] == p + 1]
            count = sum(all(fail[r, i] for i in idx) for r in rows)
            assert got[row, p] == pytest.approx(count / len(rows), abs=1e-15)
    # the path without a precomputed table counts the same
    no_table = EmpiricalErrors(5, with_pos.masks, with_pos.counts, None)
    np.testing.assert_allclose(no_table.fail_prob(members, np.zeros((5, 1))), got, atol=1e-15)
    np.testing.assert_allclose(with_pos.fail_prob_all(np.zeros((5, 1)))[1:], got, atol=1e-15)
    # positions beyond the log repeat its last
    wide = with_pos.fail_prob(members, np.zeros((5, 6)))
    np.testing.assert_array_equal(wide[:, 3:], np.repeat(got[:, 2:], 3, axis=1))


def test_zeta_transform_is_superset_sum():
    rng = np.random.default_rng(2)
    hist = rng.integers(0, 9, (1 << 4, 2)).astype(float)
    out = zeta_superset(hist)
    for s in range(16):
        expect = sum(hist[t] for t in range(16) if t & s == s)
        np.testing.assert_array_equal(out[s], expect)


def test_exact_limits():
    q = np.array([[0.3, 0.6], [0.5, 0.1], [0.2, 0.0], [0.45, 0.3]])
    m = all_members(4)
    indep = IndependentErrors().fail_prob(m, q)
    np.testing.assert_array_equal(ExchangeableErrors(correlation=0.0).fail_prob(m, q), indep)
    np.testing.assert_array_equal(ExchangeableErrors(error_correlation=0.0).fail_prob(m, q), indep)
    np.testing.assert_array_equal(FactorErrors(np.zeros(4)).fail_prob(m, q), indep)
    comon = np.array([[min(q[i, j] for i in np.flatnonzero(r)) for j in range(2)] for r in m])
    np.testing.assert_array_equal(ExchangeableErrors(correlation=1.0).fail_prob(m, q), comon)
    np.testing.assert_array_equal(ExchangeableErrors(correlation=1.0).fail_prob_all(q)[1:], comon)
    qe = np.full((4, 1), 0.3)
    np.testing.assert_array_equal(
        ExchangeableErrors(error_correlation=1.0).fail_prob(m, qe), np.full((15, 1), 0.3)
    )
    # and the limits are approached continuously
    np.testing.assert_allclose(
        ExchangeableErrors(correlation=1e-9).fail_prob(m, q), indep, atol=1e-8
    )
    np.testing.assert_allclose(
        ExchangeableErrors(correlation=1 - 1e-8).fail_prob(m, q), comon, atol=2e-3
    )


def test_error_correlation_conversion():
    # two drafters at a = 0.5: φ = (2/π) asin(r)  (docs/design.md §3.2)
    for phi in (0.1, 0.3, 0.7, 0.95):
        r = latent_from_error_correlation(phi, 0.5, 0.5)
        assert float(r) == pytest.approx(np.sin(np.pi * phi / 2), abs=1e-12)
    # unequal marginals: the pooled failure of a pair reproduces the stated φ
    q = np.array([[0.3], [0.5]])
    p = ExchangeableErrors(error_correlation=0.25).fail_prob(np.ones((1, 2), bool), q)[0, 0]
    phi = (p - 0.15) / np.sqrt(0.3 * 0.7 * 0.5 * 0.5)
    assert phi == pytest.approx(0.25, abs=1e-10)


def test_all_subsets_agree_with_batch_evaluation():
    rng = np.random.default_rng(5)
    q = rng.uniform(0.05, 0.7, (6, 3))
    q[:, 2] = q[:, 1]
    fail, pos = random_log(rng, 2000, 6, 2)
    models = [
        IndependentErrors(),
        ExchangeableErrors(correlation=0.4),
        FactorErrors(rng.uniform(-0.9, 0.9, 6)),
        EmpiricalErrors.from_failures(fail, pos),
    ]
    for model in models:
        table = model.fail_prob_all(q)
        batch = model.fail_prob(all_members(6), q)
        np.testing.assert_allclose(table[1:], batch, atol=1e-12, err_msg=model.name)
        assert np.all(table[0] == 1.0)
    # matrix models (quasi-Monte Carlo for 3+ members: kept small); error_correlation
    # with unequal marginals is a pairwise latent matrix
    q_close = rng.uniform(0.3, 0.4, (4, 2))
    matrix = np.full((4, 4), 0.3) + 0.7 * np.eye(4)
    phi = ExchangeableErrors(error_correlation=0.2)
    phi.validate(q_close)
    for model in (GaussianErrors(matrix), phi):
        np.testing.assert_allclose(
            model.fail_prob_all(q_close)[1:], model.fail_prob(all_members(4), q_close), atol=1e-12
        )


@pytest.mark.parametrize("seed", range(4))
def test_frechet_bounds(seed):
    rng = np.random.default_rng(seed)
    n = 5
    q = rng.uniform(0.0, 0.95, (n, 2))
    beta = rng.uniform(-0.99, 0.99, n)
    a = rng.standard_normal((n, n))
    cov = a @ a.T
    d = np.sqrt(np.diag(cov))
    matrix = cov / np.outer(d, d)
    m = all_members(n)
    lower = np.array([np.maximum(0, q[r].sum(axis=0) - (r.sum() - 1)) for r in m])
    upper = np.array([q[r].min(axis=0) for r in m])
    for model in (
        ExchangeableErrors(correlation=rng.uniform()),
        FactorErrors(beta),
        GaussianErrors(matrix),
    ):
        p = model.fail_prob(m, q)
        assert np.all(p >= lower - 1e-6) and np.all(p <= upper + 1e-9), model.name


def test_error_correlation_with_a_drafter_that_never_fails():
    # acceptance 1 makes an error indicator constant: its pairs carry no constraint, and
    # every subset holding it fails with probability exactly 0
    q = np.array([[0.0, 0.3], [0.5, 0.3], [0.2, 0.0]])
    model = ExchangeableErrors(error_correlation=0.2)
    model.validate(q)
    got = model.fail_prob(all_members(3), q)
    for row, members in enumerate(all_members(3)):
        for j in range(2):
            idx = np.flatnonzero(members)
            if np.any(q[idx, j] == 0):
                assert got[row, j] == 0.0
            elif idx.size == 2:  # φ = (P - q1 q2) / sd
                qa, qb = q[idx, j]
                expect = qa * qb + 0.2 * np.sqrt(qa * (1 - qa) * qb * (1 - qb))
                assert got[row, j] == pytest.approx(expect, abs=1e-12)


def test_log_readers_agree(problems_dir):
    from allocator.io.outcome_log import read_careful, read_fast

    path = problems_dir / "outcome-log" / "outcomes.csv"
    names = ("ngram", "distil-1b", "head", "distil-3b")
    fast, careful = read_fast(path, names), read_careful(path, names)
    for key in ("fail", "position", "workload"):
        np.testing.assert_array_equal(fast[key], careful[key])
    assert fast["fail"].shape == (16000, 4)
