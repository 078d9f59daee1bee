"""``least-requests``: the replica with the fewest requests in flight (join the shortest
queue).

llm-d-inference-scheduler ``pkg/plugins/scorer/active_request.go`` (commit
``139bcce2c631da70474516154a1e3dfaf9245a09``), ``ActiveRequest.Score``: each endpoint
scored ``(maxCount - count) / maxCount`` from the requests the router sent it and has not
seen complete, so the highest score is the fewest in flight. The gateway's queue scorer
(kubernetes-sigs/gateway-api-inference-extension
``pkg/epp/scheduling/framework/plugins/scorer/queue.go``, commit
``02308be307b248a4ce2e908d34945178468f3f39``) ranks the same way on the scraped waiting
queue (``(max - queue) / (max - min)``); here the count is the router's own, running and
waiting requests together, exact at the arrival.
"""

from __future__ import annotations

from .base import Router, View


class LeastRequests(Router):
    """The fewest requests in flight; ties at random."""

    name = "least-requests"
    summary = "the replica with the fewest requests in flight (llm-d active-request scorer)"
    reads = frozenset({"in_flight"})

    def choose(self, view: View) -> int:
        return self.least(view.in_flight)


__all__ = ["LeastRequests"]
