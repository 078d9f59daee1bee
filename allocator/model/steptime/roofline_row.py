"""The roofline's pass times for one step, on Python floats (:mod:`.roofline`).

The request simulator asks the step time one step at a time, the context changing at every
step; on arrays of one element numpy's cost per call is most of that time. These are
:meth:`RooflinePredictor.verify_ms` and :meth:`RooflinePredictor.drafter_pass_ms` for one
row: the same operations in the same order on Python floats, which are IEEE doubles as
float64 is, so the same bits (``tests/unit/steptime/test_roofline_row.py`` holds the two
paths equal bit for bit over random inputs). Only for the max form without experts
(:func:`by_floats`); the p-norm and a mixture of experts' coverage (expert parallelism's
busiest GPU with it: it needs routed experts) stay on the arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from .base import StepInputs


class PeakTerms(Protocol):
    """What a row reads of :class:`.roofline.PeakTerms` (a protocol, so that this module
    does not import the one that imports it)."""

    @property
    def weights_ms(self) -> float: ...
    @property
    def expert_ms(self) -> float: ...
    @property
    def kv_ms(self) -> float: ...
    @property
    def attn_ms(self) -> float: ...
    @property
    def token_ms(self) -> float: ...
    @property
    def allreduce_ms(self) -> float: ...
    @property
    def allreduce_fixed_ms(self) -> float: ...
    @property
    def experts(self) -> int: ...
    @property
    def windows(self) -> tuple[tuple[int, float], ...]: ...
    def prefill_pairs(self, prefill: np.ndarray) -> np.ndarray: ...


class DrafterCost(Protocol):
    """What a row reads of :class:`.roofline.DrafterCost`."""

    @property
    def peak(self) -> PeakTerms: ...
    @property
    def fixed_ms(self) -> float: ...
    @property
    def seq_ms(self) -> float: ...


class RooflinePredictor(Protocol):
    """What a row reads of :class:`.roofline.RooflinePredictor`."""

    @property
    def form(self) -> str: ...
    @property
    def peak(self) -> PeakTerms: ...
    @property
    def drafters(self) -> Sequence[DrafterCost]: ...
    @property
    def kv_write(self) -> bool: ...
    @property
    def mem_eff(self) -> float: ...
    @property
    def compute_eff(self) -> float: ...
    @property
    def comm_eff(self) -> float: ...
    @property
    def prefill_eff(self) -> float: ...
    @property
    def fixed_ms(self) -> float: ...
    @property
    def seq_ms(self) -> float: ...


def by_floats(r: RooflinePredictor) -> bool:
    """Whether one row of ``r`` is computed here: the max form, no expert coverage."""
    return r.form == "max" and not r.peak.experts and not any(d.peak.experts for d in r.drafters)


def attended(peak: PeakTerms, context: float) -> float:
    """:meth:`PeakTerms.attended` of one context."""
    if not peak.windows:
        return context
    full = 1.0 - sum(s for _, s in peak.windows)
    return context * full + sum(s * min(context, float(w)) for w, s in peak.windows)


def _pass(
    r: RooflinePredictor,
    peak: PeakTerms,
    n: float,
    b: float,
    ctx: float,
    pairs: float,
    fixed_ms: float,
    seq_ms: float,
    token_n: float,
) -> float:
    """One pass: ``max(memory, compute)`` plus its all-reduces, ms, as
    ``RooflinePredictor._memory_compute``, ``combine`` and ``_comm`` give it; ``token_n``
    the linear layers' arithmetic (``φ·n``, or the verifier's ``(φ·b)·t``)."""
    written = n if r.kv_write else 0.0
    traffic = (
        peak.weights_ms + peak.expert_ms * 0.0 + peak.kv_ms * (b * attended(peak, ctx) + written)
    )
    memory = traffic / r.mem_eff + fixed_ms + seq_ms * b
    compute = (token_n + peak.attn_ms * pairs) / r.compute_eff
    if memory != memory or compute != compute:  # NaN: np.maximum propagates it
        hi = math.nan
    else:
        hi = memory if memory >= compute else compute
    comm = 0.0
    if peak.allreduce_ms or peak.allreduce_fixed_ms:
        ar = peak.allreduce_ms * n + peak.allreduce_fixed_ms
        comm = ar / r.comm_eff if n > 0 else 0.0
    return hi + comm


def verify_ms(r: RooflinePredictor, x: StepInputs) -> float:
    """:meth:`RooflinePredictor.verify_ms` of a one-row ``x``, ms (NaN for an empty step)."""
    pk = r.peak
    b = float(x.decode_seqs[0])
    t = float(x.verified[0])
    c = float(x.context[0])
    pre = float(x.prefill[0])
    bt = b * t
    n = bt + pre
    pairs = bt * attended(pk, c)
    out = _pass(r, pk, n, b, c, pairs, r.fixed_ms, r.seq_ms, pk.token_ms * b * t)
    if pre > 0:
        prefill_pairs = float(pk.prefill_pairs(np.array([pre]))[0])
        out = out + (pk.token_ms * pre + pk.attn_ms * prefill_pairs) / r.prefill_eff
    return out if (b > 0 or pre > 0) else math.nan


def drafter_passes(r: RooflinePredictor, x: StepInputs) -> list[float]:
    """:meth:`RooflinePredictor.drafter_pass_ms` of a one-row ``x``: each drafter's pass,
    ms (0 when the row drafts nothing)."""
    s = float(x.draft_steps[0])
    b = float(x.decode_seqs[0])
    if not (s > 0 and b > 0):
        return [0.0] * len(r.drafters)
    m = float(int(x.members[0].sum()))
    q = (float(x.verified[0]) - 1.0) / (s * m) if m > 0 else 0.0
    c = float(x.context[0])
    nd = b * q
    out = []
    for d in r.drafters:
        pairs = nd * attended(d.peak, c)
        out.append(_pass(r, d.peak, nd, b, c, pairs, d.fixed_ms, d.seq_ms, d.peak.token_ms * nd))
    return out


__all__ = ["attended", "by_floats", "drafter_passes", "verify_ms"]
