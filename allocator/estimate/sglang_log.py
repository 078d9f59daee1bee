"""SGLang's decode log lines (``accept len``) → one scalar acceptance, with a weaker interval.

The estimator and its interval: docs/design.md §8.9.

SGLang's scheduler logs, every ``--decode-log-interval`` decode steps (40 by default;
``log_decode_stats`` in the scheduler's metrics mixin, sgl-project/sglang)::

    Decode batch, #running-req: 12, #token: 8164, token usage: 0.04, accept len: 3.21,
    accept rate: 0.55, cuda graph: True, gen throughput (token/s): 1710.55, #queue-req: 0

``accept len`` = accepted tokens (bonus included) / verify rounds of every request over
the interval, with 2 decimals; the counters then reset. (``accept rate`` is computed
differently across releases, so it is not read.) The line gives a mean per interval,
not how many rounds it averages, and nothing per position.

Estimator. Let ``C`` be the drafts a round accepts (``accept len − 1``). With one
acceptance ``a`` at every position of a chain of ``k`` (the only thing a mean can
identify), ``E[C] = f(a) = Σ_{j=1..k} a^j``, increasing in ``a`` from 0 to ``k``. Each
line's ``accept len − 1`` estimates ``E[C]`` (its interval's ratio of sums); over ``n ≥ 2``
lines the mean ``m`` and its 95% Student-t interval ``m ± t_{0.975, n−1} · s / √n``
(``s``: the standard deviation across lines, which carries the rounds' variability
whatever their number per line; widened by the 0.005 print rounding) are mapped through
``f⁻¹``: ``a = f⁻¹(m)``, interval ``[f⁻¹(lo), f⁻¹(hi)]``, clipped to (0, 1]. Weaker than
the other formats: one number for all positions, lines weighted equally, intervals
from the spread across lines (they assume lines are independent draws of one
stationary process). ``k`` (``--speculative-num-steps``) must be given with ``--k``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..exceptions import InputError, ParameterError
from ..model.acceptance import expected_accepted
from ..validate import whole
from .base import Reader, ReadOptions
from .counts import LEVEL, DrafterCounts, Estimate, read_text

if TYPE_CHECKING:
    from scipy import stats
else:
    stats = lazy_module("scipy.stats")

_ACCEPT_LEN = re.compile(r"accept len:\s*(\d+(?:\.\d*)?)")
MARK = "Decode batch"
#: Decimals SGLang prints ``accept len`` with.
DECIMALS = 2


def expected_correct(a: np.ndarray, k: int) -> np.ndarray:
    """``f(a) = Σ_{j=1..k} a^j``: drafts a chain of ``k`` accepts per round, ``a`` any shape
    (the model's bonus-convention ``E_k`` of a constant acceptance, less the verifier's
    own token)."""
    a = np.asarray(a, dtype=float)
    return expected_accepted(a[..., None], k, "bonus")[..., k - 1] - 1.0


def inverse_expected(m: np.ndarray, k: int) -> np.ndarray:
    """``f⁻¹(m)`` by bisection (``f`` increases on [0, 1]); ``m`` clipped to ``[0, k]``."""
    m = np.clip(np.asarray(m, dtype=float), 0.0, float(k))
    lo, hi = np.zeros_like(m), np.ones_like(m)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        below = expected_correct(mid, k) < m
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2.0


def read_lengths(path: Path) -> np.ndarray:
    """Every ``accept len`` of the decode lines in ``path``, float ``(n,)``."""
    values = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if MARK not in line or "accept len" not in line:
            continue
        m = _ACCEPT_LEN.search(line)
        if m is None:
            raise InputError(f"{path.name} line {number}", "'accept len:' without a number")
        values.append(float(m.group(1)))
    return np.array(values, dtype=float)


def estimate_sglang_log(path: str | Path, k: int | None, name: str = "draft") -> Estimate:
    """One drafter ``name`` with one acceptance (module docstring) from ``path``."""
    path = Path(path)
    if k is None:
        raise ParameterError(
            "k", "sglang-log needs the draft length (--speculative-num-steps) as --k K"
        )
    whole(k, "k", lo=1)
    lengths = read_lengths(path)
    if lengths.size < 2:
        raise InputError(
            path.name,
            f"{lengths.size} 'Decode batch ... accept len' line(s); at least 2 are needed for "
            "an interval (is speculative decoding on and the log level info?)",
        )
    c = lengths - 1.0
    if np.any(c < -0.5 * 10.0**-DECIMALS) or np.any(c > k + 0.5 * 10.0**-DECIMALS):
        bad = float(lengths[(c < 0) | (c > k)][0])
        raise InputError(path.name, f"accept len {bad} is outside [1, k + 1 = {k + 1}]")
    n = c.size
    mean = float(c.mean())
    half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1) * c.std(ddof=1) / np.sqrt(n))
    half += 0.5 * 10.0**-DECIMALS
    a, lo, hi = inverse_expected(np.array([mean, mean - half, mean + half]), k)
    floor = 1e-6
    acceptance = np.array([max(a, floor)])
    summary = (acceptance, np.array([max(lo, 0.0)]), np.array([max(min(hi, 1.0), floor * 2)]))
    counts = DrafterCounts(name, np.zeros(0, np.int64), np.zeros(0, np.int64), summary=summary)
    return Estimate(
        source="sglang-log",
        drafters=[counts],
        convention="bonus",
        k_max=k,
        notes=[
            f"estimated from {n} 'accept len' line(s) of {path.name}: mean accepted drafts "
            f"per round {mean:.4f} (k = {k})",
            "one acceptance for every position (a mean cannot tell positions apart): "
            "a = f^-1(mean), f(a) = a + a^2 + ... + a^k",
            "acceptance_interval: 95% Student-t interval of the mean over lines, mapped "
            "through f^-1 (weaker than per-request histograms or vLLM's counters)",
        ],
        report={"lines": n, "mean_accept_len": mean + 1.0, "half_width": half},
    )


class SGLangLogReader(Reader):
    """``--format sglang-log``: SGLang's ``accept len`` decode lines (module docstring)."""

    name = "sglang-log"
    reads = "SGLang's 'accept len' decode log lines (one scalar acceptance)"
    options = ("k",)

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        return estimate_sglang_log(path, options.k, options.drafter)


__all__ = [
    "SGLangLogReader",
    "DECIMALS",
    "MARK",
    "estimate_sglang_log",
    "expected_correct",
    "inverse_expected",
    "read_lengths",
]
