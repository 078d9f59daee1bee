"""From measurements to problem files: one module per input format.

- :mod:`.outcomes`: joint outcome logs (CSV or JSONL), one 0/1 column per drafter.
- :mod:`.vllm_metrics`: vLLM's Prometheus metrics (``/metrics`` text).
- :mod:`.vllm_log`: vLLM's ``SpecDecoding metrics:`` log lines.
- :mod:`.vllm_requests`: vLLM's per-request speculative metrics
  (``--per-request-spec-decode-metrics``, JSONL of responses).
- :mod:`.sglang_requests`: SGLang responses (JSONL) with per-request acceptance histograms.
- :mod:`.sglang_log`: SGLang's ``accept len`` decode log lines (one scalar acceptance).
- :mod:`.bench_files`: the engines' own benchmark result files (``vllm bench serve
  --save-result``, SGLang's ``bench_serving``), for calibration (:mod:`.calibrate`).

Each yields an :class:`~.counts.Estimate` (per-drafter per-position counts with
95% intervals); :mod:`.problem_file` writes it as a problem file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..exceptions import ParameterError
from .counts import LEVEL, MIN_TRIALS, DrafterCounts, Estimate, jeffreys_interval
from .outcomes import estimate_outcomes
from .problem_file import build_problem, check_problem, read_costs, render
from .sglang_log import estimate_sglang_log
from .sglang_requests import estimate_sglang_requests
from .vllm_log import estimate_vllm_log
from .vllm_metrics import estimate_vllm_metrics
from .vllm_requests import estimate_vllm_requests

FORMATS = (
    "outcomes",
    "vllm-metrics",
    "vllm-log",
    "vllm-requests",
    "sglang-requests",
    "sglang-log",
)


def estimate(
    path: str | Path,
    fmt: str,
    out_path: str | Path,
    *,
    errors: str = "empirical",
    min_trials: int = MIN_TRIALS,
    drafter_name: str = "draft",
    convention: str = "bonus",
    k: int | None = None,
    topk: int | None = None,
    adaptive: bool | None = None,
    adaptive_steps: Sequence[int] | None = None,
) -> Estimate:
    """Read ``path`` in format ``fmt`` (one of :data:`FORMATS`) into an :class:`Estimate`.

    ``k``: the draft length, for the SGLang formats (their inputs may not say it); for an
    SGLang tree, its depth. ``topk``, ``adaptive``, ``adaptive_steps``: ``sglang-requests``
    only, the run's ``--speculative-eagle-topk``, whether it ran
    ``--speculative-adaptive`` (``None``: tell from the responses) and its candidate steps.
    """
    if min_trials < 1:
        raise ParameterError("min_count", "must be at least 1")
    if fmt == "outcomes":
        return estimate_outcomes(path, out_path, errors, min_trials, convention)
    if fmt == "vllm-metrics":
        return estimate_vllm_metrics(path, min_trials)
    if fmt == "vllm-log":
        return estimate_vllm_log(path, drafter_name, min_trials)
    if fmt == "vllm-requests":
        return estimate_vllm_requests(path, drafter_name, min_trials)
    if fmt == "sglang-requests":
        if k is not None and k < 1:
            raise ParameterError("k", "must be at least 1")
        return estimate_sglang_requests(
            path,
            drafter_name,
            min_trials,
            k,
            topk=topk,
            adaptive=adaptive,
            adaptive_steps=adaptive_steps,
        )
    if fmt == "sglang-log":
        return estimate_sglang_log(path, k, drafter_name)
    raise ParameterError("format", f"{fmt!r} is not one of {', '.join(FORMATS)}")


def problem_text(
    est: Estimate,
    name: str,
    costs: dict,
    models: dict[str, str],
    methods: dict[str, str] | None = None,
) -> tuple[str, dict, list[str]]:
    """The problem file's text, its data, and the drafters still lacking a cost."""
    data, header, missing = build_problem(est, name, costs, models, methods)
    check_problem(data)
    return render(data, header), data, missing


#: Options that apply to some formats only: option name -> the formats it applies to.
FORMAT_OPTIONS = {
    "errors": ("outcomes",),
    "convention": ("outcomes",),
    "drafter": ("vllm-log", "sglang-requests", "sglang-log"),
    "k": ("sglang-requests", "sglang-log"),
}


@dataclass(frozen=True)
class EstimateOptions:
    """The options of one estimate, checked, with their defaults filled in."""

    fmt: str
    errors: str
    convention: str
    drafter: str
    k: int | None


