"""``allocator schema``: the JSON Schema of the problem-file format."""

from __future__ import annotations

from .. import api
from ..io.staged import to_json
from .common import emit_text, handles_input_errors
from .group import app


@app.command()
@handles_input_errors
def schema() -> None:
    """Print the JSON Schema of the problem file (YAML or JSON)."""
    emit_text(to_json(api.schema()))


__all__ = [
    "schema",
]
