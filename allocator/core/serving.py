"""The ``serving`` section as numpy arrays: step-time tables, the component model's
tables, batch sizes and price (docs/design.md §8.1–§8.2). The rules that read them are
in :mod:`allocator.model.serving`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class StepTableArrays:
    """One measured ``step_ms`` table.

    members : ``(N,)`` bool, the configuration measured.
    batch : ``(Bt,)`` float, measured batch sizes ascending.
    k : ``(Kt,)`` float, every ``k`` measured at some batch size, ascending (includes 0).
    ms : ``(Bt, Kt)`` float, step wall time in ms; NaN where ``k`` was not measured at
        that batch size.
    """

    members: np.ndarray
    batch: np.ndarray
    k: np.ndarray
    ms: np.ndarray


@dataclass(frozen=True, eq=False)
class Serving:
    """The ``serving`` section as numpy arrays (built by
    :func:`allocator.io.build.serving_from_spec`, never changed).

    batch_sizes : ``(S,)`` int, the batch sizes to plan for.
    gpu_cost_per_hour : $/h of one replica, NaN without a price.
    tables : measured step tables.
    verify_batch, verify_tokens : ``(Vb,)``, ``(Vt,)`` float axes of the component
        model (empty without ``verify_ms``); verify_ms : ``(Vb, Vt)`` ms.
    draft_batch, draft_ms : per drafter ``(D_i,)`` float batch sizes and ms per drafted
        token (empty arrays for a drafter without ``draft_ms``).
    overhead_ms : ms added to every speculative step of the component model.
    drafting : ``"sequential"`` (member draft times add) or ``"parallel"`` (max).
    """

    batch_sizes: np.ndarray
    gpu_cost_per_hour: float
    tables: tuple[StepTableArrays, ...]
    verify_batch: np.ndarray
    verify_tokens: np.ndarray
    verify_ms: np.ndarray
    draft_batch: tuple[np.ndarray, ...]
    draft_ms: tuple[np.ndarray, ...]
    overhead_ms: float
    drafting: str

    @property
    def has_component_model(self) -> bool:
        return self.verify_tokens.size > 0

    @property
    def k_limit(self) -> int:
        """The largest ``k`` any table measures or the component model reaches (``m = 1``)."""
        ks = [int(t.k[-1]) for t in self.tables]
        if self.has_component_model:
            ks.append(int(self.verify_tokens[-1] - 1))
        return max(ks, default=0)


__all__ = ["Serving", "StepTableArrays"]
