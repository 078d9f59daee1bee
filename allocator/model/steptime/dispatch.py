"""The step time of a problem's ``serving`` section: which predictor answers for which
configuration (docs/design.md §8.1, §8.2, §8.12).

Per configuration (its drafter set):

1. a measured table of exactly those drafters answers alone, at every ``k`` it
   measured, ``k = 0`` included, and never falls back to another source past its range
   (:mod:`.tables`);
2. otherwise the component model (``serving.verify_ms`` and the drafters' ``draft_ms``),
   when the file gives one (:mod:`.component`);
3. otherwise the roofline (``serving.hardware`` and ``serving.model``; :mod:`.roofline`),
   with each drafter's pass from its ``architecture`` and its pass times in
   ``serving.roofline.drafters``, or, without either, from its measured ``draft_ms``; a
   drafter with none of them has no drafting time, so its configurations have no step
   time.

Plain decoding (``k = 0``, one token verified) of a configuration without its own table
is the *baseline* ``baseline(b)``: ``verify_ms(b, 1)`` where the component model covers
``b``, else the ``k = 0`` entry of the first table covering ``b``, else the roofline's
pass over one token per sequence. A step that also prefills adds the measured
``serving.prefill_ms`` where the file gives it (the roofline models its own prefill
otherwise); a step with no decoding sequence (``decode_seqs = 0``) costs that prefill
alone. Tables and the component model know no context; the roofline reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ...core.serving import Serving
from .base import StepInputs, StepTimePredictor, step_inputs
from .component import ComponentPredictor, component_ms, draft_ms_at, drafting_ms, verify_ms_at
from .roofline import RooflinePredictor
from .tables import TablePredictor, chain_rows, prefill_ms_at, table_step

__all__ = ["ServingPredictor", "roofline_drafters", "roofline_of"]


def roofline_of(serving: Serving, names: tuple[str, ...]) -> RooflinePredictor | None:
    """The roofline of ``serving`` (``None`` without ``hardware`` and ``model``): the
    verifier from its architecture and the fitted factors of ``serving.roofline``, each
    drafter from its ``architecture`` where it has one."""
    if serving.hardware is None or serving.model is None:
        return None
    models = serving.drafter_models or (None,) * len(names)
    factors = dict(serving.roofline)
    drafters = factors.pop("drafters", None) or {}
    r = RooflinePredictor.from_specs(
        serving.hardware,
        serving.model,
        list(zip(names, models, strict=True)),
        drafting=serving.drafting,
        **factors,
    )
    if drafters:
        r = r.with_parameters(
            {f"draft.{n}.{key}": float(v) for n, d in drafters.items() for key, v in d.items()}
        )
    return r


def roofline_drafters(serving: Serving, roofline: RooflinePredictor) -> np.ndarray:
    """``(N,)`` bool: the drafters whose pass the roofline gives (an ``architecture``, or
    fitted pass times in ``serving.roofline.drafters``); the others draft at their measured
    ``draft_ms``."""
    fitted = serving.roofline.get("drafters") or {}
    return np.array([d.from_spec or d.name in fitted for d in roofline.drafters], bool)


@dataclass(frozen=True, eq=False)
class ServingPredictor(StepTimePredictor):
    """The step time of a ``serving`` section (module docstring): tables ▸ component model
    ▸ roofline, per configuration.

    serving : the section's arrays. roofline : its roofline, or ``None``.
    """

    name: ClassVar[str] = "serving"

    serving: Serving
    roofline: RooflinePredictor | None = None
    _tables: TablePredictor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tables", TablePredictor(self.serving))

    @property
    def drafters(self) -> tuple[np.ndarray, ...]:
        """One entry per drafter (the ``members`` columns)."""
        return self.serving.draft_ms

    # ------------------------------------------------------------ the baseline
    def measured_baseline_ms(self, batch: float) -> float:
        """Plain decoding at ``batch`` from what the file measured: ``verify_ms(b, 1)``
        where the component model covers ``b``, else the ``k = 0`` entry of the first table
        covering ``b``; NaN where neither does."""
        s = self.serving
        if s.has_component_model:
            v = float(verify_ms_at(s, np.array([1.0]), batch)[0])
            if not np.isnan(v):
                return v
        return self._tables.baseline_ms(batch)

    def baseline_ms(self, batch: float, context: float = 0.0) -> float:
        """Plain decoding at ``batch`` for a configuration without its own table, ms:
        :meth:`measured_baseline_ms`, else the roofline's pass over one token per sequence
        at ``context``; NaN where nothing covers ``batch``."""
        v = self.measured_baseline_ms(batch)
        if np.isnan(v) and self.roofline is not None:
            n = len(self.serving.draft_ms)
            x = step_inputs(np.zeros((1, n), bool), 0, 1, batch, context)
            v = float(self._roofline_step(x)[0])
        return v

    # ------------------------------------------------------------ the roofline's step
    def _roofline_step(self, x: StepInputs) -> np.ndarray:
        """The roofline's step ``(B,)`` ms, drafters without an architecture drafting at
        their measured ``draft_ms`` (NaN where they have none)."""
        r = self.roofline
        assert r is not None
        s = self.serving
        measured_prefill = s.prefill_tokens.size > 0
        y = x
        if measured_prefill:  # the measured prefill table is added instead
            y = StepInputs(
                x.members, x.draft_steps, x.verified, x.decode_seqs, x.context, 0.0 * x.prefill
            )
        if y.draft_steps.any():
            passes = r.drafter_pass_ms(y)
            specd = roofline_drafters(s, r)
            for b in np.unique(y.decode_seqs):
                at = y.decode_seqs == b
                measured = draft_ms_at(s, float(b))
                passes[np.ix_(at, ~specd)] = measured[~specd][None, :]
            one = np.where(y.members, passes, 0.0)
            if s.drafting == "parallel":
                d = np.max(one, axis=1, initial=0.0)
            else:
                d = np.sum(one, axis=1)
            drafting = y.draft_steps * d
            drafting = np.where((y.draft_steps > 0) & ~y.members.any(axis=1), np.nan, drafting)
        else:  # no row drafts: every row's drafting time is 0 (as the general path gives)
            drafting = np.zeros(len(y))
        out = r.verify_ms(y) + drafting + r.overhead_ms * y.speculative
        if measured_prefill:
            out = np.where(y.decode_seqs > 0, out, 0.0) + prefill_ms_at(s, x.prefill)
        return out

    # ------------------------------------------------------------ the contract
    def step_ms(self, members, draft_steps, verified, decode_seqs, context=0.0, prefill=0.0):
        x = step_inputs(
            members, draft_steps, verified, decode_seqs, context, prefill, len(self.drafters)
        )
        return self.step_ms_of(x)

    def step_ms_of(self, x: StepInputs) -> np.ndarray:
        """:meth:`step_ms` of checked inputs."""
        s = self.serving
        if not s.tables and not s.has_component_model and self.roofline is not None:
            # nothing measured answers: every row is the roofline's (the general path below
            # reaches the same call for every row)
            return self._roofline_step(x)
        out = np.full(len(x), np.nan)
        matched = self._tables.matched(x.members, chain_rows(x)) >= 0
        if matched.any():
            out[matched] = self._tables.step_ms(*_rows(x, matched))
        plain = ~matched & ~x.speculative
        # a step with no decoding sequence costs its prefill alone (the measured table;
        # without one the roofline models it below, and nothing else has a time for it)
        idle = plain & (x.decode_seqs == 0)
        if idle.any() and s.prefill_tokens.size:
            out[idle] = prefill_ms_at(s, x.prefill[idle])
            plain &= ~idle
        for b in np.unique(x.decode_seqs[plain]):
            at = plain & (x.decode_seqs == b)
            base = self.measured_baseline_ms(float(b))
            out[at] = base + prefill_ms_at(s, x.prefill[at])
        # speculative rows, and plain rows nothing measured covers, from the models
        rest = ~matched & (x.speculative | np.isnan(out))
        if not rest.any():
            return out
        if s.has_component_model:
            spec = rest & x.speculative
            if spec.any():
                out[spec] = ComponentPredictor(s).step_ms(*_rows(x, spec))
            # plain decoding past verify_ms's batch sizes: the baseline's last resort, the
            # roofline's pass over one token per sequence (as baseline_ms and grid have it)
            left = rest & ~x.speculative & np.isnan(out)
            if left.any() and self.roofline is not None:
                out[left] = self._roofline_step(StepInputs(*_rows(x, left)))
        elif self.roofline is not None:
            out[rest] = self._roofline_step(StepInputs(*_rows(x, rest)))
        return out

    # ------------------------------------------------------------ the search grid
    def grid(self, members: np.ndarray, ks: np.ndarray, batch: float, context: float = 0.0):
        """Step ms of every row of ``members (B, N)`` at every ``k`` of ``ks (K,)`` (a
        chain: ``m·k + 1`` tokens verified, ``k`` drafting passes), ``b = batch``
        sequences decoding at ``context`` tokens each, no prefill: ``(B, K)``, NaN where
        there is no step time. Computed once per table and once per subset's draft time."""
        s = self.serving
        members = np.atleast_2d(np.asarray(members, dtype=bool))
        ks = np.atleast_1d(np.asarray(ks)).astype(float)
        out = np.full((members.shape[0], ks.size), np.nan)
        matched = np.zeros(members.shape[0], bool)
        for t in s.tables:
            rows = np.all(members == t.members, axis=1)
            if rows.any():
                out[rows] = table_step(t, ks, batch)[None, :]
                matched |= rows
        rest = ~matched
        if not rest.any():
            return out
        mem = members[rest]
        m = mem.sum(axis=1).astype(float)
        spec = ks > 0
        if s.has_component_model or self.roofline is None:
            model = component_ms(
                s,
                batch,
                m[:, None] * ks[None, :] + 1.0,
                ks[None, :],
                drafting_ms(s, mem, batch)[:, None],
            )
            model[(m == 0)[:, None] & spec[None, :]] = np.nan
            out[rest] = np.where(spec[None, :], model, self.baseline_ms(batch, context))
            return out
        b_, k_ = mem.shape[0], ks.size
        flat = StepInputs(
            np.repeat(mem, k_, axis=0),
            np.tile(ks, b_).astype(np.int64),
            (np.repeat(m, k_) * np.tile(ks, b_) + 1.0).astype(np.int64),
            np.full(b_ * k_, float(batch)),
            np.full(b_ * k_, float(context)),
            np.zeros(b_ * k_),
        )
        out[rest] = self._roofline_step(flat).reshape(b_, k_)
        return out

    def domain(self) -> dict[str, tuple[float, float]]:
        if self.roofline is not None:
            return self.roofline.domain()
        spans = [p.domain() for p in (self._tables, ComponentPredictor(self.serving))]
        out: dict[str, tuple[float, float]] = {}
        for d in spans:
            for axis, (lo, hi) in d.items():
                a, b = out.get(axis, (lo, hi))
                out[axis] = (min(a, lo), max(b, hi))
        return out

    @classmethod
    def example(cls) -> ServingPredictor:
        """A component model with a measured prefill table, for the contract suite."""
        return cls(ComponentPredictor.example().serving)


def _rows(x: StepInputs, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """The inputs of the rows ``rows`` (a bool mask), in the contract's order."""
    return (
        x.members[rows],
        x.draft_steps[rows],
        x.verified[rows],
        x.decode_seqs[rows],
        x.context[rows],
        x.prefill[rows],
    )
