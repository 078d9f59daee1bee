"""The contract of a serving engine: what it serves and the settings it takes.

An :class:`Engine` turns what the planner chose into the engine's own settings
(docs/design.md §8.8): one drafter at draft length ``k`` (a chain), a token tree where
the engine has a tree setting (§8.10), a ``k`` schedule by batch size where it takes
one (§8.6). Every setting serves one draft model per server: a configuration pooling
several drafters is refused (:meth:`Engine.check`), never exported as one of them.
What each method is called by each engine is the one table of
:mod:`allocator.core.methods`.

Refusals are :class:`~allocator.exceptions.ParameterError` naming ``export`` (the
parameter that asked for the export), except a tree asked of a drafter whose method
builds none, which names the drafter's ``method`` field.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

from ..core.methods import METHODS, TABLE, resolve_method
from ..exceptions import InputError, ParameterError

if TYPE_CHECKING:
    from ..model.token_tree import Tree


class DrafterLike(Protocol):
    """What an export reads of a drafter (:class:`allocator.core.problem.DrafterInfo` and
    ``allocator.io.spec.Drafter`` have it)."""

    @property
    def name(self) -> str: ...
    @property
    def method(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def prompt_lookup_min(self) -> int | None: ...
    @property
    def prompt_lookup_max(self) -> int | None: ...


#: SGLang's ``--speculative-algorithm`` values that run on its EAGLE worker and draft
#: token trees (top-k > 1): ``EAGLE``, ``EAGLE3`` and ``NEXTN``, which SGLang 0.5.23
#: rewrites to ``EAGLE`` (``sglang/srt/arg_groups/speculative_hook.py`` lines 109-116;
#: ``_handle_eagle_family`` has no general top-k 1 requirement). Their methods
#: (``eagle``, ``eagle3``, ``mtp``) are the ones whose trees are exported, to either engine.
TREE_ALGORITHMS: tuple[str, ...] = ("EAGLE", "EAGLE3", "NEXTN")


def tree_method(drafter: DrafterLike, field: str) -> str:
    """The drafter's method, one whose drafters build the EAGLE trees exported here;
    refuses (an :class:`InputError` naming ``field``, the drafter's ``method``) any other
    method or none."""
    tree_methods = [m for m, info in TABLE.items() if info.sglang in TREE_ALGORITHMS]
    if drafter.method not in tree_methods:
        raise InputError(
            field,
            f"is {drafter.method!r}; SGLang's EAGLE worker builds token trees for method "
            f"{', '.join(tree_methods)} only",
        )
    return drafter.method


class Engine(ABC):
    """One serving engine.

    ``name``: its registry key (``vllm``, ``sglang``), the value of ``--export``;
    ``label``: how messages name it. ``has_trees`` / ``has_schedule``: whether
    :meth:`tree_export` / :meth:`schedule_settings` give settings (the defaults refuse).
    """

    name: ClassVar[str]
    label: ClassVar[str]
    has_trees: ClassVar[bool] = False
    has_schedule: ClassVar[bool] = False

    @abstractmethod
    def method_name(self, drafter: str, method: str) -> str:
        """The engine's name for ``method`` (of drafter ``drafter``, for messages);
        a :class:`ParameterError` naming ``export`` when it cannot serve it."""

    def serves(self, method: str) -> bool:
        """Whether the engine serves drafters of ``method``."""
        try:
            self.method_name("", method)
        except ParameterError:
            return False
        return True

    @property
    def methods(self) -> tuple[str, ...]:
        """Every method the engine serves, in :data:`~allocator.core.methods.METHODS`
        order."""
        return tuple(m for m in METHODS if self.serves(m))

    @abstractmethod
    def chain_settings(
        self, drafter: DrafterLike, k: int, *, batch: int | None = None
    ) -> tuple[dict[str, object] | list[str], list[str]]:
        """One drafter drafting a chain of ``k`` tokens: the settings (a JSON object or
        argv words) and notes for stderr (each starting ``note:``). ``batch``: the
        concurrent sequences the server is planned for, where the engine's settings
        depend on it (``None``: not stated)."""

    @abstractmethod
    def text(self, settings: dict[str, object] | list[str]) -> str:
        """``settings`` as the one line to pass to the engine (ending in a newline)."""

    def check(
        self,
        names: Sequence[str],
        drafters: Mapping[str, DrafterLike],
        what: str = "the configuration",
    ) -> DrafterLike:
        """The one drafter that configuration ``names`` runs (``what`` names it in
        messages); refuses a configuration pooling several drafters, the engine running
        one draft model, and a drafter whose method the engine cannot serve."""
        if len(names) != 1:
            raise ParameterError(
                "export",
                f"{what} pools {len(names)} drafters ({', '.join(names)}); {self.label} runs "
                "one draft model, so it cannot serve this ensemble (choose single-drafter "
                "configurations, e.g. search.m.max: 1)",
            )
        drafter = drafters[names[0]]
        method, _ = resolve_method(drafter.name, drafter.method)
        self.method_name(drafter.name, method)
        return drafter

    def tree_export(
        self,
        drafter: DrafterLike,
        tree: Tree,
        steps: int,
        topk: int,
        tokens: int,
        *,
        batch: int | None = None,
    ) -> tuple[str, list[str]]:
        """What the engine runs for an EAGLE tree (SGLang's ``(num_steps, topk,
        num_draft_tokens)``, building ``tree``): the text for stdout and notes;
        ``batch`` as for :meth:`chain_settings`."""
        raise ParameterError("export", f"{self.label} takes no token tree")

    def schedule_settings(
        self, rows: list[dict], drafters: Mapping[str, DrafterLike]
    ) -> tuple[dict[str, object], list[str]]:
        """A ``k`` schedule by batch size (``schedule --json``'s rows) as one setting,
        and notes."""
        raise ParameterError("export", f"{self.label} takes no k schedule by batch size")


__all__ = ["TREE_ALGORITHMS", "DrafterLike", "Engine", "tree_method"]
