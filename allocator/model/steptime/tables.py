"""Measured step tables: the step time of exactly the drafter set a table measured
(docs/design.md §8.1).

A table (``serving.step_ms[]``) gives ``T_b(k)`` ms at measured batch sizes ``b`` and
draft lengths ``k`` (``k = 0`` at every measured batch size), of chains: a step verifying
``m·k + 1`` tokens (a token tree's step is not in any table). At a measured batch size it
is linear in ``k`` between the ``k`` measured there (as vLLM interpolates its profiled
step times), up to the largest; between measured batch sizes it is linear in the batch,
each side first interpolated in ``k``, defined where both sides are. Nothing is
extrapolated. The table knows no context and no prefill: ``context`` is ignored (the
table was measured at its own), a step that also prefills adds the measured prefill time
(:func:`prefill_ms_at`), and without a prefill table such a step has no step time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...core.serving import Serving, StepTableArrays
from .base import StepInputs, StepTimePredictor, step_inputs

__all__ = [
    "TablePredictor",
    "chain_rows",
    "interp_measured",
    "lerp_rows",
    "prefill_ms_at",
    "table_step",
]


def lerp_rows(axis: np.ndarray, rows: np.ndarray, x: float) -> np.ndarray:
    """Rows ``(A, C)`` given at ``axis (A,)`` ascending, linear at ``x``: ``(C,)``; NaN
    everywhere outside ``[axis[0], axis[-1]]`` (never extrapolated)."""
    if axis.size == 0 or x < axis[0] or x > axis[-1]:
        return np.full(rows.shape[1:], np.nan)
    hi = int(np.searchsorted(axis, x, side="left"))
    if axis[hi] == x:
        return rows[hi].copy()
    lo = hi - 1
    w = (x - axis[lo]) / (axis[hi] - axis[lo])
    return (1.0 - w) * rows[lo] + w * rows[hi]


def interp_measured(points: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Linear in ``x`` through the non-NaN ``(points, values)``; NaN outside their range."""
    ok = ~np.isnan(values)
    p, v = points[ok], values[ok]
    out = np.full(x.shape, np.nan)
    if p.size == 0:
        return out
    inside = (x >= p[0]) & (x <= p[-1])
    out[inside] = np.interp(x[inside], p, v)
    return out


def table_step(t: StepTableArrays, k: np.ndarray, batch: float) -> np.ndarray:
    """A measured table at ``(batch, k)``: linear in ``k`` at each measured batch size,
    then linear in the batch; NaN past the largest ``k`` measured at either bracketing
    batch size, or outside the measured batch sizes. ``k`` ``(R,)`` -> ``(R,)`` ms."""
    if batch < t.batch[0] or batch > t.batch[-1]:
        return np.full(k.shape, np.nan)
    hi = int(np.searchsorted(t.batch, batch, side="left"))
    at_hi = interp_measured(t.k, t.ms[hi], k)
    if t.batch[hi] == batch:
        return at_hi
    lo = hi - 1
    at_lo = interp_measured(t.k, t.ms[lo], k)
    w = (batch - t.batch[lo]) / (t.batch[hi] - t.batch[lo])
    return (1.0 - w) * at_lo + w * at_hi


def chain_rows(x: StepInputs) -> np.ndarray:
    """``(B,)`` bool: the rows that are chains, ``m`` drafters drafting ``k`` tokens each
    and ``m·k + 1`` verified (``k = 0``: one token), the only steps a table measures."""
    m = x.members.sum(axis=1)
    return x.verified == m * x.draft_steps + 1


def prefill_ms_at(serving: Serving, tokens: np.ndarray) -> np.ndarray:
    """Measured prefill time of ``tokens`` prompt tokens in one step, ms (``serving.
    prefill_ms``): 0 for none, the first measured time below the first point, linear
    between points, NaN past the last or without a table. Any shape -> same shape."""
    tokens = np.asarray(tokens, dtype=float)
    out = np.zeros(tokens.shape)
    some = tokens > 0
    if not some.any():
        return out
    pt, pm = serving.prefill_tokens, serving.prefill_ms
    if pt.size == 0:
        out[some] = np.nan
        return out
    x = tokens[some]
    val = np.interp(x, pt, pm)  # held at the first point below it
    val[x > pt[-1]] = np.nan
    out[some] = val
    return out


