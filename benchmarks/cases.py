"""Problem files for the cases of docs/design.md §7, generated from a seed.

Drafter statistics are drawn from ranges typical of small draft models: acceptance
0.3-0.9 and unit cost 0.01-0.2 verifier-units. Correlated cases draw their
structure (loadings, matrix, outcome log) from the same seed.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from scipy.stats import norm


def drafters(n: int, rng: np.random.Generator) -> list[dict]:
    acc = rng.uniform(0.3, 0.9, n)
    rho = rng.uniform(0.01, 0.2, n)
    return [
        {
            "name": f"d{i:03d}",
            "acceptance": round(float(acc[i]), 4),
            "unit_cost": round(float(rho[i]), 4),
        }
        for i in range(n)
    ]


def problem(name: str, n: int, seed: int = 0, m_max: int | None = None, **extra) -> dict:
    """An ``n``-drafter problem, ``k`` 1..64, ``m`` up to ``m_max`` (free when ``None``)."""
    rng = np.random.default_rng(seed)
    p = {
        "name": name,
        "drafters": drafters(n, rng),
        "search": {"k": {"min": 1, "max": 64}, "m": {"min": 1, "max": m_max}},
    }
    p.update(extra)
    return p


def loadings(n: int, seed: int) -> np.ndarray:
    return np.round(np.random.default_rng(seed + 1).uniform(0.2, 0.8, n), 3)


def factor_problem(name: str, n: int, seed: int = 0) -> dict:
    p = problem(name, n, seed)
    beta = loadings(n, seed)
    p["errors"] = {
        "model": "factor",
        "loadings": {d["name"]: float(b) for d, b in zip(p["drafters"], beta, strict=True)},
    }
    return p


def gaussian_matrix(n: int, seed: int) -> np.ndarray:
    """A positive-definite correlation matrix with two latent factors."""
    rng = np.random.default_rng(seed + 2)
    b = rng.uniform(-0.3, 0.7, (n, 2))
    m = b @ b.T
    np.fill_diagonal(m, 0.0)
    scale = 1.0 / max(1.0, 1.05 * np.abs(m).sum(axis=1).max())  # diagonally dominant: PD
    out = m * scale
    np.fill_diagonal(out, 1.0)
    return np.round(out, 6)


def gaussian_problem(name: str, n: int, seed: int = 0) -> dict:
    p = problem(name, n, seed)
    p["errors"] = {"model": "gaussian", "matrix": gaussian_matrix(n, seed).tolist()}
    return p


def empirical_problem(name: str, n: int, rows: int, folder: Path, seed: int = 0) -> dict:
    """A problem whose errors are a log of ``rows`` positions drawn from a one-factor copula.

    The drafters' stated acceptance is the log's own rate, so the two agree.
    """
    p = problem(name, n, seed)
    rng = np.random.default_rng(seed + 3)
    acc = np.array([d["acceptance"] for d in p["drafters"]])
    beta = loadings(n, seed)
    z = rng.standard_normal((rows, 1))
    latent = beta * z + np.sqrt(1 - beta**2) * rng.standard_normal((rows, n))
    correct = latent >= norm.ppf(1 - acc)  # P(correct) = acc
    path = folder / f"{name}-outcomes.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([d["name"] for d in p["drafters"]])
        w.writerows(correct.astype(np.int8).tolist())
    rate = correct.mean(axis=0)
    for d, r in zip(p["drafters"], rate, strict=True):
        d["acceptance"] = float(r)
    p["errors"] = {"model": "empirical", "outcomes": path.name}
    return p
