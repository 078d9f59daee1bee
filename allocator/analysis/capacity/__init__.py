"""Capacity: the cheapest fleet of replicas for a traffic, against the cheapest that does
not speculate (docs/design.md §8.11, §8.14).

Two questions, one module each: a token load under a mean time per output token, sized
from the serving model's grid of every configuration at every batch size (:mod:`.by_load`,
on :mod:`.grid`); a request rate under SLO percentiles, each candidate simulated request by
request (:mod:`.by_rate`: the SLOs in :mod:`.slo`, the candidates, their bounds and the
search of one in :mod:`.rate_search`, where the simulations run in :mod:`.workers`). Both
sweeps list where the cheaper side changes with one finder (:mod:`.crossings`).
:mod:`allocator.api` imports the modules where they are needed, so this package
re-exports nothing.
"""

__all__: list[str] = []
