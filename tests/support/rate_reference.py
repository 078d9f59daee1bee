"""An independent reference for request-rate runs: a small open-loop serving engine with a
known step time, written apart from :mod:`allocator.sim` and the roofline predictor, that
writes ``vllm bench serve --save-result --save-detailed`` files.

**What is independent.** The scheduler and the clock are this module's own loop (no code
of :mod:`allocator.sim`); the step time is computed here from the GPU's and the model's
figures by hand (:func:`peaks`), not by :class:`~allocator.model.steptime.RooflinePredictor`;
the statistics are computed here from the per-request times. What it shares with the
package is only the *form* the package claims for vLLM's step (docs/design.md §8.12) and
the metric definitions of vLLM 0.33.0 (``calculate_metrics``, vllm/benchmarks/serve.py):
so a fit that recovers its parameters shows that the fit through the simulator, the
replay of the files and the write-back work, not that the form is vLLM's.

**The engine.** Poisson arrivals at ``rate`` (seeded). Each step: every running request
that finished its prompt decodes one token (no speculation); then the prompt tokens of the
running requests still prefilling and of waiting requests admitted first-come first-served
(up to ``max_num_seqs`` running) fill the rest of the ``budget`` tokens, chunked; a
request whose prompt completes in a step emits its first token at the step's end. The step
lasts::

    decode  = max([W + κ·(Σ context + n)] / η_m + fixed, φ·b / η_c)
    prefill = Σ over the step's chunks of (φ·c + α·c·(c + 1)/2) / η_p
    step    = (decode + prefill) · (1 + σ·N(0, 1))

(``b`` decoding requests, ``n = b + Σ c`` tokens, ``context`` each decoding request's
tokens so far; ``W`` the weights' read time, ``κ`` a token's KV, ``φ`` a token's linear
layers, ``α`` a (query, key) pair, all at peak), and every request's TTFT and E2EL gain
``overhead_ms`` (the time outside the engine), as a client measures them.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

#: NVIDIA H100 SXM: HBM3 bandwidth 3.35 TB/s, dense BF16 989.5 TFLOP/s (the datasheet's
#: 1,979 with sparsity, halved), as allocator/core/hardware.py bundles them.
H100_BANDWIDTH = 3.35e12
H100_BF16 = 989.5e12


@dataclass(frozen=True)
class Dense:
    """A dense bf16 model without an embedding table counted apart: every weight read."""

    params: float = 8e9
    layers: int = 32
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128

    def fields(self) -> dict:
        return {
            "params_b": self.params / 1e9,
            "layers": self.layers,
            "hidden": self.heads * self.head_dim,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype": "bf16",
            "kv_dtype": "bf16",
        }


def peaks(model: Dense) -> dict[str, float]:
    """The peak terms by hand, ms: weights 2 bytes a parameter over the bandwidth; KV
    ``2 (K and V) · layers · kv_heads · head_dim · 2 bytes`` a token; linear layers ``2 ·
    params`` FLOPs a token; attention ``4 · layers · heads · head_dim`` FLOPs a pair."""
    return {
        "W": 1e3 * 2.0 * model.params / H100_BANDWIDTH,
        "kv": 1e3 * 2.0 * model.layers * model.kv_heads * model.head_dim * 2.0 / H100_BANDWIDTH,
        "phi": 1e3 * 2.0 * model.params / H100_BF16,
        "alpha": 1e3 * 4.0 * model.layers * model.heads * model.head_dim / H100_BF16,
    }


@dataclass(frozen=True)
class Truth:
    """The known parameters of a reference run."""

    mem_eff: float = 0.6
    compute_eff: float = 0.5
    prefill_eff: float = 0.4
    fixed_ms: float = 0.0
    overhead_ms: float = 20.0
    noise: float = 0.02


def run(
    truth: Truth,
    *,
    rate: float,
    prompts: np.ndarray,
    outputs: np.ndarray,
    seed: int,
    model: Dense = Dense(),
    max_num_seqs: int = 64,
    budget: int = 2048,
) -> dict:
    """One run at ``rate`` requests/s of the requests ``prompts (N,)``, ``outputs (N,)``
    (tokens); per-request times in s: ``ttft (N,)``, ``e2el (N,)``, ``itl`` (a list of
    ``(output − 1,)`` arrays) and the run's ``duration``."""
    rng = np.random.default_rng(seed)
    n = prompts.size
    gaps = rng.exponential(1.0 / rate, n)
    arrival = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    pk = peaks(model)
    done_prompt = np.zeros(n, np.int64)
    emitted = np.zeros(n, np.int64)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    times: list[list[float]] = [[] for _ in range(n)]
    waiting: deque[int] = deque()
    running: list[int] = []
    nxt = 0
    clock = 0.0
    finished = 0
    while finished < n:
        while nxt < n and arrival[nxt] <= clock:
            waiting.append(nxt)
            nxt += 1
        if not running and not waiting:
            clock = float(arrival[nxt])
            continue
        decoding = [r for r in running if done_prompt[r] == prompts[r]]
        left = budget - len(decoding)
        chunks: list[tuple[int, int]] = []
        for r in running:
            if done_prompt[r] < prompts[r] and left > 0:
                c = int(min(prompts[r] - done_prompt[r], left))
                chunks.append((r, c))
                left -= c
        while waiting and left > 0 and len(running) < max_num_seqs:
            r = waiting.popleft()
            running.append(r)
            c = int(min(prompts[r], left))
            chunks.append((r, c))
            left -= c
        b = len(decoding)
        ctx = float(sum(prompts[r] + emitted[r] for r in decoding))
        tokens = b + sum(c for _, c in chunks)
        memory = (pk["W"] + pk["kv"] * (ctx + tokens)) / truth.mem_eff + truth.fixed_ms
        compute = pk["phi"] * b / truth.compute_eff
        prefill = sum(
            (pk["phi"] * c + pk["alpha"] * c * (c + 1) / 2.0) / truth.prefill_eff for _, c in chunks
        )
        step = (max(memory, compute) + prefill) * (1.0 + truth.noise * rng.standard_normal())
        clock += max(step, 1e-3) / 1e3
        for r in decoding:
            emitted[r] += 1
            times[r].append(clock)
        for r, c in chunks:
            done_prompt[r] += c
            if done_prompt[r] == prompts[r]:
                emitted[r] += 1
                first[r] = clock
                times[r].append(clock)
        for r in list(running):
            if emitted[r] >= outputs[r]:
                last[r] = clock
                running.remove(r)
                finished += 1
    shift = truth.overhead_ms / 1e3
    return {
        "ttft": first - arrival + shift,
        "e2el": last - arrival + shift,
        "itl": [np.diff(t) for t in times],
        "duration": float(np.nanmax(last) + shift),
        "arrival": arrival,
    }


