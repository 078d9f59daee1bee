"""vLLM's ``SpecDecoding metrics:`` log lines → acceptance counts of one drafter.

Each line covers one logging interval (vLLM resets its counters after logging)::

    SpecDecoding metrics: Mean acceptance length: 2.94, Accepted throughput: …,
    Drafted throughput: …, Accepted: 1944 tokens, Drafted: 3000 tokens,
    Per-position acceptance rate: 0.812, 0.655, 0.477, Avg Draft acceptance rate: 64.8%

The per-position rates are cumulative: ``rate[i] = per_pos[i] / num_drafts``. Per
line, ``k`` is the number of rates, ``num_drafts = Drafted / k`` and
``per_pos[i] = rate[i] * num_drafts``; the rates are printed with 3 decimals, so
the counts are rounded to integers summing to ``Accepted`` (largest remainders),
which places each within ``0.0005 * num_drafts + 1`` of the truth. Lines are
summed position by position (lines with fewer positions add nothing beyond them);
every other line, and fields after the rates, are ignored. The metrics endpoint
gives exact counts and is preferred when available.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..exceptions import InputError
from .counts import MIN_TRIALS, DrafterCounts, Estimate, read_text
from .vllm_metrics import cumulative_to_counts

MARK = "SpecDecoding metrics:"
_ACCEPTED = re.compile(r"Accepted:\s*(\d+)\s*tokens")
_DRAFTED = re.compile(r"Drafted:\s*(\d+)\s*tokens")
_RATES = "Per-position acceptance rate:"
_NUMBER = re.compile(r"\s*\d+(?:\.\d*)?\s*")
#: Decimals vLLM prints the per-position rates with.
RATE_DECIMALS = 3


def parse_line(line: str, where: str) -> tuple[int, np.ndarray] | None:
    """``(num_drafts, per_pos counts (k,))`` of one log line, or ``None`` without drafts."""
    body = line.split(MARK, 1)[1]
    acc, dra = _ACCEPTED.search(body), _DRAFTED.search(body)
    has_rates = _RATES in body
    missing = [
        n for n, ok in (("Accepted", acc), ("Drafted", dra), (_RATES[:-1], has_rates)) if not ok
    ]
    if missing:
        raise InputError(where, f"SpecDecoding line without {', '.join(missing)}")
    accepted, drafted = int(acc.group(1)), int(dra.group(1))  # type: ignore[union-attr]
    values = []
    for item in body.split(_RATES, 1)[1].split(","):
        if not _NUMBER.fullmatch(item):
            break  # the next field (or the end of the line)
        values.append(float(item))
    if not values:
        raise InputError(where, "no per-position acceptance rates")
    r = np.array(values)
    if drafted == 0:
        return None
    k = r.size
    if drafted % k:
        raise InputError(where, f"Drafted ({drafted}) is not a multiple of the {k} positions")
    drafts = drafted // k
    if np.any(r > 1.0) or np.any(np.diff(r) > 10.0**-RATE_DECIMALS):
        raise InputError(
            where,
            f"per-position rates {r.tolist()} increase with position or exceed 1 "
            "(they are cumulative and cannot)",
        )
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
    return drafts, counts


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
    lines = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if MARK not in line:
            continue
        parsed = parse_line(line, f"{path.name} line {number}")
        if parsed is None:
            continue
        drafts, per_pos = parsed
        c = cumulative_to_counts(name, drafts, per_pos, f"{path.name} line {number}")
        k = per_pos.size
        if k > successes.size:
            successes = np.pad(successes, (0, k - successes.size))
            trials = np.pad(trials, (0, k - trials.size))
        successes[:k] += c.successes
        trials[:k] += c.trials
        lines += 1
    if lines == 0:
        raise InputError(
            path.name,
            f"no '{MARK}' lines with drafts (is speculative decoding enabled and "
            "stats logging on?)",
        )
    counts = DrafterCounts(name, successes, trials).trimmed(min_trials)
    return Estimate(
        source="vllm-log",
        drafters=[counts],
        convention="bonus",
        k_max=int(successes.size),
        notes=[
            f"estimated from {lines} '{MARK}' line(s) of {path.name}",
            "per-position counts reconstructed from 3-decimal rates (within 0.0005 x drafts)",
            "acceptance_interval: 95% Jeffreys (Beta posterior) intervals",
        ],
        report={
            "lines": lines,
            "num_drafts": int(trials[0]),
            "accepted_per_position": successes.tolist(),
        },
    )
