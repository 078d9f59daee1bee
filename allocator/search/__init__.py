"""Search strategies: one module each, one contract (:class:`~.base.Strategy`)."""

from __future__ import annotations

from .base import Strategy
from .exact import ExactStrategy

STRATEGIES: dict[str, type[Strategy]] = {"exact": ExactStrategy}


def make_strategy(name: str, problem=None, **params) -> tuple[Strategy, str]:
    """The strategy called ``name`` (``auto`` picks one), and why it was picked."""
    if name == "auto":
        return ExactStrategy(), "exact: the whole search space can be enumerated"
    try:
        cls = STRATEGIES[name]
    except KeyError:
        from ..exceptions import InputError

        raise InputError(
            "--strategy",
            f"unknown strategy {name!r} (choose from auto, " + ", ".join(STRATEGIES) + ")",
        ) from None
    return cls(**params), f"{name}: asked for"


__all__ = ["STRATEGIES", "ExactStrategy", "Strategy", "make_strategy"]
