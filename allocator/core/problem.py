"""A problem as plain numpy arrays: what the solvers work on.

:class:`Problem` is built once from a validated :class:`~allocator.io.spec.ProblemSpec`
(:meth:`Problem.from_spec`) and never changes. Solvers, the model and reports read
its arrays; none of them touch pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..exceptions import InputError
from ..io.spec import COST_METRICS, MAX_K, SERVING_COST_METRICS, ProblemSpec, load_problem
from ..model.acceptance import extend_positions, position_matrix
from ..model.errors import ErrorModel, IndependentErrors, build_error_model, load_empirical
from ..model.evaluate import no_chain_closed_form
from ..model.serving import Serving


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
    serving : step times, batch sizes and price under load (:mod:`allocator.model.serving`),
        or ``None`` without a ``serving`` section.
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
    spec: ProblemSpec | None = None
    base_dir: Path | None = None

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

    # ------------------------------------------------------------------ build
    @classmethod
    def from_spec(
        cls,
        spec: ProblemSpec,
        base_dir: str | Path | None = None,
        *,
        simulation: bool = False,
        check_search: bool = True,
    ) -> Problem:
        """Build the numeric problem; refuse what this version cannot evaluate.

        ``simulation=True`` admits longest-chain pooling under correlated errors, which
        only the simulator can play (the closed form needs independence).
        ``check_search=False`` skips the checks that the search space can be searched
        (for evaluating one configuration, which ignores it).
        """
        _check_scale(spec)
        if spec.pooling == "longest-chain":
            if spec.errors.model != "independent" and not simulation:
                raise no_chain_closed_form(spec.errors.model)
            if spec.ensembles:
                raise InputError(
                    "ensembles",
                    "a measured per-position pooled acceptance means any-correct pooling; "
                    "it does not apply to longest-chain pooling",
                )
        if spec.ensembles and spec.workloads:
            raise InputError(
                "ensembles",
                "measured ensemble acceptance cannot be combined with workloads (it was "
                "measured on one traffic mix; give each workload its own problem)",
            )
        curve = spec.verifier.pass_cost_curve
        names = spec.names
        n = len(names)
        acc = position_matrix([d.acceptance for d in spec.drafters])
        total = sum(w.weight for w in spec.workloads)
        workloads = tuple(
            Workload(
                w.name,
                w.weight / total,
                position_matrix(
                    [w.acceptance.get(d.name, d.acceptance) for d in spec.drafters],
                    width=acc.shape[1],
                ),
                overrides=np.array([d.name in w.acceptance for d in spec.drafters], dtype=bool),
            )
            for w in spec.workloads
        )
        base = Path(base_dir) if base_dir is not None else None
        errors, workloads = _errors_and_workloads(spec, acc, workloads, base)
        ensembles = _ensembles(spec, acc)
        required = np.isin(names, spec.search.require)
        excluded = np.isin(names, spec.search.exclude)
        m_max = n if spec.search.m.max is None else min(spec.search.m.max, n)
        if check_search:
            _check_search(spec, required, excluded, m_max)
        return cls(
            name=spec.name,
            names=names,
            acceptance=acc,
            unit_cost=np.array([d.unit_cost for d in spec.drafters]),
            hosting_cost=np.array([d.hosting_cost for d in spec.drafters]),
            pass_cost=spec.verifier.pass_cost,
            token_cost=spec.verifier.token_cost,
            convention=spec.convention,
            drafting=spec.drafting,
            pooling=spec.pooling,
            k_min=spec.search.k.min,
            k_max=spec.search.k.max,
            m_min=spec.search.m.min,
            m_max=m_max,
            required=required,
            excluded=excluded,
            budget=spec.budget.caps(),
            cost_metric=spec.cost_metric,
            errors=errors,
            workloads=workloads,
            ensembles=ensembles,
            pass_cost_curve=None
            if curve is None
            else (np.asarray(curve.tokens, dtype=float), np.asarray(curve.cost, dtype=float)),
            serving=Serving.from_spec(spec),
            acceptance_interval=_intervals(spec),
            spec=spec,
            base_dir=base,
        )

    @classmethod
    def from_file(
        cls, path: str | Path, *, simulation: bool = False, check_search: bool = True
    ) -> Problem:
        """Read, validate and build a problem file (YAML or JSON)."""
        return cls.from_spec(
            load_problem(path),
            base_dir=Path(path).resolve().parent,
            simulation=simulation,
            check_search=check_search,
        )

    def replace(self, **changes) -> Problem:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)

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
        """Membership row ``(N,)`` for drafter names; unknown names are an ``InputError``."""
        index = {n: i for i, n in enumerate(self.names)}
        out = np.zeros(self.n, bool)
        if not drafters:
            raise InputError(field, "name at least one drafter")
        for d in drafters:
            if d not in index:
                raise InputError(field, f"unknown drafter {d!r} (known: {', '.join(self.names)})")
            if out[index[d]]:
                raise InputError(field, f"drafter {d!r} named twice")
            out[index[d]] = True
        return out


def _intervals(spec: ProblemSpec) -> np.ndarray | None:
    """The drafters' ``acceptance_interval`` as ``(N, J, 2)`` (NaN rows without one; a
    single ``[lo, hi]`` holds at every position), or ``None`` when no drafter has one.
    The spec has checked each interval's shape and order."""
    rows = [
        None if d.acceptance_interval is None else np.asarray(d.acceptance_interval, float)
        for d in spec.drafters
    ]
    if all(r is None for r in rows):
        return None
    width = max([1] + [len(r) for r in rows if r is not None and r.ndim == 2])
    out = np.full((len(rows), width, 2), np.nan)
    for i, r in enumerate(rows):
        if r is not None:  # (2,) or (J, 2) -> (width, 2), the last position repeating
            out[i] = extend_positions(r.reshape(-1, 2).T, width).T
    return out


