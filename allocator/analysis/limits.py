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

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.budget import budget_limit
from ..exceptions import NotModelledError
from ..model.metrics import evaluate_configs
from ..model.under_load import step_grid

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
    """The drafters a roofline file cannot time: no ``architecture``, no
    ``serving.roofline.drafters.NAME`` and no other drafting time, so that no step with
    them has a step time (asked at batch 1, ``k = 1``)."""
    serving = problem.serving
    if serving is None or not serving.has_roofline or serving.tables:
        return []
    fitted = dict(serving.roofline).get("drafters", {}) or {}
    models = serving.drafter_models or (None,) * problem.n
    alone = np.eye(problem.n, dtype=bool)
    untimed = np.isnan(step_grid(problem, alone, np.array([1]), 1.0)[:, 0])
    return [
        name
        for i, (name, model) in enumerate(zip(problem.names, models, strict=True))
        if model is None and name not in fitted and untimed[i]
    ]


#: A fitted efficiency this close to its limit of 1 is taken to sit at the bound.
AT_BOUND = 1e-3
#: An assumption the header of a bundled file labels: ``ASSUMPTION A1 - verification cost:``.
_LABELLED = re.compile(r"ASSUMPTION\s+(A\d+)\s*-\s*([^:]+):")


def provenance_notes(problem: Problem) -> list[str]:
    """Where an answer's step times come from, when it is not a measurement: a file whose
    step times come from the specs alone (the roofline, not calibrated) gives an upper
    bound on speed; a calibrated file whose fitted efficiency sits at its limit of 1 (the
    fit pressed against the bound: the measurements ask for more speed than the peaks)."""
    serving = problem.serving
    if serving is None or not serving.has_roofline:
        return []
    factors = dict(serving.roofline)
    if serving.calibrated_from is None:
        if serving.tables or serving.has_component_model:
            return []
        return [
            "specs only (uncalibrated): step times from the GPU's peaks and the model's "
            "architecture at serving.roofline's factors (every peak reached unless fitted), "
            "an UPPER BOUND ON SPEED, not a prediction; allocator calibrate fits them to "
            "measured runs (allocator profile-plan lists the runs)"
        ]
    out = []
    for name in ("mem_eff", "compute_eff"):
        value = factors.get(name)
        if value is not None and 1.0 - float(value) < AT_BOUND:
            out.append(
                f"serving.roofline.{name} = {float(value):.6g} sits at its limit of 1: the "
                "fit pressed against the bound (the measured runs are faster than the "
                "peaks allow, or the form misses a term), so the step times there rest on "
                "the bound, not on the fit"
            )
    return out


def header_notes(path: str | Path | None) -> list[str]:
    """A note when the header of the problem file (its leading ``#`` comment lines, where
    the bundled files state their sources) says numbers are derived under assumptions:
    the labelled ones (``ASSUMPTION A1 - verification cost:``) by name, else their count."""
    if path is None:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            header = []
            for line in f:
                if not line.lstrip().startswith("#"):
                    break
                header.append(line.lstrip()[1:].strip())
    except OSError:
        return []
    text = " ".join(header)
    count = text.count("ASSUMPTION")
    if not count:
        return []
    labelled = [f"{a} {b.strip()}" for a, b in _LABELLED.findall(text)]
    named = ", ".join(labelled) if labelled else f"{count} labelled ASSUMPTION"
    return [
        f"numbers derived under assumptions the header of {path} states ({named}): not "
        "measurements; read them before trusting the answer (allocator calibrate replaces "
        "them with measured runs)"
    ]


def acceptance_notes(problem: Problem, members: np.ndarray, k: int) -> list[str]:
    """One note per drafter of ``members`` run at a ``k`` (``k >= 1``) its acceptance
    does not measure position by position: past the positions given, the last value
    repeats; a single value (no positions) stands for every position."""
    if k < 1:
        return []
    out = []
    for i in np.flatnonzero(np.asarray(members, bool)):
        name, positions = problem.names[int(i)], problem.drafter(int(i)).positions
        if positions is None:
            out.append(
                f"{name}'s acceptance is one value for every position, repeated at each of "
                f"the k = {k} positions: nothing was measured position by position"
            )
        elif k > positions:
            out.append(
                f"{name} runs at k = {k}, past the {positions} position(s) its acceptance was "
                "measured for: there its last measured acceptance is repeated, an "
                "assumption, not a measurement"
            )
    return out


def lengths_note(fixed: bool, prompt: int, output: int) -> list[str]:
    """A note when every request has the same lengths (no trace): real traffic varies."""
    if not fixed:
        return []
    return [
        f"lengths taken as fixed: every request {prompt:,} prompt and {output:,} output "
        "tokens (real traffic varies; --trace replays measured lengths)"
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
    "AT_BOUND",
    "acceptance_notes",
    "LIMIT_PROBE_K",
    "extrapolated",
    "extrapolation_notes",
    "header_notes",
    "lengths_note",
    "limit_notes",
    "position_notes",
    "provenance_notes",
    "untimed_drafters",
]
