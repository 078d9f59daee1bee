"""Monte Carlo rounds of draft-then-verify, beside the closed form: chains drawn from the
error model itself, and the steps of one token tree drawn from its rank acceptance.

Chains (:func:`simulate`).

Each round draws the joint correct/fail outcome of every member at every position
from the problem's error model (correlated latent Gaussian draws for the copula
models, resampled log rows for ``empirical``; see
:meth:`~allocator.model.errors.ErrorModel.sample_failures`), never from the closed
form. Positions are drawn independently of each other, as the model assumes. A
position is accepted when some member is correct (``any-correct``); under
``longest-chain`` each member's own chain runs until its first failure and the
longest is kept. Accepted units per round follow the problem's convention:

* ``paper``: ``1 + L`` where ``L`` is the accepted run over positions ``1..k-1``;
* ``bonus``: ``1 + L`` over positions ``1..k`` (the verifier's own unit plus the run).

A subset with a measured ``ensembles`` acceptance is played with that per-position
acceptance. For a workload mixture every workload plays ``rounds`` rounds and the
estimates combine as the model does (``E = 1 / Σ_w p_w / E_w``), with a delta-method
interval.

Token trees (:func:`simulate_tree`, docs/design.md §8.10). Steps are played from the
definition of rank acceptance ``p_r`` (not from ``q``): at the accepted node the ranks are
tried in order, rank ``r`` accepted with probability ``p_r(ℓ)`` once ranks ``< r`` failed;
the step continues when that rank is a child in the tree. The mean tokens per step is
reported with the 99% normal interval ``mean ± z_0.995 · sd / √R`` beside ``E``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..exceptions import NotModelledError
from ..model.acceptance import extend_positions
from ..model.errors import IndependentErrors
from ..model.metrics import evaluate_configs
from ..model.token_tree import Tree, node_depths
from ..validate import whole

if TYPE_CHECKING:
    from scipy import special

    from ..core.problem import Problem
else:
    special = lazy_module("scipy.special")

#: Two-sided confidence level of the reported interval.
LEVEL = 0.99
#: Largest number of rounds per workload (the per-round counts are kept in memory).
MAX_ROUNDS = 50_000_000
#: Bound on booleans drawn per chunk of rounds.
MAX_CELLS = 1 << 22


@dataclass
class Simulation:
    """What :func:`simulate` reports. Units: accepted units per round, and per
    verifier-unit of time for throughputs."""

    drafters: list[str]
    k: int
    rounds: int
    seed: int
    mean_accepted: float
    ci_low: float
    ci_high: float
    model_accepted: float | None  # None: no closed form (longest-chain, correlated)
    throughput: float
    throughput_ci_low: float
    throughput_ci_high: float
    model_throughput: float | None
    round_time: float
    #: share of rounds with ``u`` accepted units, ``u = 0..k+1`` (rounds-weighted over
    #: the workloads of a mixture): the histogram to set against
    #: :func:`~allocator.model.accepted_pmf.accepted_distribution`
    accepted_shares: list[float]

    def to_dict(self) -> dict:
        """The ``simulate --json`` document of a chain."""
        return dict(self.__dict__)


def _positions(problem: Problem, k: int) -> int:
    """Positions whose outcome matters: ``k - 1`` (paper) or ``k`` (bonus)."""
    return k - 1 if problem.convention == "paper" else k


def simulate_rounds(
    problem: Problem, members: np.ndarray, k: int, rounds: int, seed: int
) -> np.ndarray:
    """Accepted units in each of ``rounds`` simulated rounds: int ``(rounds,)``.

    ``members`` bool ``(N,)``. One class of traffic: a workload mixture is played
    workload by workload with :func:`workload_rounds`.
    """
    members = np.asarray(members, dtype=bool)
    if problem.workloads:
        raise ValueError("a workload mixture is played per workload: use workload_rounds")
    rng = np.random.default_rng(seed)
    n_pos = _positions(problem, k)
    out = np.ones(rounds, np.int64)
    if n_pos == 0:
        return out
    index = np.flatnonzero(members)
    q = 1.0 - extend_positions(problem.acceptance, n_pos)
    measured = next((e for e in problem.ensembles if np.array_equal(e.members, members)), None)
    chunk = max(1, MAX_CELLS // (n_pos * index.size))
    for lo in range(0, rounds, chunk):
        size = min(chunk, rounds - lo)
        if measured is not None:
            acc_pos = extend_positions(measured.acceptance, n_pos)
            accepted = rng.random((size, n_pos)) < acc_pos
            run = np.cumprod(accepted, axis=1).sum(axis=1)
        else:
            fail = problem.errors.sample_failures(index, q, size, rng)  # (size, K, m)
            if problem.pooling == "longest-chain":
                run = np.cumprod(~fail, axis=1).sum(axis=1).max(axis=1)
            else:
                run = np.cumprod(~fail.all(axis=2), axis=1).sum(axis=1)
        out[lo : lo + size] += run
    return out


def workload_rounds(problem: Problem, members: np.ndarray, k: int, rounds: int, seed: int) -> list:
    """Accepted units of ``rounds`` rounds played by each workload of a mixture on its
    own: one int ``(rounds,)`` array per workload, in ``problem.workloads`` order.

    Each workload gets its own seed spawned from ``seed``, so :func:`simulate` and a
    plot of the same run see the same rounds.
    """
    seeds = np.random.SeedSequence(seed).spawn(len(problem.workloads))
    return [
        simulate_rounds(problem.workload_view(i), members, k, rounds, int(s.generate_state(1)[0]))
        for i, s in enumerate(seeds)
    ]


def simulate(
    problem: Problem, drafters: list[str], k: int, rounds: int, seed: int = 0
) -> Simulation:
    """Play ``rounds`` rounds of configuration (``drafters``, ``k``); compare with the model."""
    whole(k, "k", lo=1)
    whole(rounds, "rounds", lo=2, hi=MAX_ROUNDS)  # 2: the interval needs a spread
    members = problem.mask(drafters, "drafters")
    try:
        model = evaluate_configs(problem, members[None], np.array([k]))
    except NotModelledError:  # no closed form (longest-chain under correlated errors)
        timing = problem.with_errors(IndependentErrors()).replace(
            pooling="any-correct", ensembles=()
        )
        model = evaluate_configs(timing, members[None], np.array([k]))
        model["expected_accepted"] = model["throughput"] = np.array([np.nan])

    z = special.ndtri(0.5 + LEVEL / 2)
    size = k + 2
    if not problem.workloads:
        units = simulate_rounds(problem, members, k, rounds, seed)
        mean = float(units.mean())
        se = float(units.std(ddof=1) / np.sqrt(rounds))
        shares = np.bincount(units, minlength=size)[:size] / rounds
    else:
        per = workload_rounds(problem, members, k, rounds, seed)
        means = np.array([units.mean() for units in per])
        ses = np.array([units.std(ddof=1) / np.sqrt(rounds) for units in per])
        weights = np.array([w.weight for w in problem.workloads])
        mean = float(1.0 / np.sum(weights / means))
        se = float(np.sqrt(np.sum((mean**2 * weights / means**2 * ses) ** 2)))
        # workload w plays a share p_w / mean_w of the rounds (normalised)
        of_rounds = weights / means / np.sum(weights / means)
        shares = of_rounds @ np.array([np.bincount(u, minlength=size)[:size] / rounds for u in per])
    t = float(model["round_time"][0])
    return Simulation(
        drafters=list(drafters),
        k=int(k),
        rounds=int(rounds),
        seed=int(seed),
        mean_accepted=mean,
        ci_low=mean - z * se,
        ci_high=mean + z * se,
        model_accepted=_or_none(model["expected_accepted"][0]),
        throughput=mean / t,
        throughput_ci_low=(mean - z * se) / t,
        throughput_ci_high=(mean + z * se) / t,
        model_throughput=_or_none(model["throughput"][0]),
        round_time=t,
        accepted_shares=[float(x) for x in shares],
    )


def _or_none(x) -> float | None:
    return None if np.isnan(x) else float(x)


# ---------------------------------------------------------------- token trees
def simulate_tree_rounds(
    parents: np.ndarray, ranks: np.ndarray, p: np.ndarray, rounds: int, seed: int
) -> np.ndarray:
    """Tokens per step (bonus convention) of ``rounds`` simulated steps of one tree: int
    ``(rounds,)``.

    Played from the definition of rank acceptance, not from ``q``: at the accepted node of
    depth ``ℓ - 1`` the verifier tries the drafter's candidates in rank order and accepts
    rank ``r`` with probability ``p_r(ℓ)`` once ranks ``< r`` failed (at most one is
    accepted). The step continues when that candidate is a node of the tree and stops
    otherwise; each accepted node adds a token to the verifier's own.
    """
    parents = np.asarray(parents, dtype=np.int64)
    ranks = np.asarray(ranks, dtype=np.int64)
    p = np.atleast_2d(np.asarray(p, dtype=float))
    n = parents.size
    width = p.shape[1]
    child = np.full((n, width + 1), -1, np.int64)  # column 0: no rank accepted
    for v in range(1, n):
        if ranks[v] <= width:
            child[parents[v], ranks[v]] = v
    depth_max = int(node_depths(parents[None])[0].max()) if n > 1 else 0
    rng = np.random.default_rng(seed)
    out = np.ones(rounds, np.int64)
    chunk = max(1, (1 << 20) // max(1, width * max(depth_max, 1)))
    for lo in range(0, rounds, chunk):
        size = min(chunk, rounds - lo)
        node = np.zeros(size, np.int64)
        alive = np.ones(size, bool)
        for level in range(depth_max):
            u = rng.random((size, width))
            hit = u < p[min(level, p.shape[0] - 1)][None, :]
            first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
            nxt = np.where(first > 0, child[node, first], -1)
            alive &= nxt >= 0
            node = np.where(alive, nxt, node)
            out[lo : lo + size] += alive
    return out


@dataclass
class TreeSimulation:
    """``rounds`` simulated steps of one tree (seeded by ``seed``): the mean tokens per
    step with its two-sided ``level`` normal interval, beside the model's ``E``
    (``model_accepted``); tokens per step, bonus convention."""

    rounds: int
    seed: int
    mean_accepted: float
    ci_low: float
    ci_high: float
    level: float
    model_accepted: float

    def to_dict(self) -> dict:
        """The ``simulation`` block of ``tree --json`` (and the body of ``simulate --nodes``)."""
        return dict(self.__dict__)


def simulate_tree(tree: Tree, p: np.ndarray, rounds: int, seed: int = 0) -> TreeSimulation:
    """Play ``rounds`` steps of ``tree`` under conditional rank acceptance ``p (L, W)``
    (:func:`simulate_tree_rounds`); ``2 <= rounds <= MAX_ROUNDS``."""
    whole(rounds, "rounds", lo=2, hi=MAX_ROUNDS)
    units = simulate_tree_rounds(tree.parents, tree.ranks, p, rounds, seed)
    mean = float(units.mean())
    half = float(special.ndtri(0.5 + LEVEL / 2) * units.std(ddof=1) / np.sqrt(rounds))
    return TreeSimulation(
        rounds=rounds,
        seed=seed,
        mean_accepted=mean,
        ci_low=mean - half,
        ci_high=mean + half,
        level=LEVEL,
        model_accepted=tree.expected_accepted,
    )


__all__ = [
    "LEVEL",
    "MAX_ROUNDS",
    "Simulation",
    "TreeSimulation",
    "simulate",
    "simulate_rounds",
    "simulate_tree",
    "simulate_tree_rounds",
    "workload_rounds",
]
