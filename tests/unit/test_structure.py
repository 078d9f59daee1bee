"""The layout holds as docs/design.md §9 describes it: packages re-export their public
names, no module reaches into another's private names, the entities import nothing but
numpy, the maths reads no files, only the command line speaks typer and rich, and
``import allocator`` stays light."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "allocator"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(absolute module, names)`` of every import of ``path`` (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_says_what_it_exports(path):
    if path.name == "__main__.py":
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported = None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(getattr(t, "id", None) == "__all__" for t in targets):
            exported = ast.literal_eval(node.value) if node.value is not None else None
    assert exported is not None, f"{path.name} has no __all__"
    defined = (
        {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        | {
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign | ast.AnnAssign)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        | {
            (a.asname or a.name).split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom | ast.Import)
            for a in n.names
        }
    )
    lazy = "__getattr__" in defined  # a package face that imports on first use
    missing = [n for n in exported if n not in defined]
    assert lazy or not missing, f"{path.name}: __all__ names {missing} it does not define"
    assert not [n for n in exported if n.startswith("_")], f"{path.name} exports a private name"


def test_a_file_name_is_one_kind_of_module():
    """Two modules share a file name only as one command's faces (``cli/X.py`` beside its
    ``plots/X.py`` and the module answering it) or as each package's contract
    (``base.py``) or shared functions (``common.py``): never two kinds (docs/design.md §9)."""
    where: dict[str, list[str]] = {}
    for path in MODULES:
        if path.name not in ("__init__.py", "__main__.py", "base.py", "common.py"):
            where.setdefault(path.name, []).append(path.parent.relative_to(PACKAGE).as_posix())
    shared = {name: dirs for name, dirs in where.items() if len(dirs) > 1}
    faces = {name: dirs for name, dirs in shared.items() if "cli" in dirs}
    assert faces == shared, {n: d for n, d in shared.items() if n not in faces}
    for name, dirs in faces.items():
        others = [d for d in dirs if d not in ("cli", "plots")]
        assert len(others) <= 1, (name, dirs)


def test_no_module_imports_another_modules_private_name():
    found = []
    for path in MODULES:
        for module, names in _imports(path):
            if not module.startswith("allocator"):
                continue
            found += [f"{path.relative_to(ROOT)}: {module}.{n}" for n in names if _private(n)]
            found += [
                f"{path.relative_to(ROOT)}: {module}"
                for i, part in enumerate(module.split("."))
                if _private(part) and module != LAZY and not _inside(path, module, i)
            ]
    assert not found, found


def _inside(path: Path, module: str, i: int) -> bool:
    """Whether ``path`` lies in the package that holds the private part ``i`` of ``module``:
    a package's own private modules are its business (its ``__init__`` re-exports them,
    as ``allocator.api`` does), not another package's."""
    package = ROOT.joinpath(*module.split(".")[:i])
    return package in path.parents


#: The package's one deferred-import helper: private to the package, used by its modules.
LAZY = "allocator._lazy"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_layers_hold():
    """The contracts of pyproject.toml's ``[tool.importlinter]`` (docs/design.md §9): each
    package imports only the packages below it, the simulator nothing of allocator but its
    exceptions, the entities nothing heavier than numpy, the maths no files and no
    pydantic, only the command line typer and rich, only the plots matplotlib. What CI
    runs as ``lint-imports``; its report names every import that breaks one."""
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(no_cache=True, no_logo=True))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


#: The imports that stay inside a function, each with its reason. Every other import sits
#: at the top of its module, where the dependency graph can be read (and linted); a heavy
#: library a start-up does not need is named there too, through ``allocator._lazy``.
DEFERRED = {
    ("allocator/analysis/capacity/workers.py", "ray"): (
        "optional extra (capacity --ray): its absence is a ParameterError naming the extra"
    ),
    ("allocator/search/storage.py", "psycopg"): (
        "probe: which PostgreSQL driver is installed picks the URL's dialect"
    ),
    ("allocator/model/errors/gaussian.py", "scipy.stats"): (
        "imported before the pilot integrals' clock starts, so the estimate times no import"
    ),
}


def _deferred_imports(path: Path) -> set[str]:
    """The modules ``path`` imports inside a function (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inner = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    return {module for module, node in _imports_with_nodes(path, tree) if id(node) in inner}


def _imports_with_nodes(path: Path, tree: ast.Module) -> list[tuple[str, ast.AST]]:
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            out.append((".".join(base + ([node.module] if node.module else [])), node))
        elif isinstance(node, ast.Import):
            out += [(a.name, node) for a in node.names]
    return out


def test_imports_sit_at_the_top_of_their_module():
    """An import inside a function hides a dependency (and its cost) from the reader and
    from import-linter; the ones that remain are :data:`DEFERRED`, each with its reason."""
    found = {
        (str(path.relative_to(ROOT)), module)
        for path in MODULES
        for module in _deferred_imports(path)
    }
    assert found <= set(DEFERRED), sorted(found - set(DEFERRED))
    assert set(DEFERRED) <= found, f"no longer deferred: {sorted(set(DEFERRED) - found)}"


def test_import_allocator_imports_neither_scipy_nor_pydantic():
    code = (
        "import sys, allocator; print(sorted(m for m in ('scipy', 'pydantic') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


#: The most lines a module may have (docs/design.md §9): past it, split it by what it does.
MAX_MODULE_LINES = 800

#: The modules allowed past :data:`MAX_MODULE_LINES` for now, each with its reason.
OVERSIZE: dict[str, str] = {}


def test_no_module_is_longer_than_the_limit():
    """Every Python file of the package, its tests, benchmarks and docs builder stays within
    :data:`MAX_MODULE_LINES`; the exceptions are :data:`OVERSIZE` and each still needs one."""
    files = [
        p for d in ("allocator", "tests", "benchmarks", "docs") for p in (ROOT / d).rglob("*.py")
    ]
    lines = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in files
    }
    long = {f: n for f, n in lines.items() if n > MAX_MODULE_LINES}
    assert set(long) <= set(OVERSIZE), {f: n for f, n in long.items() if f not in OVERSIZE}
    assert set(OVERSIZE) <= set(long), f"no longer oversize: {sorted(set(OVERSIZE) - set(long))}"
