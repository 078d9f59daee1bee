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

#: Fitted factors by GPU name (:data:`allocator.core.hardware.GPUS` keys).
PER_GPU: Mapping[str, Mapping[str, float]] = MappingProxyType({})

#: For each GPU of :data:`PER_GPU` (and ``"fallback"``): the runs the factors were fitted to
#: (run ids of ``runs.yaml``) and how.
EVIDENCE: Mapping[str, str] = MappingProxyType(
    {"fallback": "none: the vendor peaks as printed and no time outside the engine's steps"}
)


def default_factors(gpu: str) -> Mapping[str, float]:
    """The default factors for ``gpu`` (a :data:`~allocator.core.hardware.GPUS` key): its
    fitted entry, else :data:`FALLBACK`. Keys: :data:`FACTOR_KEYS`."""
    return PER_GPU.get(gpu, FALLBACK)
