"""vLLM's per-request speculative-decoding metrics (JSON Lines of responses) → acceptance counts.

Source: vLLM 0.33.0. The server option ``--per-request-spec-decode-metrics
{none,summary,detailed}`` (``ObservabilityConfig.per_request_spec_decode_metrics``,
vllm/config/observability.py) adds ``metrics.speculative_decoding`` to every
single-sequence (``n == 1``) response of ``/v1/completions`` and
``/v1/chat/completions`` (vllm/entrypoints/openai/{completion,chat_completion}/serving.py;
in a stream, the final usage chunk) and of the token-in-token-out endpoint
(vllm/entrypoints/scale_out/token_in_token_out/serving.py), built by
``build_spec_decoding_metrics`` (vllm/entrypoints/generate/base/serving.py) from
``RequestSpecDecodeMetrics.to_dict`` (vllm/v1/metrics/stats.py); the schema is
``SpeculativeDecodingMetrics`` (vllm/entrypoints/generate/base/protocol.py):

- ``acceptance_histogram``: dense, length ``num_spec_tokens + 1``; entry ``j`` = verify
  steps that accepted exactly ``j`` drafted tokens (bonus token not counted);
- ``num_spec_steps`` = ``Σ_j histogram[j]``; ``num_accepted_draft_tokens`` =
  ``Σ_j j · histogram[j]``;
- ``num_draft_tokens``: tokens proposed over those steps, *after* subtracting the
  grammar-invalidated ones;
- ``num_spec_tokens``: the configured ``num_speculative_tokens`` ``K`` (the largest k);
- ``mean_acceptance_length`` = ``1 + accepted / steps``, ``draft_acceptance_rate`` =
  ``accepted / num_draft_tokens``;
- at ``detailed`` only: ``per_step_accepted`` and ``per_step_drafted``, one entry per
  verify step, in order.

A step is recorded (``Scheduler.update_from_output``, vllm/v1/core/sched/scheduler.py)
whenever the request had draft tokens scheduled, with ``drafted = len(scheduled) −
num_invalid_spec_tokens``. Under asynchronous scheduling (the default) with structured
output the draft is validated against the grammar *after* scheduling
(``update_draft_token_ids_in_output``), so a step whose draft the grammar rejected
entirely is recorded with ``drafted = 0`` and ``accepted = 0``: it never reached
position 1. Under dynamic k (``num_speculative_tokens_per_batch_size``) and for
drafters that propose what they find (suffix decoding), steps draft fewer than ``K``.
The V2 model runner's n-gram drafter fills slots it found nothing for with the last
sampled token (vllm/v1/worker/gpu/spec_decode/ngram/speculator.py), which count as
drafted: that is what the engine verifies.

Estimation. A step that drafted ``d`` tokens and accepted ``a`` reached positions
``1 … min(a + 1, d)`` and was accepted at ``1 … a``. With the per-step arrays
(``detailed``) the counts are exact at every position, whatever the draft lengths:
position ``j`` was reached by the steps with ``d ≥ j`` and ``a ≥ j − 1`` and accepted by
those with ``a ≥ j``. From the histogram alone (``summary``) a request's steps give
vLLM's cumulative form (``per_pos[i]`` = steps accepting more than ``i``, over ``D``
steps) and its deficit ``Δ = K · D − num_draft_tokens``; when ``Δ = 0`` every step
drafted ``K`` and the counts are exact, otherwise they are bounded as for vLLM's
counters (docs/design.md §8.9), one request at a time and *including position 1*: a step
that reached position ``j − 1``'s acceptance but not position ``j`` drafted exactly
``j − 1`` tokens (``0`` for ``j = 1``: a wholly grammar-rejected draft), leaving ``K − j
+ 1`` of the deficit, so at most ``⌊Δ / (K − j + 1)⌋`` of them exist. The file gets the
middle of each range and an interval covering it.

One JSON value per line: a response object (its ``metrics.speculative_decoding``; a null
``metrics`` or ``speculative_decoding`` — metrics off, ``n > 1`` — is skipped, as are
stream chunks without ``metrics``), a bare ``speculative_decoding`` object (an offline
``RequestOutput.outputs[0].spec_decode_metrics.to_dict()``), or a list of either. A
``data:`` prefix (a saved event stream) is dropped. An optional top-level ``workload``
(a string) puts the request in a workload, weighted by the tokens its steps produced,
``Σ_j (j + 1) · histogram[j]``. Responses naming different ``model`` values are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..exceptions import InputError
from .base import VLLM_EXACT, Reader, ReadOptions, quote
from .counts import MIN_TRIALS, DrafterCounts, Estimate, WorkloadCounts
from .jsonl import finite_number, json_lines, whole_count

METRICS = "speculative_decoding"
HISTOGRAM = "acceptance_histogram"
STEPS = "num_spec_steps"
ACCEPTED = "num_accepted_draft_tokens"
DRAFTED = "num_draft_tokens"
K_KEY = "num_spec_tokens"
PER_STEP = ("per_step_accepted", "per_step_drafted")
#: Relative tolerance of the float fields' agreement with the counts.
FLOAT_TOLERANCE = 1e-6


@dataclass
class _Tally:
    """Counts of one drafter summed over requests, at positions ``1 … K``.

    ``table[a, d]``: detailed steps that accepted ``a`` and drafted ``d``; the summary
    requests' contributions are summed into ``successes``, ``trials`` and ``low``.
    """

    k: int
    table: np.ndarray = field(init=False)
    successes: np.ndarray = field(init=False)
    trials: np.ndarray = field(init=False)
    low: np.ndarray = field(init=False)
    tokens: int = 0

    def __post_init__(self) -> None:
        self.table = np.zeros((self.k + 1, self.k + 1), np.int64)
        self.successes = np.zeros(self.k, np.int64)
        self.trials = np.zeros(self.k, np.int64)
        self.low = np.zeros(self.k, np.int64)

    def add(self, record: _Record) -> None:
        self.tokens += int((np.arange(record.hist.size) + 1) @ record.hist)
        if record.accepted is not None and record.drafted is not None:
            np.add.at(self.table, (record.accepted, record.drafted), 1)
            return
        s, hi, lo = summary_counts(record.hist, record.draft_tokens)
        self.successes += s
        self.trials += hi
        self.low += lo

    def counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(successes, trials, trials_low)``, int ``(K,)`` each."""
        j = np.arange(1, self.k + 1)
        a = np.arange(self.k + 1)[:, None]
        d = np.arange(self.k + 1)[None, :]
        reached = (d >= j[:, None, None]) & (a >= j[:, None, None] - 1)
        n = (reached * self.table).sum(axis=(1, 2))
        s = ((a >= j[:, None, None]) * self.table).sum(axis=(1, 2))
        return self.successes + s, self.trials + n, self.low + n


