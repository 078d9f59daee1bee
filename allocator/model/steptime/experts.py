"""Routed experts a step reads: the distinct experts its tokens touch
(:func:`expected_experts`), and under expert parallelism the busiest GPU's
(:func:`busiest_gpu_experts`).

Under vLLM 0.33.0's ``--enable-expert-parallel`` with one data-parallel rank the MoE layers
drop tensor parallelism: ``FusedMoEParallelConfig.make``
(``vllm/model_executor/layers/fused_moe/config.py``) sets the layer's ``ep_size`` to the
tensor-parallel size and its ``tp_size`` to 1, so each of the ``n`` GPUs holds ``E/n``
whole experts (``expert_placement_strategy`` "linear" by default,
``vllm/config/parallel.py``) instead of ``1/n`` of every expert's matrices. A step's
``N`` tokens are routed, each to ``k_e`` of the ``E`` experts; a GPU reads the experts of
its own that some token touched, whole. The step waits for the GPU that reads most.

**Per GPU, exactly.** Take one GPU's ``m = E/n`` experts. A token's ``k_e`` experts are
a uniform ``k_e``-subset of the ``E``: the number ``h`` of them on this GPU is
hypergeometric ``(E, m, k_e)``, and when ``d`` of the GPU's experts are already touched
the number of new ones among those ``h`` is hypergeometric ``(m, m − d, h)``. The touched
count ``D`` after ``N`` independent tokens is then a Markov chain on ``0..m`` started at
0; :func:`touched_distribution` is its law after ``N`` steps (``T^N``, the transition
matrix to the power ``N``). Its mean is ``(E/n)·(1 − (1 − k_e/E)^N)``, ``1/n`` of
:func:`expected_experts` (each of the ``E/n`` experts is missed by a token
with probability ``1 − k_e/E``): on average a GPU reads ``cov(N)/n`` whole experts, the
bytes tensor parallelism reads as ``1/n`` of each of ``cov(N)`` experts.

**The busiest GPU** (:func:`busiest_gpu_experts`): ``E[max_g D_g]`` over the ``n`` GPUs,
with the ``D_g`` taken independent, each of the law above: ``Σ_{d<m} (1 − F(d)^n)``,
``F`` the law's distribution function. The ``D_g`` are in fact negatively associated (a
token's ``k_e`` experts are distinct, so many on one GPU leave fewer for the others), so
``P(all D_g <= d) <= F(d)^n`` and this is a lower bound of the busiest GPU's mean: against
Monte Carlo (tests/unit/steptime/test_experts.py) 6% low for one token of DeepSeek-V3's
routing (``E = 256``, ``k_e = 8``) over 8 GPUs, 1% low at 16 tokens, within sampling
error from 64. Non-integer ``N`` (a drafter's mean tokens per pass) interpolates
linearly between ``floor(N)`` and ``ceil(N)``. Routing is taken uniform, as :func:`expected_experts`
takes it; a router's skew, and EPLB's rebalancing of it, are not modelled.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["busiest_gpu_experts", "expected_experts", "touched_distribution"]


def expected_experts(n, experts: int, per_token: int) -> np.ndarray:
    """Expected distinct experts touched by ``n`` tokens, each routed to ``per_token`` of
    ``experts`` experts, uniformly and independently: ``E·(1 − (1 − k_e/E)^n)``.

    Derivation: a token's ``k_e`` experts are a uniform ``k_e``-subset, so it misses a
    given expert with probability ``C(E−1, k_e)/C(E, k_e) = 1 − k_e/E``; ``n`` independent
    tokens all miss it with probability ``(1 − k_e/E)^n``; summing the indicator "expert
    touched" over the ``E`` experts gives the expectation. ``n`` any shape, ``>= 0``
    (fractional ``n`` interpolates); 0 for a dense model (``experts = 0``).
    """
    n = np.asarray(n, dtype=float)
    if experts <= 0:
        return np.zeros_like(n)
    if per_token >= experts:
        return np.where(n > 0, float(experts), 0.0)
    return experts * -np.expm1(n * math.log1p(-per_token / experts))


def _hypergeom(total: int, good: int, draws: int) -> np.ndarray:
    """P(h good among ``draws`` drawn without replacement from ``total`` of which ``good``
    are good), ``h = 0..draws``."""
    den = math.comb(total, draws)
    return np.array(
        [math.comb(good, h) * math.comb(total - good, draws - h) / den for h in range(draws + 1)]
    )


@lru_cache(maxsize=64)
def _transition(experts: int, per_token: int, gpus: int) -> np.ndarray:
    """The chain's ``(m + 1, m + 1)`` transition matrix, row ``d`` → column ``d'``."""
    m = experts // gpus
    on_gpu = _hypergeom(experts, m, min(per_token, experts))
    t = np.zeros((m + 1, m + 1))
    for d in range(m + 1):
        for h, ph in enumerate(on_gpu):
            if ph == 0.0 or h > m:
                continue
            new = _hypergeom(m, m - d, h)
            for j, pj in enumerate(new):
                if pj:
                    t[d, d + j] += ph * pj
    return t


@lru_cache(maxsize=4096)
def _law(tokens: int, experts: int, per_token: int, gpus: int) -> tuple[float, ...]:
    t = _transition(experts, per_token, gpus)
    start = np.zeros(t.shape[0])
    start[0] = 1.0
    return tuple(float(v) for v in start @ np.linalg.matrix_power(t, tokens))


def touched_distribution(tokens: int, experts: int, per_token: int, gpus: int) -> np.ndarray:
    """``(E/n + 1,)`` law of the number of one GPU's ``E/n`` experts that ``tokens``
    tokens touch (module docstring); ``experts`` divisible by ``gpus``, ``tokens >= 0``
    an integer."""
    return np.array(_law(int(tokens), experts, per_token, gpus))


@lru_cache(maxsize=4096)
def _busiest(tokens: int, experts: int, per_token: int, gpus: int) -> float:
    cdf = np.cumsum(_law(tokens, experts, per_token, gpus))[:-1]
    return float(np.sum(1.0 - np.minimum(cdf, 1.0) ** gpus))


def busiest_gpu_experts(n, experts: int, per_token: int, gpus: int) -> np.ndarray:
    """Expected distinct experts read by the busiest of ``gpus`` GPUs holding ``experts/gpus``
    experts each, for ``n`` tokens (any shape, ``>= 0``; module docstring): whole experts,
    so the step's routed-expert read is this many experts at one GPU's bandwidth. 0 for a
    dense model (``experts = 0``)."""
    n = np.asarray(n, dtype=float)
    if experts <= 0:
        return np.zeros_like(n)
    out = np.empty(n.shape)
    flat_in, flat_out = n.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in):
        lo = math.floor(v)
        y = _busiest(lo, experts, per_token, gpus)
        if v > lo:
            y += (v - lo) * (_busiest(lo + 1, experts, per_token, gpus) - y)
        flat_out[i] = y
    return out
