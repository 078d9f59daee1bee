"""vLLM's Prometheus metrics (text exposition or OpenMetrics) → per-drafter acceptance counts.

The estimator and why its short-draft bounds hold: docs/design.md §8.9.

Counters as vLLM 0.33.0 defines them in ``vllm/v1/spec_decode/metrics.py``
(``SpecDecodingProm``, lines 177-281) and fills them in ``Scheduler.make_spec_decoding_stats``
(``vllm/v1/core/sched/scheduler.py`` lines 3305-3322), labelled ``model_name`` and
``engine`` (others are allowed):
``vllm:spec_decode_num_drafts_total``, ``…_num_draft_tokens_total``,
``…_num_accepted_tokens_total`` and ``…_num_accepted_tokens_per_pos_total{position="i"}``.
Names with underscores instead of the colon (``vllm_spec_decode_…``, as OpenMetrics
pipelines rewrite them) are read the same. Series differing only in other labels
(engines of one deployment) are summed; one drafter per ``model_name``.

The per-position counters are cumulative: ``per_pos[i]`` counts drafts whose first
``i + 1`` tokens were all accepted. With every draft ``k`` tokens long, position ``i + 1``
(1-based) was reached by ``per_pos[i - 1]`` drafts (``per_pos[-1] = num_drafts``) and
accepted by ``per_pos[i]``. A draft may be shorter than ``k``: ``num_draft_tokens < k ·
num_drafts`` then, later positions were reached by fewer drafts than ``per_pos[i - 1]``,
and ``per_pos[i] / per_pos[i - 1]`` would be biased low. What makes drafts short in vLLM
0.33.0:

- structured output: the grammar's invalid tokens are not counted; under asynchronous
  scheduling (the default, ``vllm/config/vllm.py`` lines 1685-1719) a draft the grammar
  rejects whole still counts as a draft, with 0 tokens (scheduler.py lines 2883-2918,
  3305-3322), so position 1 is not exact either (0.560 read for a true 0.8 when the
  grammar rejects 30% of the drafts);
- a ``k`` schedule (``num_speculative_tokens_per_batch_size``): steps at a lower ``k``
  look like short drafts of the largest;
- suffix decoding (V1 model runner) drafts what its tree finds, possibly fewer than ``k``.
  The V2 model runner (the default) pads n-gram drafts to ``k`` with the last sampled
  token (``vllm/v1/worker/gpu/spec_decode/ngram/speculator.py`` lines 145-148), so they
  are never short there.

The counters then bound every position, the first included
(:func:`~.counts.bounded_trials`); the file gets the middle of each range and an interval
covering the whole range plus its sampling error, and says which positions are only
bounded. vLLM's per-request metrics (``--per-request-spec-decode-metrics detailed``, read
by ``--format vllm-requests``) count each step's drafted and accepted tokens and remove
the ambiguity.

A file may hold several scrapes one after another (``curl … >> metrics.txt``; each
OpenMetrics scrape ends with ``# EOF``). A series is read in order: a value that goes
down, or a ``_created`` time that changes, starts a new segment (a restarted server),
and the segments' last values are summed, with a note.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..exceptions import InputError
from .base import VLLM_EXACT, Reader, ReadOptions, excerpt, quote
from .counts import (
    MIN_TRIALS,
    DrafterCounts,
    Estimate,
    bounded_positions,
    bounded_trials,
    read_text,
)

if TYPE_CHECKING:
    from prometheus_client import parser
    from prometheus_client.openmetrics import parser as openmetrics
else:
    parser = lazy_module("prometheus_client.parser")
    openmetrics = lazy_module("prometheus_client.openmetrics.parser")

PREFIX = "vllm:spec_decode_"
FAMILIES = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
    "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
}
_BY_NAME = {v: k for k, v in FAMILIES.items()}
_UNDERSCORE = "vllm_spec_decode_"
#: The largest counter value taken (exact as a float; far past any server's).
MAX_COUNT = 2**53


def canonical(name: str) -> str:
    """``vllm_spec_decode_x`` → ``vllm:spec_decode_x`` (other names unchanged)."""
    if name.startswith(_UNDERSCORE):
        return PREFIX + name[len(_UNDERSCORE) :]
    return name


def _scrapes(text: str) -> list[tuple[str, bool]]:
    """The text cut into ``(chunk, is_openmetrics)``: OpenMetrics scrapes end at ``# EOF``."""
    lines = text.splitlines(keepends=True)
    if not any(line.strip() == "# EOF" for line in lines):
        return [(text, False)]
    chunks, current = [], []
    for line in lines:
        current.append(line)
        if line.strip() == "# EOF":
            chunks.append(("".join(current), True))
            current = []
    if "".join(current).strip():
        chunks.append(("".join(current), False))
    return chunks