@dataclass
class _Record:
    hist: np.ndarray
    draft_tokens: int
    accepted: np.ndarray | None
    drafted: np.ndarray | None
    workload: str | None


def summary_counts(hist: np.ndarray, draft_tokens: int) -> tuple[np.ndarray, ...]:
    """``(successes, trials, trials_low)``, int ``(K,)``, of one request's histogram
    ``(K + 1,)`` and its drafted tokens (module docstring: exact when every step drafted
    ``K``, else bounded at every position, position 1 included)."""
    k = hist.size - 1
    steps = int(hist.sum())
    tail = np.cumsum(hist[::-1])[::-1]  # tail[n] = steps accepting n or more
    per_pos = tail[1:].astype(np.int64)  # per_pos[i]: accepting more than i
    trials = np.concatenate(([steps], per_pos[:-1])).astype(np.int64)
    deficit = k * steps - draft_tokens
    missing = np.zeros(k, np.int64)
    if deficit > 0:
        room = k - np.arange(k)  # K − j + 1 for j = 1 … K
        missing = np.minimum(deficit // room, trials - per_pos)
    return per_pos, trials, trials - missing


def _count_list(raw: object, where: str) -> np.ndarray:
    if not isinstance(raw, list):
        raise InputError(where, "must be a list of counts")
    return np.array([whole_count(v, f"{where}[{i}]") for i, v in enumerate(raw)], np.int64)


def _close(value: object, expected: float, where: str) -> None:
    if value is None:
        return
    value = finite_number(value, where)
    if abs(value - expected) > FLOAT_TOLERANCE * max(1.0, abs(expected)):
        raise InputError(where, f"{quote(value)}, but the counts give {expected:.6g}")


def parse_metrics(m: dict, where: str, workload: str | None) -> tuple[int, _Record | None]:
    """``(K, record)`` of one ``speculative_decoding`` object (``None``: no verify steps)."""
    missing = [key for key in (HISTOGRAM, STEPS, ACCEPTED, DRAFTED, K_KEY) if key not in m]
    if missing:
        raise InputError(f"{where}: {METRICS}", f"missing {', '.join(missing)}")
    k = whole_count(m[K_KEY], f"{where}: {K_KEY}")
    if k < 1:
        raise InputError(f"{where}: {K_KEY}", f"{k}; speculation drafts at least one token")
    hist = _count_list(m[HISTOGRAM], f"{where}: {HISTOGRAM}")
    if hist.size != k + 1:
        raise InputError(
            f"{where}: {HISTOGRAM}",
            f"{hist.size} entries; vLLM writes num_spec_tokens + 1 = {k + 1}",
        )
    steps = int(hist.sum())
    if whole_count(m[STEPS], f"{where}: {STEPS}") != steps:
        raise InputError(f"{where}: {STEPS}", f"{m[STEPS]}, but the histogram counts {steps}")
    accepted = int(np.arange(k + 1) @ hist)
    if whole_count(m[ACCEPTED], f"{where}: {ACCEPTED}") != accepted:
        raise InputError(
            f"{where}: {ACCEPTED}", f"{m[ACCEPTED]}, but the histogram implies {accepted}"
        )
    drafted = whole_count(m[DRAFTED], f"{where}: {DRAFTED}")
    if drafted > k * steps:
        raise InputError(
            f"{where}: {DRAFTED}",
            f"{drafted} exceeds {steps} steps x {k} tokens: no step drafts more than K",
        )
    if drafted < accepted:
        raise InputError(
            f"{where}: {DRAFTED}", f"{drafted} is fewer than the {accepted} accepted tokens"
        )
    _close(
        m.get("mean_acceptance_length"),
        1.0 + accepted / steps if steps else 1.0,
        f"{where}: mean_acceptance_length",
    )
    _close(
        m.get("draft_acceptance_rate"),
        accepted / drafted if drafted else 0.0,
        f"{where}: draft_acceptance_rate",
    )
    arrays = [m.get(key) for key in PER_STEP]
    a = d = None
    if (arrays[0] is None) != (arrays[1] is None):
        have = PER_STEP[0] if arrays[0] is not None else PER_STEP[1]
        other = PER_STEP[1] if arrays[0] is not None else PER_STEP[0]
        raise InputError(f"{where}: {have}", f"given without {other}")
    if arrays[0] is not None:
        a = _count_list(arrays[0], f"{where}: {PER_STEP[0]}")
        d = _count_list(arrays[1], f"{where}: {PER_STEP[1]}")
        for key, v in zip(PER_STEP, (a, d), strict=True):
            if v.size != steps:
                raise InputError(f"{where}: {key}", f"{v.size} entries for {steps} steps")
            if v.size and int(v.max()) > k:
                i = int(np.argmax(v))
                raise InputError(f"{where}: {key}[{i}]", f"{int(v[i])} exceeds K = {k}")
        over = np.flatnonzero(a > d)
        if over.size:
            i = int(over[0])
            raise InputError(
                f"{where}: {PER_STEP[0]}[{i}]",
                f"{int(a[i])} accepted of {int(d[i])} drafted: a step accepts no more than "
                "it drafted",
            )
        if not np.array_equal(np.bincount(a, minlength=k + 1), hist):
            raise InputError(f"{where}: {PER_STEP[0]}", f"disagrees with {HISTOGRAM}")
        if int(d.sum()) != drafted:
            raise InputError(
                f"{where}: {PER_STEP[1]}", f"sums to {int(d.sum())}, not {DRAFTED} = {drafted}"
            )
    if steps == 0:
        return k, None
    return k, _Record(hist, drafted, a, d, workload)


def read_requests(path: Path) -> tuple[int, list[_Record], int, str | None]:
    """``(K, records with steps, responses without any, model)`` of the file."""
    records: list[_Record] = []
    ks: dict[int, str] = {}
    models: dict[str, str] = {}
    skipped = 0
    for where, value in json_lines(path):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, dict):
                raise InputError(where, "expected a vLLM response object (or a list of them)")
            workload = item.get("workload")
            if workload is not None and not isinstance(workload, str):
                raise InputError(f"{where}: workload", f"{quote(workload)} is not a string")
            model = item.get("model")
            if isinstance(model, str):
                models.setdefault(model, where)
                if len(models) > 1:
                    (m1, w1), (m2, w2) = list(models.items())[:2]
                    raise InputError(
                        f"{w2}: model",
                        f"{quote(m2)} where {w1} has {quote(m1)}: keep one server's responses "
                        "per file",
                    )
            if HISTOGRAM in item:
                metrics: object = item
            elif "metrics" in item:
                holder = item["metrics"]
                if holder is not None and not isinstance(holder, dict):
                    raise InputError(f"{where}: metrics", "must be an object")
                metrics = None if holder is None else holder.get(METRICS)
                if metrics is not None and not isinstance(metrics, dict):
                    raise InputError(f"{where}: metrics.{METRICS}", "must be an object")
            elif "choices" in item or "object" in item or "output" in item:
                metrics = None  # a response or stream chunk without per-request metrics
            else:
                raise InputError(
                    where,
                    f"expected a vLLM response with metrics.{METRICS}, or that object "
                    f"({HISTOGRAM}, {STEPS}, ...)",
                )
            if metrics is None:
                skipped += 1
                continue
            assert isinstance(metrics, dict)
            k, record = parse_metrics(metrics, where, workload)
            ks.setdefault(k, where)
            if len(ks) > 1:
                (k1, w1), (k2, w2) = list(ks.items())[:2]
                raise InputError(
                    w2,
                    f"num_spec_tokens {k2} where {w1} has {k1}: keep one server setting per file",
                )
            if record is None:
                skipped += 1
                continue
            records.append(record)
    k_file = next(iter(ks)) if ks else 0
    return k_file, records, skipped, next(iter(models), None)


