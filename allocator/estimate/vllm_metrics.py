"""vLLM's Prometheus metrics (text exposition) → per-drafter acceptance counts.

Four counter families, labelled ``model_name`` and ``engine`` (others are allowed):
``vllm:spec_decode_num_drafts_total``, ``…_num_draft_tokens_total``,
``…_num_accepted_tokens_total`` and ``…_num_accepted_tokens_per_pos_total{position="i"}``.
``_created`` series are ignored; series differing only in other labels (engines
of one deployment) are summed; one drafter per ``model_name``.

The per-position counters are cumulative: ``per_pos[i]`` counts drafts whose first
``i + 1`` tokens were all accepted. So position ``i + 1`` (1-based) was reached by
``per_pos[i - 1]`` drafts (``per_pos[-1] = num_drafts``) and accepted by ``per_pos[i]``:
``successes = per_pos[i]``, ``trials = per_pos[i - 1]``.

A file may hold several scrapes one after another (``curl … >> metrics.txt``):
the last value of each series is used, and a counter that goes down between
scrapes (a restart) is refused.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import InputError
from .counts import MIN_TRIALS, DrafterCounts, Estimate, read_text

FAMILIES = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
    "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
}
_BY_NAME = {v: k for k, v in FAMILIES.items()}


def parse_counters(text: str, source: str) -> dict[str, dict[str, Any]]:
    """``{model_name: {"drafts": v, "draft_tokens": v, "accepted": v, "per_pos": {i: v}}}``."""
    # slow to import: only when reading metrics
    from prometheus_client.parser import text_string_to_metric_families

    last: dict[tuple, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                base = sample.name.removesuffix("_total")
                if sample.name.endswith("_created") or base not in _BY_NAME:
                    continue
                labels = dict(sample.labels)
                key = (base, tuple(sorted(labels.items())))
                value = float(sample.value)
                if not np.isfinite(value) or value < 0:
                    raise InputError(source, f"{sample.name} has value {value}")
                if key in last and value < last[key]:
                    raise InputError(
                        source,
                        f"counter {sample.name}{_labels(labels)} decreases from "
                        f"{last[key]:g} to {value:g} between scrapes (was the server "
                        "restarted? keep scrapes of one run only)",
                    )
                last[key] = value
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(source, f"not Prometheus text exposition: {exc}") from None
    models: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": defaultdict(float)}
    )
    seen: dict[str, set] = defaultdict(set)
    for (base, labels), value in last.items():
        lab = dict(labels)
        model = lab.get("model_name", "draft")
        kind = _BY_NAME[base]
        seen[model].add(kind)
        if kind == "per_pos":
            if "position" not in lab:
                raise InputError(source, f"{base}_total without a position label")
            try:
                pos = int(lab["position"])
            except ValueError:
                raise InputError(
                    source, f"{base}_total has position {lab['position']!r}, not an integer"
                ) from None
            models[model]["per_pos"][pos] += value
        else:
            models[model][kind] += value
    if not models:
        raise InputError(
            source,
            "no vllm:spec_decode_* counters found (is speculative decoding enabled on "
            "this server? expected " + ", ".join(f + "_total" for f in FAMILIES.values()) + ")",
        )
    for model, kinds in seen.items():
        missing = [FAMILIES[k] + "_total" for k in FAMILIES if k not in kinds]
        if missing:
            raise InputError(source, f"model {model!r}: missing {', '.join(missing)}")
    return dict(models)


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def cumulative_to_counts(
    name: str, drafts: float, per_pos: np.ndarray, source: str
) -> DrafterCounts:
    """Conditional counts from cumulative per-position counts ``(k,)`` (position 1 first)."""
    if drafts <= 0:
        raise InputError(source, f"model {name!r}: no drafts recorded (num_drafts is 0)")
    reached = np.concatenate(([drafts], per_pos[:-1]))
    up = np.flatnonzero(per_pos > reached)
    if up.size:
        i = int(up[0])
        prev = "num_drafts" if i == 0 else f"position {i - 1}"
        raise InputError(
            source,
            f"model {name!r}: accepted at position {i} ({per_pos[i]:g}) exceeds {prev} "
            f"({reached[i]:g}); the per-position counts are cumulative and cannot increase",
        )
    return DrafterCounts(name, per_pos.astype(np.int64), reached.astype(np.int64))


def estimate_vllm_metrics(path: str | Path, min_trials: int = MIN_TRIALS) -> Estimate:
    """One drafter per ``model_name`` (sorted) from the counters in ``path``.

    Positions reached by fewer than ``min_trials`` drafts are dropped from the end;
    ``k_max`` is the most positions any model reports.
    """
    path = Path(path)
    source = path.name
    models = parse_counters(read_text(path), source)
    drafters = []
    notes = [f"estimated from vLLM metrics in {path.name} (cumulative spec-decode counters)"]
    k_seen = 0
    report = {}
    for name in sorted(models):
        m = models[name]
        positions = sorted(m["per_pos"])
        if positions != list(range(len(positions))):
            raise InputError(
                source, f"model {name!r}: positions {positions} are not 0, 1, 2, ... in full"
            )
        per_pos = np.array([m["per_pos"][p] for p in positions])
        counts = cumulative_to_counts(name, m["drafts"], per_pos, source)
        k = len(positions)
        k_seen = max(k_seen, k)
        if abs(m["draft_tokens"] - k * m["drafts"]) > 0.5:
            notes.append(
                f"{name}: num_draft_tokens / num_drafts = {m['draft_tokens'] / m['drafts']:.4g}, "
                f"not the {k} positions seen (k changed during the run?)"
            )
        if abs(m["accepted"] - per_pos.sum()) > 0.5:
            notes.append(
                f"{name}: num_accepted_tokens ({m['accepted']:g}) differs from the sum over "
                f"positions ({per_pos.sum():g})"
            )
        report[name] = {
            "num_drafts": m["drafts"],
            "num_draft_tokens": m["draft_tokens"],
            "num_accepted_tokens": m["accepted"],
            "accepted_per_position": per_pos.tolist(),
        }
        drafters.append(counts.trimmed(min_trials))
    notes.append("acceptance at position i: per_pos[i] / per_pos[i-1] (per_pos[-1] = num_drafts)")
    notes.append("acceptance_interval: 95% Jeffreys (Beta posterior) intervals")
    return Estimate(
        source="vllm-metrics",
        drafters=drafters,
        convention="bonus",
        k_max=k_seen,
        notes=notes,
        report={"models": report},
    )