def _samples(text: str, source: str):
    """Every ``(name, labels, value)`` sample, in file order (prometheus_client is imported
    here, on first use)."""
    for chunk, om in _scrapes(text):
        if om:
            # prometheus_client's own OpenMetrics exposition (vLLM serves /metrics
            # through it; seen with 0.26) writes vLLM's families as `# TYPE
            # vllm:spec_decode_x counter` but their samples as `vllm_spec_decode_x_total`,
            # and its strict parser then sees clashing families. One spelling for both
            # (canonical() maps it back).
            chunk = chunk.replace(PREFIX, _UNDERSCORE)
        parse = (openmetrics if om else parser).text_string_to_metric_families
        try:
            for family in parse(chunk):
                for sample in family.samples:
                    yield canonical(sample.name), dict(sample.labels), float(sample.value)
        except ValueError as exc:
            if isinstance(exc, InputError):
                raise
            kind = "OpenMetrics" if om else "Prometheus text exposition"
            raise InputError(source, f"not {kind}: {excerpt(str(exc))}") from None


def parse_counters(text: str, source: str, notes: list[str] | None = None) -> dict[str, dict]:
    """``{model_name: {"drafts": v, "draft_tokens": v, "accepted": v, "per_pos": {i: v}}}``.

    Restarts (module docstring) are summed; a note for each model that had one is
    appended to ``notes``.
    """
    values: dict[tuple, list[float]] = defaultdict(list)
    created: dict[tuple, list[float]] = defaultdict(list)
    for name, labels, value in _samples(text, source):
        is_created = name.endswith("_created")
        base = name.removesuffix("_created") if is_created else name.removesuffix("_total")
        if base not in _BY_NAME:
            continue
        key = (base, tuple(sorted(labels.items())))
        if is_created:
            created[key].append(value)
            continue
        if not np.isfinite(value) or value < 0:
            raise InputError(source, f"{name} has value {value}")
        if value > MAX_COUNT:
            # int64 counts past this wrapped silently ("-9223372036854775808 rounds")
            raise InputError(
                source, f"{name} has value {value:g}, too large to be a count (more than 2**53)"
            )
        values[key].append(value)
    last: dict[tuple, float] = {}
    restarted: dict[str, int] = defaultdict(int)
    breaks: dict[tuple, dict[tuple[int, ...], str]] = defaultdict(dict)
    for key, seq in values.items():
        times = created.get(key, [])
        total, cut = 0.0, []
        for i in range(1, len(seq)):
            new_time = len(times) == len(seq) and times[i] != times[i - 1]
            if seq[i] < seq[i - 1] or new_time:
                total += seq[i - 1]
                cut.append(i)
        last[key] = total + seq[-1]
        series = tuple(sorted((n, v) for n, v in key[1] if n != "position"))
        breaks[series][tuple(cut)] = key[0] + "_total" + _labels(dict(key[1]))
        if cut:
            model = dict(key[1]).get("model_name", "draft")
            restarted[model] = max(restarted[model], len(cut))
    for kinds in breaks.values():
        if len(kinds) > 1:
            (a, name_a), (b, name_b) = sorted(kinds.items(), key=lambda kv: len(kv[0]))[-2:]
            raise InputError(
                source,
                f"{name_b} restarts at scrape(s) {', '.join(str(i + 1) for i in b)} but "
                f"{name_a} {'at ' + ', '.join(str(i + 1) for i in a) if a else 'never'}: "
                "counters of one server restart together (keep scrapes of one deployment only)",
            )
    for model, n in sorted(restarted.items()):
        if notes is not None:
            notes.append(
                f"{model}: counters restarted {n} time(s) between scrapes (a value went down "
                "or its _created time changed); the runs' counts are summed"
            )
    models: dict[str, dict] = defaultdict(
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
            text = lab["position"]
            if not text.isdigit() or len(text) > 9:
                shown = text[:24] + ("..." if len(text) > 24 else "")
                raise InputError(
                    source, f"{base}_total has position {shown!r}, not a position 0, 1, 2, ..."
                )
            pos = int(text)
            models[model]["per_pos"][pos] += value
        else:
            models[model][kind] += value
    if not models:
        raise InputError(
            source,
            "no vllm:spec_decode_* counters found (is speculative decoding enabled on "
            "this server? expected " + ", ".join(f + "_total" for f in FAMILIES.values()) + ")",
        )
    for model, have in seen.items():
        missing = [FAMILIES[k] + "_total" for k in FAMILIES if k not in have]
        if missing:
            raise InputError(source, f"model {quote(model)}: missing {', '.join(missing)}")
    return dict(models)


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def cumulative_to_counts(
    name: str, drafts: float, per_pos: np.ndarray, source: str
) -> DrafterCounts:
    """Conditional counts from cumulative per-position counts ``(k,)`` (position 1 first)."""
    if drafts <= 0:
        raise InputError(source, f"model {quote(name)}: no drafts recorded (num_drafts is 0)")
    reached = np.concatenate(([drafts], per_pos[:-1]))
    up = np.flatnonzero(per_pos > reached)
    if up.size:
        i = int(up[0])
        prev = "num_drafts" if i == 0 else f"position {i - 1}"
        raise InputError(
            source,
            f"model {quote(name)}: accepted at position {i} ({per_pos[i]:g}) exceeds {prev} "
            f"({reached[i]:g}); the per-position counts are cumulative and cannot increase",
        )
    if drafts >= 2**53 or not np.isfinite(drafts):  # counts stay exact integers in a float
        raise InputError(
            source,
            f"model {quote(name)}: num_drafts {drafts:g} is beyond the counts this reads (2**53)",
        )
    return DrafterCounts(name, per_pos.astype(np.int64), reached.astype(np.int64))


def estimate_vllm_metrics(path: str | Path, min_trials: int = MIN_TRIALS) -> Estimate:
    """One drafter per ``model_name`` (sorted) from the counters in ``path``.

    Positions reached by fewer than ``min_trials`` drafts are dropped from the end;
    ``k_max`` is the most positions any model reports.
    """
    path = Path(path)
    source = path.name
    notes = [f"estimated from vLLM metrics in {path.name} (cumulative spec-decode counters)"]
    models = parse_counters(read_text(path), source, notes)
    drafters = []
    k_seen = 0
    report = {}
    for name in sorted(models):
        m = models[name]
        positions = sorted(m["per_pos"])
        if positions != list(range(len(positions))):
            raise InputError(
                source, f"model {quote(name)}: positions {positions} are not 0, 1, 2, ... in full"
            )
        per_pos = np.array([m["per_pos"][p] for p in positions])
        counts = cumulative_to_counts(name, m["drafts"], per_pos, source)
        k = len(positions)
        k_seen = max(k_seen, k)
        full = k * m["drafts"]
        if m["draft_tokens"] > full + 0.5:
            raise InputError(
                source,
                f"model {quote(name)}: num_draft_tokens ({m['draft_tokens']:g}) exceeds "
                f"num_drafts x {k} positions ({full:g}); drafts cannot be longer than the "
                "positions counted",
            )
        entry: dict = {
            "num_drafts": m["drafts"],
            "num_draft_tokens": m["draft_tokens"],
            "num_accepted_tokens": m["accepted"],
            "accepted_per_position": per_pos.tolist(),
        }
        # a draft that accepted i tokens drafted at least i (one the grammar rejected whole
        # holds none, module docstring)
        least = per_pos.sum()
        if m["draft_tokens"] < least - 0.5:
            raise InputError(
                source,
                f"model {quote(name)}: num_draft_tokens ({m['draft_tokens']:g}) is fewer than the "
                f"{least:g} tokens its drafts accepted",
            )
        if m["draft_tokens"] < full - 0.5:
            trials, low = bounded_trials(m["drafts"], per_pos, m["draft_tokens"])
            counts = DrafterCounts(name, counts.successes, trials, trials_low=low)
            notes.append(short_drafts_note(name, m["draft_tokens"], m["drafts"], k))
            entry["bounded_positions"] = bounded_positions(counts)
            lo, hi = counts.acceptance_range
            entry["short_drafts"] = True
            entry["acceptance_range"] = [[float(a), float(b)] for a, b in zip(lo, hi, strict=True)]
        if abs(m["accepted"] - per_pos.sum()) > 0.5:
            notes.append(
                f"{name}: num_accepted_tokens ({m['accepted']:g}) differs from the sum over "
                f"positions ({per_pos.sum():g})"
            )
        report[name] = entry
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


#: Why vLLM 0.33.0's drafts come out short, and what counts them exactly.
SHORT_DRAFT_CAUSES = (
    "drafts come out short in vLLM 0.33.0 when the grammar rejects draft tokens (under the "
    "default asynchronous scheduling a wholly rejected draft counts with 0 tokens), under a "
    "k schedule (steps at a lower k look short) and with suffix decoding; the V2 model "
    "runner pads n-gram drafts to k. Per-request metrics (--per-request-spec-decode-metrics "
    "detailed, --format vllm-requests) count every step exactly"
)


def short_drafts_note(name: str, draft_tokens: float, drafts: float, k: int) -> str:
    """What the file says when drafts were shorter than the positions."""
    return (
        f"{name}: drafts shorter than the {k} positions ({draft_tokens:g} draft tokens in "
        f"{drafts:g} drafts, {draft_tokens / drafts:.3g} per draft): the drafts reaching each "
        "position, the first included, are only bounded, so each acceptance there is too: "
        "the value written is the middle of what the counters allow and acceptance_interval "
        f"covers the whole range plus sampling error; {SHORT_DRAFT_CAUSES}"
    )


class VLLMMetricsReader(Reader):
    """``--format vllm-metrics``: vLLM's Prometheus counters (module docstring)."""

    name = "vllm-metrics"
    reads = "vLLM's Prometheus metrics (/metrics text or OpenMetrics)"
    names_drafters = True
    counts_exactly = VLLM_EXACT

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        return estimate_vllm_metrics(path, options.min_trials)


__all__ = [
    "VLLMMetricsReader",
    "FAMILIES",
    "MAX_COUNT",
    "PREFIX",
    "SHORT_DRAFT_CAUSES",
    "canonical",
    "cumulative_to_counts",
    "estimate_vllm_metrics",
    "parse_counters",
    "short_drafts_note",
]
