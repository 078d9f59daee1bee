"""Step-time predictors: one contract, one module per predictor, one registry.

:class:`~allocator.model.steptime.base.StepTimePredictor` is the contract
(docs/design.md §8.12); :data:`PREDICTORS` maps each predictor's ``name`` to its class, and
:func:`predictor_class` looks one up, refusing an unknown name with the known ones.
"""

from __future__ import annotations

from ...exceptions import InputError
from .base import AXES, StepInputs, StepTimePredictor, step_inputs
from .component import ComponentPredictor
from .roofline import RooflinePredictor
from .serving import ServingPredictor, roofline_of
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
    "predictor_class",
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


def predictor_class(name: str, field: str = "serving.step_time") -> type[StepTimePredictor]:
    """The class registered as ``name``; :class:`InputError` on ``field`` listing the
    known names otherwise."""
    if name not in PREDICTORS:
        raise InputError(
            field, f"unknown step-time predictor {name!r} (known: {', '.join(sorted(PREDICTORS))})"
        )
    return PREDICTORS[name]


for _cls in (TablePredictor, ComponentPredictor, RooflinePredictor, ServingPredictor):
    register(_cls)
