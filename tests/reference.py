"""An independent, deliberately plain re-implementation of the model, for tests.

Pure Python over itertools: one configuration at a time, sums over positions written
out as loops. It shares no code with ``allocator.model``.
"""

from __future__ import annotations

import itertools
import math


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
