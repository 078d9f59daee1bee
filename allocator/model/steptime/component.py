"""The component model: a step from its parts, for configurations without a measured
table (docs/design.md §8.2). All times in ms::

    step = V(b, verified) + draft_steps · D_S(b) + overhead_ms      (speculative)
    step = V(b, 1)                                                   (plain decoding)

``V(b, t)`` is ``serving.verify_ms``, bilinear inside its table and undefined outside;
``D_S(b)`` one drafting pass of the members (``Σ`` of their ``draft_ms`` under
sequential drafting, ``max`` under parallel), each linear in ``b`` between its measured
batch sizes and undefined outside. A step that also prefills adds the measured prefill
time (:func:`~allocator.model.steptime.tables.prefill_ms_at`). ``context`` is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...core.serving import Serving
from .base import StepTimePredictor, step_inputs
from .tables import interp_measured, lerp_rows, prefill_ms_at

__all__ = [
    "ComponentPredictor",
    "component_ms",
    "draft_ms_at",
    "drafting_ms",
    "drafting_pass",
    "verify_ms_at",
]


def draft_ms_at(serving: Serving, batch: float) -> np.ndarray:
    """Each drafter's ms per drafted token at ``batch``: ``(N,)``, NaN where not given or
    outside its measured batch sizes."""
    out = np.full(len(serving.draft_ms), np.nan)
    for i, (b, ms) in enumerate(zip(serving.draft_batch, serving.draft_ms, strict=True)):
        if b.size:
            out[i] = lerp_rows(b, ms[:, None], batch)[0]
    return out


def verify_ms_at(serving: Serving, tokens: np.ndarray, batch: float) -> np.ndarray:
    """Component model's verifier pass at ``batch`` for ``tokens`` per sequence:
    bilinear, NaN outside the table. ``tokens`` any shape -> same shape, ms."""
    tokens = np.asarray(tokens, dtype=float)
    if not serving.has_component_model:
        return np.full(tokens.shape, np.nan)
    row = lerp_rows(serving.verify_batch, serving.verify_ms, batch)
    return interp_measured(serving.verify_tokens, row, tokens)


def drafting_pass(draft_ms: np.ndarray, members: np.ndarray, drafting: str) -> np.ndarray:
    """ms of one drafting pass of a configuration from its members' draft times: summed
    under ``drafting: sequential``, the max under ``parallel``; 0 without members.

    ``draft_ms`` ``(..., N)`` ms per drafter, broadcasting with ``members`` ``(..., N)``
    bool -> ``(...)``; NaN where a member's draft time is NaN.
    """
    d = np.where(members, draft_ms, 0.0)
    if drafting == "parallel":
        return np.max(d, axis=-1, initial=0.0)
    return np.sum(d, axis=-1)


def drafting_ms(serving: Serving, members: np.ndarray, batch: float) -> np.ndarray:
    """:func:`drafting_pass` of each row of ``members`` ``(B, N)`` at ``batch``: ``(B,)``
    ms, NaN where a member has no draft time at ``batch``."""
    return drafting_pass(draft_ms_at(serving, batch), members, serving.drafting)


def component_ms(
    serving: Serving,
    batch: float,
    tokens: np.ndarray,
    draft_steps: np.ndarray,
    draft_ms: np.ndarray,
) -> np.ndarray:
    """The component model of one *speculative* step at ``batch``, ms:
    ``verify_ms(b, tokens) + draft_steps · draft_ms + overhead_ms``.

    ``tokens``: verified tokens per sequence (a chain of ``m`` drafters' ``k`` tokens:
    ``m·k + 1``; a token tree of ``n`` nodes: ``n + 1``); ``draft_steps``: drafting passes
    (``k``; a tree's depth); ``draft_ms``: ms of one pass (:func:`drafting_ms`, or one
    drafter's :func:`draft_ms_at`). Arrays broadcasting together; NaN where the
    ``verify_ms`` table or a draft time does not reach (never extrapolated).
    """
    return (
        verify_ms_at(serving, tokens, batch)
        + np.asarray(draft_steps, dtype=float) * draft_ms
        + serving.overhead_ms
    )


@dataclass(frozen=True, eq=False)
class ComponentPredictor(StepTimePredictor):
    """The component model of a ``serving`` section (module docstring). A speculative row
    without members has no step time (NaN)."""

    name: ClassVar[str] = "component"

    serving: Serving

    def step_ms(self, members, draft_steps, verified, decode_seqs, context=0.0, prefill=0.0):
        x = step_inputs(
            members, draft_steps, verified, decode_seqs, context, prefill, len(self.drafters)
        )
        out = np.full(len(x), np.nan)
        spec = x.speculative
        for b in np.unique(x.decode_seqs):
            at = x.decode_seqs == b
            plain = at & ~spec
            out[plain] = verify_ms_at(self.serving, np.ones(int(plain.sum())), float(b))
            sp = at & spec
            if sp.any():
                d = drafting_ms(self.serving, x.members[sp], float(b))
                step = component_ms(self.serving, float(b), x.verified[sp], x.draft_steps[sp], d)
                step[~x.members[sp].any(axis=1)] = np.nan
                out[sp] = step
        return out + prefill_ms_at(self.serving, x.prefill)

    def domain(self) -> dict[str, tuple[float, float]]:
        s = self.serving
        if not s.has_component_model:
            return {}
        return {
            "decode_seqs": (float(s.verify_batch[0]), float(s.verify_batch[-1])),
            "k": (0.0, float(s.verify_tokens[-1] - 1)),
        }

    @property
    def drafters(self) -> tuple[np.ndarray, ...]:
        """One entry per drafter (the ``members`` columns)."""
        return self.serving.draft_ms

    @classmethod
    def example(cls) -> ComponentPredictor:
        """One drafter, verify_ms at batch 1 and 64 (docs/design.md §5's example)."""
        s = Serving(
            batch_sizes=np.array([1, 64]),
            gpu_cost_per_hour=float("nan"),
            tables=(),
            verify_batch=np.array([1.0, 64.0]),
            verify_tokens=np.array([1.0, 2.0, 4.0, 8.0]),
            verify_ms=np.array([[6.87, 6.95, 7.1, 7.4], [8.53, 9.6, 11.8, 16.2]]),
            draft_batch=(np.array([1.0, 64.0]),),
            draft_ms=(np.array([0.9, 1.4]),),
            overhead_ms=0.2,
            drafting="sequential",
            prefill_tokens=np.array([16.0, 4096.0]),
            prefill_ms=np.array([7.0, 90.0]),
        )
        return cls(s)
