"""SGLang's per-request speculative statistics (JSON Lines of responses) → acceptance counts.

The estimator: docs/design.md §8.9.

One JSON object per line: a response of SGLang's native ``/generate`` (or a list of
them, as a batch request returns), with its ``meta_info``. SGLang fills, per request
(``fill_spec_decoding_meta`` in the tokenizer manager, python/sglang/srt/managers/, and
the scheduler's output streamer, sgl-project/sglang):

- ``spec_verify_ct``: verify rounds of the request (set when it had any);
- ``spec_correct_drafts_histogram``: entry ``n`` = rounds that accepted exactly ``n``
  drafted tokens (the bonus token not counted; the list ends at the largest ``n``
  seen). Older releases name it ``spec_accept_histogram``, kept as an alias;
- ``spec_num_correct_drafts`` (alias ``spec_accepted_drafts``) = ``Σ n · hist[n]``;
- ``spec_num_proposed_drafts`` (alias ``spec_proposed_drafts``) =
  ``spec_verify_ct · (speculative_num_draft_tokens − 1)``: ``k`` per round for a chain.

An optional top-level ``workload`` field (a string) puts the request in a workload.

Estimation (chains, ``--speculative-eagle-topk 1``): a round with ``n`` correct drafts
reached positions ``1 … n + 1`` (``n < k``) and was accepted at ``1 … n``, so, over the
summed histogram, position ``j`` (1-based) was reached by ``Σ_{n ≥ j−1} hist[n]`` rounds
and accepted by ``Σ_{n ≥ j} hist[n]`` (vLLM's cumulative form with ``per_pos[j] =
Σ_{n > j} hist[n]`` over ``Σ hist`` drafts). ``k`` comes from ``--k``, or else from
``spec_num_proposed_drafts / spec_verify_ct``; without either, positions stop at the
largest accepted count seen (a note says so: a position where every round failed is
then not seen). With a token tree (top-k > 1) the histogram counts the accepted path's
length, and the per-position numbers are the tree's acceptance by depth, not a chain's.
SGLang computes the proposed count from its settings, not from the drafts: drafts
shorter than ``k`` (NGRAM finding fewer tokens) are not visible in these fields.

Workload weights: each workload's share of the tokens its spec rounds produced,
``Σ (n + 1) · hist[n]``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..exceptions import InputError, ParameterError
from .counts import MIN_TRIALS, DrafterCounts, Estimate, WorkloadCounts, read_text
from .vllm_metrics import cumulative_to_counts

HISTOGRAM = "spec_correct_drafts_histogram"
HISTOGRAM_ALIAS = "spec_accept_histogram"
CORRECT = ("spec_num_correct_drafts", "spec_accepted_drafts")
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts")
#: The largest count taken (exact as a float; far past any server's).
MAX_COUNT = 2**53


def _count(value: object, where: str) -> int:
    # JSON lines may hold NaN and Infinity (Python's json reads them): not counts either
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise InputError(where, f"{value!r} is not a whole number")
    if value < 0:
        raise InputError(where, f"{value!r} is negative; counts cannot be")
    if value > MAX_COUNT:
        # past 2**53 a JSON number is no longer an exact count, and sums of such
        # counts overflow the int64 totals
        raise InputError(where, f"{value!r} is too large to be a count (more than 2**53)")
    return int(value)


def _histogram(meta: dict, where: str) -> np.ndarray | None:
    found = {key: meta[key] for key in (HISTOGRAM, HISTOGRAM_ALIAS) if key in meta}
    if not found:
        return None
    hists = {}
    for key, raw in found.items():
        if not isinstance(raw, list):
            raise InputError(f"{where}: meta_info.{key}", "must be a list of counts")
        hists[key] = np.array(
            [_count(v, f"{where}: meta_info.{key}[{n}]") for n, v in enumerate(raw)], np.int64
        )
    if len(hists) == 2 and not np.array_equal(hists[HISTOGRAM], hists[HISTOGRAM_ALIAS]):
        raise InputError(
            f"{where}: meta_info.{HISTOGRAM_ALIAS}",
            f"differs from {HISTOGRAM} (it is its alias and must be equal)",
        )
    return next(iter(hists.values()))


def _first(meta: dict, keys: tuple[str, ...]) -> tuple[str, object] | None:
    for key in keys:
        if key in meta:
            return key, meta[key]
    return None


def read_requests(path: Path) -> tuple[list[tuple[str | None, np.ndarray]], set[int], int]:
    """``[(workload, histogram)]`` of the requests with spec rounds, the draft lengths
    their ``spec_num_proposed_drafts`` imply, and how many responses had no rounds."""
    text = read_text(path)
    requests: list[tuple[str | None, np.ndarray]] = []
    lengths: set[int] = set()
    skipped = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(where, f"not JSON ({exc.msg}, column {exc.colno})") from None
        items = data if isinstance(data, list) else [data]
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("meta_info"), dict):
                raise InputError(where, "expected an SGLang response object with meta_info")
            meta = item["meta_info"]
            workload = item.get("workload")
            if workload is not None and not isinstance(workload, str):
                raise InputError(f"{where}: workload", f"{workload!r} is not a string")
            hist = _histogram(meta, where)
            verify = meta.get("spec_verify_ct")
            if hist is None:
                if verify is not None and _count(verify, f"{where}: meta_info.spec_verify_ct"):
                    raise InputError(
                        f"{where}: meta_info",
                        f"spec_verify_ct without {HISTOGRAM} (or {HISTOGRAM_ALIAS}): this "
                        "SGLang returns no histogram, and per-position acceptance needs it",
                    )
                skipped += 1
                continue
            rounds = int(hist.sum())
            if verify is not None:
                v = _count(verify, f"{where}: meta_info.spec_verify_ct")
                if v != rounds:
                    raise InputError(
                        f"{where}: meta_info.spec_verify_ct",
                        f"{v} rounds, but the histogram counts {rounds}",
                    )
            correct = _first(meta, CORRECT)
            if correct is not None:
                c = _count(correct[1], f"{where}: meta_info.{correct[0]}")
                implied = int(np.arange(hist.size) @ hist)
                if c != implied:
                    raise InputError(
                        f"{where}: meta_info.{correct[0]}",
                        f"{c} correct drafts, but the histogram implies {implied}",
                    )
            proposed = _first(meta, PROPOSED)
            if proposed is not None and rounds:
                p = _count(proposed[1], f"{where}: meta_info.{proposed[0]}")
                if p % rounds:
                    raise InputError(
                        f"{where}: meta_info.{proposed[0]}",
                        f"{p} is not a whole number of drafts per round ({rounds} rounds)",
                    )
                lengths.add(p // rounds)
            if rounds == 0:
                skipped += 1
                continue
            requests.append((workload, hist))
    return requests, lengths, skipped


def histogram_counts(name: str, hist: np.ndarray, k: int, source: str) -> DrafterCounts:
    """Counts at positions ``1 … k`` from a histogram of correct drafts per round."""
    if hist.size - 1 > k:
        raise InputError(
            source,
            f"a round accepted {hist.size - 1} drafts, more than the {k} drafted per round",
        )
    h = np.pad(hist, (0, k + 1 - hist.size))
    tail = np.cumsum(h[::-1])[::-1]  # tail[n] = Σ_{m >= n} h[m]
    return cumulative_to_counts(name, float(tail[0]), tail[1 : k + 1].astype(float), source)


def estimate_sglang_requests(
    path: str | Path, name: str = "draft", min_trials: int = MIN_TRIALS, k: int | None = None
) -> Estimate:
    """One drafter ``name`` (and its workloads) from every response in ``path``."""
    path = Path(path)
    requests, lengths, skipped = read_requests(path)
    if not requests:
        raise InputError(
            path.name,
            "no response with speculative rounds (meta_info.spec_verify_ct and "
            f"{HISTOGRAM}); is speculative decoding enabled on the server?",
        )
    width = max(h.size for _, h in requests)
    total = np.zeros(width, np.int64)
    for _, h in requests:
        total[: h.size] += h
    notes = [f"estimated from {len(requests)} SGLang response(s) in {path.name}"]
    if k is None and len(lengths) > 1:
        raise InputError(
            path.name,
            f"responses report different draft lengths ({', '.join(map(str, sorted(lengths)))} "
            "per round, from spec_num_proposed_drafts); keep one server setting per file",
        )
    if k is not None and lengths and k > max(lengths):
        # a position past the drafted ones was never proposed: counting its rounds as
        # reached-and-rejected would report an acceptance of ~0 there
        raise ParameterError(
            "k",
            f"{k} exceeds the {max(lengths)} drafted token(s) per round that "
            "spec_num_proposed_drafts reports; positions past it were never drafted",
        )
    if k is None and lengths:
        k = lengths.pop()
        notes.append(f"k = {k} drafted tokens per round, from spec_num_proposed_drafts")
    elif k is None:
        k = max(width - 1, 1)
        notes.append(
            f"k unknown (no --k, no spec_num_proposed_drafts): positions stop at {k}, the "
            "most drafts any round accepted; a later position where every round failed "
            "is not seen"
        )
    if skipped:
        notes.append(f"{skipped} response(s) without speculative rounds skipped")
    counts = histogram_counts(name, total, k, path.name)
    workloads = []
    labels = sorted({w for w, _ in requests if w is not None})
    if labels:
        if any(w is None for w, _ in requests):
            raise InputError(
                f"{path.name}: workload",
                "some responses have a workload and others none; give every line one",
            )
        tokens = {}
        hists = {}
        for label in labels:
            hs = [h for w, h in requests if w == label]
            hw = np.zeros(max(h.size for h in hs), np.int64)
            for h in hs:
                hw[: h.size] += h
            hists[label] = hw
            tokens[label] = float((np.arange(hw.size) + 1) @ hw)
        for label in labels:
            try:
                c = histogram_counts(name, hists[label], k, path.name).trimmed(min_trials)
            except InputError as exc:
                raise InputError(f"workload {label!r}", exc.message) from None
            workloads.append(WorkloadCounts(label, tokens[label] / sum(tokens.values()), [c]))
        notes.append("workload weights: each workload's share of tokens from speculative rounds")
    notes.append("acceptance at position j: rounds accepting >= j drafts / rounds accepting >= j-1")
    notes.append("acceptance_interval: 95% Jeffreys (Beta posterior) intervals")
    return Estimate(
        source="sglang-requests",
        drafters=[counts.trimmed(min_trials)],
        convention="bonus",
        k_max=k,
        workloads=workloads,
        notes=notes,
        report={
            "requests": len(requests),
            "skipped": skipped,
            "rounds": int(total.sum()),
            "correct_drafts_histogram": total.tolist(),
        },
    )
