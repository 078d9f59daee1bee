"""Synthetic benchmark files from a known step-time function: vLLM and SGLang formats.

A closed-loop client (``max_concurrency`` slots, ``num_prompts`` requests of fixed
input and output lengths) drives a continuously batched engine, simulated step by step:
every step prefills the prompts that arrived (whole, in the same step as the decoding
sequences: chunked prefill) and advances every decoding sequence by one verify round of
a chain of ``k`` drafts, accepted position by position with the given acceptance (seeded
draws). A step lasts ``step_ms(decode_seqs, verified_tokens, context_tokens,
prefill_tokens)`` ms — the step-time contract of the project's step-time predictors —
with ``verified_tokens = k + 1`` and ``context_tokens`` the mean KV length of the
decoding sequences. A request's first token comes at the end of its prefill step; it
finishes when it holds ``output_len`` tokens (the last round's surplus is cut, and not
counted as accepted), and the client sends the next one at that moment.

From the simulated requests the files are written as the engines' benchmark tools write
them (vllm/benchmarks/serve.py ``calculate_metrics`` and ``main_async`` in vLLM 0.33.0;
python/sglang/benchmark/serving.py ``calculate_metrics`` and ``run_benchmark`` in SGLang
0.5.23): the same statistics over the same per-request quantities. Everything is
deterministic in ``seed``. Used by the parameter-recovery tests of calibration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

StepFn = Callable[[int, int, float, int], float]


@dataclass(frozen=True)
class Roofline:
    """A known step time, ms: ``max(weights + kv · b · context, flop · (b · t + prefill))
    + (t − 1) · (draft0 + draft1 · b) + (overhead if t > 1)``."""

    weights: float = 6.0
    kv: float = 2e-6
    flop: float = 2e-3
    draft0: float = 0.35
    draft1: float = 0.01
    overhead: float = 0.4

    def __call__(self, b: int, t: int, context: float, prefill: int) -> float:
        memory = self.weights + self.kv * b * context
        compute = self.flop * (b * t + prefill)
        spec = (t - 1) * (self.draft0 + self.draft1 * b) + (self.overhead if t > 1 else 0.0)
        return max(memory, compute) + spec


@dataclass
class Simulated:
    """Per-request results (seconds, as the benchmark clients record them) and counters."""

    ttft: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    itl: list[list[float]] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    duration: float = 0.0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    steps: list[tuple[int, float]] = field(default_factory=list)  # (batch, ms) per step


def simulate(
    step_ms: StepFn,
    *,
    concurrency: int,
    num_prompts: int,
    input_len: int,
    output_len: int,
    k: int,
    acceptance: Sequence[float],
    seed: int,
) -> Simulated:
    """The closed loop of the module docstring."""
    rng = np.random.default_rng(seed)
    acc = np.asarray(acceptance, float)
    a_pos = acc[np.minimum(np.arange(max(k, 1)), acc.size - 1)] if acc.size else np.zeros(1)
    sim = Simulated(per_pos=[0] * k)
    now = 0.0
    sent = 0
    waiting: list[int] = []  # request ids awaiting prefill
    decoding: dict[int, int] = {}  # id -> tokens so far
    arrival: dict[int, float] = {}
    last_token: dict[int, float] = {}
    done = 0
    while sent < min(concurrency, num_prompts):
        arrival[sent] = now
        waiting.append(sent)
        sent += 1
    record: dict[int, dict] = {}
    while done < num_prompts:
        b = len(decoding)
        ctx = float(np.mean([input_len + n for n in decoding.values()])) if b else 0.0
        prefill = input_len * len(waiting)
        ms = step_ms(b, k + 1, ctx, prefill)
        sim.steps.append((b, ms))
        now += ms / 1000.0
        finished = []
        for rid in list(decoding):
            remaining = output_len - decoding[rid]
            a = 0
            if k:
                ok = rng.random(k) < a_pos[:k]
                a = int(np.cumprod(ok).sum())
                a = min(a, remaining - 1)
                sim.drafts += 1
                sim.draft_tokens += k
                sim.accepted += a
                for i in range(a):
                    sim.per_pos[i] += 1
            decoding[rid] += 1 + a
            record[rid]["itl"].append(now - last_token[rid])
            last_token[rid] = now
            if decoding[rid] >= output_len:
                finished.append(rid)
        for rid in waiting:
            record[rid] = {"ttft": now - arrival[rid], "itl": [], "start": arrival[rid]}
            last_token[rid] = now
            decoding[rid] = 1
            if output_len <= 1:
                finished.append(rid)
        waiting = []
        for rid in finished:
            del decoding[rid]
            r = record[rid]
            sim.ttft.append(r["ttft"])
            sim.latency.append(now - arrival[rid])
            sim.itl.append(r["itl"])
            sim.start.append(r["start"])
            done += 1
            if sent < num_prompts:
                arrival[sent] = now
                waiting.append(sent)
                sent += 1
    sim.duration = now
    return sim


def _stats(values: list[float], percentiles: Sequence[float]) -> dict[str, float]:
    v = values or [0.0]
    out = {
        "mean": float(np.mean(v) * 1000),
        "median": float(np.median(v) * 1000),
        "std": float(np.std(v) * 1000),
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}"] = float(np.percentile(v, p) * 1000)
    return out


def _per_second(sim: Simulated) -> tuple[float, int]:
    """vLLM's and SGLang's ``max_output_tokens_per_s`` and ``max_concurrent_requests``."""
    t0 = min(sim.start)
    end = max(s + lat for s, lat in zip(sim.start, sim.latency, strict=True))
    n = int(np.ceil(end - t0)) + 1
    tokens, running = np.zeros(n), np.zeros(n)
    for s, ttft, itl, lat in zip(sim.start, sim.ttft, sim.itl, sim.latency, strict=True):
        t = s + ttft
        times = [t]
        for gap in itl:
            t += gap
            times.append(t)
        for x in times:
            i = int(x - t0)
            if 0 <= i < n:
                tokens[i] += 1
        for sec in range(int(s - t0), min(int(s + lat - t0) + 1, n)):
            running[sec] += 1
    return float(tokens.max()), int(running.max())


def _common(sim: Simulated, input_len: int, output_len: int) -> dict:
    completed = len(sim.latency)
    tpots = [(lat - tt) / (output_len - 1) for lat, tt in zip(sim.latency, sim.ttft, strict=True)]
    return {
        "completed": completed,
        "total_input": input_len * completed,
        "total_output": output_len * completed,
        "tpots": tpots if output_len > 1 else [],
        "itls": [x for gaps in sim.itl for x in gaps],
    }


def vllm_result(
    sim: Simulated,
    *,
    model: str,
    concurrency: int,
    num_prompts: int,
    input_len: int,
    output_len: int,
    k: int,
    e2el: bool = True,
    detailed: bool = False,
    metadata: dict[str, str] | None = None,
    date: str = "20261201-000000",
) -> dict:
    """The ``--save-result`` JSON object of vLLM 0.33.0 for a simulated run."""
    c = _common(sim, input_len, output_len)
    dur = sim.duration
    top_tps, top_running = _per_second(sim)
    result: dict = {
        "date": date,
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": num_prompts,
    }
    result.update(metadata or {})
    result.update({"request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency})
    result.update(
        {
            "duration": dur,
            "completed": c["completed"],
            "failed": 0,
            "total_input_tokens": c["total_input"],
            "total_output_tokens": c["total_output"],
            "request_throughput": c["completed"] / dur,
            "request_goodput": None,
            "output_throughput": c["total_output"] / dur,
            "total_token_throughput": (c["total_input"] + c["total_output"]) / dur,
            "input_lens": [input_len] * c["completed"],
            "output_lens": [output_len] * c["completed"],
            "max_output_tokens_per_s": top_tps,
            "max_concurrent_requests": top_running,
            "rtfx": 0.0,
        }
    )
    if k:
        result["spec_decode_acceptance_rate"] = sim.accepted / sim.draft_tokens * 100
        result["spec_decode_acceptance_length"] = 1 + sim.accepted / sim.drafts
        result["spec_decode_num_drafts"] = sim.drafts
        result["spec_decode_draft_tokens"] = sim.draft_tokens
        result["spec_decode_accepted_tokens"] = sim.accepted
        result["spec_decode_per_position_acceptance_rates"] = [p / sim.drafts for p in sim.per_pos]
    metrics = [("ttft", sim.ttft), ("tpot", c["tpots"]), ("itl", c["itls"])]
    if e2el:
        metrics.append(("e2el", sim.latency))
    for name, values in metrics:
        for stat, v in _stats(values, [99]).items():
            result[f"{stat}_{name}_ms"] = v
    if not detailed:
        del result["input_lens"], result["output_lens"]
    return result


def sglang_result(
    sim: Simulated,
    *,
    model: str,
    concurrency: int,
    input_len: int,
    output_len: int,
    k: int,
    topk: int = 1,
    draft_model: str | None = None,
    tp_size: int = 1,
    tag: str | None = None,
) -> dict:
    """One ``--output-file`` line of SGLang 0.5.23's ``bench_serving`` for a simulated run
    (``--dataset-name random --random-range-ratio 1``)."""
    c = _common(sim, input_len, output_len)
    dur = sim.duration
    top_tps, top_running = _per_second(sim)
    info = {
        "model_path": model,
        "served_model_name": model,
        "tp_size": tp_size,
        "speculative_algorithm": "EAGLE3" if k else None,
        "speculative_draft_model_path": draft_model if k else None,
        "speculative_num_steps": k if k else None,
        "speculative_eagle_topk": topk if k else None,
        "speculative_num_draft_tokens": k + 1 if k else None,
        "speculative_adaptive": False,
        "version": "0.5.23",
        "internal_states": [{"avg_spec_accept_length": 1 + sim.accepted / sim.drafts}]
        if k
        else [{}],
    }
    result: dict = {
        "tag": tag,
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": math.inf,
        "max_concurrency": concurrency,
        "sharegpt_output_len": None,
        "random_input_len": input_len,
        "random_output_len": output_len,
        "random_range_ratio": 1.0,
        "server_info": info,
        "duration": dur,
        "completed": c["completed"],
        "total_input_tokens": c["total_input"],
        "total_input_text_tokens": c["total_input"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": c["total_output"],
        "total_output_tokens_retokenized": c["total_output"],
        "request_throughput": c["completed"] / dur,
        "input_throughput": c["total_input"] / dur,
        "output_throughput": c["total_output"] / dur,
        "total_throughput": (c["total_input"] + c["total_output"]) / dur,
    }
    for values, key in (
        (sim.latency, "e2e_latency"),
        (sim.ttft, "ttft"),
        (c["tpots"], "tpot"),
        (c["itls"], "itl"),
    ):
        for stat, v in _stats(values, [90, 95, 99]).items():
            result[f"{stat}_{key}_ms"] = v
    result["concurrency"] = float(np.sum(sim.latency) / dur)
    result["accept_length"] = 1 + sim.accepted / sim.drafts if k else None
    result["max_output_tokens_per_s"] = top_tps
    result["max_concurrent_requests"] = top_running
    return result


def write_vllm(path: Path, result: dict) -> None:
    """As vLLM writes it (``json.dump``, no newline)."""
    path.write_text(json.dumps(result))


def write_sglang(path: Path, results: Sequence[dict]) -> None:
    """As SGLang appends its lines (``json.dumps(...) + "\\n"``; ``Infinity`` for inf)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in results))


def time_average_step(sim: Simulated) -> tuple[float, float]:
    """``(batch, step_ms)`` the steady-state relation estimates: the time-average number
    of decoding sequences ``Σ b·ms / Σ ms``, and the step time a decoding sequence sees
    on average ``Σ b·ms / Σ b`` (steps weighted by the sequences in them)."""
    b = np.array([s[0] for s in sim.steps], float)
    ms = np.array([s[1] for s in sim.steps], float)
    return float((b * ms).sum() / ms.sum()), float((b * ms).sum() / b.sum())
