"""Request-level serving simulator of one vLLM replica with speculative decoding.

Requests arrive (:func:`arrival_times`, :func:`fixed_requests`; a trace is read by
:func:`allocator.io.trace.read_trace`), a replica schedules them step by step as vLLM's V1
scheduler does (:func:`simulate`, with a :class:`Scheduler`, a :class:`SpecPolicy` and a
:class:`StepTime` function), and the run is measured as ``vllm bench serve`` measures it
(:func:`summary`, :func:`metric`); several replicas behind a router share one clock in
:func:`simulate_fleet` (:mod:`allocator.sim.fleet`, routers in :mod:`allocator.sim.routers`).
Only numpy, the standard library and
:mod:`allocator.exceptions` are imported.
"""

from .config import Scheduler, StepTime
from .engine import simulate
from .fleet import FleetResult, simulate_fleet
from .policy import SpecPolicy
from .requests import Requests, TokenContent, arrival_times, fixed_requests
from .results import (
    LATENCIES,
    PERCENTILES,
    SimResult,
    acceptance_length,
    max_concurrent_requests,
    metric,
    percentile_word,
    summary,
)
from .state import decode_uniforms

__all__ = [
    "LATENCIES",
    "PERCENTILES",
    "FleetResult",
    "Requests",
    "Scheduler",
    "SimResult",
    "SpecPolicy",
    "StepTime",
    "TokenContent",
    "acceptance_length",
    "arrival_times",
    "decode_uniforms",
    "fixed_requests",
    "max_concurrent_requests",
    "metric",
    "percentile_word",
    "simulate",
    "simulate_fleet",
    "summary",
]
