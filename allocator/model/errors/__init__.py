"""Correlated-error models (docs/design.md §3): one module per model, one factory."""

from __future__ import annotations

import numpy as np

from ...core.errors import ErrorModel, IndependentErrors
from ...exceptions import InputError
from .empirical import EmpiricalErrors
from .exchangeable import ExchangeableErrors
from .factor import FactorErrors
from .gaussian import GaussianErrors, check_correlation_matrix

#: Every error model by its ``name`` (the problem file's ``errors.model``): one module per
#: model; the contract suite (tests/contract/test_error_models_contract.py) runs on each.
ERROR_MODELS: dict[str, type[ErrorModel]] = {
    cls.name: cls
    for cls in (
        IndependentErrors,
        ExchangeableErrors,
        FactorErrors,
        GaussianErrors,
        EmpiricalErrors,
    )
}

__all__ = [
    "ERROR_MODELS",
    "EmpiricalErrors",
    "ErrorModel",
    "ExchangeableErrors",
    "FactorErrors",
    "GaussianErrors",
    "IndependentErrors",
    "build_error_model",
]


def build_error_model(spec, names, acceptance, empirical=None) -> ErrorModel:
    """The error model a problem file's ``errors:`` section asks for.

    ``spec`` is an :class:`allocator.io.spec.ErrorsSpec` (its fields already checked for
    shape); ``names`` the drafter names in order; ``acceptance`` their ``(N, J)``
    marginal acceptance; ``empirical`` the model of the outcome log named by
    ``errors.outcomes`` (read by :func:`allocator.io.outcome_log.load_empirical`),
    for ``model: empirical``.
    Checks that need the drafters (matrix size and validity, loadings by name,
    the log's columns and values, reachable error correlation) raise
    :class:`~allocator.exceptions.InputError` naming the field.
    """
    n = len(names)
    if spec.model not in ERROR_MODELS:
        raise InputError("errors.model", f"unknown error model {spec.model!r}")
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
        if empirical is None:
            raise ValueError("model: empirical needs the outcome log's model (empirical=)")
        return empirical
    raise InputError("errors.model", f"unknown error model {spec.model!r}")
