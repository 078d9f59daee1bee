"""The benchmark client: when each request is sent, and the slots ``max_concurrency`` frees.

vLLM 0.33.0, ``vllm/benchmarks/serve.py``, ``benchmark`` (lines 1001-1019): each request is
sent at its arrival time, or, with ``--max-concurrency C``, once fewer than ``C`` of the
client's requests are in flight (an ``asyncio.Semaphore``, first come first served: request
``i`` takes the slot the ``(i - C + 1)``-th finish frees). Latencies run from the send
(``output.start_time``, ``vllm/benchmarks/lib/endpoint_request_func.py`` line 249).
"""

from __future__ import annotations

import math

import numpy as np


class Client:
    """Sends ``N`` requests arriving at ``arrival_s`` (``(N,)``, s), at most
    ``max_concurrency`` in flight (``None``: no limit).

    ``sent``: ``(N,)`` send times, s (NaN until sent); ``next``: the next request to send;
    ``finished``: requests finished so far, their finish times in time order in
    ``finish_order[:finished]``.
    """

    def __init__(self, arrival_s: np.ndarray, max_concurrency: int | None) -> None:
        self.arrival = arrival_s
        self.N = int(arrival_s.size)
        self.C = max_concurrency
        self.sent = np.full(self.N, np.nan)
        self.next = 0
        self.finished = 0
        self.finish_order = np.empty(self.N)

    def next_send_time(self) -> float:
        """When the next request is sent, s (``inf``: all sent, or held back by
        ``max_concurrency`` until a request in flight finishes)."""
        i = self.next
        if i >= self.N:
            return math.inf
        t = float(self.arrival[i])
        if self.C is not None and i >= self.C:
            j = i - self.C  # the (i - C + 1)-th finish frees the slot request i waits for
            if j >= self.finished:
                return math.inf
            t = max(t, float(self.finish_order[j]))
        return t

    def all_sent(self) -> bool:
        return self.next >= self.N

    def finish(self, times: np.ndarray | float, count: int) -> None:
        """``count`` requests finished at ``times`` (one per request, or one for all)."""
        self.finish_order[self.finished : self.finished + count] = (
            np.sort(times) if isinstance(times, np.ndarray) else times
        )
        self.finished += count


__all__ = ["Client"]
