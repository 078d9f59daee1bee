"""vLLM's ``SpecDecoding metrics:`` log lines → acceptance counts of one drafter.

The estimator: docs/design.md §8.9.

Each line covers one logging interval (vLLM resets its counters after logging;
``SpecDecodingLogging.log`` in ``vllm/v1/spec_decode/metrics.py``)::

    SpecDecoding metrics: Mean acceptance length: 2.94, Accepted throughput: …,
    Drafted throughput: …, Accepted: 1944 tokens, Drafted: 3000 tokens,
    Per-position acceptance rate: 0.812, 0.655, 0.477, Avg Draft acceptance rate: 64.8%

The per-position rates are cumulative: ``rate[i] = per_pos[i] / num_drafts``, printed
with 3 decimals (vLLM 0.33.0, ``vllm/v1/spec_decode/metrics.py`` lines 107-136); ``k`` is
the number of rates. The line does not print ``num_drafts``. When every draft is ``k``
tokens long it is ``Drafted / k``; drafts may be shorter (see :mod:`.vllm_metrics`: a
draft the grammar rejects whole counts with 0 tokens under the default asynchronous
scheduling), so it is read from the line itself: ``Accepted / Σ rate``, within the
rounding of the rates and of the mean acceptance length ``1 + Accepted / num_drafts`` (2
decimals), and at least ``Drafted / k`` (no draft holds more than ``k`` tokens; a line
that accepted nothing tells no more, and takes ``⌈Drafted / k⌉``). ``Drafted / k`` is
taken when it is consistent with all of that; otherwise the drafts were shorter than
``k`` and, as for the metrics, every position, the first included, is bounded
(:func:`~.counts.bounded_trials`), line by line. Counts are
``rate[i] * num_drafts`` rounded to integers summing to ``Accepted`` (largest
remainders), each within ``0.0005 * num_drafts + 1`` of the truth. Lines are summed
position by position (lines with fewer positions add nothing beyond them); every other
line, and fields after the rates, are ignored. The metrics endpoint gives exact counts
and is preferred when available.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ..exceptions import InputError
from ..io.inputs import MAX_NUMBER_CHARS
from .base import VLLM_EXACT, Reader, ReadOptions
from .counts import MIN_TRIALS, DrafterCounts, Estimate, bounded_trials, read_text
from .vllm_metrics import SHORT_DRAFT_CAUSES, cumulative_to_counts

MARK = "SpecDecoding metrics:"
_ACCEPTED = re.compile(r"Accepted:\s*(\d+)\s*tokens")
_DRAFTED = re.compile(r"Drafted:\s*(\d+)\s*tokens")
#: The most tokens one line may count (exact as a float; far past any interval's).
MAX_TOKENS = 2**53
_MEAN_LENGTH = re.compile(r"Mean acceptance length:\s*(\d+(?:\.\d*)?)")
_RATES = "Per-position acceptance rate:"
_NUMBER = re.compile(r"\s*\d+(?:\.\d*)?\s*")
#: Decimals vLLM prints the per-position rates with.
RATE_DECIMALS = 3
#: Decimals vLLM prints the mean acceptance length with.
LENGTH_DECIMALS = 2


def _drafts(accepted: int, drafted: int, rates: np.ndarray, length: float | None, where: str):
    """``(num_drafts, full)``: the drafts of one line and whether all were ``k`` long."""
    k = rates.size
    lo, hi = float(math.ceil(drafted / k)), math.inf
    if accepted == 0:
        hi = lo  # the rates (all 0) say nothing of the drafts: ⌈Drafted / k⌉
    half = 0.5 * 10.0**-RATE_DECIMALS * k
    total = float(rates.sum())
    if accepted > 0:
        if total <= 0:
            raise InputError(where, f"Accepted ({accepted}) but every per-position rate is 0")
        lo = max(lo, accepted / (total + half))
        if total > half:
            hi = min(hi, accepted / (total - half))
        if length is not None and length > 1.0:
            slack = 0.5 * 10.0**-LENGTH_DECIMALS
            lo = max(lo, accepted / (length - 1.0 + slack))
            if length - 1.0 > slack:
                hi = min(hi, accepted / (length - 1.0 - slack))
    eps = 1e-9 * max(hi, 1.0)
    full = drafted % k == 0 and lo - eps <= drafted // k <= hi + eps
    if full:
        return drafted // k, True
    if math.isfinite(hi) and math.ceil(lo - eps) > math.floor(hi + eps):
        raise InputError(
            where,
            f"Accepted ({accepted}), Drafted ({drafted}) and the {k} per-position rates "
            "disagree: no number of drafts of at most k tokens fits them",
        )
    n = round(accepted / total) if accepted > 0 else math.ceil(drafted / k)
    if math.isfinite(hi):
        n = min(n, math.floor(hi + eps))
    return int(max(n, math.ceil(drafted / k))), False


def parse_line(line: str, where: str) -> tuple[int, np.ndarray, int] | None:
    """``(num_drafts, per_pos counts (k,), Drafted)`` of one log line, or ``None`` without
    drafts."""
    body = line.split(MARK, 1)[1]
    acc, dra = _ACCEPTED.search(body), _DRAFTED.search(body)
    has_rates = _RATES in body
    missing = [
        n for n, ok in (("Accepted", acc), ("Drafted", dra), (_RATES[:-1], has_rates)) if not ok
    ]
    if missing or acc is None or dra is None:
        raise InputError(where, f"SpecDecoding line without {', '.join(missing)}")
    for label, m in (("Accepted", acc), ("Drafted", dra)):
        if len(m.group(1)) > MAX_NUMBER_CHARS:
            # int() of 5,000 digits raised past Python's digit limit (a traceback)
            raise InputError(
                where, f"{label} is a number of {len(m.group(1)):,} digits: not a token count"
            )
    accepted, drafted = int(acc.group(1)), int(dra.group(1))
    if drafted > MAX_TOKENS or accepted > MAX_TOKENS:
        # past 2**53 the counts overflow the int64 arithmetic (a traceback before)
        raise InputError(where, "Accepted or Drafted is too large to be a token count")
    values = []
    for item in body.split(_RATES, 1)[1].split(","):
        if not _NUMBER.fullmatch(item):
            break  # the next field (or the end of the line)
        if len(item.strip()) > MAX_NUMBER_CHARS:
            raise InputError(where, f"a per-position rate of {len(item.strip()):,} characters")
        values.append(float(item))
    if not values:
        raise InputError(where, "no per-position acceptance rates")
    r = np.array(values)
    if drafted == 0:
        return None
    k = r.size
    if np.any(r > 1.0) or np.any(np.diff(r) > 10.0**-RATE_DECIMALS):
        raise InputError(
            where,
            f"per-position rates {r.tolist()} increase with position or exceed 1 "
            "(they are cumulative and cannot)",
        )
    if accepted > drafted:
        raise InputError(where, f"Accepted ({accepted}) exceeds Drafted ({drafted}): they disagree")
    mean = _MEAN_LENGTH.search(body)
    if mean is not None and len(mean.group(1)) > MAX_NUMBER_CHARS:
        raise InputError(where, f"a mean acceptance length of {len(mean.group(1)):,} characters")
    drafts, _ = _drafts(accepted, drafted, r, float(mean.group(1)) if mean else None, where)
    raw = r * drafts
    slack = 0.5 * 10.0**-RATE_DECIMALS * drafts * k + k
    if abs(raw.sum() - accepted) > slack:
        raise InputError(
            where,
            f"Accepted ({accepted}) disagrees with the per-position rates "
            f"(they imply {raw.sum():.0f})",
        )
    counts = np.floor(raw).astype(np.int64)
    short = accepted - int(counts.sum())
    if 0 <= short <= k:
        order = np.argsort(-(raw - counts), kind="stable")
        counts[order[:short]] += 1
    else:
        counts = np.rint(raw).astype(np.int64)
    counts = np.minimum(np.minimum.accumulate(counts), drafts)
    if drafted < counts.sum():
        raise InputError(
            where,
            f"Drafted ({drafted}) is fewer tokens than the {int(counts.sum())} accepted: the "
            "counts disagree",
        )
    return drafts, counts, drafted


def estimate_vllm_log(
    path: str | Path, name: str = "draft", min_trials: int = MIN_TRIALS
) -> Estimate:
    """One drafter ``name`` from every ``SpecDecoding metrics:`` line of ``path``.

    Counts are summed over lines position by position (module docstring); positions
    reached by fewer than ``min_trials`` drafts are dropped from the end, and
    ``k_max`` is the most positions any line reports.
    """
    path = Path(path)
    text = read_text(path)
    successes: np.ndarray = np.zeros(0, np.int64)
    trials: np.ndarray = np.zeros(0, np.int64)
    trials_low: np.ndarray = np.zeros(0, np.int64)
    lines = short_lines = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if MARK not in line:
            continue
        parsed = parse_line(line, f"{path.name} line {number}")
        if parsed is None:
            continue
        drafts, per_pos, drafted = parsed
        c = cumulative_to_counts(name, drafts, per_pos, f"{path.name} line {number}")
        k = per_pos.size
        hi, low = bounded_trials(drafts, per_pos, drafted)
        short_lines += int(np.any(low < hi) or drafted < k * drafts)
        if k > successes.size:
            pad = (0, k - successes.size)
            successes, trials, trials_low = (
                np.pad(a, pad) for a in (successes, trials, trials_low)
            )
        successes[:k] += c.successes
        trials[:k] += hi
        trials_low[:k] += low
        lines += 1
    if lines == 0:
        raise InputError(
            path.name,
            f"no '{MARK}' lines with drafts (is speculative decoding enabled and "
            "stats logging on?)",
        )
    counts = DrafterCounts(
        name, successes, trials, trials_low=trials_low if short_lines else None
    ).trimmed(min_trials)
    notes = [
        f"estimated from {lines} '{MARK}' line(s) of {path.name}",
        "per-position counts reconstructed from 3-decimal rates (within 0.0005 x drafts)",
    ]
    if short_lines:
        notes.append(
            f"{short_lines} line(s) drafted fewer tokens than drafts x positions (drafts "
            "shorter than k): the drafts reaching each position, the first included, are "
            "only bounded: the value written is the middle of what the counts allow and "
            f"acceptance_interval covers the whole range plus sampling error; "
            f"{SHORT_DRAFT_CAUSES}"
        )
    notes.append("acceptance_interval: 95% Jeffreys (Beta posterior) intervals")
    return Estimate(
        source="vllm-log",
        drafters=[counts],
        convention="bonus",
        k_max=int(successes.size),
        notes=notes,
        report={
            "lines": lines,
            "short_draft_lines": short_lines,
            "num_drafts": int(trials[0]),
            "accepted_per_position": successes.tolist(),
        },
    )


class VLLMLogReader(Reader):
    """``--format vllm-log``: vLLM's ``SpecDecoding metrics:`` lines (module docstring)."""

    name = "vllm-log"
    reads = "vLLM's 'SpecDecoding metrics:' log lines"
    counts_exactly = VLLM_EXACT

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        return estimate_vllm_log(path, options.drafter, options.min_trials)


__all__ = [
    "VLLMLogReader",
    "LENGTH_DECIMALS",
    "MARK",
    "MAX_TOKENS",
    "RATE_DECIMALS",
    "estimate_vllm_log",
    "parse_line",
]
