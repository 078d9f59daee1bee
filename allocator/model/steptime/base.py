"""The step-time contract: one engine step's wall time, ms (docs/design.md §8.12).

Every predictor of step time (measured tables, the component model, the roofline) is a
:class:`StepTimePredictor`: a class with a registry ``name`` and one vectorised method,
:meth:`~StepTimePredictor.step_ms`, over a batch axis of ``B`` configurations. Nothing
else in the package computes a step time.

The inputs describe one step of a serving engine:

- ``members (B, N)`` bool: each configuration's drafters, over the problem's ``N``
  drafters (a row of ``False``: no speculation);
- ``draft_steps (B,)`` int: drafting passes in the step (``k`` of a chain, the depth of a
  tree; 0: none);
- ``verified (B,)`` int: tokens the verifier checks per decoding sequence (``m·k + 1`` for
  ``m`` pooled chains of ``k``; ``nodes + 1`` for a tree; 1 without speculation);
- ``decode_seqs (B,)`` float: sequences decoding in the step (the batch size ``b``);
- ``context (B,)`` float: mean tokens in each decoding sequence's KV cache;
- ``prefill (B,)`` float: prompt tokens prefilled in the same step.

:func:`step_inputs` checks and broadcasts them; predictors call it first, so every one
refuses the same bad input the same way (``ValueError`` naming the argument).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

__all__ = ["AXES", "StepInputs", "StepTimePredictor", "step_inputs"]

#: Axis names of :meth:`StepTimePredictor.domain`.
AXES: tuple[str, ...] = ("decode_seqs", "k", "context", "prefill")


class StepTimePredictor(abc.ABC):
    """Wall time of one engine step, in ms (docs/design.md §8.12)."""

    name: ClassVar[str]  # registry key, e.g. "roofline"

    @abc.abstractmethod
    def step_ms(self, members, draft_steps, verified, decode_seqs, context, prefill) -> np.ndarray:
        """members (B, N) bool: each configuration's drafters (a row of False: no speculation);
        draft_steps (B,) int: drafting passes in the step (k of a chain, depth of a tree; 0: none);
        verified (B,) int: tokens verified per decoding sequence (m·k + 1 for m pooled chains of k,
            nodes + 1 for a tree, 1 without speculation);
        decode_seqs (B,) float >= 0: sequences decoding in the step;
        context (B,) float >= 0: mean tokens in each decoding sequence's KV cache;
        prefill (B,) float >= 0: prompt tokens prefilled in the step.
        Returns (B,) float ms; NaN where the predictor has no step time (outside what it models)."""

    def domain(self) -> dict[str, tuple[float, float]]:
        """Measured/valid ranges by axis name (:data:`AXES`), ``{}`` when unbounded."""
        return {}


@dataclass(frozen=True, eq=False)
class StepInputs:
    """Checked, broadcast inputs of one :meth:`StepTimePredictor.step_ms` call.

    members ``(B, N)`` bool; draft_steps, verified ``(B,)`` int64; decode_seqs, context,
    prefill ``(B,)`` float64. ``B`` is the common batch length.
    """

    members: np.ndarray
    draft_steps: np.ndarray
    verified: np.ndarray
    decode_seqs: np.ndarray
    context: np.ndarray
    prefill: np.ndarray

    def __len__(self) -> int:
        return int(self.verified.shape[0])

    @property
    def speculative(self) -> np.ndarray:
        """``(B,)`` bool: rows that speculate (a drafting pass or more than one token verified)."""
        return (self.draft_steps > 0) | (self.verified > 1)

    def take(self, rows: np.ndarray) -> StepInputs:
        """The rows selected by a bool mask or an index array."""
        return StepInputs(
            self.members[rows],
            self.draft_steps[rows],
            self.verified[rows],
            self.decode_seqs[rows],
            self.context[rows],
            self.prefill[rows],
        )


def _vector(name: str, value) -> np.ndarray:
    a = np.asarray(value)
    if a.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a (B,) array, got shape {a.shape}")
    if a.dtype == bool or not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{name} must be numeric, got dtype {a.dtype}")
    a = a.astype(float)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def step_inputs(
    members, draft_steps, verified, decode_seqs, context=0.0, prefill=0.0, n_drafters=None
) -> StepInputs:
    """Check the inputs of :meth:`StepTimePredictor.step_ms` and broadcast them to ``(B,)``.

    Scalars and length-1 arrays broadcast along the batch axis; ``members`` may be ``(N,)``
    (one row for every configuration) or ``(B, N)``. ``n_drafters``: the ``N`` the
    predictor knows, checked when given. Raises ``ValueError`` naming the argument for a
    wrong shape, a non-finite or negative value, a fractional ``draft_steps`` or
    ``verified``, or ``verified < 1``.
    """
    m = np.asarray(members)
    if m.dtype != bool:
        raise ValueError(f"members must be a bool array, got dtype {m.dtype}")
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2:
        raise ValueError(f"members must be (B, N) or (N,), got shape {m.shape}")
    if n_drafters is not None and m.shape[1] != n_drafters:
        raise ValueError(f"members has {m.shape[1]} columns for {n_drafters} drafters")
    named = {
        "draft_steps": _vector("draft_steps", draft_steps),
        "verified": _vector("verified", verified),
        "decode_seqs": _vector("decode_seqs", decode_seqs),
        "context": _vector("context", context),
        "prefill": _vector("prefill", prefill),
    }
    sizes = {a.size for a in named.values() if a.ndim == 1 and a.size != 1}
    if m.shape[0] != 1:
        sizes.add(m.shape[0])
    if any(a.ndim == 1 and a.size == 0 for a in named.values()) or m.shape[0] == 0:
        sizes.add(0)
    if len(sizes) > 1:
        shapes = {k: np.shape(v) for k, v in named.items()} | {"members": m.shape}
        raise ValueError(f"inputs do not share one batch length: {shapes}")
    size = sizes.pop() if sizes else 1
    out = {k: np.broadcast_to(v.reshape(-1), (size,)).copy() for k, v in named.items()}
    m = np.broadcast_to(m, (size, m.shape[1])).copy()
    for k in ("draft_steps", "verified", "decode_seqs", "context", "prefill"):
        if np.any(out[k] < 0):
            raise ValueError(f"{k} must be >= 0")
    for k in ("draft_steps", "verified"):
        if np.any(out[k] != np.round(out[k])):
            raise ValueError(f"{k} must be whole numbers")
    if np.any(out["verified"] < 1):
        raise ValueError("verified must be >= 1 (the verifier's own token)")
    return StepInputs(
        members=m,
        draft_steps=out["draft_steps"].astype(np.int64),
        verified=out["verified"].astype(np.int64),
        decode_seqs=out["decode_seqs"],
        context=out["context"],
        prefill=out["prefill"],
    )
