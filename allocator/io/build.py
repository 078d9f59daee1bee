"""The only code that turns a validated problem file (:class:`~allocator.io.spec.ProblemSpec`)
into the numeric :class:`~allocator.core.problem.Problem`, and refuses what the model
cannot evaluate (docs/design.md §5)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ..core.hardware import Hardware
from ..core.memory import MemoryModel
from ..core.model_spec import ModelSpec
from ..core.problem import DrafterInfo, Ensemble, Problem, Workload
from ..core.serving import SchedulerLimits, Serving, StepTableArrays
from ..exceptions import InputError
from ..model.acceptance import extend_positions, position_matrix
from ..model.errors import build_error_model
from ..model.metrics import no_chain_closed_form
from ..model.token_tree import rank_matrix
from .inputs import parse_document, read_input_text
from .outcome_log import load_empirical
from .spec import MAX_K, ArchitectureSpec, ProblemSpec, load_problem


def problem_from_spec(
    spec: ProblemSpec,
    base_dir: str | Path | None = None,
    *,
    simulation: bool = False,
    check_search: bool = True,
) -> Problem:
    """Build the numeric problem; refuse what this version cannot evaluate.

    ``base_dir``: the folder paths inside the file are relative to (an outcome log).
    ``simulation=True`` admits longest-chain pooling under correlated errors, which
    only the simulator can play (the closed form needs independence).
    ``check_search=False`` skips the checks that the search space can be searched
    (for evaluating one configuration, which ignores it).
    """
    _check_scale(spec)
    _check_width(spec)
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
    return Problem(
        name=spec.name,
        names=names,
        acceptance=acc,
        # NaN where a serving file leaves the cost out: answers in verifier-units refuse
        unit_cost=np.array([np.nan if d.unit_cost is None else d.unit_cost for d in spec.drafters]),
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
        serving=serving_from_spec(spec, base),
        acceptance_interval=_intervals(spec),
        memory=memory_from_spec(spec),
        drafters=drafters_from_spec(spec),
    )


def problem_from_file(
    path: str | Path, *, simulation: bool = False, check_search: bool = True
) -> Problem:
    """Read, validate and build a problem file (YAML or JSON)."""
    return problem_from_spec(
        load_problem(path),
        base_dir=Path(path).resolve().parent,
        simulation=simulation,
        check_search=check_search,
    )


def serving_from_spec(spec: ProblemSpec, base_dir: Path | None = None) -> Serving | None:
    """The arrays of ``spec.serving`` (``None`` when the problem has no such section)."""
    s = spec.serving
    if s is None:
        return None
    names = spec.names
    tables = []
    for t in s.step_ms:
        batches = sorted(t.by_batch)
        ks = sorted({k for row in t.by_batch.values() for k in row})
        ms = np.full((len(batches), len(ks)), np.nan)
        for i, b in enumerate(batches):
            for j, k in enumerate(ks):
                ms[i, j] = t.by_batch[b].get(k, np.nan)
        tables.append(
            StepTableArrays(
                np.isin(names, t.drafters),
                np.asarray(batches, float),
                np.asarray(ks, float),
                ms,
            )
        )
    v = s.verify_ms
    empty = np.zeros(0)
    return Serving(
        batch_sizes=np.asarray(s.batch_sizes, dtype=np.int64),
        gpu_cost_per_hour=np.nan if s.gpu_cost_per_hour is None else s.gpu_cost_per_hour,
        tables=tuple(tables),
        verify_batch=empty if v is None else np.asarray(v.batch, float),
        verify_tokens=empty if v is None else np.asarray(v.tokens, float),
        verify_ms=np.zeros((0, 0)) if v is None else np.asarray(v.ms, float),
        draft_batch=tuple(np.asarray(sorted(d.draft_ms or {}), float) for d in spec.drafters),
        draft_ms=tuple(
            np.asarray([d.draft_ms[b] for b in sorted(d.draft_ms)] if d.draft_ms else [], float)
            for d in spec.drafters
        ),
        overhead_ms=float(s.overhead_ms),
        drafting=spec.drafting,
        gpus_per_replica=int(
            s.gpus_per_replica or (s.hardware.count if s.hardware is not None else 1)
        ),
        scheduler=None
        if s.scheduler is None
        else SchedulerLimits(
            s.scheduler.max_num_seqs,
            s.scheduler.max_num_batched_tokens,
            s.scheduler.kv_cache_tokens,
            s.scheduler.block_size,
            s.scheduler.async_scheduling,
            s.scheduler.enable_prefix_caching,
        ),
        prefill_tokens=np.asarray([] if s.prefill_ms is None else s.prefill_ms.tokens, float),
        prefill_ms=np.asarray([] if s.prefill_ms is None else s.prefill_ms.ms, float),
        hardware=None
        if s.hardware is None
        else Hardware.from_fields(
            s.hardware.gpu, s.hardware.count, s.hardware.interconnect, s.hardware.pp, s.hardware.ep
        ),
        model=None if s.model is None else architecture(s.model, "serving.model", base_dir),
        drafter_models=tuple(
            None
            if d.architecture is None
            else architecture(d.architecture, f"drafters[{d.name}].architecture", base_dir, d.name)
            for d in spec.drafters
        ),
        roofline=_roofline_factors(s, names),
        drafter_memory_gb=tuple(float(d.memory_gb or 0.0) for d in spec.drafters),
        calibrated_from=None
        if s.calibrated_from is None
        else {
            "batch": tuple(s.calibrated_from.batch),
            "k": tuple(s.calibrated_from.k),
            "context": None
            if s.calibrated_from.context is None
            else tuple(s.calibrated_from.context),
            "speculative_batch": None
            if s.calibrated_from.speculative_batch is None
            else tuple(s.calibrated_from.speculative_batch),
            "speculative_k": None
            if s.calibrated_from.speculative_k is None
            else tuple(s.calibrated_from.speculative_k),
            "rows": s.calibrated_from.rows,
        },
    )


def _roofline_factors(s, names: tuple[str, ...]) -> dict:
    """``serving.roofline`` as plain data; a drafter named in ``roofline.drafters`` must
    be one of the problem's."""
    if s.roofline is None:
        return {}
    factors = s.roofline.model_dump()
    for name in factors.get("drafters") or {}:
        if name not in names:
            raise InputError(
                f"serving.roofline.drafters.{name}",
                f"no such drafter (the problem has {', '.join(names)})",
            )
    return factors


