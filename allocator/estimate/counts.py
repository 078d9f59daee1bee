"""Acceptance counts per drafter and position, and their 95% intervals.

Every input format is reduced to the same thing: for drafter ``i`` and position
``j`` (1-based), ``trials[j-1]`` rounds reached position ``j`` and in
``successes[j-1]`` of them the drafter's unit there was correct. The conditional
acceptance ``a_i(j)`` (DESIGN §1) is estimated by ``successes / trials``.

Intervals are equal-tailed Beta posterior intervals under the Jeffreys prior
``Beta(1/2, 1/2)``: the posterior after ``s`` successes in ``n`` trials is
``Beta(s + 1/2, n - s + 1/2)``. Their frequentist coverage is close to nominal
even for small ``n`` and for ``s`` near ``0`` or ``n`` (Brown, Cai & DasGupta 2001),
and :mod:`allocator.uncertainty` draws from the same posterior.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import special

from ..exceptions import InputError
from ..inputs import MAX_LOG_BYTES, read_input_text

#: Positions reached by fewer rounds than this are dropped from the end of the
#: per-position list (the last kept value then repeats, DESIGN §1).
MIN_TRIALS = 30
#: Level of every interval written into a problem file.
LEVEL = 0.95
#: Jeffreys prior ``Beta(PRIOR, PRIOR)``.
PRIOR = 0.5


def read_text(path: Path) -> str:
    """The text of an input file (a regular file within :data:`~allocator.inputs.MAX_LOG_BYTES`,
    a leading UTF-8 BOM dropped); a missing or unreadable file names ``INPUT``."""
    return read_input_text(path, "INPUT", MAX_LOG_BYTES)


def jeffreys_interval(
    successes: np.ndarray, trials: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed Beta-posterior interval (Jeffreys prior); arrays of any common shape.

    Returns ``(lo, hi)`` in [0, 1].
    """
    s = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    tail = (1.0 - level) / 2.0
    lo = special.betaincinv(s + PRIOR, n - s + PRIOR, tail)
    hi = special.betaincinv(s + PRIOR, n - s + PRIOR, 1.0 - tail)
    return lo, hi


def point_estimate(successes: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """``s / n``; where ``s = 0`` (acceptance 0 is not a valid value) the posterior median."""
    s = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    est = s / n
    zero = s == 0
    if zero.any():
        est = np.where(zero, special.betaincinv(s + PRIOR, n - s + PRIOR, 0.5), est)
    return est


def kept_positions(trials: np.ndarray, min_trials: int, what: str) -> int:
    """How many leading positions have at least ``min_trials`` trials (at least one)."""
    t = np.asarray(trials)
    short = np.flatnonzero(t < min_trials)
    keep = int(short[0]) if short.size else int(t.size)
    if keep == 0:
        got = int(t[0]) if t.size else 0
        raise InputError(
            what,
            f"only {got} round(s) reach position 1; at least {min_trials} are needed "
            "(lower --min-count to accept fewer)",
        )
    return keep


@dataclass
class DrafterCounts:
    """Counts of one drafter: ``successes`` and ``trials`` are int ``(J,)``, position 1 first."""

    name: str
    successes: np.ndarray
    trials: np.ndarray
    model: str | None = None

    def trimmed(self, min_trials: int) -> DrafterCounts:
        j = kept_positions(self.trials, min_trials, f"drafter {self.name!r}")
        return DrafterCounts(self.name, self.successes[:j], self.trials[:j], self.model)

    @property
    def acceptance(self) -> np.ndarray:
        return point_estimate(self.successes, self.trials)

    @property
    def interval(self) -> tuple[np.ndarray, np.ndarray]:
        return jeffreys_interval(self.successes, self.trials)


@dataclass
class WorkloadCounts:
    """One workload's share of traffic and its drafters' counts."""

    name: str
    weight: float
    drafters: list[DrafterCounts]


@dataclass
class Estimate:
    """What an input format yields, before it is written as a problem file.

    ``errors`` is the ``errors:`` section (or ``None`` for the default);
    ``k_max`` caps ``search.k.max``; ``notes`` become comments in the file;
    ``report`` holds extra facts for the JSON report (correlations, totals).
    """

    source: str
    drafters: list[DrafterCounts]
    convention: str = "bonus"
    k_max: int | None = None
    errors: dict | None = None
    workloads: list[WorkloadCounts] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report: dict = field(default_factory=dict)
