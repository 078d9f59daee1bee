"""Small problems for the request-level tests (``bench``, capacity for a request rate), every
number written here so that expected values can be worked out by hand.

``eagle`` (method eagle3, acceptance 0.8, 0.7, 0.6, 0.5 by position) and ``ngram`` (method
ngram, 0.5) have measured step tables at batch 1 and 16 (``STEP`` below, ms), linear in
between; plain decoding is 10 ms at batch 1 and 16 ms at batch 16 in both. A prefill of
``P`` tokens costs ``4 + 56 · (P − 16) / 2032`` ms (4 ms at 16 tokens, 60 ms at 2048), 4 ms
below 16.
"""

from __future__ import annotations

import copy

from allocator.core.problem import Problem
from allocator.io.build import problem_from_spec
from allocator.io.spec import parse_problem

ACCEPTANCE = [0.8, 0.7, 0.6, 0.5]
STEP = {
    "eagle": {1: [10.0, 11.0, 12.0, 13.0, 14.0], 16: [16.0, 20.0, 24.0, 28.0, 32.0]},
    "ngram": {1: [10.0, 10.5, 11.0, 11.5, 12.0], 16: [16.0, 18.0, 20.0, 22.0, 24.0]},
}
PREFILL = {"tokens": [16, 2048], "ms": [4.0, 60.0]}


def step_ms(name: str | None, b: float, k: int) -> float:
    """The table's step by hand: linear in the batch between 1 and 16."""
    rows = STEP[name or "eagle"]
    w = (b - 1) / 15
    return (1 - w) * rows[1][k] + w * rows[16][k]


def prefill_ms(tokens: float) -> float:
    """The prefill table by hand."""
    if tokens <= 0:
        return 0.0
    if tokens <= 16:
        return 4.0
    return 4.0 + 56.0 * (tokens - 16) / 2032


def chain_pmf(acceptance: list[float], k: int) -> list[float]:
    """Tokens one sequence emits per step (bonus convention) by hand: ``P(≥ j) = Π_{i<j}
    a(i)`` for ``j = 1..k+1``, the last acceptance repeating."""
    at_least = [1.0]
    for j in range(1, k + 1):
        a = acceptance[min(j - 1, len(acceptance) - 1)]
        at_least.append(at_least[-1] * a)
    at_least.append(0.0)
    return [0.0] + [at_least[j] - at_least[j + 1] for j in range(k + 1)]


def data(**serving) -> dict:
    """The problem as data; ``serving`` entries replace those of its serving section."""
    base = {
        "name": "requests",
        "convention": "bonus",
        "drafters": [
            {
                "name": "eagle",
                "method": "eagle3",
                "model": "example/eagle3-head",
                "acceptance": ACCEPTANCE,
                "unit_cost": 0.05,
            },
            {"name": "ngram", "method": "ngram", "acceptance": 0.5, "unit_cost": 0.0},
        ],
        "search": {"k": {"min": 1, "max": 4}, "m": {"max": 1}},
        "serving": {
            "batch_sizes": [1, 16],
            "gpu_cost_per_hour": 2.0,
            "gpus_per_replica": 2,
            "step_ms": [
                {
                    "drafters": [name],
                    "by_batch": {b: dict(enumerate(row)) for b, row in rows.items()},
                }
                for name, rows in STEP.items()
            ],
            "scheduler": {
                "max_num_seqs": 16,
                "max_num_batched_tokens": 2048,
                "kv_cache_tokens": 200_000,
                "block_size": 16,
            },
            "prefill_ms": copy.deepcopy(PREFILL),
        },
    }
    base["serving"].update(serving)
    return base


def build(d: dict) -> Problem:
    return problem_from_spec(parse_problem(copy.deepcopy(d)))


def problem(**serving) -> Problem:
    return build(data(**serving))


__all__ = [
    "ACCEPTANCE",
    "PREFILL",
    "STEP",
    "build",
    "chain_pmf",
    "data",
    "prefill_ms",
    "problem",
    "step_ms",
]
