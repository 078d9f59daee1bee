"""allocator: plan draft-then-verify inference.

Search jointly over the draft length ``k``, the number of drafters ``m`` and which
drafters to pool, and return the Pareto front of throughput against cost.

Public API::

    from . import load_problem, Problem, solve, evaluate
"""

from .api import evaluate, load, solve
from .core.problem import Problem
from .exceptions import InputError
from .io.spec import ProblemSpec, load_problem

__all__ = ["InputError", "Problem", "ProblemSpec", "evaluate", "load", "load_problem", "solve"]
#: The one place the version is written (pyproject.toml reads it: dynamic version).
__version__ = "0.1.0"
