"""allocator: plan draft-then-verify inference.

Search jointly over the draft length ``k``, the number of drafters ``m`` and which
drafters to pool, and return the Pareto front of throughput against cost; size fleets
for a load, simulate requests at a rate, fit step times to measurements.

Public API (one function per command, :mod:`allocator.api`)::

    from allocator import api
    problem = api.load("problems/paper-r2.yaml")
    front = api.solve(problem)

The names below are imported on first use, so ``import allocator`` stays light (no
scipy, no pydantic until a problem is read).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ loads, named for mypy and import-linter
    from . import api
    from .api import evaluate, load, solve
    from .core.problem import Problem
    from .exceptions import InputError
    from .io.spec import ProblemSpec, load_problem

#: The one place the version is written (pyproject.toml reads it: dynamic version).
__version__ = "0.1.0"

#: Public name -> the module that defines it.
_LAZY = {
    "api": "allocator.api",
    "load": "allocator.api",
    "solve": "allocator.api",
    "evaluate": "allocator.api",
    "InputError": "allocator.exceptions",
    "Problem": "allocator.core.problem",
    "ProblemSpec": "allocator.io.spec",
    "load_problem": "allocator.io.spec",
}

__all__ = [
    "InputError",
    "Problem",
    "ProblemSpec",
    "api",
    "evaluate",
    "load",
    "load_problem",
    "solve",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = module if name == "api" else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'allocator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