def _check_search(
    spec: ProblemSpec, required: np.ndarray, excluded: np.ndarray, m_max: int
) -> None:
    """The search space holds at least one subset size the file allows."""
    n = len(spec.drafters)
    if spec.search.m.min > n:
        raise InputError("search.m.min", f"{spec.search.m.min} exceeds the {n} drafters given")
    n_req, n_allowed = int(required.sum()), int(n - excluded.sum())
    if n_req > m_max:
        raise InputError("search.require", f"requires {n_req} drafters but search.m.max is {m_max}")
    if n_allowed < spec.search.m.min:
        raise InputError(
            "search.exclude",
            f"leaves {n_allowed} drafters, fewer than search.m.min = {spec.search.m.min}",
        )


#: Largest throughput or cost the model may produce (far from float overflow).
MAX_MAGNITUDE = 1e300


def _check_scale(spec: ProblemSpec) -> None:
    """Refuse costs so small or large that a throughput or a cost would overflow.

    A round takes at least the cheapest verification pass and yields at most
    ``MAX_K + 1`` units, so throughput stays below ``(MAX_K + 1) / min pass``; costs
    stay below ``MAX_K`` times the sum of every per-unit cost, plus the dearest pass.
    """
    ver = spec.verifier
    curve = ver.pass_cost_curve
    field, cheapest = (
        ("verifier.pass_cost", ver.pass_cost)
        if curve is None
        else ("verifier.pass_cost_curve.cost", min(curve.cost))
    )
    if (MAX_K + 1) / cheapest > MAX_MAGNITUDE:
        raise InputError(field, f"{cheapest:g} is too small: throughput would overflow")
    n = len(spec.drafters)
    per_unit = sum(d.unit_cost for d in spec.drafters) + ver.token_cost * n
    dearest = ver.pass_cost
    if curve is not None:  # the curve's largest value, or its extrapolation to n * MAX_K
        slope = (curve.cost[-1] - curve.cost[-2]) / (curve.tokens[-1] - curve.tokens[-2])
        reach = max(n * MAX_K - curve.tokens[-1], 0.0)
        dearest = max(max(curve.cost), curve.cost[-1] + max(slope, 0.0) * reach)
    if not MAX_K * per_unit + dearest < MAX_MAGNITUDE:
        raise InputError("drafters", "costs so large that a round's time would overflow")
    if not sum(d.hosting_cost for d in spec.drafters) < MAX_MAGNITUDE:
        raise InputError("drafters", "hosting costs so large that their sum would overflow")


def _errors_and_workloads(spec, acc, workloads, base):
    """The error model, and workloads carrying their own (outcome-log) models."""
    names = spec.names
    if spec.errors.model != "empirical":
        errors = build_error_model(spec.errors, names, acc, base)
        for w in workloads:
            errors.validate(1.0 - w.acceptance, f" in workload {w.name!r}")
        return errors, workloads
    whole, parts = load_empirical(spec.errors, names, base)
    if not workloads:
        whole.check_marginals(acc, names)
        return whole, workloads
    if not parts:
        raise InputError(
            "errors.outcomes", "the problem has workloads, so the log needs a 'workload' column"
        )
    known = {w.name for w in workloads}
    extra = sorted(set(parts) - known)
    if extra:
        raise InputError("errors.outcomes", f"workload {extra[0]!r} of the log is not in workloads")
    out = []
    for w in workloads:
        if w.name not in parts:
            raise InputError("errors.outcomes", f"the log has no rows for workload {w.name!r}")
        parts[w.name].check_marginals(w.acceptance, names, f" of workload {w.name!r}")
        out.append(replace(w, errors=parts[w.name]))
    return whole, tuple(out)


def _ensembles(spec, acc) -> tuple[Ensemble, ...]:
    """Measured ensembles as masks; each must respect the Fréchet bounds of its members.

    Any-correct pooling accepts a position when some member is right, so the pooled
    acceptance lies in ``[max_i a_i, min(1, sum_i a_i)]`` at every position.
    """
    names = spec.names
    seen: set[bytes] = set()
    out = []
    for e, ens in enumerate(spec.ensembles):
        field = f"ensembles.{e}"
        mask = np.isin(names, ens.members)
        if len(set(ens.members)) != len(ens.members):
            raise InputError(f"{field}.members", "a drafter is named twice")
        key = mask.tobytes()
        if key in seen:
            raise InputError(f"{field}.members", "the same subset is measured twice")
        seen.add(key)
        a = position_matrix([ens.acceptance])[0]
        width = max(a.size, acc.shape[1])
        a_w, members = extend_positions(a, width), extend_positions(acc[mask], width)
        low, high = members.max(axis=0), np.minimum(1.0, members.sum(axis=0))
        tol = 1e-12
        for j in range(width):
            if a_w[j] < low[j] - tol:
                raise InputError(
                    f"{field}.acceptance",
                    f"{a_w[j]:.6g} at position {j + 1} is below its best member's "
                    f"{low[j]:.6g}: any-correct pooling cannot do worse (Fréchet bound)",
                )
            if a_w[j] > high[j] + tol:
                raise InputError(
                    f"{field}.acceptance",
                    f"{a_w[j]:.6g} at position {j + 1} exceeds the sum of its members' "
                    f"acceptance {high[j]:.6g} (Fréchet bound)",
                )
        out.append(Ensemble(mask, a))
    return tuple(out)