def check_options(
    fmt: str,
    out: str | Path,
    *,
    errors: str | None = None,
    convention: str | None = None,
    drafter: str | None = None,
    k: int | None = None,
) -> EstimateOptions:
    """Refuse a format not in :data:`FORMATS`, an option given for a format it does not
    apply to (:data:`FORMAT_OPTIONS`), an unknown convention and an output that is not
    ``.yaml``/``.yml``; fill in the defaults (``empirical``, ``bonus``, ``draft``). Raises
    :class:`~allocator.exceptions.ParameterError` naming the parameter."""
    from ..model.acceptance import CONVENTIONS

    if fmt not in FORMATS:
        raise ParameterError("format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    given = {"errors": errors, "convention": convention, "drafter": drafter, "k": k}
    for option, applies in FORMAT_OPTIONS.items():
        if given[option] is not None and fmt not in applies:
            raise ParameterError(option, f"applies to --format {' or '.join(applies)} only")
    convention = convention or "bonus"
    if convention not in CONVENTIONS:
        raise ParameterError("convention", f"{convention!r} is not one of {', '.join(CONVENTIONS)}")
    if Path(out).suffix.lower() not in (".yaml", ".yml"):
        raise ParameterError("out", "write the problem as .yaml or .yml")
    return EstimateOptions(fmt, errors or "empirical", convention, drafter or "draft", k)


def _assignments(items: Mapping[str, object] | Sequence[str] | None, option: str) -> dict:
    """``NAME=VALUE`` strings (as the command line gives them) or a mapping, as a dict of
    strings."""
    from .problem_file import parse_assignments

    if isinstance(items, Mapping):
        return {str(n): str(v) for n, v in items.items()}
    return parse_assignments(list(items or []), option)


@dataclass
class EstimateReport:
    """``allocator estimate``: what was read and the problem file made of it.

    estimate : the :class:`Estimate`; data : the problem file as plain data; text : the
    file to write (YAML, with comments); missing : drafters whose ``unit_cost`` is still
    to be filled in; fmt, out : the input format and the output path.
    """

    estimate: Estimate
    data: dict
    text: str
    missing: list[str]
    fmt: str
    out: str

    def to_dict(self) -> dict:
        """The ``estimate --json`` document."""
        data, est = self.data, self.estimate
        return {
            "problem": data["name"],
            "out": self.out,
            "format": self.fmt,
            "drafters": [
                {
                    "name": d["name"],
                    "acceptance": d["acceptance"],
                    "acceptance_interval": d["acceptance_interval"],
                    "positions": c.positions,
                    "trials": c.trials.tolist(),
                    # drafts shorter than k: the rounds reaching each position lie in
                    # [trials_low, trials] (null when known exactly)
                    "trials_low": None if c.trials_low is None else c.trials_low.tolist(),
                    "successes": c.successes.tolist(),
                    **(
                        {}
                        if c.ranks is None
                        else {
                            "acceptance_by_rank": d["acceptance_by_rank"],
                            "acceptance_by_rank_interval": d["acceptance_by_rank_interval"],
                            "rank_trials": c.ranks.trials.tolist(),
                            "rank_successes": c.ranks.successes.tolist(),
                        }
                    ),
                }
                for d, c in zip(data["drafters"], est.drafters, strict=True)
            ],
            "errors": data.get("errors"),
            "workloads": data.get("workloads", []),
            "missing_costs": self.missing,
            "report": est.report,
        }


def estimate_problem(
    path: str | Path,
    out: str | Path,
    fmt: str = "outcomes",
    *,
    unit_cost: Mapping[str, float] | Sequence[str] | None = None,
    costs: str | Path | None = None,
    models: Mapping[str, str] | Sequence[str] | None = None,
    methods: Mapping[str, str] | Sequence[str] | None = None,
    errors: str | None = None,
    name: str | None = None,
    drafter: str | None = None,
    k: int | None = None,
    min_count: int = MIN_TRIALS,
    convention: str | None = None,
) -> EstimateReport:
    """Read ``path`` in format ``fmt`` and make the problem file for ``out`` (not written).

    Costs (in no log) come from the YAML file ``costs`` and ``unit_cost`` (which wins);
    ``models`` and ``methods`` give drafters' serving model and method; each a mapping
    or ``NAME=VALUE`` strings. ``name``: the problem's (default: the stem of ``out``).
    The other options are :func:`check_options`'s and :func:`estimate`'s.
    """
    from ..core.methods import METHODS

    opts = check_options(fmt, out, errors=errors, convention=convention, drafter=drafter, k=k)
    unit = (
        [f"{n}={v}" for n, v in unit_cost.items()]
        if isinstance(unit_cost, Mapping)
        else list(unit_cost or [])
    )
    cost_data = read_costs(costs, unit)
    model_map = _assignments(models, "model")
    method_map = _assignments(methods, "method")
    for n, m in method_map.items():
        if m not in METHODS:
            raise ParameterError("method", f"{n}: {m!r} is not one of {', '.join(METHODS)}")
    est = estimate(
        path,
        opts.fmt,
        out,
        errors=opts.errors,
        min_trials=min_count,
        drafter_name=opts.drafter,
        convention=opts.convention,
        k=opts.k,
    )
    text, data, missing = problem_text(
        est, name or Path(out).stem, cost_data, model_map, method_map
    )
    return EstimateReport(est, data, text, missing, opts.fmt, str(out))


__all__ = [
    "FORMATS",
    "FORMAT_OPTIONS",
    "LEVEL",
    "MIN_TRIALS",
    "DrafterCounts",
    "Estimate",
    "EstimateOptions",
    "EstimateReport",
    "check_options",
    "estimate",
    "estimate_problem",
    "jeffreys_interval",
    "problem_text",
    "read_costs",
]
