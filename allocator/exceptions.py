"""The errors users see, one class per kind of failure.

Every one but :class:`SolverError` is an :class:`InputError`: something about what was
asked, named by ``field``. The command line prints ``error: <field>: <message>`` on one
line and exits with status 2; it shows a :class:`ParameterError`'s ``field`` (a
parameter name of :mod:`allocator.api`) as the command-line flag that sets it.

- :class:`InputError`: a bad problem file or input file (``field`` is its dotted path:
  ``drafters.1.acceptance``, ``serving.memory.kv_cache_gb``, ``errors.outcomes``).
- :class:`ParameterError`: a bad argument to a library function (``field`` is the
  parameter's name: ``k``, ``tpot_ms``, ``pick``).
- :class:`InfeasibleError`: a well-formed question with no answer: a budget, latency or
  service-level target that no configuration meets.
- :class:`NotModelledError`: a question outside what the model evaluates: no step time
  where nothing was measured, no closed form for correlated longest chains.
- :class:`SolverError`: a solver that failed on a well-posed problem (not the input's
  fault).
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad or unsatisfiable input.

    ``field`` is the dotted path of the offending field in the problem file
    (``drafters.1.acceptance``, ``budget.hosting_cost``) or, for a
    :class:`ParameterError`, the parameter's name; ``message`` says what is wrong with it.
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ParameterError(InputError):
    """A bad argument to a library function: ``field`` names the parameter (``k``,
    ``tpot_ms``); the command line names the flag that sets it (``--k``, ``--tpot-ms``)."""


class InfeasibleError(InputError):
    """No configuration meets the budget or target named by ``field``."""


class NotModelledError(InputError):
    """The model gives no answer here (nothing measured, no closed form): ``field`` names
    what would have to be given."""


class SolverError(RuntimeError):
    """A solver failed on a well-posed problem; ``field`` names the step, ``message`` why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


__all__ = ["InfeasibleError", "InputError", "NotModelledError", "ParameterError", "SolverError"]
