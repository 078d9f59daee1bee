"""A replica's memory: how many sequences its KV cache holds (docs/design.md §8.11).

A replica's accelerator memory left after the verifier's weights and activations is its
KV cache (``serving.memory.kv_cache_gb``, what the engine reports at start-up with no
drafter loaded). Hosting a drafter takes its ``memory_gb`` out of that, and each
sequence in the batch needs ``serving.memory.kv_per_seq_gb`` of KV at the traffic's
context length. So a configuration whose drafters are ``S`` can run at most::

    max_batch(S) = floor((kv_cache_gb - Σ_{i∈S} memory_gb_i) / kv_per_seq_gb)

sequences at once. A drafter without ``memory_gb`` takes none (an n-gram or suffix
drafter, which has no weights). Without ``serving.memory`` nothing caps the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..exceptions import InputError

#: ``max_batch`` of a configuration when the problem gives no memory: no cap.
UNCAPPED = np.iinfo(np.int64).max

#: Relative slack for the floor, so that a batch that fits exactly is not lost to rounding.
FIT_SLACK = 1e-9


@dataclass(frozen=True, eq=False)
class MemoryModel:
    """One replica's memory, GB.

    kv_cache_gb : KV-cache memory with no drafter hosted.
    kv_per_seq_gb : one sequence's KV footprint at the traffic's context length.
    drafter_gb : ``(N,)`` memory each drafter takes from the KV cache when hosted.
    """

    kv_cache_gb: float
    kv_per_seq_gb: float
    drafter_gb: np.ndarray

    def hosted_gb(self, members: np.ndarray) -> np.ndarray:
        """Memory the drafters of each row take: ``members (B, N)`` bool -> ``(B,)`` GB."""
        return np.asarray(members, dtype=float) @ self.drafter_gb

    def max_batch(self, members: np.ndarray) -> np.ndarray:
        """Largest batch each row's replica can hold: ``members (B, N)`` -> ``(B,)`` int64.

        ``0`` where the drafters leave no room for a single sequence.
        """
        room = (self.kv_cache_gb - self.hosted_gb(members)) / self.kv_per_seq_gb
        fits = np.floor(room * (1.0 + FIT_SLACK) + FIT_SLACK)
        return np.maximum(fits, 0.0).astype(np.int64)


def check_memory(
    kv_cache_gb: float,
    kv_per_seq_gb: float,
    drafter_gb: Sequence[float] | np.ndarray,
    names: Sequence[str] | None = None,
) -> None:
    """Refuse memory fields that leave no room for a single sequence (fields named as in
    the problem file)."""
    if kv_cache_gb < kv_per_seq_gb * (1.0 - FIT_SLACK):
        raise InputError(
            "serving.memory.kv_cache_gb",
            f"{kv_cache_gb:g} GB cannot hold a single sequence of kv_per_seq_gb = "
            f"{kv_per_seq_gb:g} GB",
        )
    room = kv_cache_gb - kv_per_seq_gb
    for i, gb in enumerate(drafter_gb):
        if gb > room + FIT_SLACK * kv_cache_gb:
            raise InputError(
                f"drafters[{names[i]}].memory_gb" if names else f"drafters.{i}.memory_gb",
                f"{gb:g} GB leaves no room for a single sequence (the KV cache holds "
                f"{kv_cache_gb:g} GB, one sequence needs {kv_per_seq_gb:g} GB)",
            )


__all__ = ["FIT_SLACK", "UNCAPPED", "MemoryModel", "check_memory"]
