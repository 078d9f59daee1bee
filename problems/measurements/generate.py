"""Write the sample measurements beside this file, from drafters of known acceptance.

One seeded script, four formats, each as its engine writes it (the formats are those
read by ``allocator estimate``; the engine sources followed are named in
``allocator/estimate/*.py``):

- ``vllm-metrics.prom``: a vLLM ``/metrics`` scrape (Prometheus text, written with
  ``prometheus_client`` as vLLM does) of a server running an EAGLE-3 head with
  ``num_speculative_tokens = 4`` on two engines: counters
  ``vllm:spec_decode_num_drafts_total``, ``…_num_draft_tokens_total``,
  ``…_num_accepted_tokens_total``, ``…_num_accepted_tokens_per_pos_total``, labelled
  ``model_name`` and ``engine``. Every draft is 4 tokens long.
- ``vllm-ngram.log``: vLLM ``SpecDecoding metrics:`` lines of a prompt-lookup server
  (``method: ngram``, ``num_speculative_tokens = 3``) whose drafts are 1 to 3 tokens
  long (prompt lookup proposes what it finds), one line per 10-second interval.
- ``sglang-requests.jsonl``: responses of SGLang's ``/generate`` (EAGLE3, 3 steps,
  top-k 1, 4 draft tokens) with ``meta_info`` (``spec_verify_ct``,
  ``spec_correct_drafts_histogram`` and its alias ``spec_accept_histogram``,
  ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``, …) and a top-level
  ``workload`` (chat or code).
- ``sglang-decode.log``: the same SGLang server's ``Decode batch … accept len`` lines
  (every 40 decode steps, a varying number of running requests).
- ``outcomes.csv``: a joint outcome log (round, position, one 0/1 column per drafter)
  of an EAGLE-3 head and a prompt-lookup drafter on one verifier.

Truth (``truth.json``): every draft token is accepted independently with the
probability of its position (the conditional acceptance ``a(j)``; the last value
repeats), so every estimate can be checked against it. Run from anywhere:
``python problems/measurements/generate.py``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, generate_latest

SEED = 20261201
HERE = Path(__file__).resolve().parent
SERVED = "meta-llama/Llama-3.1-8B-Instruct"

VLLM_EAGLE3 = [0.80, 0.72, 0.65, 0.58]  # per position, k = 4
VLLM_ENGINE_DRAFTS = [30000, 20000]
NGRAM = [0.62, 0.50, 0.44]  # prompt lookup, k = 3
NGRAM_LINES = 40
SGLANG = {"chat": [0.78, 0.70, 0.62], "code": [0.90, 0.84, 0.78]}  # EAGLE3, k = 3
SGLANG_REQUESTS = {"chat": 300, "code": 200}
DECODE_LINES = 60
OUTCOMES = {"eagle3": [0.80, 0.72, 0.65, 0.58, 0.52], "ngram": [0.45]}  # k = 5
OUTCOME_ROUNDS = 3000


def chain(rng: np.random.Generator, acc: list[float], rounds: int, k: int) -> np.ndarray:
    """Accepted drafts per round ``(rounds,)``: the first rejection along ``k`` positions."""
    a = np.asarray(acc)[np.minimum(np.arange(k), len(acc) - 1)]
    ok = rng.random((rounds, k)) < a
    return np.cumprod(ok, axis=1).sum(axis=1)


def per_position(accepted: np.ndarray, k: int) -> np.ndarray:
    """vLLM's cumulative counts: ``per_pos[i]`` = rounds accepting at least ``i + 1``."""
    return np.array([(accepted > i).sum() for i in range(k)])


def write_vllm_metrics(rng: np.random.Generator) -> None:
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = Counter(
        "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=reg
    )
    tokens = Counter(
        "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=reg
    )
    accepted = Counter(
        "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=reg
    )
    per_pos = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        [*labels, "position"],
        registry=reg,
    )
    k = len(VLLM_EAGLE3)
    for engine, n in enumerate(VLLM_ENGINE_DRAFTS):
        acc = chain(rng, VLLM_EAGLE3, n, k)
        drafts.labels(SERVED, str(engine)).inc(n)
        tokens.labels(SERVED, str(engine)).inc(n * k)
        accepted.labels(SERVED, str(engine)).inc(int(acc.sum()))
        for i, c in enumerate(per_position(acc, k)):
            per_pos.labels(SERVED, str(engine), str(i)).inc(int(c))
    (HERE / "vllm-metrics.prom").write_bytes(generate_latest(reg))


