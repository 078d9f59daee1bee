"""Multi-objective Optuna search, for spaces exact enumeration cannot reach.

Each trial is one configuration: ``k`` and one 0/1 choice per free drafter.
Throughput is maximised and the cost metric minimised; the budget and the range of
``m`` are constraints (``trial.set_constraint``, feasible at ``<= 0``), so NSGA-II
ranks infeasible trials behind feasible ones. Before the search the study is
seeded with the exact front of the same problem under independent errors, when that
front is cheap to get: the seed points are evaluated as NSGA-II's first generations
(they do not count against ``trials``) and stored in batches; the study's ``seeded``
flag is written only once every seed point is stored, and a run that finds the flag
missing stores just the seed points the study lacks, so a worker killed while seeding
leaves a study the next run completes. ``timeout`` is checked before every batch,
seeding included. Trials are asked and told in batches so the model evaluates a whole
batch at once. The front returned is built from every finished trial in the study,
re-evaluated by the model; it is never claimed complete (``exact: false``).

Only Optuna's public API is used: trials are written to storage whole with
``Study.add_trials`` and told to the sampler with ``Study.tell``.
"""

from __future__ import annotations

import hashlib
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import validate
from .._lazy import lazy_module
from ..core.budget import budget_limit, feasible_mask, infeasible_error
from ..core.pareto import front_order, nondominated
from ..core.result import Front, SolveResult
from ..core.space import count_subsets, size_allowed
from ..exceptions import InfeasibleError, InputError, NotModelledError, ParameterError
from ..model.errors import IndependentErrors
from ..model.metrics import METRICS, evaluate_configs
from .base import Strategy
from .dominance import pruning_blocker
from .exact import ExactStrategy
from .knapsack import KnapsackStrategy, knapsack_blocker
from .storage import database_error, mask_url, open_storage, reason

if TYPE_CHECKING:
    import optuna
    from optuna import Study
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, Trial

    from ..core.problem import Problem
else:
    optuna = lazy_module("optuna")

#: Seed the study from the independence front only when exact search of it is this small.
SEED_MAX_SUBSETS = 2_000_000
#: At most this many seed trials are enqueued.
SEED_MAX_TRIALS = 400
#: Objectives: throughput up, cost down.
DIRECTIONS: list[Any] = ["maximize", "minimize"]
#: User attributes of stored trials: the seed points, and the run that wrote a trial.
SEED_ATTR = "seed"
WORKER_ATTR = "worker"
#: Study user attribute written once every seed point is stored.
SEEDED_ATTR = "seeded"
#: User attribute of the trial a worker takes from storage only for its number
#: (:meth:`OptunaStrategy.worker_number`); told pruned, it is never a finished trial.
TICKET_ATTR = "worker_ticket"
#: Optuna's samplers seed numpy's legacy ``RandomState``, which takes ``0 .. 2**32 - 1``.
SAMPLER_SEEDS = 2**32


