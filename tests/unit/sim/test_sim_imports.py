"""The simulator stands alone: ``allocator/sim`` imports numpy, the standard library and
``allocator.exceptions`` and ``allocator.validate`` (the argument checks, which import no
more than that themselves), nothing else of the package (files are read in
``allocator.io``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SIM = Path(__file__).resolve().parents[3] / "allocator" / "sim"


def _absolute_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
            elif node.level == 2:  # from ..x import y: a sibling package of sim
                found.add("allocator." + (node.module or ""))
            elif node.level > 2:
                found.add("<beyond allocator>")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_sim_imports_only_numpy_the_standard_library_and_exceptions():
    allowed = set(sys.stdlib_module_names) | {
        "__future__",
        "numpy",
        "allocator.exceptions",
        "allocator.validate",
    }
    outside = {
        f"{path.name}: {module}"
        for path in sorted(SIM.glob("*.py"))
        for module in _absolute_imports(path)
        if module.split(".")[0] not in allowed and module not in allowed
    }
    assert not outside, sorted(outside)
