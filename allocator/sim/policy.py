"""The speculation the simulator plays: ``k`` and the tokens-per-step pmf by decode batch size.

A :class:`SpecPolicy` maps the decode batch size ``b`` (sequences past their prefill) to
``k``, the draft tokens each sequence verifies in a step (0: speculation off), and to a pmf
over the tokens one sequence emits in that step: ``pmf[j] = P(emit j tokens)``,
``j = 0..k+1``, ``pmf[0] = 0`` (a chain emits its accepted drafts plus the verifier's own
token, 1..k+1). The pmfs are inputs: the caller computes them from its acceptance model
(for a chain, ``P(emit >= j) = Π_{i<j} a(i)``).

A schedule by batch size takes vLLM's dynamic speculative decoding form, inclusive
``(start, end)`` ranges sorted, non-overlapping, the first starting at 1; a batch size in a
gap takes the previous range's entry and one past the last range the last entry (vLLM
0.33.0, ``vllm/v1/spec_decode/dynamic/utils.py``, ``build_dynamic_sd_schedule_lookup``).
One range is played as a static ``k`` (vLLM's ``num_speculative_tokens`` alone), several as
a dynamic schedule (``num_speculative_tokens_per_batch_size``): they differ in that vLLM
pads a new 1-token prompt to ``1 + k`` tokens only under a static ``k``
(:mod:`allocator.sim.scheduler`).

``lookahead_tokens``: KV slots reserved past the verified tokens of every scheduled
request for the drafter's own KV (vLLM 0.33.0, ``vllm/config/vllm.py``,
``num_lookahead_tokens``, lines 626-651: ``num_speculative_tokens``, the largest ``k``, for
EAGLE, MTP and draft models; 0 for n-gram and suffix drafting; ``k + 1`` for DFlash).
``None`` takes the largest ``k`` of the policy (0 when it never speculates).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..exceptions import ParameterError
from ..validate import whole

#: Tolerance on a pmf's total before it is renormalised.
PMF_TOL = 1e-9


@dataclass(frozen=True)
class SpecPolicy:
    """``k`` and the emitted-tokens pmf for each decode batch size.

    ``starts``, ``ends``: ``(R,)`` inclusive batch-size ranges (``starts[0] = 1``);
    ``ks``: ``(R,)`` draft tokens per sequence in each range; ``pmfs``: ``R`` arrays, entry
    ``r`` of shape ``(ks[r] + 2,)``. Build with :meth:`off`, :meth:`fixed` or
    :meth:`by_batch_size`.
    """

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    ks: tuple[int, ...]
    pmfs: tuple[np.ndarray, ...]
    lookahead_tokens: int | None = None

    def __post_init__(self) -> None:
        n = len(self.ks)
        if n == 0 or not (len(self.starts) == len(self.ends) == len(self.pmfs) == n):
            raise ParameterError("policy", "needs one (start, end, k, pmf) per range, at least one")
        if self.starts[0] != 1:
            raise ParameterError("policy", "the first batch-size range must start at 1")
        previous = 0
        for s, e in zip(self.starts, self.ends, strict=True):
            if s < 1 or e < s:
                raise ParameterError(
                    "policy", f"batch-size range ({s}, {e}) must have 1 <= start <= end"
                )
            if s <= previous:
                raise ParameterError(
                    "policy", "batch-size ranges must be sorted and non-overlapping"
                )
            previous = e
        pmfs = tuple(_check_pmf(k, p) for k, p in zip(self.ks, self.pmfs, strict=True))
        object.__setattr__(self, "pmfs", pmfs)
        la = self.lookahead_tokens
        if la is not None:
            whole(la, "lookahead_tokens", lo=0)

    @classmethod
    def off(cls) -> SpecPolicy:
        """Speculation off: ``k = 0`` at every batch size, one token per step."""
        return cls((1,), (1,), (0,), (np.array([0.0, 1.0]),), 0)

    @classmethod
    def fixed(cls, k: int, pmf: Sequence[float] | np.ndarray, lookahead_tokens: int | None = None):
        """The same ``k`` and pmf (``(k + 2,)``) at every batch size."""
        return cls((1,), (1,), (k,), (np.asarray(pmf, dtype=np.float64),), lookahead_tokens)

    @classmethod
    def by_batch_size(
        cls,
        entries: Sequence[tuple[int, int, int, Sequence[float] | np.ndarray]],
        lookahead_tokens: int | None = None,
    ) -> SpecPolicy:
        """A schedule: ``entries`` of ``(start, end, k, pmf)``, inclusive batch-size ranges
        sorted and non-overlapping, the first starting at 1 (vLLM's
        ``num_speculative_tokens_per_batch_size`` with a pmf beside each ``k``)."""
        if not entries:
            raise ParameterError("policy", "needs at least one (start, end, k, pmf) entry")
        try:
            starts = tuple(int(e[0]) for e in entries)
            ends = tuple(int(e[1]) for e in entries)
            ks = tuple(int(e[2]) for e in entries)
            pmfs = tuple(np.asarray(e[3], dtype=np.float64) for e in entries)
        except (TypeError, ValueError, IndexError):
            raise ParameterError("policy", "each entry must be (start, end, k, pmf)") from None
        return cls(starts, ends, ks, pmfs, lookahead_tokens)

    @property
    def max_k(self) -> int:
        """The largest ``k`` of any range (vLLM's ``num_speculative_tokens``)."""
        return max(self.ks)

    @property
    def lookahead(self) -> int:
        """KV slots reserved past the verified tokens (the largest ``k`` unless given)."""
        return self.max_k if self.lookahead_tokens is None else self.lookahead_tokens

    def entry(self, batch_size: int) -> int:
        """Index of the range serving ``batch_size`` (>= 1): the range holding it, else the
        last range starting at or below it (gaps and the tail carry the previous entry)."""
        if batch_size < 1:
            raise ParameterError("batch_size", "must be >= 1")
        return int(np.searchsorted(np.asarray(self.starts), batch_size, side="right") - 1)

    def k(self, batch_size: int) -> int:
        """Draft tokens per sequence at decode batch size ``batch_size``."""
        return self.ks[self.entry(batch_size)]

    def pmf(self, batch_size: int) -> np.ndarray:
        """Emitted-tokens pmf, ``(k + 2,)``, at decode batch size ``batch_size``."""
        return self.pmfs[self.entry(batch_size)]

    def mean_tokens(self, batch_size: int) -> float:
        """``E``: expected tokens one sequence emits per decode step (bonus included)."""
        p = self.pmf(batch_size)
        return float(p @ np.arange(p.size))


def _check_pmf(k: int, pmf: np.ndarray) -> np.ndarray:
    whole(k, "k", lo=0)
    p = np.asarray(pmf, dtype=np.float64)
    if p.shape != (k + 2,):
        raise ParameterError(
            "pmf", f"at k = {k} must have k + 2 = {k + 2} entries, got shape {p.shape}"
        )
    if not np.all(np.isfinite(p)) or p.min() < 0:
        raise ParameterError("pmf", "entries must be finite and >= 0")
    if p[0] != 0:
        raise ParameterError("pmf", "pmf[0] must be 0 (a step emits at least the verifier's token)")
    total = float(p.sum())
    if abs(total - 1.0) > PMF_TOL:
        raise ParameterError("pmf", f"must sum to 1, sums to {total!r}")
    out = p / total if total != 1.0 else p.copy()
    out.setflags(write=False)
    return out


__all__ = [
    "PMF_TOL",
    "SpecPolicy",
]
