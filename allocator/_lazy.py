"""The one way a module of allocator defers an import: a heavy library (scipy, optuna,
matplotlib, cvxpy, ...) that a command's start-up does not need is named at the top of
the module that uses it, and imported on first use::

    from typing import TYPE_CHECKING

    from .._lazy import lazy_module

    if TYPE_CHECKING:
        from scipy import special
    else:
        special = lazy_module("scipy.special")

    def thresholds(q):
        return special.ndtri(q)  # scipy.special is imported here, the first time

The ``TYPE_CHECKING`` twin keeps the dependency visible: mypy types the name, and
import-linter (``lint-imports``, the contracts of pyproject.toml) sees the import. Every
other import sits at the top of its module; the few that cannot are listed, each with its
reason, in ``tests/unit/test_structure.py`` (``DEFERRED``), which fails on any other.

:mod:`allocator.api` names each command's analysis the same way, so that a command's
start-up loads its own analysis and not every other. The other deferred faces are the
packages' own: ``allocator.__getattr__`` (PEP 562: the public names load on first use,
so ``import allocator`` stays light) and the command line's ``main``, which imports the
one command being run (docs/design.md §9).
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """Stands for the module of its name, which is imported (once, by Python's import
    system) on the first attribute read; every read is then the module's own, so a test
    that patches the module's attribute sees its patch."""

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy_module(name: str) -> Any:
    """The module ``name``, imported when an attribute of it is first read."""
    return LazyModule(name)


__all__ = ["LazyModule", "lazy_module"]
