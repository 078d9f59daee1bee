"""How estimate's messages quote an input: a short prefix, escaped and masked.

Kept apart from :mod:`.base` (the reader contract) so that every reader module, the
counting code included, can import it without a cycle.
"""

from __future__ import annotations

from ..io.quoting import mask_secrets

#: The longest stretch of an input's own text a message quotes (:func:`excerpt`).
EXCERPT_CHARS = 60


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` as a message may quote it: its first ``limit`` characters, with how many
    there were when it is longer (an input's content is not repeated back whole), control
    characters escaped and the value of anything shaped like ``KEY=VALUE`` masked
    (:func:`allocator.io.quoting.mask_secrets`)."""
    text = str(text)
    head = mask_secrets(text[:limit], limit)
    if len(text) <= limit:
        return head
    return f"{head}... ({len(text):,} characters)"


def quote(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` for a message, as :func:`excerpt` shows text: a name or value read
    from an input."""
    return excerpt(repr(value), limit)


__all__ = ["EXCERPT_CHARS", "excerpt", "quote"]
