"""Step-time predictors: one contract, one module per predictor, one registry.

:class:`~allocator.model.steptime.base.StepTimePredictor` is the contract
(docs/design.md §8.12); :data:`PREDICTORS` maps each predictor's ``name`` to its class
(the contract tests run every one).
"""

from __future__ import annotations

from .base import AXES, StepInputs, StepTimePredictor, step_inputs
from .component import ComponentPredictor
from .dispatch import ServingPredictor, roofline_of
from .roofline import RooflinePredictor
from .tables import TablePredictor

__all__ = [
    "AXES",
    "PREDICTORS",
    "ComponentPredictor",
    "RooflinePredictor",
    "ServingPredictor",
    "TablePredictor",
    "StepInputs",
    "StepTimePredictor",
    "register",
    "roofline_of",
    "step_inputs",
]

#: Registry: predictor name → class.
PREDICTORS: dict[str, type[StepTimePredictor]] = {}


def register(cls: type[StepTimePredictor]) -> type[StepTimePredictor]:
    """Add a predictor class to :data:`PREDICTORS` under its ``name`` (usable as a
    decorator); a second class under the same name is refused."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} has no registry name")
    if PREDICTORS.get(name, cls) is not cls:
        raise ValueError(f"a step-time predictor named {name!r} is already registered")
    PREDICTORS[name] = cls
    return cls


for _cls in (TablePredictor, ComponentPredictor, RooflinePredictor, ServingPredictor):
    register(_cls)
