"""Memory caps the batch: the largest number of sequences one replica can hold, for
each configuration of a problem (docs/design.md §8.11; the entity is
:class:`allocator.core.memory.MemoryModel`, ``problem.memory``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.memory import FIT_SLACK, UNCAPPED, MemoryModel
from ..exceptions import InputError

if TYPE_CHECKING:
    from ..core.problem import Problem


def memory_model(problem: Problem) -> MemoryModel | None:
    """The memory model of ``problem`` (``None`` without ``serving.memory``)."""
    return problem.memory


def max_batch(problem: Problem, members: np.ndarray) -> np.ndarray:
    """Largest batch of each row of ``members (B, N)``: ``(B,)`` int64, :data:`UNCAPPED`
    when the problem gives no ``serving.memory``."""
    model = memory_model(problem)
    if model is None:
        return np.full(np.asarray(members).shape[0], UNCAPPED, dtype=np.int64)
    return model.max_batch(members)


def hosting_room(problem: Problem, batch: int, option: str = "batch") -> tuple[np.ndarray, float]:
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
    if room < -FIT_SLACK * model.kv_cache_gb:
        most = int(model.max_batch(np.zeros((1, model.drafter_gb.size), bool))[0])
        raise InputError(
            option,
            f"a replica holds at most {most} sequences (serving.memory) even with no "
            f"drafter hosted; {batch} do not fit",
        )
    return model.drafter_gb, max(room, 0.0) + FIT_SLACK * model.kv_cache_gb


def batch_fits(problem: Problem, members: np.ndarray, batch: int) -> np.ndarray:
    """``(B,)`` bool: the replica of each row can hold ``batch`` sequences."""
    return max_batch(problem, members) >= batch


__all__ = ["batch_fits", "hosting_room", "max_batch", "memory_model"]
