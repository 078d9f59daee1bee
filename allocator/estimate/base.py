"""The reader contract: ``Reader().read(path, options) -> Estimate`` (docs/design.md §8.9).

Every input format of ``allocator estimate`` is one :class:`Reader`: a registry ``name``
(the ``--format`` value), what it reads, the format-specific options it takes, and one
method, :meth:`Reader.read`, reducing a file to the common :class:`~.counts.Estimate`
(per-drafter per-position counts). The registry is :data:`allocator.estimate.READERS`;
one contract test suite runs every reader it holds
(``tests/contract/test_readers_contract.py``).

What every reader keeps:

- a file it cannot read (empty, another format, garbage) is an
  :class:`~allocator.exceptions.InputError` whose ``field`` names the file (``INPUT``,
  the file's name, ``NAME line N``, or a field of it), never a crash;
- a message quotes at most a short prefix of what the file holds (:func:`excerpt`,
  :func:`quote`);
- counts are whole and non-negative, ``successes <= trials_low <= trials`` at every
  position (``trials_low``: the rounds known to reach it), the same on every read;
- nothing is printed: what a user should know goes into :attr:`Estimate.notes`.

The format is always named (``--format``): inputs are not told apart by their content.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from .counts import MIN_TRIALS
from .messages import EXCERPT_CHARS, excerpt, quote

if TYPE_CHECKING:
    from .counts import Estimate

#: Options that only some formats take, in the order they are checked; a reader lists
#: the ones it takes in :attr:`Reader.options` (``drafter``, ``min_count`` and ``rename``
#: apply to every format).
FORMAT_SPECIFIC = ("errors", "convention", "k", "topk", "adaptive", "adaptive_steps")


@dataclass(frozen=True)
class ReadOptions:
    """What a read is asked besides the file, checked by the caller.

    ``out``: the problem file to be written (``outcomes`` under the empirical error
    model points at the log relative to it); ``drafter``: the name of the one drafter of
    a format that does not name its drafters (:attr:`Reader.names_drafters` false);
    ``min_trials``: the fewest rounds reaching a position to keep it. The others are the
    format-specific options (:data:`FORMAT_SPECIFIC`), ``None`` where not given.
    """

    out: str | Path
    drafter: str = "draft"
    min_trials: int = MIN_TRIALS
    errors: str = "empirical"
    convention: str = "bonus"
    k: int | None = None
    topk: int | None = None
    adaptive: bool | None = None
    adaptive_steps: Sequence[int] | None = None


class Reader(abc.ABC):
    """One input format. Subclasses set the class attributes and implement :meth:`read`.

    ``name``: the registry key, the value of ``--format``; ``reads``: what it reads, for
    messages and help; ``options``: the format-specific options it takes (a subset of
    :data:`FORMAT_SPECIFIC`); ``names_drafters``: whether the input names its drafters
    (outcome columns, vLLM's ``model_name``), else it reads one drafter named
    ``ReadOptions.drafter``; ``counts_exactly``: where positions come out only bounded,
    what would count them exactly (appended to the note, ``""`` for nothing).
    """

    name: ClassVar[str]
    reads: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()
    names_drafters: ClassVar[bool] = False
    counts_exactly: ClassVar[str] = ""

    @abc.abstractmethod
    def read(self, path: Path, options: ReadOptions) -> Estimate:
        """The counts ``path`` holds, as an :class:`~.counts.Estimate` (raises
        :class:`~allocator.exceptions.InputError` for a file it cannot read and
        :class:`~allocator.exceptions.ParameterError` for a bad option)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: What the vLLM counter formats add to their note on bounded positions.
VLLM_EXACT = (
    "; vLLM's per-request metrics (--per-request-spec-decode-metrics detailed, "
    "--format vllm-requests) count them exactly"
)


__all__ = [
    "EXCERPT_CHARS",
    "FORMAT_SPECIFIC",
    "VLLM_EXACT",
    "ReadOptions",
    "Reader",
    "excerpt",
    "quote",
]
