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

from collections.abc import Sequence
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


__all__ = [
    "FORMATS",
    "LEVEL",
    "MIN_TRIALS",
    "DrafterCounts",
    "Estimate",
    "estimate",
    "jeffreys_interval",
    "problem_text",
    "read_costs",
]
