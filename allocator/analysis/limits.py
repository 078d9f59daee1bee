"""Where the best point of a solved front sits against the search's limits.

:func:`limit_notes` says when the configuration of most throughput is at ``search.k.max``,
``search.m.max`` or ``budget.drafters``, or when a budget cap binds there: the search
stopped at a limit while a longer draft or more drafters may still pay
(docs/design.md §6, ``solve --json``'s ``notes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.budget import budget_limit
from ..exceptions import NotModelledError
from ..model.evaluate import evaluate_configs

if TYPE_CHECKING:
    from ..core.problem import Problem
    from ..core.result import SolveResult

#: The best point's ``k + 1`` is evaluated (to say whether a longer draft pays) only up to
#: this draft length: beyond it one evaluation would allocate ``k``-long position arrays.
LIMIT_PROBE_K = 100_000


def limit_notes(problem: Problem, result: SolveResult) -> list[str]:
    """Notes when the front's best-throughput point sits at a limit of the search.

    The limits are ``search.k.max``, ``search.m.max`` (and ``budget.drafters``) and any
    budget cap that the same drafters one unit further (``k + 1``) would break. The
    same drafters at ``k + 1`` are evaluated by the model (one configuration) and the
    note gives their throughput (accepted units per verifier-unit of time) when higher:
    the search stopped at a limit while a longer draft would still pay. Returns the
    notes (possibly none).
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
    broken = [n for n, cap in problem.budget.items() if pays and longer[n] > budget_limit(cap)]
    detail = (
        f"the same drafters at k={k + 1} give throughput {longer['throughput']:.6f} "
        f"({longer['throughput'] / best - 1:+.2%})"
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
    if m == m_cap and m < n_free:
        which = "search.m.max" if m == m_max else "budget.drafters"
        notes.append(
            f"the best point ({label}) pools m = {m} = {which} drafters: pooling more may "
            f"pay; raise {which} to search further"
        )
    return notes


__all__ = ["LIMIT_PROBE_K", "limit_notes"]
