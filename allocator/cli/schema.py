"""``allocator schema``: the JSON Schema of the problem-file format."""

from __future__ import annotations

from ..io.spec import problem_json_schema
from ..io.staged import to_json
from . import app


@app.command()
def schema() -> None:
    """Print the JSON Schema of the problem file (YAML or JSON)."""
    print(to_json(problem_json_schema()), end="")


__all__ = [
    "schema",
]
