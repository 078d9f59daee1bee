"""The entities: plain numpy objects every other package works on (docs/design.md §1).

A :class:`Problem` (drafters' acceptance and costs, search space, budget, error model,
traffic, serving section), what a drafter is (:class:`DrafterInfo`), the serving arrays
(:class:`Serving`), one replica's memory (:class:`MemoryModel`), the error-model contract
(:class:`ErrorModel`), subsets (:mod:`.space`), the budget rules (:mod:`.budget`), Pareto
filtering (:mod:`.pareto`), results (:mod:`.result`) and their JSON shapes
(:mod:`.documents`), the drafter methods
(:mod:`.methods`), accelerators (:mod:`.hardware`) and model architectures
(:mod:`.model_spec`). Nothing here reads a file or imports more than numpy.
"""

from .errors import ErrorModel, IndependentErrors
from .hardware import GPUS, Hardware
from .memory import MemoryModel
from .model_spec import ModelSpec
from .problem import COST_METRICS, MAX_K, SERVING_COST_METRICS, DrafterInfo, Problem, Workload
from .serving import SchedulerLimits, Serving

__all__ = [
    "COST_METRICS",
    "GPUS",
    "MAX_K",
    "SERVING_COST_METRICS",
    "DrafterInfo",
    "ErrorModel",
    "Hardware",
    "IndependentErrors",
    "MemoryModel",
    "ModelSpec",
    "Problem",
    "SchedulerLimits",
    "Serving",
    "Workload",
]
