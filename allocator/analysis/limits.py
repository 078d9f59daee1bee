"""Where the best point of a solved front sits against the search's limits, and which
answers rest on positions nobody measured, and which drafters the roofline cannot time
(:func:`untimed_drafters`).

:func:`limit_notes` says when the configuration of most throughput is at ``search.k.max``,
``search.m.max`` or ``budget.drafters``, or when a budget cap binds there: the search
stopped at a limit while a longer draft or more drafters may still pay
(docs/design.md §6, ``solve --json``'s ``notes``). :func:`position_notes` says when an
answer's ``k`` reaches past the positions a drafter's acceptance was given for
(:attr:`~allocator.core.problem.DrafterInfo.positions`): past them the last value
repeats, an assumption, not a measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.budget import budget_limit
from ..exceptions import NotModelledError
from ..model.metrics import evaluate_configs

if TYPE_CHECKING:
    from ..core.problem import Problem
    from ..core.result import SolveResult

#: The best point's ``k + 1`` is evaluated (to say whether a longer draft pays) only up to
#: this draft length: beyond it one evaluation would allocate ``k``-long position arrays.
LIMIT_PROBE_K = 100_000


def limit_notes(
    problem: Problem, result: SolveResult, *, one_per_server: bool = False
) -> list[str]:
    """Notes when the front's best-throughput point sits at a limit of the search.

    The limits are ``search.k.max``, ``search.m.max`` (and ``budget.drafters``) and any
    budget cap that the same drafters one unit further (``k + 1``) would break. The
    same drafters at ``k + 1`` are evaluated by the model (one configuration) and the
    note gives their throughput (accepted units per verifier-unit of time) when higher:
    the search stopped at a limit while a longer draft would still pay.
    ``one_per_server``: the problem was restricted to what an engine serves
    (:func:`allocator.engines.servable`), so one drafter is the engine's limit, not the
    search's, and no note suggests pooling more. Returns the notes (possibly none), and
    :func:`position_notes` for the front's points.
    """
    front = result.front
    if len(front) == 0:
        return []
    i = int(np.argmax(front.throughput))
    members, k, best = front.members[i], int(front.k[i]), float(front.throughput[i])
    label = f"{'+'.join(n for n, on in zip(problem.names, members, strict=True) if on)}, k={k}"
    notes = []
    longer: dict[str, float] = {}
    if k + 1 <= LIMIT_PROBE_K:
        try:
            met = evaluate_configs(problem, members[None, :], np.array([k + 1]))
            longer = {name: float(v[0]) for name, v in met.items()}
        except NotModelledError:  # the model cannot evaluate k + 1 here
            longer = {}
    pays = bool(longer) and longer["throughput"] > best
    past = extrapolated(problem, members, k + 1)
    broken = [n for n, cap in problem.budget.items() if pays and longer[n] > budget_limit(cap)]
    detail = (
        f"the same drafters at k={k + 1} give throughput {longer['throughput']:.6f} "
        f"({longer['throughput'] / best - 1:+.2%}"
        + (f"; {_past_text(past, k + 1)}" if past else "")
        + ")"
        if pays
        else ""
    )
    if k == problem.k_max:
        text = f"the best point ({label}) sits at search.k.max = {k}: a longer draft may pay"
        if pays:
            text += f"; {detail}" + (f", over budget.{broken[0]}" if broken else "")
        notes.append(text + "; raise search.k.max to search further")
    elif broken:
        cap = problem.budget[broken[0]]
        notes.append(
            f"budget.{broken[0]} = {cap:g} binds at the best point ({label}): {detail} at "
            f"{broken[0]} {longer[broken[0]]:.6g} (a larger cap may pay)"
        )
    m = int(members.sum())
    n_free = int((~np.asarray(problem.excluded, bool)).sum())
    m_max = int(problem.m_max if problem.m_max is not None else problem.n)
    m_cap = min(m_max, int(problem.budget.get("drafters", m_max)))
    if m == m_cap and m < n_free and not one_per_server:
        which = "search.m.max" if m == m_max else "budget.drafters"
        notes.append(
            f"the best point ({label}) pools m = {m} = {which} drafters: pooling more may "
            f"pay; raise {which} to search further"
        )
    return notes + position_notes(problem, front.members, front.k)


def extrapolated(problem: Problem, members: np.ndarray, k: int) -> list[tuple[str, int]]:
    """``(name, measured positions)`` of the drafters of ``members`` (``(N,)`` bool) whose
    acceptance was given for fewer than ``k`` positions."""
    out = []
    for i in np.flatnonzero(np.asarray(members, bool)):
        positions = problem.drafter(int(i)).positions
        if positions is not None and k > positions:
            out.append((problem.names[int(i)], int(positions)))
    return out


def _past_text(past: list[tuple[str, int]], k: int) -> str:
    names = ", ".join(f"{n} ({p} measured)" for n, p in past)
    return (
        f"k = {k} reaches past the positions measured for {names}: there the last measured "
        "acceptance is repeated, an assumption, not a measurement"
    )


def position_notes(
    problem: Problem, members: np.ndarray, k: np.ndarray, what: str = "front point"
) -> list[str]:
    """One note per drafter when answers (``members (P, N)`` bool and ``k (P,)``: a front's
    points, a plan's routes; ``what`` names them) use it at a ``k`` past the positions its
    acceptance was given for (:attr:`~allocator.core.problem.DrafterInfo.positions`)."""
    members = np.atleast_2d(np.asarray(members, bool))
    k = np.atleast_1d(np.asarray(k, dtype=np.int64))
    notes = []
    for i, name in enumerate(problem.names):
        positions = problem.drafter(i).positions
        if positions is None:
            continue
        past = members[:, i] & (k > positions)
        if not past.any():
            continue
        ks = sorted({int(x) for x in k[past]})
        shown = ", ".join(map(str, ks[:6])) + (", ..." if len(ks) > 6 else "")
        notes.append(
            f"{int(past.sum())} {what}(s) run {name} at k = {shown}, past the {positions} "
            f"position(s) its acceptance was measured for: there its last measured "
            "acceptance is repeated, an assumption, not a measurement (measure longer drafts, "
            f"or set search.k.max: {positions})"
        )
    return notes


def untimed_drafters(problem: Problem) -> list[str]:
    """The drafters the roofline has no drafting time for: no ``architecture`` and no
    ``serving.roofline.drafters.NAME`` (a file whose step times come from the roofline
    alone)."""
    serving = problem.serving
    if (
        serving is None
        or not serving.has_roofline
        or serving.tables
        or (serving.has_component_model)
    ):
        return []
    fitted = dict(serving.roofline).get("drafters", {}) or {}
    models = serving.drafter_models or (None,) * problem.n
    return [
        name
        for name, model in zip(problem.names, models, strict=True)
        if model is None and name not in fitted
    ]


def extrapolation_notes(problem: Problem, members: np.ndarray, k: int) -> list[str]:
    """A note for each drafter of ``members`` run at ``k`` past the positions it was
    measured at (:func:`extrapolated`), for an export of that configuration."""
    return [
        f"note: k = {k} is past the {p} position(s) measured for {n}: its "
        "acceptance there is the last measured value repeated"
        for n, p in extrapolated(problem, members, int(k))
    ]


__all__ = [
    "LIMIT_PROBE_K",
    "extrapolated",
    "extrapolation_notes",
    "limit_notes",
    "position_notes",
    "untimed_drafters",
]
