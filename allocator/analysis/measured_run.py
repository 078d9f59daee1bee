"""One measured benchmark run as ``allocator validate`` reads it (:mod:`.validation`), apart
so that the sweep replay (:mod:`.validation_sweep`) reads it without importing the module
that imports it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MeasuredRun:
    """What one measured run says: the deployment (where stated), the configuration, the
    workload to send again and the metrics under vLLM's keys."""

    source: str
    engine: str
    model: str | None
    hardware: str | None
    tensor_parallel: int | None
    k: int
    request_rate: float
    max_concurrency: int | None
    burstiness: float
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    metrics: Mapping[str, float]
    drafters: tuple[str, ...] | None = None
    schedule: bool = False
    pooled: bool = False
    max_num_seqs: int | None = None
    notes: tuple[str, ...] = ()
    lengths_recorded: bool = False
    #: the file's keys the lengths came from: per request, or the totals (fixed lengths)
    length_keys: tuple[str, str] = ("input_lens", "output_lens")


__all__ = ["MeasuredRun"]
