"""``least-kv``: the replica with the lowest KV-cache usage.

kubernetes-sigs/gateway-api-inference-extension (the scorers llm-d's inference scheduler
runs), ``pkg/epp/scheduling/framework/plugins/scorer/kvcache_utilization.go`` (commit
``02308be307b248a4ce2e908d34945178468f3f39``), ``KVCacheUtilizationScorer.Score``: ``1 -
KVCacheUsagePercent`` per endpoint, the scraped ``vllm:kv_cache_usage_perc``; the highest
score is the lowest usage. Here the usage is the replica's allocated blocks over its
usable blocks after its last step completed at or before the arrival (the fleet then
plays every step on its own, so that such a step exists between any two arrivals).
"""

from __future__ import annotations

from .base import Router, View


class LeastKV(Router):
    """The lowest KV-cache usage as of each replica's last completed step; ties at random."""

    name = "least-kv"
    summary = "the replica with the lowest KV-cache usage (llm-d kv-cache-utilization scorer)"
    reads = frozenset({"kv_usage"})

    def choose(self, view: View) -> int:
        return self.least(view.kv_usage)


__all__ = ["LeastKV"]
