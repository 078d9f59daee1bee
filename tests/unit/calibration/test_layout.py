"""Calibration's place in the layout: it imports the entities, the maths, the file edge
and the estimate readers (the benchmark files), nothing above them, and no package below
it imports calibration; the predictor module keeps no fitting."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "allocator"
#: What calibration may import from the package.
ALLOWED = {
    "allocator._lazy",
    "allocator.calibration",
    "allocator.core",
    "allocator.estimate",
    "allocator.exceptions",
    "allocator.validate",
    "allocator.io",
    "allocator.model",
}
#: Packages at or below calibration's layer, which must not import it.
BELOW = ("core", "model", "io", "estimate", "sim", "engines", "search")


def _allocator_imports(path: Path) -> set[str]:
    """``allocator.<package>`` of every import of ``path`` from the package (relative
    imports resolved)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {".".join(m.split(".")[:2]) for m in names if m.split(".")[0] == "allocator"}
    return out


def test_calibration_imports_only_the_layers_below_it():
    modules = sorted((PACKAGE / "calibration").glob("*.py"))
    assert {p.stem for p in modules} >= {"rows", "fit", "holdout", "write", "report"}
    for path in modules:
        reached = _allocator_imports(path)
        assert reached <= ALLOWED, (path.name, reached - ALLOWED)


def test_nothing_below_calibration_imports_it():
    for folder in BELOW:
        for path in (PACKAGE / folder).rglob("*.py"):
            assert "allocator.calibration" not in _allocator_imports(path), path


def test_the_roofline_predictor_module_does_no_fitting():
    from allocator.model.steptime import roofline

    for name in ("fit_roofline", "undetermined", "identify", "log_jacobian", "RooflineFit"):
        assert not hasattr(roofline, name), name
    assert "scipy" not in (PACKAGE / "model" / "steptime" / "roofline.py").read_text()
