"""An independent, deliberately plain re-implementation of the model, for tests.

Pure Python over itertools: one configuration at a time, sums over positions written
out as loops. It shares no code with ``allocator.model``.
"""

from __future__ import annotations

import itertools
import math
import statistics


def acc_at(acc, j):
    """Acceptance at 1-based position j (scalar, or list whose last value repeats)."""
    if isinstance(acc, (int, float)):
        return float(acc)
    return float(acc[min(j, len(acc)) - 1])


def pooled(drafters, subset, j):
    fail = 1.0
    for i in subset:
        fail *= 1.0 - acc_at(drafters[i]["acceptance"], j)
    return 1.0 - fail


def expected(drafters, subset, k, convention):
    total = 0.0
    if convention == "paper":
        for i in range(1, k + 1):
            prod = 1.0
            for j in range(1, i):
                prod *= pooled(drafters, subset, j)
            total += prod
    else:
        total = 1.0
        for i in range(1, k + 1):
            prod = 1.0
            for j in range(1, i + 1):
                prod *= pooled(drafters, subset, j)
            total += prod
    return total


def metrics(p, subset, k):
    d = p["drafters"]
    e = expected(d, subset, k, p.get("convention", "paper"))
    rhos = [d[i]["unit_cost"] for i in subset]
    ver = p.get("verifier", {})
    verify = ver.get("pass_cost", 1.0) + ver.get("token_cost", 0.0) * len(subset) * k
    draft_t = k * (sum(rhos) if p.get("drafting", "sequential") == "sequential" else max(rhos))
    t = draft_t + verify
    return {
        "throughput": e / t,
        "expected_accepted": e,
        "round_time": t,
        "draft_cost_per_round": k * sum(rhos),
        "draft_cost_per_token": k * sum(rhos) / e,
        "hosting_cost": sum(d[i].get("hosting_cost", 0.0) for i in subset),
        "drafters": len(subset),
    }


def brute_front(p):
    """All (subset, k, metrics) within budget, then the non-dominated ones."""
    d = p["drafters"]
    names = [x["name"] for x in d]
    s = p.get("search", {})
    kr, mr = s.get("k", {}), s.get("m", {})
    kmin, kmax = kr.get("min", 1), kr.get("max", 64)
    mmin, mmax = mr.get("min", 1), mr.get("max") or len(d)
    req = {names.index(n) for n in s.get("require", [])}
    exc = {names.index(n) for n in s.get("exclude", [])}
    budget = p.get("budget", {})
    metric = p.get("cost_metric", "draft_cost_per_round")
    points = []
    for m in range(mmin, mmax + 1):
        for subset in itertools.combinations(range(len(d)), m):
            if not req <= set(subset) or exc & set(subset):
                continue
            for k in range(kmin, kmax + 1):
                met = metrics(p, subset, k)
                if all(met[b] <= cap + 1e-9 * max(1.0, abs(cap)) for b, cap in budget.items()):
                    points.append((met[metric], met["throughput"], subset, k))
    front = [
        pt
        for pt in points
        if not any(
            (o[0] <= pt[0] and o[1] >= pt[1]) and (o[0] < pt[0] or o[1] > pt[1]) for o in points
        )
    ]
    # identical points count once
    uniq = {}
    for c, t, subset, k in front:
        uniq.setdefault((round(c, 12), round(t, 12)), (c, t, subset, k))
    return sorted(uniq.values()), len(points)


def same_front(a, b, tol=1e-9):
    """Two lists of (cost, throughput) attain the same region (within tol)."""

    def covered(p, front):
        return any(c <= p[0] + tol and t >= p[1] - tol for c, t in front)

    return all(covered(p, b) for p in a) and all(covered(p, a) for p in b)


def isclose(a, b, rel=1e-12, abs_=1e-12):
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# ---------------------------------------------------------------------------------------
# The whole model, every feature: error models, workloads, ensembles, longest-chain
# pooling, pass-cost curves. Written from the model's definitions (the README and the
# docstrings of allocator.model), with scipy's normal distribution and quadrature for
# the latent-Gaussian error models and the outcome log counted row by row.


_STD = statistics.NormalDist()


