"""The error-model contract, and the default model: independent errors.

An error model gives, for a batch of drafter subsets, the probability that every
member fails at each position: ``P(all i in S fail at j)``. Pooled acceptance
under ``any-correct`` pooling is ``1 - fail_prob``. Implementations live in
:mod:`allocator.model.errors`, one module per model; independent errors (the paper's
A2, ``P(all fail) = prod_i (1 - a_i)``) are here because a :class:`~allocator.core.problem.Problem`
takes them when nothing else is said.

Parametric models (independent, exchangeable, factor, gaussian) take the marginal
failure probabilities ``q`` at call time, so one model serves every workload of a
mixture. The empirical model carries its own marginals (the log's) and returns as
many position columns as the wider of ``q`` and its log; columns beyond repeat the
last, as everywhere in the model.
"""

from __future__ import annotations

import abc

import numpy as np


def fold_all_subsets(q: np.ndarray, op: np.ufunc) -> np.ndarray:
    """``op`` folded over the members of every subset, in bitmask order: ``(2**N, J)``.

    Lowest-bit recursion: the row of ``S`` is ``op(row of S without its highest member,
    q[highest])``, one vectorised ``op`` per drafter. Row 0 (no member) is 1. With
    ``np.multiply`` this is ``prod q_i`` (independent errors); with ``np.minimum``,
    ``min q_i`` (identical errors).
    """
    n, j = q.shape
    out = np.ones((1 << n, j))
    for i in range(n):
        lo, hi = 1 << i, 1 << (i + 1)
        op(out[: hi - lo], q[i], out=out[lo:hi])
    return out


class ErrorModel(abc.ABC):
    """Base class. Constructors only store parameters (no work, no I/O)."""

    name: str = "base"

    @abc.abstractmethod
    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        """P(all members fail) at every position.

        Parameters
        ----------
        members : bool array ``(B, N)``
            Row ``b`` marks the members of subset ``b``; every row has at least one.
        q : float array ``(N, J)``
            Each drafter's marginal failure probability ``1 - a_i(j)`` at positions
            ``1..J`` (the last column repeats beyond ``J``).

        Returns
        -------
        float array ``(B, J)`` (``(B, max(J, P))`` for a log with ``P`` positions).
        """

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        """P(all fail) for every subset at once, indexed by bitmask: ``(2**N, J)``.

        Row ``s`` is the subset whose members are the set bits of ``s``; row 0 (the
        empty subset) is 1. The default builds the membership matrix; models
        override it with something faster.
        """
        n = q.shape[0]
        masks = np.arange(1 << n, dtype=np.int64)
        members = ((masks[:, None] >> np.arange(n)) & 1).astype(bool)
        rest = self.fail_prob(members[1:], q)
        return np.concatenate([np.ones((1, rest.shape[1])), rest])

    def validate(self, q: np.ndarray, where: str = "") -> None:
        """Raise :class:`~allocator.exceptions.InputError` when the model cannot hold
        for marginal failures ``q (N, J)`` (``where`` names a workload, if any)."""
        return None

    def sample_failures(
        self, index: np.ndarray, q: np.ndarray, rounds: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Draw joint failure indicators from the model itself.

        Parameters
        ----------
        index : int array ``(m,)``, the drafters drawn (the subset's members).
        q : ``(N, K)`` marginal failure probabilities at positions ``1..K``.
        rounds : number of rounds; positions are independent given the model.
        rng : a seeded ``numpy.random.Generator``.

        Returns
        -------
        bool array ``(rounds, K, m)``: True where the member fails at that position.
        """
        raise NotImplementedError(f"the {self.name} model cannot be sampled")


def independent_fail_prob(members: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``prod_{i in S} q_i`` for each row of ``members (B, N)``: ``(B, J)``; exact zeros kept."""
    members = np.asarray(members, dtype=bool)
    zero = q <= 0.0  # acceptance 1: the product is exactly 0
    logq = np.log(np.where(zero, 1.0, q))
    m = members.astype(float)
    out = np.exp(m @ logq)
    if zero.any():
        out[(m @ zero.astype(float)) > 0] = 0.0
    return out


def independent_fail_prob_all(q: np.ndarray) -> np.ndarray:
    """``prod q_i`` for every subset in bitmask order (lowest-bit recursion): ``(2**N, J)``."""
    return fold_all_subsets(q, np.multiply)


class IndependentErrors(ErrorModel):
    """Independent errors: ``P(all fail) = prod_{i in S} q_i``."""

    name = "independent"

    def fail_prob(self, members: np.ndarray, q: np.ndarray) -> np.ndarray:
        return independent_fail_prob(members, q)

    def fail_prob_all(self, q: np.ndarray) -> np.ndarray:
        return independent_fail_prob_all(q)

    def sample_failures(self, index, q, rounds, rng):
        u = rng.random((rounds, q.shape[1], len(index)))
        return u < q[index].T[None]


__all__ = [
    "ErrorModel",
    "IndependentErrors",
    "fold_all_subsets",
    "independent_fail_prob",
    "independent_fail_prob_all",
]
