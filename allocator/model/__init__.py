"""The draft-then-verify model (docs/design.md §2–§3), vectorised over a leading batch axis."""

from .acceptance import expected_accepted, position_matrix
from .metrics import METRICS, evaluate_configs, evaluate_subsets

__all__ = [
    "METRICS",
    "evaluate_configs",
    "evaluate_subsets",
    "expected_accepted",
    "position_matrix",
]