def _phi(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _cdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _latent_fail(q, loadings):
    """P(all fail) under a one-factor Gaussian copula: Z_i = b_i W + sqrt(1 - b_i^2) e_i,
    drafter i fails when Z_i < Phi^-1(q_i). One adaptive quadrature over W."""
    from scipy import integrate

    if any(x <= 0.0 for x in q):
        return 0.0
    t = [_STD.inv_cdf(x) for x in q]
    s = [math.sqrt(1.0 - b * b) for b in loadings]

    def integrand(z):
        out = _phi(z)
        for ti, b, si in zip(t, loadings, s, strict=True):
            out *= _cdf((ti - b * z) / si)
        return out

    value, _ = integrate.quad(integrand, -12.0, 12.0, epsabs=1e-14, epsrel=1e-12, limit=200)
    return value


def _gaussian_fail(q, matrix):
    """P(all fail) under a Gaussian copula: the multivariate normal CDF at the
    thresholds (scipy's Genz integration, to ~1e-7)."""
    if len(q) == 1:
        return q[0]
    if any(x <= 0.0 for x in q):
        return 0.0
    from scipy import stats

    t = [_STD.inv_cdf(x) for x in q]
    dist = stats.multivariate_normal(
        mean=[0.0] * len(q), cov=matrix, maxpts=100_000 * len(q), abseps=1e-7, releps=0
    )
    return float(dist.cdf(t))


def read_log(path):
    """The outcome log as a list of dicts (a BOM on the first column name dropped)."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


class Model:
    """One problem file (a dict) evaluated configuration by configuration.

    ``base_dir``: the folder ``errors.outcomes`` is relative to.
    """

    def __init__(self, p, base_dir=None):
        self.p = p
        self.d = p["drafters"]
        self.names = [x["name"] for x in self.d]
        self.errors = p.get("errors", {}) or {}
        self.model = self.errors.get("model", "independent")
        self.log = None
        self.log_positions = 0
        if self.model == "empirical":
            import os

            self.log = read_log(os.path.join(base_dir or ".", self.errors["outcomes"]))
            if "position" in self.log[0]:
                self.log_positions = max(int(r["position"]) for r in self.log)
        self._cache = {}

    # --- one class of traffic ---------------------------------------------------------
    def acc(self, i, j, workload=None):
        """Marginal acceptance of drafter i at position j (1-based) in a workload."""
        if workload is not None:
            over = workload.get("acceptance", {})
            if self.names[i] in over:
                return acc_at(over[self.names[i]], j)
        return acc_at(self.d[i]["acceptance"], j)

    def fail_all(self, subset, j, workload=None):
        q = [1.0 - self.acc(i, j, workload) for i in subset]
        if self.model == "empirical":
            last = self.log_positions
            key = ("fail", subset, min(j, last) if last else 0)
        else:
            key = ("fail", subset, tuple(q))  # later positions repeat earlier marginals
        if key not in self._cache:
            self._cache[key] = self._fail_all(subset, j, q)
        return self._cache[key]

    def _fail_all(self, subset, j, q):
        m = self.model
        if m == "independent":
            out = 1.0
            for x in q:
                out *= x
            return out
        if m == "exchangeable":
            r = self.errors["correlation"]
            if r == 0.0:
                return math.prod(q)
            if r == 1.0:
                return min(q)
            return _latent_fail(q, [math.sqrt(r)] * len(q))
        if m == "factor":
            return _latent_fail(q, [self.errors["loadings"][self.names[i]] for i in subset])
        if m == "gaussian":
            mat = self.errors["matrix"]
            return _gaussian_fail(q, [[mat[a][b] for b in subset] for a in subset])
        if m == "empirical":
            rows = self.log
            if "position" in rows[0]:
                last = max(int(r["position"]) for r in rows)
                rows = [r for r in rows if int(r["position"]) == min(j, last)]
            fails = sum(all(r[self.names[i]].strip() == "0" for i in subset) for r in rows)
            return fails / len(rows)
        raise ValueError(m)

    def pooled(self, subset, j, workload=None):
        """Pooled acceptance at position j (any-correct; measured ensembles override)."""
        key = ("pooled", subset, j, None if workload is None else workload["name"])
        if key in self._cache:
            return self._cache[key]
        value = None
        if workload is None:
            for e in self.p.get("ensembles", []):
                if sorted(self.names.index(n) for n in e["members"]) == sorted(subset):
                    value = acc_at(e["acceptance"], j)
        if value is None:
            value = 1.0 - self.fail_all(subset, j, workload)
        self._cache[key] = value
        return value

    def chain_any(self, subset, i, workload=None):
        """Longest-chain pooling: P(some member's own chain survives positions 1..i)."""
        none = 1.0
        for d in subset:
            surv = 1.0
            for j in range(1, i + 1):
                surv *= self.acc(d, j, workload)
            none *= 1.0 - surv
        return 1.0 - none

    def position_acceptance(self, subset, j, workload=None):
        """The per-position acceptance a(j) the expected-units sums use."""
        if self.p.get("pooling", "any-correct") == "longest-chain":
            prev = self.chain_any(subset, j - 1, workload) if j > 1 else 1.0
            return self.chain_any(subset, j, workload) / prev if prev > 0 else 0.0
        return self.pooled(subset, j, workload)

    def expected(self, subset, k, workload=None):
        """E_k: accepted units per round (paper or bonus convention)."""
        a = [self.position_acceptance(subset, j, workload) for j in range(1, k + 1)]
        total = 0.0
        if self.p.get("convention", "paper") == "paper":
            for i in range(1, k + 1):
                total += math.prod(a[: i - 1])
        else:
            total = 1.0
            for i in range(1, k + 1):
                total += math.prod(a[:i])
        return total

    def mean_acceptance(self, subset, k, workload=None):
        """Mean per-position acceptance over positions 1..k."""
        return sum(self.position_acceptance(subset, j, workload) for j in range(1, k + 1)) / k

    # --- time and cost ----------------------------------------------------------------
    def verify(self, tokens):
        ver = self.p.get("verifier", {})
        curve = ver.get("pass_cost_curve")
        if curve is None:
            return ver.get("pass_cost", 1.0) + ver.get("token_cost", 0.0) * tokens
        xs, ys = curve["tokens"], curve["cost"]
        if tokens <= xs[0]:
            return ys[0]
        for a in range(len(xs) - 1):
            if tokens <= xs[a + 1]:
                w = (tokens - xs[a]) / (xs[a + 1] - xs[a])
                return ys[a] + w * (ys[a + 1] - ys[a])
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        # beyond the last measured point a falling slope is clamped to flat: a longer
        # pass never costs less than the last one measured
        return ys[-1] + max(slope, 0.0) * (tokens - xs[-1])

    def metrics(self, subset, k):
        """Every output metric of (subset, k)."""
        d = self.d
        rhos = [d[i]["unit_cost"] for i in subset]
        parallel = self.p.get("drafting", "sequential") == "parallel"
        t = k * (max(rhos) if parallel else sum(rhos)) + self.verify(len(subset) * k)
        workloads = self.p.get("workloads", [])
        if workloads:
            total = sum(w["weight"] for w in workloads)
            inv = 0.0
            weighted = 0.0
            for w in workloads:
                e_w = self.expected(subset, k, w)
                share = w["weight"] / total / e_w
                inv += share
                weighted += share * self.mean_acceptance(subset, k, w)
            e = 1.0 / inv
            pooled_acc = weighted / inv
        else:
            e = self.expected(subset, k)
            pooled_acc = self.mean_acceptance(subset, k)
        return {
            "throughput": e / t,
            "expected_accepted": e,
            "pooled_acceptance": pooled_acc,
            "round_time": t,
            "draft_cost_per_round": k * sum(rhos),
            "draft_cost_per_token": k * sum(rhos) / e,
            "hosting_cost": sum(d[i].get("hosting_cost", 0.0) for i in subset),
            "drafters": len(subset),
        }

    def front(self):
        """Brute force: every configuration in the search space and budget, then the
        non-dominated (cost, throughput) points, identical points once."""
        d = self.d
        s = self.p.get("search", {})
        kr, mr = s.get("k", {}), s.get("m", {})
        kmin, kmax = kr.get("min", 1), kr.get("max", 64)
        mmin, mmax = mr.get("min", 1), mr.get("max") or len(d)
        req = {self.names.index(n) for n in s.get("require", [])}
        exc = {self.names.index(n) for n in s.get("exclude", [])}
        budget = self.p.get("budget", {})
        metric = self.p.get("cost_metric", "draft_cost_per_round")
        points = []
        for m in range(mmin, mmax + 1):
            for subset in itertools.combinations(range(len(d)), m):
                if not req <= set(subset) or exc & set(subset):
                    continue
                for k in range(kmin, kmax + 1):
                    met = self.metrics(subset, k)
                    if all(met[b] <= cap + 1e-9 * max(1.0, abs(cap)) for b, cap in budget.items()):
                        points.append((met[metric], met["throughput"], subset, k))
        # a sweep by cost: a point is on the front when it beats the throughput of every
        # point at most as costly seen before it
        front = []
        best = -math.inf
        for c, t, subset, k in sorted(points, key=lambda x: (x[0], -x[1])):
            if t > best:
                front.append((c, t, subset, k))
                best = t
        return front
