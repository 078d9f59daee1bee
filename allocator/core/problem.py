"""A problem as plain numpy arrays: what the solvers work on.

:class:`Problem` is built once from a validated problem file
(:func:`allocator.io.build.problem_from_spec`, the only code that reads the pydantic
spec) and never changes. Solvers, the model and reports read its arrays and the
plain entities here; nothing in it refers to the file it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..exceptions import ParameterError
from .errors import ErrorModel, IndependentErrors
from .memory import MemoryModel
from .serving import Serving

#: The cost metrics of the model (docs/design.md §2.5), in verifier-units or the file's own.
COST_METRICS: tuple[str, ...] = (
    "draft_cost_per_round",
    "draft_cost_per_token",
    "hosting_cost",
    "drafters",
)
#: Cost metrics that exist only under load (a ``serving`` section and a batch size):
#: ``cost_per_mtok``, $ per million generated tokens.
SERVING_COST_METRICS: tuple[str, ...] = ("cost_per_mtok",)
#: Longest draft length searched or evaluated (every array over k stays small).
MAX_K = 100_000


@dataclass(frozen=True, eq=False)
class DrafterInfo:
    """What a drafter is, beyond its statistics: how engines serve it, and its token-tree
    statistics.

    name : the drafter's name.
    method : its serving method (:data:`allocator.core.methods.METHODS`), or ``None``.
    model : the engine's model name or path, or ``None``.
    prompt_lookup_min, prompt_lookup_max : ``ngram`` settings, or ``None``.
    acceptance_by_rank : ``(L, W)`` rank acceptance ``p_r(depth)`` (docs/design.md §8.10;
        row ``L - 1`` repeats for deeper levels), or ``None``.
    acceptance_by_rank_interval : ``(L, W, 2)`` its 95% intervals, or ``None``.
    positions : how many positions its acceptance was given for (the length of its
        ``acceptance`` list, the shortest where workloads give their own lists); at later
        positions the last value repeats, so a ``k`` beyond it rests on that repetition.
        ``None``: one value for every position (nothing measured by position).
    """

    name: str
    method: str | None = None
    model: str | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    acceptance_by_rank: np.ndarray | None = None
    acceptance_by_rank_interval: np.ndarray | None = None
    positions: int | None = None


@dataclass(frozen=True, eq=False)
class Workload:
    """One class of traffic: its share of generated units and its own acceptance.

    ``acceptance`` is ``(N, J)``: the problem's acceptance with this workload's
    per-drafter overrides applied. ``errors``: this workload's own error model (an
    outcome log's rows of this workload), or ``None`` for the problem's.
    ``overrides``: ``(N,)`` bool, the drafters whose acceptance this workload sets
    itself (the others take the problem's, and are resampled with it); ``None``: none.
    """

    name: str
    weight: float
    acceptance: np.ndarray
    errors: ErrorModel | None = None
    overrides: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Ensemble:
    """A measured ensemble: ``members (N,)`` bool and its pooled acceptance ``(J,)``."""

    members: np.ndarray
    acceptance: np.ndarray


@dataclass(frozen=True, eq=False)
class Problem:
    """Drafters, verifier, search space and budget of one planning problem.

    Attributes
    ----------
    names : drafter names, length ``N``.
    acceptance : ``(N, J)`` per-position acceptance in (0, 1]; column ``J-1`` repeats.
    unit_cost : ``(N,)`` draft cost per unit, verifier-units.
    hosting_cost : ``(N,)`` cost of hosting each drafter (any unit: memory, GPUs, $/h).
    pass_cost, token_cost : verification pass cost and its per-verified-token part.
    convention : ``"paper"`` or ``"bonus"``; drafting: ``"sequential"`` or ``"parallel"``.
    k_min, k_max, m_min, m_max : search ranges (inclusive).
    required, excluded : ``(N,)`` bool masks from ``search.require`` / ``search.exclude``.
    budget : caps by metric name; cost_metric : the front's cost axis.
    errors : the error model giving P(all members fail).
    workloads : traffic mixture (weights normalised to sum to 1); empty for one class.
    ensembles : measured pooled acceptance of named subsets (overrides the model).
    pass_cost_curve : ``(tokens (P,), cost (P,))`` measured verification cost against
        verified tokens ``m * k``, or ``None`` for ``pass_cost + token_cost * m * k``.
    serving : step times, batch sizes and price under load (:mod:`allocator.model.under_load`),
        or ``None`` without a ``serving`` section.
    memory : one replica's KV-cache memory (:class:`~allocator.core.memory.MemoryModel`),
        or ``None`` without ``serving.memory``.
    drafters : per drafter, what it is (:class:`DrafterInfo`: method, model, rank
        acceptance); empty when the problem was built without them.
    acceptance_interval : ``(N, J', 2)`` the 95% interval ``[lo, hi]`` of each drafter's
        acceptance by position (column ``J'-1`` repeats; NaN for a drafter without one),
        what ``solve --samples`` draws from; ``None`` when no drafter has one.
    """

    name: str
    names: tuple[str, ...]
    acceptance: np.ndarray
    unit_cost: np.ndarray
    hosting_cost: np.ndarray
    pass_cost: float = 1.0
    token_cost: float = 0.0
    convention: str = "paper"
    drafting: str = "sequential"
    pooling: str = "any-correct"
    k_min: int = 1
    k_max: int = 64
    m_min: int = 1
    m_max: int = None  # type: ignore[assignment]  # None: every drafter (__post_init__)
    required: np.ndarray = None  # type: ignore[assignment]  # None: none (__post_init__)
    excluded: np.ndarray = None  # type: ignore[assignment]  # None: none (__post_init__)
    budget: dict[str, float] = field(default_factory=dict)
    cost_metric: str = "draft_cost_per_round"
    errors: ErrorModel = field(default_factory=IndependentErrors)
    workloads: tuple[Workload, ...] = ()
    ensembles: tuple[Ensemble, ...] = ()
    pass_cost_curve: tuple[np.ndarray, np.ndarray] | None = None
    serving: Serving | None = None
    acceptance_interval: np.ndarray | None = None
    memory: MemoryModel | None = None
    drafters: tuple[DrafterInfo, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.names)
        set_ = object.__setattr__
        set_(self, "acceptance", np.atleast_2d(np.asarray(self.acceptance, dtype=float)))
        set_(self, "unit_cost", np.asarray(self.unit_cost, dtype=float).reshape(n))
        set_(self, "hosting_cost", np.asarray(self.hosting_cost, dtype=float).reshape(n))
        if self.m_max is None or self.m_max > n:
            set_(self, "m_max", n)
        for mask in ("required", "excluded"):
            v = getattr(self, mask)
            set_(self, mask, np.zeros(n, bool) if v is None else np.asarray(v, dtype=bool))
        if self.acceptance.shape[0] != n:
            raise ValueError("acceptance must have one row per drafter")
        if self.acceptance_interval is not None:
            iv = np.asarray(self.acceptance_interval, dtype=float)
            set_(self, "acceptance_interval", iv)
            if iv.ndim != 3 or iv.shape[0] != n or iv.shape[2] != 2:
                raise ValueError("acceptance_interval must be (N, J, 2)")
        if self.cost_metric not in COST_METRICS + SERVING_COST_METRICS:
            raise ValueError(f"unknown cost metric {self.cost_metric!r}")

    def replace(self, **changes) -> Problem:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)

    def with_budget(self, budget: Mapping[str, float] | None) -> Problem:
        """A copy with the caps of ``budget`` replacing its own (none: as it is)."""
        if not budget:
            return self
        return replace(self, budget={**self.budget, **dict(budget)})

    def with_errors(self, errors: ErrorModel) -> Problem:
        """A copy under the error model ``errors`` everywhere: workloads' own models
        (their rows of an outcome log) give way to it too."""
        workloads = tuple(replace(w, errors=None) for w in self.workloads)
        return replace(self, errors=errors, workloads=workloads)

    # ------------------------------------------------------------------ views
    def workload_view(self, index: int) -> Problem:
        """The single-class problem of workload ``index``: its acceptance, no mixture."""
        w = self.workloads[index]
        errors = self.errors if w.errors is None else w.errors
        return replace(
            self,
            name=f"{self.name}/{w.name}",
            acceptance=w.acceptance,
            workloads=(),
            errors=errors,
        )

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def k_values(self) -> np.ndarray:
        """Draft lengths searched: ``(K,)`` int."""
        return np.arange(self.k_min, self.k_max + 1)

    def mask(self, drafters: list[str] | tuple[str, ...], field: str = "drafters") -> np.ndarray:
        """Membership row ``(N,)`` for drafter names (the parameter ``field``); an unknown or
        repeated name is a :class:`~allocator.exceptions.ParameterError`."""
        index = {n: i for i, n in enumerate(self.names)}
        out = np.zeros(self.n, bool)
        if not drafters:
            raise ParameterError(field, "name at least one drafter")
        for d in drafters:
            if d not in index:
                raise ParameterError(
                    field, f"unknown drafter {d!r} (known: {', '.join(self.names)})"
                )
            if out[index[d]]:
                raise ParameterError(field, f"drafter {d!r} named twice")
            out[index[d]] = True
        return out

    def drafter(self, index: int) -> DrafterInfo:
        """What drafter ``index`` is (a bare :class:`DrafterInfo` of its name when the
        problem was built without drafter information)."""
        if self.drafters:
            return self.drafters[index]
        return DrafterInfo(self.names[index])

    @property
    def drafter_map(self) -> dict[str, DrafterInfo]:
        """Every drafter by name (what engine exports look up)."""
        return {n: self.drafter(i) for i, n in enumerate(self.names)}


__all__ = [
    "COST_METRICS",
    "MAX_K",
    "SERVING_COST_METRICS",
    "DrafterInfo",
    "Ensemble",
    "Problem",
    "Workload",
]
