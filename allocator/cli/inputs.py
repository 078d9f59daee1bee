"""Outputs that would overwrite an input: refused before any work.

``precheck_outputs`` checks that an output can be written, not that it is no input; until
it does, the commands here name their inputs themselves.
"""

from __future__ import annotations

from pathlib import Path

from ..exceptions import InputError


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether paths ``a`` and ``b`` name one file (links and ``./`` followed)."""
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return pa.samefile(pb)
    return pa.resolve() == pb.resolve()


def refuse_overwriting(inputs: dict[str, str | Path], **outputs: str | None) -> None:
    """Raise :class:`InputError` naming the option when an output PATH (not ``-``) is one
    of ``inputs`` (``{name shown: path}``); ``outputs``: option name (``json``) → path."""
    for option, path in outputs.items():
        if not path or path == "-":
            continue
        for name, source in inputs.items():
            if same_file(path, source):
                raise InputError(
                    "--" + option.replace("_", "-"),
                    f"is the same file as {name} ({source}); inputs are never overwritten",
                )
