"""Plans under load: the best configuration at each batch size, and the front at one.

The rules and their reasons: docs/design.md §8.5.

Both enumerate the problem's search space (``search.m``, ``require``, ``exclude``)
exhaustively, every subset at every ``k`` of ``search.k`` up to the largest ``k`` any
step time reaches, vectorised over subsets (:func:`allocator.core.space.iter_subsets`
chunks) with the step times of :mod:`allocator.model.serving`. A configuration is a
candidate when it is within the budget (the problem's caps, on the model's metrics)
and has a step time at the batch size; configurations without one are counted and
left out, never guessed.

:func:`schedule` — for each batch size of ``serving.batch_sizes``, the configuration
of highest ``tokens_per_s`` (speculation off, ``k = 0`` and no drafters, is always a
candidate). Ties go to the smaller ``k``, then to fewer drafters, then to the first in
enumeration order. ``speculation_off_from`` is the smallest planned batch size ``b``
such that the schedule has ``k = 0`` at ``b`` and at every larger planned batch size;
``None`` when speculation still pays at the largest one. A planned batch size where no
configuration of the search space (budget aside) has a step time with ``k >= 1`` is an
input error: ``k = 0`` would win there by default, which is not a finding.

:func:`serving_front` — ``solve --batch B``: the Pareto front of ``tokens_per_s``
against the problem's cost metric (``cost_per_mtok`` or a model cost metric) over the
speculative configurations (``k >= 1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..core.pareto import front_order
from ..core.problem import Problem
from ..core.result import Front
from ..core.space import iter_subsets
from ..exceptions import NotModelledError
from ..model.evaluate import curves, evaluate_subsets
from ..model.memory import max_batch
from ..model.serving import (
    SERVING_METRICS,
    baseline_ms,
    metrics_from,
    need_serving,
    speculative_ks,
    step_grid,
    tokens_per_s,
)
from ..search.base import feasible_mask

#: Subset x k cells evaluated per chunk (bounds memory).
MAX_CELLS = 1 << 20
#: Relative difference between a table's own ``k = 0`` step and the baseline above which
#: :func:`schedule` notes that the file's plain-decoding times disagree.
K0_TOLERANCE = 0.01


@dataclass
class Schedule:
    """The plan per batch size.

    batch : ``(S,)`` int batch sizes; members : ``(S, N)`` bool; k : ``(S,)`` int.
    metrics : serving metrics of each chosen configuration, ``(S,)`` arrays keyed by
        :data:`~allocator.model.serving.SERVING_METRICS`.
    ks : ``(K,)`` the ``k`` values compared (``0`` first); by_k : ``(S, K)`` the best
        ``tokens_per_s`` at each batch size and ``k`` within the budget (NaN: none).
    speculation_off_from : see the module docstring.
    evaluated : configurations compared (all batch sizes); unmeasured : of those,
        how many had no step time and were left out.
    """

    problem: str
    names: tuple[str, ...]
    batch: np.ndarray
    members: np.ndarray
    k: np.ndarray
    metrics: dict[str, np.ndarray]
    ks: np.ndarray
    by_k: np.ndarray
    speculation_off_from: int | None
    evaluated: int
    unmeasured: int
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        """One plain dict per batch size, the ``rows`` of ``schedule --json``."""
        out = []
        for i, b in enumerate(self.batch):
            cost = float(self.metrics["cost_per_mtok"][i])
            out.append(
                {
                    "batch": int(b),
                    "drafters": [
                        n for n, on in zip(self.names, self.members[i], strict=True) if on
                    ],
                    "k": int(self.k[i]),
                    "tokens_per_s": float(self.metrics["tokens_per_s"][i]),
                    "tokens_per_s_per_seq": float(self.metrics["tokens_per_s_per_seq"][i]),
                    "itl_ms": float(self.metrics["itl_ms"][i]),
                    "speedup": float(self.metrics["speedup"][i]),
                    "cost_per_mtok": None if np.isnan(cost) else cost,
                }
            )
        return out


@dataclass
class _Chunk:
    """Subsets ``(B, N)`` with, for ``ks (K,)``: budget feasibility ``(B, K)``, the
    model's metrics ``(B, K)`` and the bonus-convention ``E`` ``(B, K)``."""

    members: np.ndarray
    feasible: np.ndarray
    model: dict[str, np.ndarray]
    e: np.ndarray


