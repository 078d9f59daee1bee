"""Correlated-error models (DESIGN §2): one module per model, one factory."""

from __future__ import annotations

from ...exceptions import NotSupportedYet
from .base import ErrorModel
from .independent import IndependentErrors

__all__ = ["ErrorModel", "IndependentErrors", "build_error_model"]


def build_error_model(spec, names, acceptance, base_dir=None) -> ErrorModel:
    """The error model a problem file's ``errors:`` section asks for.

    ``spec`` is an :class:`allocator.spec.ErrorsSpec`; ``names`` the drafter names in
    order; ``acceptance`` their ``(N, J)`` marginal acceptance; ``base_dir`` the folder
    paths in the file are relative to.
    """
    if spec.model == "independent":
        return IndependentErrors()
    raise NotSupportedYet("errors.model", f"the {spec.model!r} error model")