def architecture(
    a: ArchitectureSpec, field: str, base_dir: Path | None = None, name: str = ""
) -> ModelSpec:
    """A model's architecture from its problem-file fields or its Hugging Face
    ``config.json`` (``config``, relative to ``base_dir``); errors name ``field``."""
    if a.config is not None:
        path = Path(a.config)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        text = read_input_text(path, f"{field}.config")
        data = parse_document(text, f"{field}.config", str(path), json_format=True)
        if not isinstance(data, dict):
            raise InputError(f"{field}.config", f"{path.name} does not hold a JSON object")
        spec = ModelSpec.from_hf_config(
            data, field=f"{field}.config", dtype=a.dtype, kv_dtype=a.kv_dtype
        )
        return replace(spec, name=name or spec.name, field=field)
    assert a.params_b and a.layers and a.hidden and a.heads and a.kv_heads  # the spec checked
    return ModelSpec.from_fields(
        params_b=a.params_b,
        layers=a.layers,
        hidden=a.hidden,
        heads=a.heads,
        kv_heads=a.kv_heads,
        head_dim=a.head_dim,
        dtype=a.dtype or "bf16",
        kv_dtype=a.kv_dtype,
        active_params_b=a.active_params_b,
        experts=a.experts,
        experts_per_token=a.experts_per_token,
        expert_params_b=a.expert_params_b,
        embedding_params_b=a.embedding_params_b,
        name=name,
        field=field,
    )


def memory_from_spec(spec: ProblemSpec) -> MemoryModel | None:
    """One replica's memory from ``serving.memory`` and the drafters' ``memory_gb``
    (``None`` without ``serving.memory``; the spec has checked that one sequence fits)."""
    mem = spec.serving.memory if spec.serving is not None else None
    if mem is None:
        return None
    gb = np.asarray([float(d.memory_gb or 0.0) for d in spec.drafters], dtype=float)
    return MemoryModel(float(mem.kv_cache_gb), float(mem.kv_per_seq_gb), gb)


def drafters_from_spec(spec: ProblemSpec) -> tuple[DrafterInfo, ...]:
    """What each drafter is: method, model, ``ngram`` settings, rank acceptance and how
    many positions its acceptance lists give (``DrafterInfo.positions``)."""
    out = []
    for d in spec.drafters:
        ranks = None if d.acceptance_by_rank is None else rank_matrix(d.acceptance_by_rank)
        iv = d.acceptance_by_rank_interval
        intervals = None
        if iv is not None:
            arr = np.asarray(iv, dtype=float)
            intervals = arr.reshape(-1, arr.shape[-2], 2) if arr.ndim == 3 else arr[None]
        lists = [d.acceptance] + [
            w.acceptance[d.name] for w in spec.workloads if d.name in w.acceptance
        ]
        given = [len(a) for a in lists if isinstance(a, list)]
        out.append(
            DrafterInfo(
                name=d.name,
                method=d.method,
                model=d.model,
                prompt_lookup_min=d.prompt_lookup_min,
                prompt_lookup_max=d.prompt_lookup_max,
                acceptance_by_rank=ranks,
                acceptance_by_rank_interval=intervals,
                positions=min(given) if given else None,
            )
        )
    return tuple(out)


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
#: Most cells of the acceptance matrix (drafters x the longest acceptance list, every
#: drafter padded to it): 2**24 float64 values, 128 MiB, per workload.
MAX_ACCEPTANCE_CELLS = 1 << 24


def _check_width(spec: ProblemSpec) -> None:
    """Refuse an acceptance matrix (every drafter padded to the longest list) of more than
    :data:`MAX_ACCEPTANCE_CELLS` values, naming the longest list."""
    lists = [(f"drafters[{d.name}].acceptance", d.acceptance) for d in spec.drafters]
    for w in spec.workloads:
        lists += [(f"workloads[{w.name}].acceptance.{n}", a) for n, a in w.acceptance.items()]
    field, longest = max(
        ((f, len(a) if isinstance(a, list) else 1) for f, a in lists), key=lambda x: x[1]
    )
    cells = len(spec.drafters) * longest
    if cells > MAX_ACCEPTANCE_CELLS:
        raise InputError(
            field,
            f"{longest:,} positions for each of {len(spec.drafters):,} drafters make "
            f"{cells:,} values, more than {MAX_ACCEPTANCE_CELLS:,}: shorten the list "
            "(positions past search.k.max are never used)",
        )


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
    per_unit = sum(d.unit_cost or 0.0 for d in spec.drafters) + ver.token_cost * n
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
        errors = build_error_model(spec.errors, names, acc)
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


__all__ = [
    "MAX_ACCEPTANCE_CELLS",
    "architecture",
    "drafters_from_spec",
    "memory_from_spec",
    "problem_from_file",
    "problem_from_spec",
    "serving_from_spec",
]
