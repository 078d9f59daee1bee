"""Seeded synthetic measurements from drafters whose statistics are known exactly.

Independent of ``allocator``: the generators below simulate draft rounds directly
and write the formats a serving system or a logging harness would write.
"""

from __future__ import annotations

import csv
import json

import numpy as np
from prometheus_client import CollectorRegistry, Counter, generate_latest
from scipy import stats


def simulate_outcomes(rng, acc, corr, rounds, k):
    """Joint outcome rows of ``rounds`` rounds of length ``k``.

    ``acc``: ``(N, J)`` per-position conditional acceptance (last column repeats);
    ``corr``: ``(N, N)`` latent Gaussian correlation of the drafters' errors.
    Drafter ``i`` is correct at position ``j`` when ``Z_i >= Phi^-1(1 - a_i(j))``,
    ``Z ~ N(0, corr)`` drawn afresh at every position. A round logs positions
    ``1..L``: it stops after the first position where every drafter fails, or at ``k``.
    Returns ``(round_ids, positions, outcomes (R, N) int)``.
    """
    acc = np.asarray(acc, float)
    n, j = acc.shape
    a = acc[:, np.minimum(np.arange(k), j - 1)]  # (N, k)
    z = rng.multivariate_normal(np.zeros(n), corr, size=(rounds, k))  # (rounds, k, N)
    correct = z >= stats.norm.ppf(1.0 - a.T)[None]
    any_ok = correct.any(axis=2)
    reached = np.ones((rounds, k), bool)
    reached[:, 1:] = np.cumprod(any_ok[:, :-1], axis=1).astype(bool)
    r_idx, p_idx = np.nonzero(reached)
    return r_idx, p_idx + 1, correct[r_idx, p_idx].astype(int)


def write_outcomes_csv(path, names, rounds, positions, outcomes, workloads=None):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "position", *(["workload"] if workloads is not None else []), *names])
        for i in range(len(rounds)):
            extra = [workloads[i]] if workloads is not None else []
            w.writerow([int(rounds[i]), int(positions[i]), *extra, *outcomes[i].tolist()])


def write_outcomes_jsonl(path, names, rounds, positions, outcomes):
    with open(path, "w") as f:
        for i in range(len(rounds)):
            row = {"round": int(rounds[i]), "position": int(positions[i])}
            row.update({n: int(v) for n, v in zip(names, outcomes[i], strict=True)})
            f.write(json.dumps(row) + "\n")


def simulate_chain(rng, acc, rounds, k):
    """One drafter's rounds as vLLM counts them: cumulative per-position accepted counts.

    ``acc``: ``(J,)`` conditional acceptance by position (last repeats). Returns
    ``per_pos (k,)``: rounds whose first ``i + 1`` drafted tokens were all accepted.
    """
    acc = np.asarray(acc, float)
    a = acc[np.minimum(np.arange(k), acc.size - 1)]
    ok = rng.random((rounds, k)) < a
    return np.cumprod(ok, axis=1).sum(axis=0)


def simulate_short_drafts(rng, acc, rounds, k, lengths):
    """Rounds whose drafts hold ``lengths`` tokens ``(rounds,)`` (1..k) as vLLM counts them.

    Acceptance is drawn along ``k`` positions as in :func:`simulate_chain`, then cut at
    the draft's length. Returns ``(per_pos (k,), draft_tokens)``.
    """
    acc = np.asarray(acc, float)
    a = acc[np.minimum(np.arange(k), acc.size - 1)]
    ok = rng.random((rounds, k)) < a
    accepted = np.minimum(np.cumprod(ok, axis=1).sum(axis=1), lengths)
    per_pos = np.array([(accepted > i).sum() for i in range(k)])
    return per_pos, int(np.sum(lengths))


def vllm_exposition(models: dict[str, list[tuple]], openmetrics: bool = False) -> str:
    """vLLM-style Prometheus text from real ``prometheus_client`` counters.

    ``models``: model_name → one ``(num_drafts, per_pos)`` or ``(num_drafts, per_pos,
    num_draft_tokens)`` per engine (tokens default to ``num_drafts * k``). With
    ``openmetrics`` the OpenMetrics exposition (ending ``# EOF``).
    """
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = Counter("vllm:spec_decode_num_drafts", "drafts", labels, registry=reg)
    tokens = Counter("vllm:spec_decode_num_draft_tokens", "draft tokens", labels, registry=reg)
    acc = Counter("vllm:spec_decode_num_accepted_tokens", "accepted", labels, registry=reg)
    per = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "accepted per position",
        labels + ["position"],
        registry=reg,
    )
    for model, engines in models.items():
        for e, item in enumerate(engines):
            n, per_pos = item[0], item[1]
            drafts.labels(model, str(e)).inc(n)
            tokens.labels(model, str(e)).inc(item[2] if len(item) > 2 else n * len(per_pos))
            acc.labels(model, str(e)).inc(int(np.sum(per_pos)))
            for i, c in enumerate(per_pos):
                per.labels(model, str(e), str(i)).inc(int(c))
    if openmetrics:
        from prometheus_client.openmetrics.exposition import generate_latest as om_latest

        return om_latest(reg).decode()
    return generate_latest(reg).decode()


def vllm_log_line(
    num_drafts: int, per_pos: np.ndarray, seconds: float = 10.0, drafted: int | None = None
) -> str:
    """One ``SpecDecoding metrics:`` line as vLLM v1 logs it (rates to 3 decimals);
    ``drafted`` defaults to ``num_drafts * k`` (every draft full length)."""
    k = len(per_pos)
    accepted = int(np.sum(per_pos))
    drafted = num_drafts * k if drafted is None else drafted
    rates = ", ".join(f"{p / num_drafts:.3f}" for p in per_pos)
    return (
        "INFO 06-03 14:05:12 [metrics.py:86] SpecDecoding metrics: "
        f"Mean acceptance length: {1 + accepted / num_drafts:.2f}, "
        f"Accepted throughput: {accepted / seconds:.2f} tokens/s, "
        f"Drafted throughput: {drafted / seconds:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
        f"Per-position acceptance rate: {rates}, "
        f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%"
    )


def sglang_response(hist, workload=None, k=None, alias=True) -> dict:
    """One SGLang ``/generate`` response with the speculative ``meta_info`` fields.

    ``hist``: correct drafts per round histogram (entry ``n`` = rounds accepting ``n``).
    """
    hist = [int(v) for v in hist]
    rounds = sum(hist)
    correct = sum(n * c for n, c in enumerate(hist))
    meta = {
        "id": "0" * 12,
        "completion_tokens": 1 + correct + rounds,
        "spec_verify_ct": rounds,
        "spec_num_correct_drafts": correct,
        "spec_correct_drafts_histogram": hist,
    }
    if k is not None:
        meta["spec_num_proposed_drafts"] = rounds * k
    if alias:
        meta["spec_accept_histogram"] = list(hist)
    out = {"text": "...", "meta_info": meta}
    if workload is not None:
        out["workload"] = workload
    return out


def sglang_decode_line(accept_len: float, running: int, forward: int) -> str:
    """One SGLang ``Decode batch`` log line with ``accept len`` (2 decimals)."""
    return (
        f"[2026-12-01 05:00:00] Decode batch [{forward}], #running-req: {running}, "
        f"#token: {running * 500}, token usage: 0.03, accept len: {accept_len:.2f}, "
        "accept rate: 0.50, cuda graph: True, gen throughput (token/s): 900.00, #queue-req: 0, "
    )