def _chunks(problem: Problem, ks: np.ndarray) -> Iterator[_Chunk]:
    k_max = int(ks[-1])
    limited = problem.replace(k_max=k_max)
    bonus = limited.replace(convention="bonus")
    rows = max(1, MAX_CELLS // ks.size)
    for members in iter_subsets(problem, rows):
        model = evaluate_subsets(limited, members)  # (B, K) over k_min..k_max == ks
        e, _ = curves(bonus, members, k_max)
        yield _Chunk(members, feasible_mask(model, problem.budget), model, e[:, ks - 1])


def _serving_at(problem: Problem, c: _Chunk, ks: np.ndarray, batch: int) -> dict[str, np.ndarray]:
    """Serving metrics ``(B, K)`` of a chunk at ``batch`` (NaN where no step time)."""
    step = step_grid(problem, c.members, ks, batch)
    base = step_grid(problem, c.members, np.zeros(1, np.int64), batch)
    price = problem.serving.gpu_cost_per_hour if problem.serving else np.nan
    return metrics_from(c.e, step, base, float(batch), price)


def schedule(problem: Problem) -> Schedule:
    """The best configuration within the budget at each of ``serving.batch_sizes``."""
    serving = need_serving(problem)
    batches = serving.batch_sizes
    s_count, n = batches.size, problem.n
    ks = speculative_ks(problem)
    all_ks = np.concatenate([[0], ks])
    by_k = np.full((s_count, all_ks.size), np.nan)
    # speculation off at every batch size first: the candidate every plan starts from
    best_members = np.zeros((s_count, n), bool)
    best_k = np.zeros(s_count, np.int64)
    best_m = np.zeros(s_count, np.int64)
    off = np.array([baseline_ms(serving, float(b)) for b in batches])
    if np.isnan(off).any():
        b = int(batches[np.flatnonzero(np.isnan(off))[0]])
        raise NotModelledError("serving", f"no k = 0 step time at batch {b} (the baseline)")
    metrics = metrics_from(
        np.ones(s_count), off, off, batches.astype(float), serving.gpu_cost_per_hour
    )
    metrics = {key: np.array(v, dtype=float) for key, v in metrics.items()}
    by_k[:, 0] = metrics["tokens_per_s"]
    evaluated = s_count
    unmeasured = 0
    no_room = 0
    # per batch size: does any speculative configuration (budget aside) have a step time?
    spec_timed = np.zeros(s_count, bool)
    if ks.size:
        for c in _chunks(problem, ks):
            m_rows = c.members.sum(axis=1)
            room = max_batch(problem, c.members)  # hosted drafters take KV-cache memory
            for i, b in enumerate(batches):
                step = step_grid(problem, c.members, ks, float(b))
                tps = tokens_per_s(c.e, step, float(b))
                has = ~np.isnan(tps)
                spec_timed[i] |= bool(has.any())
                evaluated += int(c.feasible.sum())
                unmeasured += int((c.feasible & ~has).sum())
                fits = (room >= b)[:, None]
                no_room += int((c.feasible & has & ~fits).sum())
                ok = c.feasible & has & fits
                if not ok.any():
                    continue
                masked = np.where(ok, tps, -np.inf)
                col = masked.max(axis=0)
                col[~ok.any(axis=0)] = np.nan
                by_k[i, 1:] = np.fmax(by_k[i, 1:], col)
                # best of the chunk: highest tokens/s, then smaller k, then fewer drafters
                top = masked.max()
                r, j = np.nonzero(masked == top)
                pick = np.lexsort((m_rows[r], ks[j]))[0]
                r0, j0 = int(r[pick]), int(j[pick])
                key = (-float(top), int(ks[j0]), int(m_rows[r0]))
                cur = (-float(metrics["tokens_per_s"][i]), int(best_k[i]), int(best_m[i]))
                if key < cur:
                    best_members[i] = c.members[r0]
                    best_k[i] = ks[j0]
                    best_m[i] = m_rows[r0]
                    base = step_grid(problem, c.members[r0 : r0 + 1], np.zeros(1), float(b))
                    won = metrics_from(
                        c.e[r0, j0], step[r0, j0], base[0, 0], float(b), serving.gpu_cost_per_hour
                    )
                    for name in SERVING_METRICS:
                        metrics[name][i] = won[name]
    if not spec_timed.all():
        # k = 0 there would read as "speculation stops paying" for want of a measurement
        i = int(np.flatnonzero(~spec_timed)[0])
        raise NotModelledError(
            f"serving.batch_sizes.{i}",
            f"batch size {int(batches[i])}: no configuration of the search space has a "
            f"step time with k >= 1 there (search.k {problem.k_min}..{problem.k_max}); "
            "whether speculation pays cannot be said: measure it or leave the batch size "
            "out (step times are never extrapolated)",
        )
    notes = []
    if unmeasured:
        notes.append(
            f"{unmeasured:,} configuration(s) within the budget have no step time at their "
            "batch size (no measured table and no component model covering them): left out"
        )
    if no_room:
        notes.append(
            f"{no_room:,} configuration(s) left out at some batch size: their drafters take "
            "KV-cache memory the batch needs (serving.memory, drafters[].memory_gb)"
        )
    notes += baseline_disagreements(problem, batches, off)
    return Schedule(
        problem=problem.name,
        names=problem.names,
        batch=batches.copy(),
        members=best_members,
        k=best_k,
        metrics=metrics,
        ks=all_ks,
        by_k=by_k,
        speculation_off_from=speculation_off_from(batches, best_k),
        evaluated=evaluated,
        unmeasured=unmeasured,
        notes=notes,
    )


def baseline_disagreements(problem: Problem, batch: np.ndarray, off: np.ndarray) -> list[str]:
    """A note when a table's own ``k = 0`` step differs from the baseline ``off`` ``(S,)``
    (ms at each of ``batch``) by more than :data:`K0_TOLERANCE`: the schedule decides
    against the baseline while each row's speedup is over its own ``k = 0``
    (docs/design.md §8.5), so the two can then disagree."""
    serving = need_serving(problem)
    zero = np.zeros(1, np.int64)
    found = []
    for t in serving.tables:
        names = "+".join(n for n, on in zip(problem.names, t.members, strict=True) if on)
        for b, base in zip(batch, off, strict=True):
            own = float(step_grid(problem, t.members[None, :], zero, float(b))[0, 0])
            if not np.isnan(own) and abs(own - base) > K0_TOLERANCE * base:
                found.append(f"{names}'s table {own:.4g} ms against {base:.4g} at batch {b}")
    if not found:
        return []
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return [
        "the file's k = 0 (no speculation) step times disagree: "
        + "; ".join(found[:3])
        + more
        + ". The schedule compares tokens/s with the baseline (verify_ms(b, 1), else the "
        "first table's k = 0); each row's speedup is over its own configuration's k = 0"
    ]


def speculation_off_from(batch: np.ndarray, k: np.ndarray) -> int | None:
    """The smallest batch size ``b`` with ``k = 0`` at ``b`` and at every larger one
    (``batch`` ascending); ``None`` when the largest batch size still speculates."""
    k = np.asarray(k)
    if k.size == 0 or k[-1] != 0:
        return None
    spec = np.flatnonzero(k != 0)
    first = 0 if spec.size == 0 else int(spec[-1]) + 1
    return int(batch[first])


def serving_front(problem: Problem, batch: int) -> tuple[Front, int, int, list[str]]:
    """The front of ``tokens_per_s`` against the cost metric at ``batch``.

    Returns the front (its ``throughput`` metric is ``tokens_per_s``; it carries every
    model metric and every serving metric, plus ``batch``), the configurations
    evaluated, how many of them had no step time (left out), and notes.
    """
    serving = need_serving(problem)
    ks = speculative_ks(problem)
    metric = problem.cost_metric
    parts: list[Front] = []
    evaluated = unmeasured = no_room = 0
    base = baseline_ms(serving, float(batch))
    if np.isnan(base):
        raise NotModelledError(
            "serving", f"no step time at batch {batch}: outside every measured or modelled range"
        )
    if ks.size == 0:
        raise NotModelledError(
            "serving",
            f"no speculative step time within search.k ({problem.k_min}..{problem.k_max})",
        )
    for c in _chunks(problem, ks):
        sm = _serving_at(problem, c, ks, batch)
        has = ~np.isnan(sm["tokens_per_s"])
        evaluated += c.e.size
        unmeasured += int((~has).sum())
        fits = (max_batch(problem, c.members) >= batch)[:, None]  # drafters take KV memory
        no_room += int((c.feasible & has & ~fits).sum())
        ok = c.feasible & has & fits
        r, j = np.nonzero(ok)
        if r.size == 0:
            continue
        met = {name: np.asarray(v)[r, j] for name, v in c.model.items()}
        met["tokens_per_step"] = sm["expected_accepted"][r, j]
        for name in SERVING_METRICS:
            if name != "expected_accepted":
                met[name] = sm[name][r, j]
        met["batch"] = np.full(r.size, float(batch))
        met["throughput"] = met["tokens_per_s"]
        keep = front_order(met[metric], met["throughput"], met["drafters"], ks[j])
        parts.append(
            Front(c.members[r[keep]], ks[j][keep], {m: v[keep] for m, v in met.items()}, metric)
        )
    if not parts:
        raise NotModelledError(
            "serving",
            f"no configuration within the budget has a step time at batch {batch}"
            + (
                f" and leaves the batch room in memory ({no_room:,} have a step time but "
                "their drafters take the KV-cache memory it needs: serving.memory, "
                "drafters[].memory_gb)"
                if no_room
                else ""
            ),
        )
    members = np.concatenate([p.members for p in parts])
    k = np.concatenate([p.k for p in parts])
    met = {m: np.concatenate([p.metrics[m] for p in parts]) for m in parts[0].metrics}
    keep = front_order(met[metric], met["throughput"], met["drafters"], k)
    front = Front(members[keep], k[keep], {m: v[keep] for m, v in met.items()}, metric)
    notes = [
        f"throughput is tokens_per_s at batch {batch} (E in the bonus convention over the "
        "step wall time); k = 0 (no speculation) gives "
        f"{batch * 1000.0 / base:.6g} tokens/s"
    ]
    if unmeasured:
        notes.append(
            f"{unmeasured:,} of {evaluated:,} configurations have no step time at batch "
            f"{batch} (no measured table and no component model covering them): left out"
        )
    if no_room:
        notes.append(
            f"{no_room:,} configuration(s) left out at batch {batch}: their drafters take "
            "KV-cache memory the batch needs (serving.memory, drafters[].memory_gb)"
        )
    return front, evaluated, unmeasured, notes