def write_vllm_ngram_log(rng: np.random.Generator) -> None:
    k = len(NGRAM)
    lines = []
    for i in range(NGRAM_LINES):
        n = int(rng.integers(150, 600))
        length = rng.integers(1, k + 1, size=n)  # tokens prompt lookup found, 1..k
        acc = np.minimum(chain(rng, NGRAM, n, k), length)
        pos = per_position(acc, k)
        a, d = int(acc.sum()), int(length.sum())
        stamp = f"12-01 05:{i // 6:02d}:{(i % 6) * 10:02d}"
        lines.append(
            f"INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            f"Avg generation throughput: {(n + a) / 10:.1f} tokens/s, Running: 8 reqs, "
            "Waiting: 0 reqs, GPU KV cache usage: 2.1%, Prefix cache hit rate: 41.3%"
        )
        lines.append(
            f"INFO {stamp} [metrics.py:96] SpecDecoding metrics: "
            f"Mean acceptance length: {1 + a / n:.2f}, "
            f"Accepted throughput: {a / 10:.2f} tokens/s, "
            f"Drafted throughput: {d / 10:.2f} tokens/s, "
            f"Accepted: {a} tokens, Drafted: {d} tokens, "
            f"Per-position acceptance rate: {', '.join(f'{c / n:.3f}' for c in pos)}, "
            f"Avg Draft acceptance rate: {100 * a / d:.1f}%"
        )
    (HERE / "vllm-ngram.log").write_text("\n".join(lines) + "\n")


def histogram(accepted: np.ndarray) -> list[int]:
    """SGLang's list: entry ``n`` = rounds with ``n`` correct drafts, up to the largest seen."""
    return np.bincount(accepted).tolist()


def write_sglang(rng: np.random.Generator) -> None:
    k = len(SGLANG["chat"])
    out = []
    for workload, count in SGLANG_REQUESTS.items():
        for _ in range(count):
            rounds = int(rng.integers(20, 160))
            acc = chain(rng, SGLANG[workload], rounds, k)
            correct = int(acc.sum())
            completion = 1 + correct + rounds  # the prefill token, then n + 1 per round
            hist = histogram(acc)
            meta = {
                "id": f"{rng.integers(16**12):012x}",
                "finish_reason": {"type": "length", "length": completion},
                "prompt_tokens": int(rng.integers(40, 900)),
                "weight_version": "default",
                "completion_tokens": completion,
                "cached_tokens": 0,
                "spec_accept_rate": correct / (rounds * k),
                "spec_accept_length": completion / rounds,
                "spec_num_correct_drafts": correct,
                "spec_num_proposed_drafts": rounds * k,
                "spec_verify_ct": rounds,
                "spec_accepted_drafts": correct,
                "spec_proposed_drafts": rounds * k,
                "spec_correct_drafts_histogram": hist,
                "spec_accept_histogram": hist,
                "e2e_latency": round(float(rng.uniform(0.4, 4.0)), 4),
            }
            out.append(json.dumps({"text": "…", "meta_info": meta, "workload": workload}))
    order = rng.permutation(len(out))
    (HERE / "sglang-requests.jsonl").write_text("\n".join(out[i] for i in order) + "\n")
    share = {w: n / sum(SGLANG_REQUESTS.values()) for w, n in SGLANG_REQUESTS.items()}
    lines = []
    forward = 0
    for i in range(DECODE_LINES):
        running = int(rng.integers(4, 17))
        rounds = 40 * running
        chat = rng.random(rounds) < share["chat"]
        acc = np.where(
            chat, chain(rng, SGLANG["chat"], rounds, k), chain(rng, SGLANG["code"], rounds, k)
        )
        forward += 40
        length = 1 + acc.mean()
        lines.append(
            f"[2026-12-01 05:{i // 6:02d}:{(i % 6) * 10:02d}] Decode batch [{forward}], "
            f"#running-req: {running}, #token: {running * 700}, token usage: 0.04, "
            f"accept len: {length:.2f}, accept rate: {(length - 1) / k:.2f}, "
            f"cuda graph: True, gen throughput (token/s): {running * length * 30:.2f}, "
            "#queue-req: 0, "
        )
    (HERE / "sglang-decode.log").write_text("\n".join(lines) + "\n")


def write_outcomes(rng: np.random.Generator) -> None:
    k = len(OUTCOMES["eagle3"])
    names = list(OUTCOMES)
    rows = []
    for r in range(OUTCOME_ROUNDS):
        for j in range(k):
            ok = [int(rng.random() < OUTCOMES[n][min(j, len(OUTCOMES[n]) - 1)]) for n in names]
            rows.append([r, j + 1, *ok])
            if not any(ok):
                break
    with open(HERE / "outcomes.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "position", *names])
        w.writerows(rows)


def main() -> None:
    rng = np.random.default_rng(SEED)
    write_vllm_metrics(rng)
    write_vllm_ngram_log(rng)
    write_sglang(rng)
    write_outcomes(rng)
    truth = {
        "vllm-metrics.prom": {SERVED: VLLM_EAGLE3},
        "vllm-ngram.log": {"ngram": NGRAM},
        "sglang-requests.jsonl": SGLANG,
        "sglang-decode.log": {"mix": SGLANG_REQUESTS, "by_workload": SGLANG},
        "outcomes.csv": OUTCOMES,
        "seed": SEED,
    }
    (HERE / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
