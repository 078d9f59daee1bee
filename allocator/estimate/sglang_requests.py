"""SGLang's per-request speculative statistics (JSON Lines of responses) → acceptance counts.

The estimator: docs/design.md §8.9. Source: SGLang 0.5.23.

One JSON value per line: a response of SGLang's native ``/generate`` with its
``meta_info`` (or a list of them, as a batch request returns), or an OpenAI-style
response (``/v1/completions``, ``/v1/chat/completions``; a saved stream's chunks, a
``data:`` prefix dropped) whose ``sglext.spec_tokens_details`` holds the same fields
(``SglExt`` and ``SpecTokensDetails``, python/sglang/srt/entrypoints/openai/protocol.py;
filled by ``spec_tokens_details_from_meta_info``, .../openai/utils.py, only when the
request sets ``"return_spec_tokens_details": true``; a list of them when ``n > 1``).
OpenAI-style responses without ``sglext.spec_tokens_details`` are skipped. SGLang fills,
per request (``TokenizerManager._calculate_spec_decoding_metrics``,
python/sglang/srt/managers/tokenizer_manager.py, from the scheduler's counters,
``_resolve_spec_v2_tokens`` in .../managers/scheduler_components/batch_result_processor.py):

- ``spec_verify_ct``: verify rounds of the request (set when it had any);
- ``spec_correct_drafts_histogram``: entry ``n`` = rounds whose accepted path held exactly
  ``n`` drafted tokens (the bonus token not counted; the list ends at the largest ``n``
  seen). Older releases name it ``spec_accept_histogram``, kept as an alias;
- ``spec_num_correct_drafts`` (alias ``spec_accepted_drafts``) = ``Σ n · hist[n]``;
- ``spec_num_proposed_drafts`` (alias ``spec_proposed_drafts``) =
  ``spec_verify_ct · (speculative_num_draft_tokens − 1)``, computed in the tokenizer
  process from the *starting* server settings, not from the rounds.

An optional top-level ``workload`` field (a string) puts the request in a workload.

What a round's numbers mean, by server setting:

- **Chain** (``--speculative-eagle-topk 1``; SGLang then sets ``num_draft_tokens =
  num_steps + 1``, python/sglang/srt/arg_groups/speculative_hook.py): ``P =
  proposed / verify_ct`` is ``k``, the drafted tokens per round.
- **Token tree** (top-k > 1, e.g. SGLang's own choice ``(steps, topk, tokens) = (5, 4,
  8)`` for Llama, ``_auto_choose_speculative_params``): ``P = num_draft_tokens − 1`` is
  the tree's *node* count, not its depth ``--speculative-num-steps``; the histogram
  counts the accepted path's depth. The per-position numbers are then the tree's
  acceptance by depth (a round whose path stopped at depth ``n`` below the tree's depth
  reached depth ``n + 1`` and no candidate there was right), and positions stop at the
  depth: ``--k`` (the depth), else the deepest accepted path (a note says so). Reading
  ``P`` as a chain's ``k`` would report positions past the depth as reached and never
  accepted (acceptance 0), so when neither ``topk`` nor ``--k`` is given and no round
  accepted as many as ``P`` drafts — the mark of a tree, or of a chain whose last
  positions were never accepted — the file is refused and asks which it is.
- **Adaptive** (``--speculative-adaptive``, chains only: ``adaptive_unsupported_reason``,
  python/sglang/srt/speculative/adaptive_spec_params.py): the worker changes
  ``num_steps`` per batch among the config's ``candidate_steps`` (default
  ``DEFAULT_ADAPTIVE_CONFIG``: 1, 3, 5, 7 at batch < 8, 0, 1, 3 below 32, 0, 1 below 64,
  0 above; union 0, 1, 3, 5, 7), while ``P`` keeps the starting steps; a round at 0
  steps verifies only the bonus token (``_build_trivial_verify_input``,
  python/sglang/srt/speculative/eagle_worker_v2.py) and still counts as a verify round
  with 0 correct drafts. A round accepting more than ``P`` drafts happens only then, so
  it marks the run adaptive (or ``adaptive=True`` / ``adaptive_steps`` say so). A round
  with ``n`` correct drafts drafted some candidate ``s ≥ n``: when ``n`` is not a
  candidate it drafted at least ``n + 1`` and reached position ``n + 1`` (exact); when
  ``n`` is a candidate it may have stopped there, so the rounds reaching ``n + 1`` lie
  in ``[Σ_{m > n} hist[m], Σ_{m ≥ n} hist[m]]`` and that acceptance is only bounded
  (:class:`~.counts.DrafterCounts` ``trials_low``). Positions run to the largest
  candidate.

Estimation (every mode): position ``j`` is accepted by ``Σ_{n ≥ j} hist[n]`` rounds and
reached by ``Σ_{n ≥ j−1} hist[n]`` (less the bounded share above), over the summed
histogram (vLLM's cumulative form with ``per_pos[j] = Σ_{n > j} hist[n]`` over ``Σ hist``
drafts). Without ``--k`` and without ``spec_num_proposed_drafts`` positions stop at the
largest accepted count seen (a note says so: a position where every round failed is then
not seen). SGLang computes the proposed count from its settings, not from the drafts:
drafts shorter than ``k`` (NGRAM finding fewer tokens) are not visible in these fields.

Workload weights: each workload's share of the tokens its spec rounds produced,
``Σ (n + 1) · hist[n]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..exceptions import InputError, ParameterError
from ..validate import whole
from .base import Reader, ReadOptions, quote
from .counts import MIN_TRIALS, DrafterCounts, Estimate, WorkloadCounts
from .jsonl import MAX_COUNT, json_lines, whole_count
from .vllm_metrics import cumulative_to_counts

HISTOGRAM = "spec_correct_drafts_histogram"
HISTOGRAM_ALIAS = "spec_accept_histogram"
CORRECT = ("spec_num_correct_drafts", "spec_accepted_drafts")
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts")
#: ``candidate_steps`` of SGLang's ``DEFAULT_ADAPTIVE_CONFIG``, all batch sizes together
#: (python/sglang/srt/speculative/adaptive_spec_params.py, SGLang 0.5.23).
DEFAULT_ADAPTIVE_STEPS = (0, 1, 3, 5, 7)
__all__ = [
    "DEFAULT_ADAPTIVE_STEPS",
    "SGLangRequestsReader",
    "MAX_COUNT",
    "adaptive_counts",
    "estimate_sglang_requests",
    "histogram_counts",
    "read_requests",
]


def _count(value: object, where: str) -> int:
    return whole_count(value, where)


def _histogram(meta: dict, where: str, prefix: str) -> np.ndarray | None:
    found = {key: meta[key] for key in (HISTOGRAM, HISTOGRAM_ALIAS) if key in meta}
    if not found:
        return None
    hists = {}
    for key, raw in found.items():
        if not isinstance(raw, list):
            raise InputError(f"{where}: {prefix}.{key}", "must be a list of counts")
        hists[key] = np.array(
            [_count(v, f"{where}: {prefix}.{key}[{n}]") for n, v in enumerate(raw)], np.int64
        )
    if len(hists) == 2 and not np.array_equal(hists[HISTOGRAM], hists[HISTOGRAM_ALIAS]):
        raise InputError(
            f"{where}: {prefix}.{HISTOGRAM_ALIAS}",
            f"differs from {HISTOGRAM} (it is its alias and must be equal)",
        )
    return next(iter(hists.values()))


def _first(meta: dict, keys: tuple[str, ...]) -> tuple[str, object] | None:
    for key in keys:
        if key in meta:
            return key, meta[key]
    return None


def _statistics(item: dict, where: str) -> list[tuple[dict, str]] | None:
    """The statistics objects of one response and the name they are found under
    (``meta_info`` or ``sglext.spec_tokens_details``); ``[]`` when an OpenAI-style
    response carries none; ``None`` when ``item`` is no SGLang response."""
    if "meta_info" in item and isinstance(item["meta_info"], dict):
        return [(item["meta_info"], "meta_info")]
    ext = item.get("sglext")
    if ext is not None:
        if not isinstance(ext, dict):
            raise InputError(f"{where}: sglext", "must be an object")
        details = ext.get("spec_tokens_details")
        prefix = "sglext.spec_tokens_details"
        if details is None:
            return []
        if isinstance(details, dict):
            return [(details, prefix)]
        if isinstance(details, list) and all(isinstance(d, dict) for d in details):
            return [(d, f"{prefix}[{i}]") for i, d in enumerate(details)]
        raise InputError(f"{where}: {prefix}", "must be an object or a list of objects")
    if "choices" in item or "object" in item:
        return []  # OpenAI-style, without return_spec_tokens_details (or a plain chunk)
    return None


def read_requests(path: Path) -> tuple[list[tuple[str | None, np.ndarray]], set[int], int]:
    """``[(workload, histogram)]`` of the requests with spec rounds, the drafts per round
    their ``spec_num_proposed_drafts`` imply, and how many responses had no rounds."""
    requests: list[tuple[str | None, np.ndarray]] = []
    lengths: set[int] = set()
    skipped = 0
    for where, data in json_lines(path):
        items = data if isinstance(data, list) else [data]
        for item in items:
            found = _statistics(item, where) if isinstance(item, dict) else None
            if found is None:
                raise InputError(
                    where,
                    "expected an SGLang response object with meta_info (or an OpenAI-style "
                    "response with sglext.spec_tokens_details)",
                )
            if not found:
                skipped += 1
                continue
            assert isinstance(item, dict)
            workload = item.get("workload")
            if workload is not None and not isinstance(workload, str):
                raise InputError(f"{where}: workload", f"{quote(workload)} is not a string")
            for meta, prefix in found:
                hist = _histogram(meta, where, prefix)
                verify = meta.get("spec_verify_ct")
                if hist is not None and hist.size == 0 and not verify:
                    hist = None  # SpecTokensDetails' defaults for a request without rounds
                if hist is None:
                    if verify is not None and _count(verify, f"{where}: {prefix}.spec_verify_ct"):
                        raise InputError(
                            f"{where}: {prefix}",
                            f"spec_verify_ct without {HISTOGRAM} (or {HISTOGRAM_ALIAS}): this "
                            "SGLang returns no histogram, and per-position acceptance needs it",
                        )
                    skipped += 1
                    continue
                rounds = int(hist.sum())
                if verify is not None:
                    v = _count(verify, f"{where}: {prefix}.spec_verify_ct")
                    if v != rounds:
                        raise InputError(
                            f"{where}: {prefix}.spec_verify_ct",
                            f"{v} rounds, but the histogram counts {rounds}",
                        )
                correct = _first(meta, CORRECT)
                if correct is not None:
                    c = _count(correct[1], f"{where}: {prefix}.{correct[0]}")
                    implied = int(np.arange(hist.size) @ hist)
                    if c != implied:
                        raise InputError(
                            f"{where}: {prefix}.{correct[0]}",
                            f"{c} correct drafts, but the histogram implies {implied}",
                        )
                proposed = _first(meta, PROPOSED)
                if proposed is not None and rounds:
                    p = _count(proposed[1], f"{where}: {prefix}.{proposed[0]}")
                    if p % rounds:
                        raise InputError(
                            f"{where}: {prefix}.{proposed[0]}",
                            f"{p} is not a whole number of drafts per round ({rounds} rounds)",
                        )
                    lengths.add(p // rounds)
                if rounds == 0:
                    skipped += 1
                    continue
                requests.append((workload, hist))
    return requests, lengths, skipped


def histogram_counts(name: str, hist: np.ndarray, k: int, source: str) -> DrafterCounts:
    """Counts at positions ``1 … k`` from a histogram of correct drafts per round
    (a chain of ``k``, or a tree of depth ``k``)."""
    if hist.size - 1 > k:
        raise InputError(
            source,
            f"a round accepted {hist.size - 1} drafts, more than the {k} drafted per round",
        )
    h = np.pad(hist, (0, k + 1 - hist.size))
    tail = np.cumsum(h[::-1])[::-1]  # tail[n] = Σ_{m >= n} h[m]
    return cumulative_to_counts(name, float(tail[0]), tail[1 : k + 1].astype(float), source)


def adaptive_counts(
    name: str, hist: np.ndarray, steps: Sequence[int], k: int, source: str
) -> DrafterCounts:
    """Counts at positions ``1 … k`` of an adaptive run whose rounds drafted one of
    ``steps`` tokens each (module docstring): exact where ``j − 1`` is not a candidate,
    bounded (``trials_low``) where it is."""
    if hist.size - 1 > k:
        raise InputError(
            source,
            f"a round accepted {hist.size - 1} drafts, more than the largest candidate step "
            f"{k}; give the adaptive config's candidate steps",
        )
    h = np.pad(hist, (0, k + 1 - hist.size))
    tail = np.cumsum(h[::-1])[::-1]
    successes = tail[1 : k + 1].astype(np.int64)
    trials = tail[:k].astype(np.int64)
    candidate = np.isin(np.arange(k), np.asarray(list(steps), np.int64))  # j - 1 a step
    low = np.where(candidate, successes, trials)
    if trials[0] <= 0:
        raise InputError(source, f"model {quote(name)}: no drafts recorded (num_drafts is 0)")
    return DrafterCounts(name, successes, trials, trials_low=low)


def _steps(adaptive_steps: Sequence[int]) -> tuple[int, ...]:
    steps = []
    for s in adaptive_steps:
        steps.append(whole(s, "adaptive_steps", lo=0))
    if not steps or max(steps) < 1:
        raise ParameterError("adaptive_steps", "needs a candidate of at least 1 step")
    return tuple(sorted(set(steps)))


def estimate_sglang_requests(
    path: str | Path,
    name: str = "draft",
    min_trials: int = MIN_TRIALS,
    k: int | None = None,
    *,
    topk: int | None = None,
    adaptive: bool | None = None,
    adaptive_steps: Sequence[int] | None = None,
) -> Estimate:
    """One drafter ``name`` (and its workloads) from every response in ``path``.

    ``k``: the chain's draft length, or the tree's depth (``--speculative-num-steps``).
    ``topk``: ``--speculative-eagle-topk`` (> 1: a token tree; 1: a chain). ``adaptive``:
    ``True`` for a ``--speculative-adaptive`` run, ``False`` to refuse one, ``None`` to
    tell from the responses; ``adaptive_steps``: its config's candidate steps (implies
    ``adaptive``; default :data:`DEFAULT_ADAPTIVE_STEPS`). The modes: module docstring.
    """
    path = Path(path)
    if topk is not None:
        whole(topk, "topk", lo=1)
    if k is not None:
        whole(k, "k", lo=1)
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
    most = width - 1  # the most drafts any round accepted
    notes = [f"estimated from {len(requests)} SGLang response(s) in {path.name}"]
    if len(lengths) > 1:
        raise InputError(
            path.name,
            f"responses report different draft lengths ({', '.join(map(str, sorted(lengths)))} "
            "per round, from spec_num_proposed_drafts); keep one server setting per file",
        )
    proposed = next(iter(lengths)) if lengths else None
    if adaptive_steps is not None:
        adaptive = True if adaptive is None else adaptive
        if not adaptive:
            raise ParameterError("adaptive_steps", "given for a run declared not adaptive")
    detected = proposed is not None and most > proposed
    if adaptive is None and detected:
        adaptive = True
        notes.append(
            f"adaptive run (--speculative-adaptive): a round accepted {most} drafts, more "
            f"than the {proposed} per round of spec_num_proposed_drafts, which SGLang "
            "computes from the starting --speculative-num-steps; each round drafted one "
            "of the adaptive config's candidate steps"
        )
    if adaptive:
        if topk is not None and topk > 1:
            raise ParameterError(
                "topk", f"{topk}: SGLang runs --speculative-adaptive with top-k 1 only"
            )
        steps = _steps(adaptive_steps if adaptive_steps is not None else DEFAULT_ADAPTIVE_STEPS)
        if adaptive_steps is None:
            notes.append(
                "candidate steps "
                + ", ".join(map(str, steps))
                + " (SGLang's default adaptive config; give --adaptive-steps for another)"
            )
        if proposed is not None and proposed not in steps:
            seen = f"a round accepted {most} drafts, more than the {proposed}" if detected else ""
            raise InputError(
                path.name,
                (
                    f"{seen} per round of spec_num_proposed_drafts; that count"
                    if seen
                    else f"spec_num_proposed_drafts gives {proposed} per round; that"
                )
                + " is an adaptive run's starting --speculative-num-steps, but it is not "
                f"among the candidate steps {', '.join(map(str, steps))} (give the adaptive "
                "config's --adaptive-steps)",
            )
        if k is not None and k > max(steps):
            raise ParameterError("k", f"{k} exceeds the largest candidate step {max(steps)}")
        k = max(steps) if k is None else k

        def counts_of(hist: np.ndarray) -> DrafterCounts:
            assert k is not None
            return adaptive_counts(name, hist, steps, k, path.name)

        bounded = [j + 1 for j in range(k) if j in steps]
        notes.append(
            "positions "
            + ", ".join(map(str, bounded))
            + " are only bounded: a round that accepted every draft of a candidate step "
            "(0 at a step with no drafts) stopped there, one that accepted as many of a "
            "longer draft went on; the value written is the middle of what the counts "
            "allow and acceptance_interval covers the whole range plus sampling error"
        )
        mode = "adaptive"
    else:
        if proposed is not None and most > proposed:
            raise InputError(
                path.name,
                f"a round accepted {most} drafts, more than the {proposed} drafted per round "
                "(an adaptive run? it was declared not adaptive)",
            )
        tree = topk is not None and topk > 1
        if k is not None and proposed is not None and k > proposed:
            # a position past the drafted ones was never proposed: counting its rounds as
            # reached-and-rejected would report an acceptance of ~0 there
            raise ParameterError(
                "k",
                f"{k} exceeds the {proposed} drafted token(s) per round that "
                "spec_num_proposed_drafts reports; positions past it were never drafted",
            )
        if k is None and tree:
            k = max(most, 1)
            notes.append(
                f"k unknown (no --k): positions stop at {k}, the deepest accepted path; "
                "a deeper level where every round failed is not seen"
            )
        elif k is None and proposed is not None:
            if topk is None and most < proposed:
                raise InputError(
                    path.name,
                    f"no round accepted more than {most} of the {proposed} drafts per round "
                    "that spec_num_proposed_drafts implies: with a token tree "
                    "(--speculative-eagle-topk > 1) that count is the tree's nodes, not its "
                    "depth; give --topk and the depth as --k, or --topk 1 for a chain whose "
                    "later positions were never accepted",
                )
            k = proposed
            notes.append(f"k = {k} drafted tokens per round, from spec_num_proposed_drafts")
        elif k is None:
            k = max(most, 1)
            notes.append(
                f"k unknown (no --k, no spec_num_proposed_drafts): positions stop at {k}, the "
                "most drafts any round accepted; a later position where every round failed "
                "is not seen"
            )
        if tree:
            notes.append(
                f"token tree (top-k {topk}"
                + (f", {proposed} nodes per round" if proposed is not None else "")
                + f", depth {k}): acceptance by depth of the accepted path, not a chain's "
                "positions"
            )

        def counts_of(hist: np.ndarray) -> DrafterCounts:
            assert k is not None
            return histogram_counts(name, hist, k, path.name)

        mode = "tree" if tree else "chain"
    if skipped:
        notes.append(f"{skipped} response(s) without speculative rounds skipped")
    counts = counts_of(total)
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
                c = counts_of(hists[label]).trimmed(min_trials)
            except InputError as exc:
                raise InputError(f"workload {quote(label)}", exc.message) from None
            workloads.append(WorkloadCounts(label, tokens[label] / sum(tokens.values()), [c]))
        notes.append("workload weights: each workload's share of tokens from speculative rounds")
    notes.append("acceptance at position j: rounds accepting >= j drafts / rounds accepting >= j-1")
    notes.append("acceptance_interval: 95% Jeffreys (Beta posterior) intervals")
    report: dict = {
        "requests": len(requests),
        "skipped": skipped,
        "rounds": int(total.sum()),
        "correct_drafts_histogram": total.tolist(),
        "mode": mode,
    }
    if topk is not None:
        report["topk"] = topk
    if mode == "adaptive":
        report["candidate_steps"] = list(steps)
        report["reached_per_position_low"] = counts.trials_low.tolist()  # type: ignore[union-attr]
    return Estimate(
        source="sglang-requests",
        drafters=[counts.trimmed(min_trials)],
        convention="bonus",
        k_max=k,
        workloads=workloads,
        notes=notes,
        report=report,
    )


class SGLangRequestsReader(Reader):
    """``--format sglang-requests``: SGLang's responses (module docstring)."""

    name = "sglang-requests"
    reads = "SGLang responses (JSONL) with per-request acceptance histograms"
    options = ("k", "topk", "adaptive", "adaptive_steps")

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        if options.k is not None:
            whole(options.k, "k", lo=1)
        return estimate_sglang_requests(
            path,
            options.drafter,
            options.min_trials,
            options.k,
            topk=options.topk,
            adaptive=options.adaptive,
            adaptive_steps=options.adaptive_steps,
        )
