"""``round-robin``: request ``i`` to replica ``i mod R``.

vLLM production-stack, ``src/vllm_router/routers/routing_logic.py`` (commit
``008a23bd48371ffc707875848b19784c348a3de0``), ``RoundRobinRouter.route_request``: the
endpoints sorted by URL, ``sorted_endpoints[self.req_id % len(sorted_endpoints)]``, then
``req_id += 1``. It reads no load.
"""

from __future__ import annotations

from .base import Router, View


class RoundRobin(Router):
    """Each request to the next replica in turn."""

    name = "round-robin"
    summary = "each request to the next replica in turn (production-stack RoundRobinRouter)"

    def reset(self) -> None:
        self.next = 0

    def choose(self, view: View) -> int:
        r = self.next
        self.next = (r + 1) % self.replicas
        return r


__all__ = ["RoundRobin"]