def sampler_seed(seed: int | None, worker: int | None = None) -> int | None:
    """The seed of Optuna's sampler from ``--seed`` (``0 .. 2**63 - 1``) and a worker number.

    Optuna's samplers take ``0 .. 2**32 - 1`` (numpy's legacy ``RandomState``). A seed in
    that range with no worker (an in-memory study) or worker 0 (the first of a stored
    study) is used as it is; any other pair is folded to 32 bits by SHA-256 of
    ``"<seed>:<worker>"``, so the same ``--seed`` and worker always give the same sampler,
    and two workers of one study sample apart. ``None`` stays ``None`` (Optuna's own
    random seed).
    """
    if seed is None:
        return None
    seed = validate.seed(seed)
    if seed < SAMPLER_SEEDS and not worker:
        return seed
    digest = hashlib.sha256(f"{seed}:{int(worker or 0)}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class DeadlinePassed(Exception):
    """``timeout`` ran out (raised between batches only)."""


def problem_fingerprint(problem: Problem) -> str:
    """A short hash of what a trial's meaning depends on (names, search space)."""
    h = hashlib.sha256()
    h.update("\0".join(problem.names).encode())
    for a in (problem.required, problem.excluded):
        h.update(np.asarray(a, bool).tobytes())
    h.update(f"{problem.k_min},{problem.k_max},{problem.m_min},{problem.m_max}".encode())
    h.update(problem.cost_metric.encode())
    return h.hexdigest()[:16]


class SearchSpace:
    """The mapping between trial parameters and configurations of a problem.

    Two encodings: one 0/1 parameter per free drafter (``d:<name>``), or, when
    ``search.m.max`` leaves room for fewer than half the free drafters, ``L`` slots
    (``s0 .. s<L-1>``), each a free drafter's name or ``-``, so that every trial
    respects the cap (a drafter named twice counts once).
    """

    def __init__(self, problem: Problem):
        self.problem = problem
        self.free = np.flatnonzero(~problem.required & ~problem.excluded)
        room = problem.m_max - int(problem.required.sum())
        self.slots = room if 2 * room < self.free.size else 0

    def distributions(self) -> dict[str, BaseDistribution]:
        dists: dict[str, BaseDistribution] = {
            "k": optuna.distributions.IntDistribution(self.problem.k_min, self.problem.k_max)
        }
        if self.slots:
            choices = ("-",) + tuple(self.problem.names[i] for i in self.free)
            for s in range(self.slots):
                dists[f"s{s}"] = optuna.distributions.CategoricalDistribution(choices)
            return dists
        for i in self.free:
            dists[f"d:{self.problem.names[i]}"] = optuna.distributions.CategoricalDistribution(
                (0, 1)
            )
        return dists

    def params(self, members: np.ndarray, k: int) -> dict[str, Any]:
        """Trial parameters of one configuration: membership ``(N,)`` bool and ``k``."""
        out: dict[str, Any] = {"k": int(k)}
        if self.slots:
            chosen = [self.problem.names[i] for i in self.free if members[i]]
            chosen += ["-"] * (self.slots - len(chosen))
            out.update({f"s{s}": name for s, name in enumerate(chosen[: self.slots])})
            return out
        for i in self.free:
            out[f"d:{self.problem.names[i]}"] = int(members[i])
        return out

    def configs(self, params: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Membership ``(B, N)`` and ``k`` ``(B,)`` of trials' parameters."""
        members = np.tile(self.problem.required, (len(params), 1))
        if self.slots:
            index = {n: i for i, n in enumerate(self.problem.names)}
            for b, p in enumerate(params):
                for s in range(self.slots):
                    if p[f"s{s}"] != "-":
                        members[b, index[p[f"s{s}"]]] = True
        else:
            names = [f"d:{self.problem.names[i]}" for i in self.free]
            for b, p in enumerate(params):
                members[b, self.free] = [bool(p[n]) for n in names]
        return members, np.array([p["k"] for p in params], dtype=np.int64)


def evaluate_batch(problem: Problem, members: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    """Model metrics, each ``(B,)``, of configurations: membership ``(B, N)``, ``k`` ``(B,)``.

    Only subsets whose size is within ``search.m`` are evaluated; the others (the
    model may not even evaluate them) get zeros except ``drafters``, their size,
    which the m-range constraint then rejects.
    """
    out = {name: np.zeros(len(k)) for name in METRICS}
    m = members.sum(axis=1)
    out["drafters"] = m.astype(float)
    ok = size_allowed(problem, m)
    if ok.any():
        met = evaluate_configs(problem, members[ok], k[ok])
        for name in METRICS:
            out[name][ok] = met[name]
    return out


def constraint_values(problem: Problem, metrics: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Constraint values (feasible at ``<= 0``) of a batch: budget caps and the range of m.

    ``metrics`` maps names to ``(B,)`` arrays; so does the result, keyed ``budget.<metric>``
    (in that metric's units), ``search.m.min`` and ``search.m.max`` (in drafters).
    """
    cons: dict[str, np.ndarray] = {}
    for name, cap in problem.budget.items():
        cons[f"budget.{name}"] = metrics[name] - budget_limit(cap)
    m = metrics["drafters"]
    cons["search.m.min"] = max(problem.m_min, 1) - m
    cons["search.m.max"] = m - problem.m_max
    return cons


class OptunaStrategy(Strategy):
    """NSGA-II over configurations, in an Optuna study that may be stored and shared.

    Parameters
    ----------
    trials : int or None
        Trials this call runs (the study may already hold others). ``None`` with no
        ``timeout`` means 1000.
    timeout : float or None
        Stop asking for new batches after this many seconds.
    seed : int or None
        ``0 .. 2**63 - 1``; the sampler's seed is :func:`sampler_seed` of it and the
        worker's number. With in-memory storage and ``trials`` (no timeout) the result
        is reproducible.
    storage : str or None
        Storage URL (see :mod:`allocator.search.storage`); ``None`` is in-memory.
    study : str or None
        Study name; default ``allocator-<problem name>``. An existing study resumes.
    population : int
        NSGA-II population size, also the batch size.
    seed_front : bool
        Enqueue the independence front before the first trial.
    progress : callable ``(done, total, front_size)`` or None
    """

    name = "optuna"

    def __init__(
        self,
        trials: int | None = None,
        timeout: float | None = None,
        seed: int | None = None,
        storage: str | None = None,
        study: str | None = None,
        population: int = 50,
        seed_front: bool = True,
        progress: Callable[[int, int | None, int | None], None] | None = None,
    ):
        self.trials = trials
        self.timeout = timeout
        self.seed = seed
        self.storage = storage
        self.study = study
        self.population = population
        self.seed_front = seed_front
        self.progress = progress

    # ------------------------------------------------------------------ study
    def open_study(self, problem: Problem) -> Study | None:
        """The shared study in storage (``None`` when in memory), created or loaded.

        A study made for another problem is refused.
        """
        storage = open_storage(self.storage)
        if storage is None:
            return None
        name = self.study or f"allocator-{problem.name}"
        try:
            # the stored study never samples (the in-memory one does): the cheapest sampler
            study = optuna.create_study(
                storage=storage,
                study_name=name,
                directions=DIRECTIONS,
                load_if_exists=True,
                sampler=optuna.samplers.RandomSampler(seed=0),
            )
        except ValueError as exc:
            raise ParameterError("study", f"{name!r} in {mask_url(self.storage)}: {exc}") from None
        self.check_fingerprint(problem, study)
        return study

    @staticmethod
    def worker_number(study: Study) -> int:
        """A number no other worker of the stored ``study`` holds: the number of a trial
        created in storage for it (the database makes trial numbers unique, however many
        workers start at once), told pruned at once so that it never counts as finished
        and no sampler learns from it."""
        ticket = study.ask()
        ticket.set_user_attr(TICKET_ATTR, True)
        study.tell(ticket, state=optuna.trial.TrialState.PRUNED)
        return int(ticket.number)

    def check_fingerprint(self, problem: Problem, study: Study) -> None:
        fp = problem_fingerprint(problem)
        have = study.user_attrs.get("problem_fingerprint")
        if have is None:
            study.set_user_attr("problem_fingerprint", fp)
            study.set_user_attr("problem", problem.name)
            study.set_user_attr("cost_metric", problem.cost_metric)
        elif have != fp:
            raise ParameterError(
                "study",
                f"study {study.study_name!r} in {mask_url(self.storage)} was made for another "
                f"problem ({study.user_attrs.get('problem')!r}); choose another --study name",
            )

    def seed_points(self, problem: Problem, space: SearchSpace) -> list[dict[str, Any]] | str:
        """Trial parameters of the seed points (at most ``SEED_MAX_TRIALS``, spread along
        the independence front), or a note saying why there are none."""
        indep = problem.with_errors(IndependentErrors())
        try:
            n_sub = count_subsets(indep)
            if knapsack_blocker(indep) is None:
                res = KnapsackStrategy().solve(indep)
            elif n_sub <= (SEED_MAX_SUBSETS if pruning_blocker(indep) is None else 50_000):
                res = ExactStrategy().solve(indep)
            else:
                return "no seed: the independence front is too large to enumerate"
        except (InfeasibleError, NotModelledError) as exc:
            return f"no seed: {exc.message}"
        front = res.front
        idx = np.unique(
            np.linspace(0, len(front) - 1, min(len(front), SEED_MAX_TRIALS)).astype(int)
        )
        return [space.params(front.members[i], front.k[i]) for i in idx]

    def seed_study(
        self,
        problem: Problem,
        record: Study,
        runner: BatchRunner,
        deadline: float | None,
    ) -> str:
        """Evaluate and store the seed points ``record`` lacks; then flag it seeded.

        The flag is written after the last seed point is stored, so a run killed
        before that leaves it unset and the next run stores only what is missing
        (seed points are recognised by their parameters). Raises
        :class:`DeadlinePassed` when ``deadline`` (``time.perf_counter()``) passes
        between batches.
        """
        if not self.seed_front:
            return "study not seeded"
        if record.user_attrs.get(SEEDED_ATTR):
            return "study resumed"
        points = self.seed_points(problem, runner.space)
        if isinstance(points, str):
            record.set_user_attr(SEEDED_ATTR, True)
            return points

        stored = {
            _param_key(t.params)
            for t in record.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get(SEED_ATTR)
        }
        missing = [p for p in points if _param_key(p) not in stored]
        for start in range(0, len(missing), self.population):
            if deadline is not None and time.perf_counter() >= deadline:
                raise DeadlinePassed(
                    f"seeding stopped by --timeout: {len(points) - len(missing) + start} of "
                    f"{len(points)} points of the independence front stored"
                )
            runner.run(missing[start : start + self.population], deadline, seed=True)
        record.set_user_attr(SEEDED_ATTR, True)
        if len(missing) < len(points):
            return (
                f"seeded with {len(points)} points of the independence front "
                f"({len(points) - len(missing)} stored by an earlier run)"
            )
        return f"seeded with {len(points)} points of the independence front"

    # ------------------------------------------------------------------ solve
    def solve(self, problem: Problem) -> SolveResult:
        self.check(problem)
        t0 = time.perf_counter()
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return self._solve(problem, t0)
        except InputError:
            raise
        except Exception as exc:
            if database_error(exc) is None:
                raise
            raise ParameterError(
                "storage",
                f"{mask_url(self.storage)}: the database failed mid-run: "
                f"{reason(exc, self.storage)}",
            ) from None
        finally:
            optuna.logging.set_verbosity(verbosity)

    def _solve(self, problem: Problem, t0: float) -> SolveResult:
        deadline = None if self.timeout is None else t0 + self.timeout
        space = SearchSpace(problem)
        shared = self.open_study(problem)
        # workers of one stored study get different samplers, each from --seed and its number
        worker = None if shared is None else self.worker_number(shared)
        sampler = optuna.samplers.NSGAIISampler(
            population_size=self.population, seed=sampler_seed(self.seed, worker)
        )
        local = optuna.create_study(
            sampler=sampler,
            directions=DIRECTIONS,
            study_name=self.study or f"allocator-{problem.name}",
        )
        mirror = StudyMirror(shared, local)
        mirror.pull()
        if shared is None:
            self.check_fingerprint(problem, local)
        trials = self.trials if (self.trials is not None or self.timeout is not None) else 1000
        runner = BatchRunner(problem, space, local, mirror, self.progress, trials)
        done = 0
        seed_note = ""
        try:
            seed_note = self.seed_study(problem, shared or local, runner, deadline)
            while trials is None or done < trials:
                if deadline is not None and time.perf_counter() >= deadline:
                    break
                size = self.population if trials is None else min(self.population, trials - done)
                runner.run([None] * size, deadline)
                done += size
        except DeadlinePassed as stop:
            unfinished = "seeding unfinished" + (
                "; " if shared is None else " (the next run completes it); "
            )
            seed_note = f"{seed_note}; {stop}" if seed_note else f"{unfinished}{stop}"
        front, finished = study_front(problem, shared or local, space)
        notes = [
            f"optuna NSGA-II, study {(shared or local).study_name!r} ({mask_url(self.storage)}): "
            f"{runner.ran} trials run now, {finished} finished in the study; {seed_note}"
        ]
        return self.result(problem, front, finished, t0, notes, exact=False)


def _param_key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable form of trial parameters."""
    return tuple(sorted((k, v) for k, v in params.items()))


class BatchRunner:
    """Asks a batch of trials of the in-memory study, evaluates it at once, tells it and
    stores it (:class:`StudyMirror`); reports ``progress(trials run, trials, front size)``
    after every batch, seed batches included."""

    def __init__(
        self,
        problem: Problem,
        space: SearchSpace,
        local: Study,
        mirror: StudyMirror,
        progress: Callable[[int, int | None, int | None], None] | None = None,
        total: int | None = None,
    ):
        self.problem = problem
        self.space = space
        self.local = local
        self.mirror = mirror
        self.dists = space.distributions()
        self.best: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
        self.front_size = 0
        self.ran = 0  # search trials (not seed points) run and, with storage, stored
        self.progress = progress
        self.total = total

    def run(
        self, fixed: Sequence[dict[str, Any] | None], deadline: float | None, seed: bool = False
    ) -> None:
        """One batch: ``fixed`` holds, per trial, parameters to evaluate (enqueued) or
        ``None`` for the sampler's choice. Storing stops at ``deadline``
        (:class:`DeadlinePassed`)."""
        problem = self.problem
        for params in fixed:
            if params is not None:
                self.local.enqueue_trial(params)
        batch: list[Trial] = [self.local.ask(self.dists) for _ in fixed]
        members, k = self.space.configs([t.params for t in batch])
        met = evaluate_batch(problem, members, k)
        cons = constraint_values(problem, met)
        told: list[FrozenTrial] = []
        for b, t in enumerate(batch):
            for key, v in cons.items():
                t.set_constraint(key, float(v[b]))
            if seed:
                t.set_user_attr(SEED_ATTR, True)
            self.mirror.mark(t)
            values = [float(met["throughput"][b]), float(met[problem.cost_metric][b])]
            told.append(self.local.tell(t, values))
        try:
            self.mirror.push(told, deadline)
        finally:
            if not seed:
                self.ran += self.mirror.stored
        self.mirror.pull()
        ok = np.all([v <= 0 for v in cons.values()], axis=0)
        c = np.concatenate([self.best[0], met[problem.cost_metric][ok]])
        th = np.concatenate([self.best[1], met["throughput"][ok]])
        keep = front_order(c, th)
        self.best = (c[keep], th[keep])
        self.front_size = int(keep.size)
        if self.progress is not None:
            self.progress(self.ran, self.total, self.front_size)


class StudyMirror:
    """Keeps an in-memory study (where the sampler runs) in step with a stored one.

    Optuna writes a stored trial one parameter per transaction; asking and telling
    in memory and writing each finished trial whole (``Study.add_trials``: one
    transaction per trial) makes stored studies usable at 50+ parameters. Each
    finished trial reaches storage right after its batch, so a killed worker loses at
    most the batch it was evaluating, never a trial the study recorded as finished,
    and leaves no trial stuck running. Trials other workers finish are pulled into
    memory after every batch, so all workers' samplers see the whole study; this
    run's own trials carry its ``worker`` token and are not pulled back.
    """

    def __init__(self, shared: Study | None, local: Study):
        self.shared = shared
        self.local = local
        self.token = uuid.uuid4().hex
        self.seen: set[int] = set()  # numbers of stored trials already considered
        self.stored = 0  # trials the last push wrote

    def mark(self, trial: Trial) -> None:
        """Tag a trial of this run before it is told (stored studies only)."""
        if self.shared is not None:
            trial.set_user_attr(WORKER_ATTR, self.token)

    def pull(self) -> None:
        """Copy finished stored trials of other runs into the in-memory study."""
        if self.shared is None:
            return

        new = [
            t
            for t in self.shared.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)
            )
            if t.number not in self.seen
        ]
        self.seen.update(t.number for t in new)
        self.local.add_trials([t for t in new if t.user_attrs.get(WORKER_ATTR) != self.token])

    def push(self, trials: list[FrozenTrial], deadline: float | None = None) -> None:
        """Write finished in-memory trials to storage, one transaction each.

        A stored trial costs a transaction per parameter in Optuna's storage (about
        0.1 s at 100 parameters in SQLite), so the deadline (``time.perf_counter()``)
        is checked between trials; past it, the rest are not stored and
        :class:`DeadlinePassed` says how many.
        """
        self.stored = len(trials)
        if self.shared is None:
            return
        for i, trial in enumerate(trials):
            self.stored = i
            if deadline is not None and time.perf_counter() >= deadline:
                raise DeadlinePassed(
                    f"--timeout reached while storing: {len(trials) - i} evaluated trials of "
                    "the last batch not stored"
                )
            self.shared.add_trial(trial)
        self.stored = len(trials)


def stored_candidates(done: Sequence[FrozenTrial]) -> np.ndarray:
    """Indices of finished trials that can be on the front, judged by their stored values.

    The trials' values and constraints came from the same model, so only the feasible
    trials no other feasible trial strictly dominates need re-evaluating (identical
    points are all kept). When some trial lacks constraints (not written by this
    strategy) every trial is a candidate.
    """
    cons = [t.constraints for t in done]
    if any(not c for c in cons):
        return np.arange(len(done))
    feasible = np.flatnonzero([all(v <= 0 for v in c.values()) for c in cons])
    if feasible.size == 0:
        return np.arange(len(done))  # let the model say which cap binds
    thr = np.array([done[int(i)].values[0] for i in feasible])
    cost = np.array([done[int(i)].values[1] for i in feasible])
    return feasible[nondominated(cost, thr)]


def study_front(problem: Problem, study: Study, space: SearchSpace) -> tuple[Front, int]:
    """The front of every finished trial of ``study``, re-evaluated by the model.

    Returns the front and the number of finished trials in the study.
    """
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not done:
        raise ParameterError(
            "trials", "no trial finished; give more --trials or a longer --timeout"
        )
    candidates = stored_candidates(done)
    members, k = space.configs([done[i].params for i in candidates])
    # one configuration may have been tried many times: evaluate it once
    key = np.column_stack([members, k])
    _, first = np.unique(key, axis=0, return_index=True)
    members, k = members[first], k[first]
    some = size_allowed(problem, members.sum(axis=1))
    members, k = members[some], k[some]
    if members.shape[0] == 0:
        raise InputError("search.m", "no finished trial has a drafter count within search.m")
    met = evaluate_configs(problem, members, k)
    ok = feasible_mask(met, problem.budget)
    if not ok.any():
        lowest = {n: float(met[n].min()) for n in problem.budget}
        raise infeasible_error(problem.budget, lowest)
    members, k = members[ok], k[ok]
    met = {n: np.asarray(v)[ok] for n, v in met.items()}
    keep = front_order(met[problem.cost_metric], met["throughput"], met["drafters"], k)
    front = Front(members[keep], k[keep], {n: v[keep] for n, v in met.items()}, problem.cost_metric)
    return front, len(done)


__all__ = [
    "DIRECTIONS",
    "SAMPLER_SEEDS",
    "SEEDED_ATTR",
    "SEED_ATTR",
    "SEED_MAX_SUBSETS",
    "SEED_MAX_TRIALS",
    "TICKET_ATTR",
    "WORKER_ATTR",
    "BatchRunner",
    "DeadlinePassed",
    "OptunaStrategy",
    "SearchSpace",
    "StudyMirror",
    "constraint_values",
    "evaluate_batch",
    "problem_fingerprint",
    "sampler_seed",
    "stored_candidates",
    "study_front",
]
