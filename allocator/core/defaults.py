"""Default step-time factors of the roofline when a problem file gives none: the shares of
peak reached (memory bandwidth, dense tensor throughput for decode and verification, for
prefill, and the link's bandwidth for the all-reduce) and the time each request spends
outside the engine's steps (API server, tokenisation, detokenisation, streaming), per GPU.

These are what a specs-only answer rests on. Each value is fitted to public measured serving
runs (``problems/measured/serving-runs/runs.yaml``: every run's source, licence, hardware and
conversions there), and :data:`EVIDENCE` says from which runs and with what fit; a GPU
without runs of its own takes :data:`FALLBACK`, whose evidence is stated the same way.
``benchmarks/accuracy.py`` reproduces the fits and reports the errors they leave.

Keys of every entry: ``mem_eff``, ``compute_eff``, ``prefill_eff``, ``comm_eff`` (shares,
in (0, 1]) and ``ttft_overhead_ms`` (ms per request, >= 0).

**The fit** (``python benchmarks/accuracy.py``, seed 0). The runs are grouped by (model, GPU,
tensor-parallel size, engine, dtype); each group's lowest-load run is replayed through the
request simulator (:func:`allocator.analysis.validation.replay`, what ``allocator validate``
runs) on the problem the benchmark builds for it (the model's published ``config.json``, the
GPU of :mod:`allocator.core.hardware`, the engine's scheduler defaults), and ``mem_eff``,
``compute_eff``, ``prefill_eff`` and ``ttft_overhead_ms`` minimise, over the groups of one
GPU weighted alike, the sum of squared log ratios predicted / measured of the latencies the
runs publish (mean and median TTFT, ITL, TPOT and E2E): a grid (``mem_eff`` 0.3..1 in 9
steps, ``compute_eff`` 0.25..1 in 4, ``prefill_eff`` 0.2..1 in 6, geometric;
``ttft_overhead_ms`` 0..300 ms by 1 ms, which shifts TTFT and E2E and replays nothing),
refined by a parabola through the minimum and its neighbours along each axis; where the
loss is flat along ``compute_eff`` (every step of the runs memory-bound) the largest
value is taken. Left out of the fit, and named in the benchmark's output: groups whose
tensor parallelism crosses nodes (the all-reduce runs over the network; the runs.yaml
README calls them stress cases) and groups saturated at their lowest load (under 90% of
the offered output tokens/s delivered: the run measures queueing, not the step).
``comm_eff`` is not fitted (the all-reduce's share is not separable from ``mem_eff`` with
these runs): it stays at :data:`FALLBACK`'s.

========  =======  ===========  ===========  ========  ======  ==============================
GPU       mem_eff  compute_eff  prefill_eff  overhead  loss    groups (their lowest-load run)
========  =======  ===========  ===========  ========  ======  ==============================
a100-80g  0.541    1.0          1.0          0 ms      1.20    Qwen2-7B-Instruct TP 1 and
                                                               TP 2 (vLLM 0.10.1.1),
                                                               Qwen2.5-32B TP 1 (vLLM)
h200      0.542    1.0          0.532        24.7 ms   0.0025  Llama-3.3-70B-Instruct TP 4,
                                                               Llama-3.1-405B-Instruct TP 8
                                                               (SGLang, December 2024)
========  =======  ===========  ===========  ========  ======  ==============================

Reading them. ``compute_eff`` is 1 on both GPUs because these runs do not determine it:
prefill has its own share now, and at the lowest loads every decoding step is
memory-bound, so the loss is flat along it and the peak is taken. The A100's
``prefill_eff`` 1 and overhead 0 sit at their bounds: those runs' time to first token of
a lone 1024-token prompt (36.5 ms on Qwen2-7B) is below what the printed peak allows for
that prefill on top of the weights' read (2 x 7.07e9 x 1024 FLOP / 312e12 FLOP/s = 46 ms,
plus 15.2 GB / 2.04 TB/s = 7.5 ms), because ``vllm bench serve`` sends the run's first
prompt once before the run (``vllm/benchmarks/serve.py`` lines 360-398 of 0.10.1.1) and
those servers cache prefixes, so that prompt's prefill is a cache hit; the A100 runs cannot
place the prefill's share or the time outside the steps, and the values say so rather than
that the A100 reaches its peak. The H200 runs (SGLang with its radix cache off) can: 24.7
ms per request outside the steps and 53% of peak for prefill. The memory shares agree with
closed forms worked by hand from one run each (``tests/unit/core/test_defaults.py``): 0.59
for one Qwen2-7B request decoding alone on an A100, 0.54 for Llama-3.3-70B at 1 request/s
on 4 x H200; the H200's overhead and prefill share reproduce that run's median TTFT by hand
too. H100, L40S, MI300X and B200 have no replayable run (runs.yaml's H100 and MI300X
families use ShareGPT lengths or state no dataset) and take :data:`FALLBACK`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["EVIDENCE", "FACTOR_KEYS", "FALLBACK", "PER_GPU", "default_factors"]

#: The factors every entry gives.
FACTOR_KEYS: tuple[str, ...] = (
    "mem_eff",
    "compute_eff",
    "prefill_eff",
    "comm_eff",
    "ttft_overhead_ms",
)

#: Factors for a GPU without runs of its own: the peaks as printed, no time outside the
#: steps (the roofline as an upper bound on speed).
FALLBACK: Mapping[str, float] = MappingProxyType(
    {
        "mem_eff": 1.0,
        "compute_eff": 1.0,
        "prefill_eff": 1.0,
        "comm_eff": 1.0,
        "ttft_overhead_ms": 0.0,
    }
)

#: Fitted factors by GPU name (:data:`allocator.core.hardware.GPUS` keys); the fit in the
#: module docstring, its runs in :data:`EVIDENCE`.
PER_GPU: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "a100-80g": MappingProxyType(
            {
                "mem_eff": 0.541,
                "compute_eff": 1.0,
                "prefill_eff": 1.0,
                "comm_eff": 1.0,
                "ttft_overhead_ms": 0.0,
            }
        ),
        "h200": MappingProxyType(
            {
                "mem_eff": 0.542,
                "compute_eff": 1.0,
                "prefill_eff": 0.532,
                "comm_eff": 1.0,
                "ttft_overhead_ms": 24.7,
            }
        ),
    }
)

#: For each GPU of :data:`PER_GPU` (and ``"fallback"``): the runs the factors were fitted to
#: (family ids of ``runs.yaml`` and run indices) and how.
EVIDENCE: Mapping[str, str] = MappingProxyType(
    {
        "fallback": "none: the vendor peaks as printed and no time outside the engine's steps",
        "a100-80g": (
            "mem_eff, compute_eff, prefill_eff, ttft_overhead_ms: least squares (log ratios "
            "of TTFT, ITL and TPOT, mean and median) over the lowest-load runs of "
            "dl-qwen2-7b-a100-tp1-kv5gib (run 0, one request of 1024/1024), "
            "dl-qwen2-7b-a100x2-tp2-kv12gib (run 0, one request, TP 2) and "
            "dl-qwen2.5-32b-a100-tp1 (run 0, 10 requests at once); loss 1.20; mem_eff "
            "0.541. compute_eff 1: not determined (every step memory-bound, the peak "
            "taken). prefill_eff 1 and ttft_overhead_ms 0 at their bounds: the first prompt "
            "is prefix-cached by the benchmark's test request (module docstring). Left out: "
            "dl-gpt-oss-120b-a100x4-tp4-crossnode (TP across nodes). comm_eff: not fitted "
            "(FALLBACK's)."
        ),
        "h200": (
            "mem_eff, compute_eff, prefill_eff, ttft_overhead_ms: least squares (log ratios "
            "of median TTFT, median ITL, mean and median E2E) over the lowest-load runs of "
            "dc-sglang-llama33-70b-h200x4-tp4-random (run 0, 1 request/s, TP 4) and "
            "dc-sglang-llama31-405b-h200x8-tp8-random (run 0, 1 request/s, TP 8); loss "
            "0.0025; mem_eff 0.542, prefill_eff 0.532, ttft_overhead_ms 24.7. compute_eff 1: "
            "not determined (every step memory-bound, the peak taken). Left out: "
            "sglang041-deepseek-v3-h200x8-tp8-bf16 and -fp8 (saturated at 1 request/s: 640 "
            "and 773 of 1024 output tokens/s offered) and "
            "sglang041-deepseek-v3-2x8h200-tp16-bf16 and -fp8 (TP across nodes). comm_eff: "
            "not fitted (FALLBACK's)."
        ),
    }
)


def default_factors(gpu: str) -> Mapping[str, float]:
    """The default factors for ``gpu`` (a :data:`~allocator.core.hardware.GPUS` key): its
    fitted entry, else :data:`FALLBACK`. Keys: :data:`FACTOR_KEYS`."""
    return PER_GPU.get(gpu, FALLBACK)
