"""Output paths checked against the command's inputs and against each other.

A command must never overwrite a file it reads (``schedule P --json P`` replaced the
problem file with its own JSON) nor write two outputs to one path (the second
silently replaced the first). Checked before any work, with the other output checks.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..exceptions import InputError


def _same(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (the same resolved path, or one inode)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: not the same file
        return False


def refuse_overwriting(
    inputs: dict[str, str | Path | None], outputs: dict[str, str | Path | None]
) -> None:
    """Raise :class:`InputError` (naming the output option) when an output path is one of
    the ``inputs`` or another output. Keys are what the message names (``"--json"``,
    ``"the problem file"``); ``None`` and ``"-"`` (stdout) are skipped."""
    seen: list[tuple[str, str | Path]] = []
    for option, path in outputs.items():
        if path is None or str(path) == "-":
            continue
        for label, source in inputs.items():
            if source is not None and _same(path, source):
                raise InputError(
                    option, f"{path} is {label}, which this command reads: it would be overwritten"
                )
        for other, earlier in seen:
            if _same(path, earlier):
                raise InputError(option, f"{path} is also the {other} output; give each its own")
        seen.append((option, path))