def estimate_vllm_requests(
    path: str | Path, name: str = "draft", min_trials: int = MIN_TRIALS
) -> Estimate:
    """One drafter ``name`` (and its workloads) from every response in ``path``.

    Exact counts from requests with per-step arrays and from summary requests whose
    steps all drafted ``K``; bounded counts otherwise (module docstring). Positions
    reached by fewer than ``min_trials`` steps (their lower bound) are dropped from the
    end; ``k_max`` is ``K``, the server's ``num_speculative_tokens``.
    """
    path = Path(path)
    k, records, skipped, model = read_requests(path)
    if not records:
        raise InputError(
            path.name,
            f"no response with speculative steps (metrics.{METRICS}); start the server "
            "with --per-request-spec-decode-metrics detailed (or summary), and send "
            "requests with n = 1",
        )
    total = _Tally(k)
    by_workload: dict[str | None, _Tally] = {}
    for r in records:
        total.add(r)
        by_workload.setdefault(r.workload, _Tally(k)).add(r)
    s, n, lo = total.counts()
    if n[0] == 0:
        raise InputError(path.name, "no verify step drafted a token")
    counts = DrafterCounts(name, s, n, trials_low=lo if np.any(lo < n) else None)
    detailed = sum(r.accepted is not None for r in records)
    steps = sum(int(r.hist.sum()) for r in records)
    notes = [
        f"estimated from {len(records)} vLLM response(s) in {path.name} "
        f"(--per-request-spec-decode-metrics; {detailed} with per-step arrays), "
        f"num_speculative_tokens = {k}"
    ]
    if skipped:
        notes.append(f"{skipped} response(s) without speculative steps skipped")
    if counts.bounded:
        notes.append(
            f"{name}: some summary-level requests drafted fewer than {k} tokens per step "
            "(dynamic k, short drafts, or drafts the grammar rejected): their counts only "
            "bound the steps reaching each position, position 1 included; the value "
            "written is the middle of what the counts allow and acceptance_interval "
            "covers the whole range plus sampling error (the per-step arrays of "
            "--per-request-spec-decode-metrics detailed give exact counts)"
        )
    workloads = []
    labels = sorted(w for w in by_workload if w is not None)
    if labels:
        if None in by_workload:
            raise InputError(
                f"{path.name}: workload",
                "some responses have a workload and others none; give every line one",
            )
        tokens = sum(by_workload[w].tokens for w in labels)
        for label in labels:
            t = by_workload[label]
            ws, wn, wlo = t.counts()
            c = DrafterCounts(name, ws, wn, trials_low=wlo if np.any(wlo < wn) else None)
            try:
                c = c.trimmed(min_trials)
            except InputError as exc:
                raise InputError(f"workload {quote(label)}", exc.message) from None
            workloads.append(WorkloadCounts(label, t.tokens / tokens, [c]))
        notes.append("workload weights: each workload's share of tokens from speculative steps")
    notes.append(
        "acceptance at position j: steps that drafted j or more tokens and accepted the "
        "first j - 1, and of those the ones accepting the j-th"
    )
    notes.append("acceptance_interval: 95% Jeffreys (Beta posterior) intervals")
    lo_a, hi_a = counts.acceptance_range
    report: dict = {
        "requests": len(records),
        "detailed_requests": detailed,
        "skipped": skipped,
        "steps": steps,
        "num_spec_tokens": k,
        "accepted_per_position": s.tolist(),
        "reached_per_position": n.tolist(),
    }
    if model is not None:
        report["model"] = model
    if counts.bounded:
        report["reached_per_position_low"] = lo.tolist()
        report["acceptance_range"] = [[float(a), float(b)] for a, b in zip(lo_a, hi_a, strict=True)]
    return Estimate(
        source="vllm-requests",
        drafters=[counts.trimmed(min_trials)],
        convention="bonus",
        k_max=k,
        workloads=workloads,
        notes=notes,
        report=report,
    )


class VLLMRequestsReader(Reader):
    """``--format vllm-requests``: vLLM's per-request metrics (module docstring)."""

    name = "vllm-requests"
    reads = "vLLM's per-request speculative metrics (JSONL of responses)"
    counts_exactly = VLLM_EXACT

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        return estimate_vllm_requests(path, options.drafter, options.min_trials)


__all__ = [
    "VLLMRequestsReader",
    "ACCEPTED",
    "DRAFTED",
    "FLOAT_TOLERANCE",
    "HISTOGRAM",
    "K_KEY",
    "METRICS",
    "PER_STEP",
    "STEPS",
    "estimate_vllm_requests",
    "parse_metrics",
    "read_requests",
    "summary_counts",
]
