"""One question per module, each answering with a dataclass whose ``to_dict()`` is the
command's JSON document: schedules by batch size (:mod:`.schedule`), fleets for a load or
a request rate (:mod:`.capacity`), token trees (:mod:`.trees`), Monte Carlo rounds
(:mod:`.rounds`), a simulated ``vllm bench serve`` (:mod:`.bench`, on the problem's replica
:mod:`.replica` and its requests :mod:`.request_source`), decisions under sampling
uncertainty (:mod:`.uncertainty`), the break-even correlation (:mod:`.breakeven`), the
paper's numbers (:mod:`.paper`), mixed-traffic plans (:mod:`.plan`), profiling plans
(:mod:`.profile_plan`), each drafter's own front (:mod:`.fronts`) and search limits
(:mod:`.limits`). :mod:`allocator.api` is the way in; the modules are imported where
they are needed, so this package re-exports nothing.
"""

__all__: list[str] = []