def _stats(values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, float) * 1e3
    return {
        "mean": float(np.mean(v)),
        "median": float(np.median(v)),
        "std": float(np.std(v)),
        "p99": float(np.percentile(v, 99)),
    }


def vllm_file(
    path: Path,
    sim: dict,
    *,
    rate: float,
    prompts: np.ndarray,
    outputs: np.ndarray,
    model_id: str = "org/dense-8b",
    hardware: str | None = "h100-sxm",
) -> None:
    """``sim`` as vLLM 0.33.0's ``--save-result --save-detailed`` JSON (the statistics of
    ``calculate_metrics``: TPOT per request with more than one output token, ITL over every
    gap, percentiles by ``np.percentile``)."""
    n = prompts.size
    dur = sim["duration"]
    tpot = [
        (sim["e2el"][i] - sim["ttft"][i]) / (outputs[i] - 1) for i in range(n) if outputs[i] > 1
    ]
    itls = np.concatenate([g for g in sim["itl"] if g.size] or [np.zeros(0)])
    doc: dict = {
        "date": "20261201-000000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": n,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": dur,
        "completed": n,
        "failed": 0,
        "total_input_tokens": int(prompts.sum()),
        "total_output_tokens": int(outputs.sum()),
        "request_throughput": n / dur,
        "output_throughput": float(outputs.sum()) / dur,
        "total_token_throughput": float(prompts.sum() + outputs.sum()) / dur,
        "input_lens": [int(x) for x in prompts],
        "output_lens": [int(x) for x in outputs],
        "ttfts": [float(x) for x in sim["ttft"]],
        "itls": [[float(x) for x in g] for g in sim["itl"]],
        "generated_texts": [""] * n,
        "errors": [""] * n,
    }
    if hardware is not None:
        doc["hardware"] = hardware
    for name, values in (
        ("ttft", sim["ttft"]),
        ("tpot", tpot),
        ("itl", itls),
        ("e2el", sim["e2el"]),
    ):
        for stat, v in _stats(np.asarray(values)).items():
            doc[f"{stat}_{name}_ms"] = v
    path.write_text(json.dumps(doc))


def problem_file(path: Path, model: Dense = Dense(), **serving) -> Path:
    """A roofline problem of the reference's deployment (one drafter, never served)."""
    data = {
        "name": "rate-reference",
        "convention": "bonus",
        "drafters": [{"name": "d", "method": "eagle3", "acceptance": 0.7, "unit_cost": 0.05}],
        "serving": {
            "batch_sizes": [1, 8],
            "hardware": {"gpu": "h100-sxm"},
            "model": model.fields(),
            "scheduler": {
                "max_num_seqs": 64,
                "max_num_batched_tokens": 2048,
                "kv_cache_tokens": 400_000,
                "block_size": 16,
                # the reference schedules each step after the one before it is processed,
                # and caches nothing (vLLM's defaults are both on)
                "async_scheduling": False,
                "enable_prefix_caching": False,
            },
            **serving,
        },
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
