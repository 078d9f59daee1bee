"""Generate the outcome log ``outcomes.csv`` and the problem ``problem.yaml`` beside it.

A seeded stand-in for a measured joint log: four drafters of one verifier, two of
them distilled from the same teacher (their errors are strongly correlated), a
retrieval/n-gram drafter whose errors are nearly independent of the others, and a
small draft head. Each row is one verified position of one round: a 0/1 column per
drafter (1: its unit was correct), the position (1..8) and the workload (chat or
code). Outcomes come from a Gaussian copula whose thresholds fall with position
(acceptance decays along the draft) and differ by workload.

The problem's stated acceptance is the log's own rates (rounded), so the empirical
error model accepts it. Run from anywhere: ``python problems/outcome-log/generate.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.stats import norm

SEED = 20240611
HERE = Path(__file__).resolve().parent
NAMES = ["distil-1b", "distil-3b", "ngram", "head"]
UNIT_COST = [0.05, 0.12, 0.005, 0.03]
HOSTING = [2.0, 6.0, 0.1, 1.0]
POSITIONS = 8
ROWS_PER_POSITION = {"chat": 1200, "code": 800}
# acceptance at position 1 and its decay per position, by workload
BASE = {
    "chat": np.array([0.62, 0.70, 0.35, 0.55]),
    "code": np.array([0.72, 0.80, 0.60, 0.58]),
}
DECAY = np.array([0.03, 0.025, 0.04, 0.035])
# latent correlation: the distilled pair shares a teacher
MATRIX = np.array(
    [
        [1.0, 0.75, 0.10, 0.35],
        [0.75, 1.0, 0.10, 0.35],
        [0.10, 0.10, 1.0, 0.05],
        [0.35, 0.35, 0.05, 1.0],
    ]
)


def main() -> None:
    rng = np.random.default_rng(SEED)
    root = np.linalg.cholesky(MATRIX)
    lines = [",".join(NAMES + ["position", "workload"])]
    rates = {}
    for workload, rows in ROWS_PER_POSITION.items():
        rates[workload] = np.zeros((len(NAMES), POSITIONS))
        for pos in range(1, POSITIONS + 1):
            acc = np.clip(BASE[workload] - DECAY * (pos - 1), 0.05, 0.99)
            z = rng.standard_normal((rows, len(NAMES))) @ root.T
            correct = z >= norm.ppf(1.0 - acc)  # P(correct) = acc
            rates[workload][:, pos - 1] = correct.mean(axis=0)
            for row in correct.astype(int):
                lines.append(",".join(map(str, row)) + f",{pos},{workload}")
    (HERE / "outcomes.csv").write_text("\n".join(lines) + "\n")

    weights = {"chat": 0.6, "code": 0.4}
    total = sum(ROWS_PER_POSITION.values())
    overall = sum(rates[w] * ROWS_PER_POSITION[w] for w in rates) / total

    def fmt(values) -> str:
        return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"

    out = [
        "# Four drafters of one verifier, driven by a joint outcome log (outcomes.csv,",
        f"# written with problem.yaml by generate.py, seed {SEED}). The distilled pair",
        "# shares a teacher: pooling the two buys much less than independence would",
        "# promise. Acceptance below is the log's own rate per position and workload.",
        "# `allocator breakeven problems/outcome-log/problem.yaml -e distil-1b,distil-3b",
        "# -b distil-3b` puts the pair's break-even at latent correlation 0.717; the log",
        "# was drawn at 0.75, so the pair does not pay (it is on no front point).",
        "name: outcome-log",
        "convention: bonus",
        "verifier:",
        "  # measured cost of one verification pass against verified tokens m*k",
        "  pass_cost_curve: {tokens: [1, 8, 16, 32, 64], cost: [1.0, 1.04, 1.12, 1.35, 1.9]}",
        "drafters:",
    ]
    for i, n in enumerate(NAMES):
        out.append(
            f"  - {{name: {n}, acceptance: {fmt(overall[i])}, unit_cost: {UNIT_COST[i]}, "
            f"hosting_cost: {HOSTING[i]}}}"
        )
    out += ["errors: {model: empirical, outcomes: outcomes.csv}", "workloads:"]
    for w, wt in weights.items():
        out.append(f"  - name: {w}")
        out.append(f"    weight: {wt}")
        out.append("    acceptance:")
        for i, n in enumerate(NAMES):
            out.append(f"      {n}: {fmt(rates[w][i])}")
    out += ["search: {k: {min: 1, max: 12}}", "cost_metric: hosting_cost", ""]
    (HERE / "problem.yaml").write_text("\n".join(out))


if __name__ == "__main__":
    main()
