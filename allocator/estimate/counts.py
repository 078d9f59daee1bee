"""Acceptance counts per drafter and position, and their 95% intervals.

Every input format is reduced to the same thing: for drafter ``i`` and position
``j`` (1-based), ``trials[j-1]`` rounds reached position ``j`` and in
``successes[j-1]`` of them the drafter's unit there was correct. The conditional
acceptance ``a_i(j)`` (docs/design.md §1) is estimated by ``successes / trials``.

Intervals are equal-tailed Beta posterior intervals under the Jeffreys prior
``Beta(1/2, 1/2)``: the posterior after ``s`` successes in ``n`` trials is
``Beta(s + 1/2, n - s + 1/2)``. Their frequentist coverage is close to nominal
even for small ``n`` and for ``s`` near ``0`` or ``n`` (Brown, Cai & DasGupta 2001),
and :mod:`allocator.analysis.uncertainty` draws from the same posterior.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..exceptions import InputError
from ..io.inputs import MAX_LOG_BYTES, read_input_text
from .messages import quote

if TYPE_CHECKING:
    from scipy import special
else:
    special = lazy_module("scipy.special")

#: Positions reached by fewer rounds than this are dropped from the end of the
#: per-position list (the last kept value then repeats, docs/design.md §1).
MIN_TRIALS = 30
#: Level of every interval written into a problem file.
LEVEL = 0.95
#: Jeffreys prior ``Beta(PRIOR, PRIOR)``.
PRIOR = 0.5


def read_text(path: Path) -> str:
    """The text of an input file (a regular file within :data:`~allocator.io.inputs.MAX_LOG_BYTES`,
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
class RankCounts:
    """Per-rank counts of one drafter's tree candidates: ``successes`` and ``trials`` are
    int ``(J, R)`` (depth ``j + 1``, rank ``r + 1``); ``trials`` counts the rows where every
    lower rank failed. ``J = 1`` when pooled over depths."""

    successes: np.ndarray
    trials: np.ndarray

    @property
    def acceptance(self) -> np.ndarray:
        return point_estimate(self.successes, self.trials)

    @property
    def interval(self) -> tuple[np.ndarray, np.ndarray]:
        return jeffreys_interval(self.successes, self.trials)


@dataclass
class DrafterCounts:
    """Counts of one drafter: ``successes`` and ``trials`` are int ``(J,)``, position 1 first.

    ``trials_low`` (int ``(J,)``, optional): when the number of rounds reaching a position
    is only known to lie in ``[trials_low, trials]`` (drafts shorter than the positions,
    :func:`bounded_trials`). The acceptance is then only bounded, ``[s / trials,
    s / trials_low]``: :attr:`acceptance` is the middle of that range and
    :attr:`interval` joins the Jeffreys intervals at both ends, so it holds the truth at
    least at the stated level whatever the true number of trials was.

    ``ranks``: its per-rank counts when the log has ``NAME@r`` columns.
    """

    name: str
    successes: np.ndarray
    trials: np.ndarray
    model: str | None = None
    trials_low: np.ndarray | None = None
    ranks: RankCounts | None = None
    #: ``(acceptance, lo, hi)``, float ``(J,)`` each: for inputs that give no counts (a log
    #: of means); :attr:`acceptance` and :attr:`interval` then return these.
    summary: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def positions(self) -> int:
        return int(self.summary[0].size) if self.summary is not None else int(self.trials.size)

    def trimmed(self, min_trials: int) -> DrafterCounts:
        if self.summary is not None:
            return self

        sure = self.trials if self.trials_low is None else self.trials_low
        j = kept_positions(sure, min_trials, f"drafter {quote(self.name)}")
        low = None if self.trials_low is None else self.trials_low[:j]
        return DrafterCounts(
            self.name, self.successes[:j], self.trials[:j], self.model, low, ranks=self.ranks
        )

    @property
    def bounded(self) -> bool:
        """Whether some position's trials are only bounded (not known exactly)."""
        return self.trials_low is not None and bool(np.any(self.trials_low < self.trials))

    @property
    def acceptance_range(self) -> tuple[np.ndarray, np.ndarray]:
        """What the counts identify: ``(s / trials, s / trials_low)`` (equal when exact)."""
        lo = point_estimate(self.successes, self.trials)
        if self.trials_low is None:
            return lo, lo
        return lo, point_estimate(self.successes, self.trials_low)

    @property
    def acceptance(self) -> np.ndarray:
        if self.summary is not None:
            return self.summary[0]
        lo, hi = self.acceptance_range
        return (lo + hi) / 2.0

    @property
    def interval(self) -> tuple[np.ndarray, np.ndarray]:
        if self.summary is not None:
            return self.summary[1], self.summary[2]
        lo, _ = jeffreys_interval(self.successes, self.trials)
        if self.trials_low is None:
            return lo, jeffreys_interval(self.successes, self.trials)[1]
        return lo, jeffreys_interval(self.successes, self.trials_low)[1]


def bounded_trials(
    drafts: float, per_pos: np.ndarray, draft_tokens: float
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on the rounds reaching each position when drafts may be shorter than ``k``.

    ``per_pos`` ``(k,)``: cumulative accepted counts (vLLM's ``per_pos[i]`` = drafts whose
    first ``i + 1`` tokens were accepted); ``drafts`` drafts holding ``draft_tokens``
    tokens in all. A draft may hold no token at all: under asynchronous scheduling (the
    default in vLLM 0.33.0) a draft the grammar rejects whole is still counted as a draft,
    with 0 tokens (``make_spec_decoding_stats``, ``vllm/v1/core/sched/scheduler.py`` lines
    3305-3322: the invalid tokens are subtracted after the "no draft" check), so position
    1 is bounded like the others, not exact.

    Position ``j`` (1-based) is reached by the drafts whose first ``j − 1`` tokens were
    accepted and which drafted a ``j``-th token: at most ``per_pos[j−2]`` (``drafts`` for
    ``j = 1``). The ones missing are drafts of length exactly ``j − 1`` with everything
    accepted (for ``j = 1``: drafts of no token); each leaves ``k − j + 1`` of the
    ``deficit = k · drafts − draft_tokens`` positions undrafted, so at most
    ``deficit // (k − j + 1)`` of them exist, and no more than ``per_pos[j−2] −
    per_pos[j−1]``. Returns ``(trials, trials_low)``, both int ``(k,)``.
    """
    per_pos = np.asarray(per_pos, dtype=np.int64)
    k = per_pos.size
    trials = np.concatenate(([int(drafts)], per_pos[:-1])).astype(np.int64)
    deficit = max(int(round(k * drafts - draft_tokens)), 0)
    missing = np.zeros(k, np.int64)
    if deficit:
        room = k - np.arange(k)  # k − j + 1 for j = 1 … k
        missing = np.minimum(deficit // room, trials - per_pos)
    return trials, trials - np.maximum(missing, 0)


def bounded_positions(counts: DrafterCounts) -> list[int]:
    """The positions (1-based) whose acceptance the counts only bound (the rounds reaching
    them known to lie in ``[trials_low, trials]`` with ``trials_low < trials``)."""
    if counts.trials_low is None:
        return []
    return [int(j) + 1 for j in np.flatnonzero(counts.trials_low < counts.trials)]


def position_ranges(positions: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``"1-3, 5"``."""
    parts: list[str] = []
    for p in positions:
        if parts and parts[-1].split("-")[-1] == str(p - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{p}"
        else:
            parts.append(str(p))
    return ", ".join(parts)


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


__all__ = [
    "LEVEL",
    "MIN_TRIALS",
    "PRIOR",
    "DrafterCounts",
    "Estimate",
    "RankCounts",
    "WorkloadCounts",
    "bounded_positions",
    "bounded_trials",
    "jeffreys_interval",
    "kept_positions",
    "point_estimate",
    "position_ranges",
    "read_text",
]
