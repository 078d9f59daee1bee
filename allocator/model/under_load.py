"""Serving under load: step wall time, tokens/s, inter-token latency and $/Mtok at a batch size.

The model and its reasons: docs/design.md §8.1–§8.4.

A decoding *step* drafts ``k`` tokens per sequence and verifies them for the whole
batch of ``b`` concurrent sequences; ``k = 0`` is plain decoding, the baseline. Its
wall time ``step_ms(b, k)`` (ms) comes from, in this order:

1. a measured table (``serving.step_ms``) of exactly the configuration's drafters:
   linear in ``k`` between the ``k`` measured at one batch size (as vLLM interpolates
   its profiled step times), linear in ``b`` between measured batch sizes;
2. otherwise the component model
   ``verify_ms(b, m·k + 1) + k · (Σ | max over members of draft_ms_i(b)) + overhead_ms``
   (``Σ`` for ``drafting: sequential``, ``max`` for ``parallel``), bilinear in
   ``(batch, tokens)`` inside the ``verify_ms`` table and linear in ``b`` between a
   drafter's ``draft_ms`` points; for ``k = 0`` it is ``verify_ms(b, 1)``.

Nothing is extrapolated: a ``k`` past the largest measured one, a batch size outside
the measured or modelled ones, or a configuration with neither a table nor a draft
time for every member is an :class:`~allocator.exceptions.InputError` naming
``serving``. A configuration without drafters (an all-False membership row) can only
take ``k = 0``; its step is ``verify_ms(b, 1)``, or without a component model the
``k = 0`` entry of the first table measured at ``b``.

Expected tokens per step ``E`` are in the **bonus convention** whatever the problem's
``convention``: ``k`` drafted tokens plus the verifier's own,
``E_bonus(k) = 1 + Σ_{i=1..k} Π_{j≤i} a(j)``, and ``E_bonus(0) = 1``. The acceptance
``a(j)`` means the same in both conventions, so for a ``paper``-convention problem
``E_bonus(k) = E_paper(k + 1)`` (the paper's round of ``k + 1`` units, the first always
kept, is a serving step drafting ``k``); the code evaluates the bonus sum directly
(:func:`bonus_expected`), through the same pooling, error and workload model as
:mod:`allocator.model.metrics`.

Metrics at batch ``b`` (each ``(B,)``): ``tokens_per_s_per_seq = 1000·E / step_ms``,
``tokens_per_s = b · tokens_per_s_per_seq``, ``tpot_ms = step_ms / E`` (the mean time per
output token of one sequence, vLLM's TPOT; a streaming client gets a step's tokens as one
chunk, so the gap it measures between chunks, vLLM's ITL, is the whole step), ``speedup``
= per-sequence tokens/s over the same configuration's ``k = 0`` step at ``b`` (``E ·
step_ms(b, 0) / step_ms(b, k)``), ``cost_per_mtok = gpu_cost_per_hour /
(3600 · tokens_per_s) · 10⁶`` ($ per million generated tokens; NaN without a price).
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..core.serving import Serving
from ..exceptions import InputError, NotModelledError, ParameterError
from .metrics import curves
from .steptime import ServingPredictor, roofline_of
from .steptime.component import (
    component_ms,
    draft_ms_at,
    drafting_ms,
    drafting_pass,
    verify_ms_at,
)

if TYPE_CHECKING:
    from ..core.problem import Problem

#: Keys of :func:`serving_metrics`, in display order.
SERVING_METRICS: tuple[str, ...] = (
    "step_ms",
    "expected_accepted",
    "tokens_per_s",
    "tokens_per_s_per_seq",
    "tpot_ms",
    "speedup",
    "cost_per_mtok",
)


# ---------------------------------------------------------------- interpolation
def predictor(problem: Problem) -> ServingPredictor:
    """The step-time predictor of ``problem``'s serving section
    (:class:`~allocator.model.steptime.ServingPredictor`: tables ▸ component ▸ roofline),
    built once per problem. Raises like :func:`need_serving` without one."""
    serving = need_serving(problem)
    found = _PREDICTORS.get(serving)
    if found is None:
        found = ServingPredictor(serving, roofline_of(serving, problem.names))
        _PREDICTORS[serving] = found
    return found


#: One predictor per ``Serving`` (an immutable entity), dropped with it.
_PREDICTORS: weakref.WeakKeyDictionary[Serving, ServingPredictor] = weakref.WeakKeyDictionary()


def baseline_ms(problem: Problem | Serving, batch: float, context: float = 0.0) -> float:
    """Plain decoding (``k = 0``) step at ``batch`` and ``context`` tokens per sequence:
    ``verify_ms(b, 1)``, or without a component model the ``k = 0`` entry of the first
    table measured at ``b``, else the roofline's (NaN if none). ``problem``: the problem
    (its predictor, roofline included) or only its serving arrays (the roofline then only
    when the problem's predictor was built)."""
    if isinstance(problem, Serving):
        found = _PREDICTORS.get(problem)
        if found is None:
            found = ServingPredictor(problem)
    else:
        found = predictor(problem)
    return found.baseline_ms(batch, context)


def step_ms_or_nan(
    problem: Problem, members: np.ndarray, k: np.ndarray, batch: float, context: float = 0.0
) -> np.ndarray:
    """:func:`step_ms` with NaN (instead of an error) where a row has no step time.

    ``members`` ``(B, N)`` bool, ``k`` ``(B,)`` int ``>= 0`` -> ``(B,)`` ms: a chain of
    ``k`` drafted tokens per member, ``m·k + 1`` verified, ``batch`` sequences decoding at
    ``context`` tokens each. Used by searches, which leave such configurations out.
    """
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    k = np.atleast_1d(np.asarray(k)).astype(np.int64)
    m = members.sum(axis=1)
    verified = np.where(k > 0, m * k + 1, 1)
    return predictor(problem).step_ms(members, k, verified, float(batch), float(context), 0.0)


def step_grid(
    problem: Problem, members: np.ndarray, ks: np.ndarray, batch: float, context: float = 0.0
) -> np.ndarray:
    """Step ms of every subset at every ``k``: ``members`` ``(B, N)``, ``ks`` ``(K,)`` ->
    ``(B, K)``, NaN where there is no step time. The same values as
    :func:`step_ms_or_nan` on every ``(subset, k)`` pair, computed once per subset
    (draft time) and once per table (searches call this)."""
    return predictor(problem).grid(members, ks, float(batch), float(context))


# ---------------------------------------------------------------- public interface
def need_serving(problem: Problem, what: str = "step times by batch size") -> Serving:
    """The problem's serving arrays; an :class:`InputError` naming ``serving`` without
    them, saying ``what`` the section has to give."""
    s = getattr(problem, "serving", None)
    if s is None:
        raise InputError("serving", f"the problem has no serving section ({what})")
    return s


def speculative_ks(problem: Problem) -> np.ndarray:
    """The ``k >= 1`` a search compares: ``search.k`` up to the largest ``k`` any step
    time reaches (:attr:`Serving.k_limit`). ``(K,)`` int64, empty when none."""
    hi = min(problem.k_max, need_serving(problem).k_limit)
    return np.arange(problem.k_min, hi + 1, dtype=np.int64)


def _why(problem: Problem, members: np.ndarray, k: int, batch: float) -> str:
    """Why one configuration has no step time at ``(batch, k)``: a sentence."""
    serving = need_serving(problem)
    names = [n for n, on in zip(problem.names, members, strict=True) if on]
    what = f"drafters {'+'.join(names) or '(none)'} at k={k}, batch {batch:g}"
    ranges = [f"{t.batch[0]:g}..{t.batch[-1]:g}" for t in serving.tables]
    if serving.has_component_model:
        ranges.append(f"{serving.verify_batch[0]:g}..{serving.verify_batch[-1]:g}")
    if k == 0 and not any(np.array_equal(t.members, members) for t in serving.tables):
        return (
            f"no k = 0 (plain decoding) step time at batch {batch:g}: outside every measured "
            f"or modelled batch range ({', '.join(ranges)}); step times are never extrapolated"
        )
    for t in serving.tables:
        if np.array_equal(t.members, members):
            return (
                f"no step time for {what}: outside its measured step_ms table (batch sizes "
                f"{t.batch[0]:g}..{t.batch[-1]:g}; k up to {int(t.k[-1])} where measured); "
                "step times are never extrapolated"
            )
    if not names:
        return f"no step time for {what}: speculation needs at least one drafter"
    if not serving.has_component_model:
        return f"no step time for {what}: no step_ms table measures it and there is no verify_ms"
    d = draft_ms_at(serving, batch)
    lacking = [n for n, on, v in zip(problem.names, members, d, strict=True) if on and np.isnan(v)]
    if lacking:
        return (
            f"no step time for {what}: no step_ms table measures it and draft_ms of "
            f"{', '.join(lacking)} does not cover batch {batch:g}"
        )
    return (
        f"no step time for {what}: outside serving.verify_ms (batch "
        f"{serving.verify_batch[0]:g}..{serving.verify_batch[-1]:g}, tokens up to "
        f"{serving.verify_tokens[-1]:g}; this needs m*k+1 = {len(names) * k + 1})"
    )


def step_ms(
    problem: Problem, members: np.ndarray, k: np.ndarray, batch: int, context: float = 0.0
) -> np.ndarray:
    """Wall time of one decoding step, ms, at ``batch`` concurrent sequences of ``context``
    tokens in their KV caches each.

    ``members`` ``(B, N)`` bool, ``k`` ``(B,)`` int ``>= 0`` (0: no speculation) ->
    ``(B,)`` ms. Raises :class:`InputError` (field ``serving``) naming the first row
    that is neither measured nor modelled.
    """
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    k = np.atleast_1d(np.asarray(k, dtype=np.int64))
    if k.shape[0] != members.shape[0]:
        raise ValueError("members and k must have the same batch size")
    if np.any(k < 0):
        raise ParameterError("k", "must be >= 0")
    out = step_ms_or_nan(problem, members, k, float(batch), context)
    bad = np.flatnonzero(np.isnan(out))
    if bad.size:
        i = int(bad[0])
        raise NotModelledError("serving", _why(problem, members[i], int(k[i]), float(batch)))
    return out


def bonus_expected(problem: Problem, members: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Expected tokens per step in the bonus convention, ``(B,)``; ``1`` where ``k = 0``.

    ``E_bonus(k) = 1 + Σ_{i=1..k} Π_{j≤i} a_S(j)`` with the problem's pooled acceptance
    ``a_S`` (pooling, error model, ensembles, workload mixture), regardless of
    ``problem.convention``; equal to ``E_paper(k + 1)`` of the same acceptance.
    """
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    k = np.atleast_1d(np.asarray(k, dtype=np.int64))
    out = np.ones(k.shape)
    spec = k > 0
    if spec.any():
        k_max = int(k[spec].max())
        bonus = problem if problem.convention == "bonus" else replace(problem, convention="bonus")
        e, _ = curves(bonus, members[spec], k_max)
        out[spec] = np.take_along_axis(e, (k[spec] - 1)[:, None], axis=1)[:, 0]
    return out


def tokens_per_s(e: np.ndarray, step: np.ndarray, batch: float | np.ndarray) -> np.ndarray:
    """Generated tokens/s of a whole batch: ``batch · 1000 · E / step_ms`` (``E`` tokens
    per sequence per step, bonus convention); arrays broadcasting together."""
    return batch * (1000.0 * e / step)


def cost_per_mtok(cost_per_hour: float | np.ndarray, tokens_s: float | np.ndarray) -> np.ndarray:
    """$ per million generated tokens: ``cost_per_hour / (3600 · tokens/s) · 10⁶``
    (NaN where the price is NaN); arrays broadcasting together."""
    return np.asarray(cost_per_hour, dtype=float) / (3600.0 * np.asarray(tokens_s)) * 1e6


def metrics_from(
    e: np.ndarray,
    step: np.ndarray,
    base: np.ndarray,
    batch: float | np.ndarray,
    price: float,
) -> dict[str, np.ndarray]:
    """The serving metrics from ``E`` (bonus), the step ms, the ``k = 0`` step ms, the
    batch size and the price ($/h; NaN for none); arrays broadcasting together."""
    per_seq = tokens_per_s(e, step, 1.0)
    tps = batch * per_seq
    return {
        "step_ms": step,
        "expected_accepted": e,
        "tokens_per_s": tps,
        "tokens_per_s_per_seq": per_seq,
        "tpot_ms": step / e,
        "speedup": e * base / step,
        "cost_per_mtok": cost_per_mtok(price, tps),
    }


def serving_metrics(
    problem: Problem, members: np.ndarray, k: np.ndarray, batch: int, context: float = 0.0
) -> dict[str, np.ndarray]:
    """Serving metrics of configurations (``members[b]``, ``k[b]``) at ``batch``
    sequences of ``context`` tokens each.

    Keys :data:`SERVING_METRICS`, each ``(B,)``: ``step_ms`` (ms), ``expected_accepted``
    (``E``, tokens per step, bonus convention), ``tokens_per_s`` (whole batch),
    ``tokens_per_s_per_seq``, ``tpot_ms`` (ms per token of one sequence), ``speedup``
    (over the same configuration's ``k = 0`` step), ``cost_per_mtok`` ($ per 10⁶
    tokens, NaN without ``gpu_cost_per_hour``). Raises like :func:`step_ms`.
    """
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    k = np.atleast_1d(np.asarray(k, dtype=np.int64))
    step = step_ms(problem, members, k, batch, context)
    base = step_ms(problem, members, np.zeros_like(k), batch, context)
    e = bonus_expected(problem, members, k)
    return metrics_from(e, step, base, float(batch), need_serving(problem).gpu_cost_per_hour)


# ---------------------------------------------------------------- what a step time rests on
def roofline_answers(serving: Serving) -> bool:
    """Every configuration's step time comes from the roofline (no table, no
    ``verify_ms``)."""
    return serving.has_roofline and not serving.tables and not serving.has_component_model


def _span(values: np.ndarray) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"


def step_time_notes(
    problem: Problem,
    batch: np.ndarray | list[float],
    k: np.ndarray | list[int] | None = None,
    context: np.ndarray | list[float] | None = None,
    speculative_batch: np.ndarray | list[float] | None = None,
    verified_tokens: bool = False,
) -> list[str]:
    """Every note of :func:`step_time_caveats`: what the step times rest on, then where
    they extrapolate."""
    basis, extrapolations = step_time_caveats(
        problem, batch, k, context, speculative_batch, verified_tokens
    )
    return basis + extrapolations


def step_time_caveats(
    problem: Problem,
    batch: np.ndarray | list[float],
    k: np.ndarray | list[int] | None = None,
    context: np.ndarray | list[float] | None = None,
    speculative_batch: np.ndarray | list[float] | None = None,
    verified_tokens: bool = False,
) -> tuple[list[str], list[str]]:
    """Notes on what the step times of an answer rest on, as ``(basis, extrapolations)``:
    the first item below is ``extrapolations`` (an answer outside a calibrated file's
    measured domain), the other two ``basis``. The answer used step times at the batch
    sizes ``batch``, at the draft lengths ``k`` (``None``: not checked), with speculative
    steps at the batch sizes ``speculative_batch`` (default: ``batch`` where
    ``k > 0``, or every batch size when ``k`` is ``None``: a schedule compares
    speculation at each), at the contexts ``context`` (tokens per sequence; ``None`` or
    0: none given). ``verified_tokens``: ``k`` counts the draft tokens a step verifies (a
    token tree's nodes), compared with the longest calibrated chain's.

    - outside ``serving.calibrated_from`` (a calibrated file's measured domain): batch
      sizes, batch sizes of speculative steps (``speculative_batch``), ``k`` past the
      largest calibrated one or outside the speculative ``k`` measured
      (``speculative_k``), contexts: each noted as an extrapolation of the fitted form;
    - step times from the roofline of an uncalibrated file: at the file's factors;
    - a context asked for where the step times are measured tables or ``verify_ms``:
      they do not depend on it.
    """
    serving = need_serving(problem)
    b = np.atleast_1d(np.asarray(batch, dtype=float))
    ks = None if k is None else np.atleast_1d(np.asarray(k, dtype=float))
    if speculative_batch is not None:
        spec_b = np.atleast_1d(np.asarray(speculative_batch, dtype=float))
    elif ks is not None and ks.size == b.size:
        spec_b = b[ks > 0]
    else:
        spec_b = b
    ctx = np.zeros(1) if context is None else np.atleast_1d(np.asarray(context, dtype=float))
    notes: list[str] = []
    given = ctx[ctx > 0]
    if given.size and (serving.tables or serving.has_component_model):
        notes.append(
            f"context {_span(given)} tokens: the measured step_ms tables and verify_ms hold at "
            "the context they were measured at and do not change with it"
            + (
                ""
                if serving.has_roofline
                else " (give serving.hardware and serving.model for a step time that reads "
                "the context)"
            )
        )
    cal = serving.calibrated_from
    if cal is None:
        if roofline_answers(serving):
            notes.append(
                "step times from the roofline at the factors of serving.roofline, not "
                "calibrated to measurements (allocator calibrate fits them)"
            )
        return notes, []
    basis, notes = notes, []
    lo, hi = cal["batch"]
    out = b[(b < lo) | (b > hi)]
    if out.size:
        notes.append(
            f"batch {_span(out)} lies outside the calibrated batch sizes {lo:g}..{hi:g} "
            "(serving.calibrated_from): the step times there extrapolate the fitted form"
        )
    spec_range = cal.get("speculative_batch")
    if spec_range is not None and spec_b.size:
        slo, shi = spec_range
        out = spec_b[((spec_b < slo) | (spec_b > shi)) & (spec_b >= lo) & (spec_b <= hi)]
        if out.size:
            notes.append(
                f"speculative step times at batch {_span(out)} extrapolate the fitted form: "
                f"speculation was measured at batch {slo:g}..{shi:g} only "
                "(serving.calibrated_from.speculative_batch), so whether it pays there is the "
                "form's reading, not a measurement"
            )
    if ks is not None:
        khi = cal["k"][1]
        past = ks[ks > khi]
        what = "draft tokens verified per step" if verified_tokens else "k ="
        if past.size:
            notes.append(
                f"{what} {_span(past)} lies past the largest calibrated k ({khi:g}): the step "
                "time extrapolates the fitted form"
            )
        spec_k = cal.get("speculative_k")
        if spec_k is not None:
            slo, shi = spec_k
            out = ks[(ks > 0) & (ks <= khi) & ((ks < slo) | (ks > shi))]
            if out.size:
                notes.append(
                    f"{what} {_span(out)} lies outside the speculative k measured "
                    f"({_span(np.array(spec_k))}, serving.calibrated_from.speculative_k): its "
                    "step time is the fitted form's reading between k = 0 and the measured k"
                )
    crange = cal.get("context")
    if crange is not None and serving.has_roofline:
        clo, chi = crange
        out = ctx[(ctx < clo) | (ctx > chi)]
        if out.size:
            notes.append(
                f"context {_span(out)} tokens lies outside the calibrated contexts "
                f"{clo:g}..{chi:g} (serving.calibrated_from): the roofline extrapolates "
                "there" + (" (pass --context)" if np.any(out == 0) else "")
            )
    return basis, notes


__all__ = [
    "SERVING_METRICS",
    "roofline_answers",
    "step_time_caveats",
    "step_time_notes",
    "baseline_ms",
    "bonus_expected",
    "component_ms",
    "cost_per_mtok",
    "draft_ms_at",
    "drafting_ms",
    "drafting_pass",
    "metrics_from",
    "need_serving",
    "predictor",
    "serving_metrics",
    "speculative_ks",
    "step_grid",
    "step_ms",
    "step_ms_or_nan",
    "tokens_per_s",
    "verify_ms_at",
]
