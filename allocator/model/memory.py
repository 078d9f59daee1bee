"""Memory caps the batch: the largest number of sequences one replica can hold
(docs/design.md §8.11).

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
from typing import TYPE_CHECKING

import numpy as np

from ..exceptions import InputError

if TYPE_CHECKING:
    from ..core.problem import Problem

#: ``max_batch`` of a configuration when the problem gives no memory: no cap.
UNCAPPED = np.iinfo(np.int64).max

#: Relative slack for the floor, so that a batch that fits exactly is not lost to rounding.
_FIT_SLACK = 1e-9


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
        fits = np.floor(room * (1.0 + _FIT_SLACK) + _FIT_SLACK)
        return np.maximum(fits, 0.0).astype(np.int64)


def memory_model(problem: Problem) -> MemoryModel | None:
    """The memory model of ``problem`` (``None`` without ``serving.memory``).

    Raises :class:`InputError` when the KV cache cannot hold one sequence (field
    ``serving.memory.kv_cache_gb``) or when hosting one drafter leaves no room for a
    single sequence (field ``drafters[<name>].memory_gb``).
    """
    spec = getattr(problem, "spec", None)
    serving = getattr(spec, "serving", None) if spec is not None else None
    if spec is None or serving is None or serving.memory is None:
        return None
    mem = serving.memory
    gb = np.asarray([float(d.memory_gb or 0.0) for d in spec.drafters], dtype=float)
    check_memory(mem.kv_cache_gb, mem.kv_per_seq_gb, gb)  # spec.py checked it when read
    return MemoryModel(float(mem.kv_cache_gb), float(mem.kv_per_seq_gb), gb)


def check_memory(
    kv_cache_gb: float,
    kv_per_seq_gb: float,
    drafter_gb: Sequence[float] | np.ndarray,
    names: Sequence[str] | None = None,
) -> None:
    """Refuse memory fields that leave no room for a single sequence (see :func:`memory_model`)."""
    if kv_cache_gb < kv_per_seq_gb * (1.0 - _FIT_SLACK):
        raise InputError(
            "serving.memory.kv_cache_gb",
            f"{kv_cache_gb:g} GB cannot hold a single sequence of kv_per_seq_gb = "
            f"{kv_per_seq_gb:g} GB",
        )
    room = kv_cache_gb - kv_per_seq_gb
    for i, gb in enumerate(drafter_gb):
        if gb > room + _FIT_SLACK * kv_cache_gb:
            raise InputError(
                f"drafters[{names[i]}].memory_gb" if names else f"drafters.{i}.memory_gb",
                f"{gb:g} GB leaves no room for a single sequence (the KV cache holds "
                f"{kv_cache_gb:g} GB, one sequence needs {kv_per_seq_gb:g} GB)",
            )


def max_batch(problem: Problem, members: np.ndarray) -> np.ndarray:
    """Largest batch of each row of ``members (B, N)``: ``(B,)`` int64, :data:`UNCAPPED`
    when the problem gives no ``serving.memory``."""
    model = memory_model(problem)
    if model is None:
        return np.full(np.asarray(members).shape[0], UNCAPPED, dtype=np.int64)
    return model.max_batch(members)


def hosting_room(problem: Problem, batch: int, option: str = "--batch") -> tuple[np.ndarray, float]:
    """What hosting may take so that a replica still holds ``batch`` sequences: each
    drafter's memory ``(N,)`` GB and the cap ``kv_cache_gb - batch · kv_per_seq_gb`` GB on
    the hosted set's total. Raises :class:`InputError` (field ``option``) without
    ``serving.memory`` or when ``batch`` sequences do not fit even with nothing hosted."""
    model = memory_model(problem)
    if model is None:
        raise InputError(option, "needs serving.memory (kv_cache_gb, kv_per_seq_gb)")
    if batch < 1:
        raise InputError(option, f"must be at least 1 (got {batch})")
    room = model.kv_cache_gb - batch * model.kv_per_seq_gb
    if room < -_FIT_SLACK * model.kv_cache_gb:
        most = int(model.max_batch(np.zeros((1, model.drafter_gb.size), bool))[0])
        raise InputError(
            option,
            f"a replica holds at most {most} sequences (serving.memory) even with no "
            f"drafter hosted; {batch} do not fit",
        )
    return model.drafter_gb, max(room, 0.0) + _FIT_SLACK * model.kv_cache_gb


def batch_fits(problem: Problem, members: np.ndarray, batch: int) -> np.ndarray:
    """``(B,)`` bool: the replica of each row can hold ``batch`` sequences."""
    return max_batch(problem, members) >= batch


__all__ = [
    "UNCAPPED",
    "MemoryModel",
    "batch_fits",
    "check_memory",
    "hosting_room",
    "max_batch",
    "memory_model",
]