@dataclass(frozen=True, eq=False)
class TablePredictor(StepTimePredictor):
    """The measured tables of a ``serving`` section: a row whose drafters are exactly a
    table's takes that table at ``k = draft_steps`` (``verified`` is the table's own); a
    plain-decoding row of other drafters (``k = 0``, one token verified) takes the
    ``k = 0`` entry of the first table covering its batch size (:meth:`baseline_ms`);
    every other row has no step time (NaN)."""

    name: ClassVar[str] = "tables"

    serving: Serving

    @property
    def drafters(self) -> tuple[np.ndarray, ...]:
        """One entry per drafter (the ``members`` columns)."""
        return self.serving.draft_ms

    def matched(self, members: np.ndarray, chain: np.ndarray | None = None) -> np.ndarray:
        """``(B,)`` int: the index of the table measuring each row's drafters, -1 for none.
        ``chain (B,)`` bool: rows that are chains (:func:`chain_rows`); a table measures
        chains of ``m·k + 1`` tokens only, so other rows (token trees) match none."""
        out = np.full(members.shape[0], -1)
        for i, t in enumerate(self.serving.tables):
            out[(out < 0) & np.all(members == t.members, axis=1)] = i
        if chain is not None:
            out[~chain] = -1
        return out

    def step_ms(self, members, draft_steps, verified, decode_seqs, context=0.0, prefill=0.0):
        x = step_inputs(
            members, draft_steps, verified, decode_seqs, context, prefill, len(self.drafters)
        )
        out = np.full(len(x), np.nan)
        which = self.matched(x.members, chain_rows(x))
        k = x.draft_steps.astype(float)
        for i, t in enumerate(self.serving.tables):
            rows = np.flatnonzero(which == i)
            for b in np.unique(x.decode_seqs[rows]):
                at = rows[x.decode_seqs[rows] == b]
                out[at] = table_step(t, k[at], float(b))
        plain = np.flatnonzero((which < 0) & ~x.speculative)
        for b in np.unique(x.decode_seqs[plain]):
            out[plain[x.decode_seqs[plain] == b]] = self.baseline_ms(float(b))
        return out + prefill_ms_at(self.serving, x.prefill)

    def baseline_ms(self, batch: float) -> float:
        """Plain decoding at ``batch``: the ``k = 0`` entry of the first table (in file
        order) whose batch sizes cover it, interpolated in the batch; NaN if none does."""
        for t in self.serving.tables:
            v = float(table_step(t, np.array([0.0]), batch)[0])
            if not np.isnan(v):
                return v
        return float("nan")

    def domain(self) -> dict[str, tuple[float, float]]:
        tables = self.serving.tables
        if not tables:
            return {}
        return {
            "decode_seqs": (min(t.batch[0] for t in tables), max(t.batch[-1] for t in tables)),
            "k": (0.0, max(float(t.k[-1]) for t in tables)),
        }

    @classmethod
    def example(cls) -> TablePredictor:
        """One drafter measured at batch 1 and 64 (issue 10's table), for the contract suite."""
        t = StepTableArrays(
            np.array([True]),
            np.array([1.0, 64.0]),
            np.array([0.0, 1.0, 3.0]),
            np.array([[6.87, 7.97, 9.41], [8.53, 10.44, 13.16]]),
        )
        empty = np.zeros(0)
        s = Serving(
            batch_sizes=np.array([1, 64]),
            gpu_cost_per_hour=float("nan"),
            tables=(t,),
            verify_batch=empty,
            verify_tokens=empty,
            verify_ms=np.zeros((0, 0)),
            draft_batch=(empty,),
            draft_ms=(empty,),
            overhead_ms=0.0,
            drafting="sequential",
            prefill_tokens=np.array([16.0, 4096.0]),
            prefill_ms=np.array([7.0, 90.0]),
        )
        return cls(s)
