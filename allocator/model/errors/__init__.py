"""Correlated-error models (docs/design.md §3): one module per model, one factory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...exceptions import InputError
from .base import ErrorModel
from .empirical import EmpiricalErrors, read_outcomes
from .exchangeable import ExchangeableErrors
from .factor import FactorErrors
from .gaussian import GaussianErrors, check_correlation_matrix
from .independent import IndependentErrors

__all__ = [
    "EmpiricalErrors",
    "ErrorModel",
    "ExchangeableErrors",
    "FactorErrors",
    "GaussianErrors",
    "IndependentErrors",
    "build_error_model",
    "load_empirical",
]


def build_error_model(spec, names, acceptance, base_dir=None) -> ErrorModel:
    """The error model a problem file's ``errors:`` section asks for.

    ``spec`` is an :class:`allocator.io.spec.ErrorsSpec` (its fields already checked for
    shape); ``names`` the drafter names in order; ``acceptance`` their ``(N, J)``
    marginal acceptance; ``base_dir`` the folder paths in the file are relative to.
    Checks that need the drafters (matrix size and validity, loadings by name,
    the log's columns and values, reachable error correlation) raise
    :class:`~allocator.exceptions.InputError` naming the field.
    """
    n = len(names)
    if spec.model == "independent":
        return IndependentErrors()
    if spec.model == "exchangeable":
        model = ExchangeableErrors(spec.correlation, spec.error_correlation)
        model.validate(1.0 - np.asarray(acceptance, dtype=float))
        return model
    if spec.model == "factor":
        unknown = sorted(set(spec.loadings) - set(names))
        if unknown:
            raise InputError("errors.loadings", f"unknown drafter {unknown[0]!r}")
        missing = [x for x in names if x not in spec.loadings]
        if missing:
            raise InputError("errors.loadings", f"no loading for drafter {missing[0]!r}")
        return FactorErrors(np.array([spec.loadings[x] for x in names], dtype=float))
    if spec.model == "gaussian":
        matrix = np.asarray(spec.matrix, dtype=float)
        if matrix.shape != (n, n):
            raise InputError(
                "errors.matrix",
                f"must be {n} x {n} (one row and column per drafter), got {len(spec.matrix)} rows",
            )
        check_correlation_matrix(matrix, "errors.matrix")
        return GaussianErrors(matrix)
    if spec.model == "empirical":
        return load_empirical(spec, names, base_dir)[0]
    raise InputError("errors.model", f"unknown error model {spec.model!r}")


def load_empirical(spec, names, base_dir=None) -> tuple[EmpiricalErrors, dict]:
    """The empirical model over the whole log, and one per value of its ``workload``
    column (empty dict without one)."""
    path = Path(spec.outcomes)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    data = read_outcomes(path, tuple(names))
    fail, position, workload = data["fail"], data["position"], data["workload"]
    whole = EmpiricalErrors.from_failures(fail, position)
    parts = {}
    if workload is not None:
        for w in np.unique(workload):
            rows = workload == w
            pos = None if position is None else position[rows]
            if pos is not None and np.unique(pos).size != pos.max():
                raise InputError(
                    "errors.outcomes", f"workload {str(w)!r} skips a position in the log"
                )
            parts[str(w)] = EmpiricalErrors.from_failures(fail[rows], pos)
    return whole, parts
