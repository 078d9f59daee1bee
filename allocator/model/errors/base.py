"""The contract every error model fulfils.

An error model gives, for a batch of drafter subsets, the probability that every
member fails at each position: ``P(all i in S fail at j)``. Pooled acceptance
under ``any-correct`` pooling is ``1 - fail_prob``.
"""

from __future__ import annotations

import abc

import numpy as np


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
        float array ``(B, J)``.
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
        out = np.ones((1 << n, q.shape[1]))
        out[1:] = self.fail_prob(members[1:], q)
        return out
