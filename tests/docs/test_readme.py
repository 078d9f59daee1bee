"""The README: its commands run, its generated references are current, its links resolve."""

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def load_build():
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def commands(block: str) -> list[list[str]]:
    """Shell words of each command in a block (continuations joined, comments dropped)."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def setup_commands() -> list[str]:
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [" ".join(c) for b in bash_blocks(setup) for c in commands(b)]


def test_setup_commands_are_the_two_documented_ones():
    assert setup_commands() == [
        "pip install -e . && allocator solve problems/paper-r2.yaml",
        "pip install -e .[test] && pytest",
    ]


def test_first_setup_command_runs_against_the_installed_package():
    line = setup_commands()[0]
    after = shlex.split(line.split("&&", 1)[1])
    assert after[0] == "allocator"
    r = subprocess.run(
        [sys.executable, "-m", "allocator", *after[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "paper-r2" in r.stdout and "1.525391" in r.stdout  # the pair at k* = 5


def test_second_setup_command_collects_tests_and_notebooks():
    """``pytest`` from the repository root (running the suite inside itself would
    recurse): it must collect the tests and every notebook, with no collection error."""
    line = setup_commands()[1]
    assert line.split("&&", 1)[1].strip() == "pytest"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 4
    for name in notebooks:
        assert f"notebooks/{name}" in r.stdout
    assert "tests/docs/test_readme.py" in r.stdout


def runnable_commands() -> list[list[str]]:
    """Every ``allocator ...`` command in the README's bash blocks, outside Set up."""
    body = README.split("## Set up", 1)[1].split("\n## ", 1)[1]
    return [c for b in bash_blocks(body) for c in commands(b) if c[0] == "allocator"]


def test_readme_commands_run(tmp_path, monkeypatch):
    """Each documented command whose input file ships with the repository runs and
    exits 0, in a scratch copy (outputs land there), in-process through the command
    line's own entry point. Commands on files a user brings (``metrics.txt``, the
    ``plan.yaml`` it makes) are the only ones left out."""
    from typer.testing import CliRunner

    from allocator.cli import app

    for folder in ("problems", "docs"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "scratch").mkdir()  # the README's `mkdir -p scratch`
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    ran, skipped = [], []
    for words in runnable_commands():
        sub = words[1]
        inputs = [w for w in words[2:3] if not w.startswith("-")]
        if sub not in ("paper", "schema") and not all((tmp_path / w).exists() for w in inputs):
            skipped.append(" ".join(words))
            continue
        r = runner.invoke(app, words[1:])
        assert r.exit_code == 0, f"{' '.join(words)}\n{r.output[-2000:]}"
        ran.append(" ".join(words))
        for option in ("--plot", "--json", "--csv", "--out"):
            if option in words:
                target = words[words.index(option) + 1]
                if target != "-":
                    assert (tmp_path / target).stat().st_size > 0, target
    tour = README.split("## A tour", 1)[1].split("\n## ", 1)[0]
    tour_commands = [
        " ".join(c) for b in bash_blocks(tour) for c in commands(b) if c[0] == "allocator"
    ]
    assert set(tour_commands) <= set(ran), "every tour command must run"
    assert all("metrics.txt" in s or "plan.yaml" in s for s in skipped), skipped
    # every file a command writes goes to scratch/ (or is the tour's committed picture)
    for words in ran:
        for option in ("--plot", "--json", "--csv", "--out"):
            if f" {option} " in f" {words} ":
                target = words.split(f" {option} ", 1)[1].split()[0]
                assert target == "-" or target.startswith(("scratch/", "docs/front.png")), words


def test_tour_picture_is_committed_and_its_command_documented():
    assert "allocator solve docs/tour.yaml --plot docs/front.png" in README
    assert "![" in README and "(docs/front.png)" in README
    data = (ROOT / "docs" / "front.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


@pytest.mark.parametrize("name", ["problem-reference"])
def test_generated_reference_is_current(name):
    """The problem-file reference is exactly what the schema generates. (The
    command-line reference is checked for completeness below, not word for word, so
    that rewording a help text does not fail the suite; `python docs/build.py --check`
    compares both.)"""
    build = load_build()
    current = build.section(README, name)
    assert current is not None, f"README.md lost its {name} markers"
    assert current == build.generated()[name], (
        f"README.md's {name} is out of date: run `python docs/build.py`"
    )


def test_problem_reference_names_every_schema_field():
    from allocator.io.spec import problem_json_schema

    build = load_build()
    section = build.section(README, "problem-reference")
    schema = problem_json_schema()
    objects = [schema, *schema["$defs"].values()]
    for obj in objects:
        for field in obj.get("properties", {}):
            assert f"| `{field}` |" in section, field


def test_cli_reference_names_every_command_and_option():
    import typer

    from allocator.cli import app

    build = load_build()
    section = build.section(README, "cli-reference")
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        assert f"#### `allocator {name}`" in section
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("-") and opt != "--help":
                    assert opt in section, (name, opt)


def test_local_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), target


def test_notebooks_are_stored_without_outputs_and_listed():
    import nbformat

    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert [p.stem for p in paths] == [
        "01-paper-reproduced",
        "02-correlation-breakeven",
        "03-budget-across-m-and-k",
        "04-capacity-planning",
        "05-serving-under-load",
        "06-width-against-depth",
        "07-capacity",
        "08-requests-and-slos",
        "09-context-and-batch",
    ]
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code, path.name
        assert all(not c.outputs and c.execution_count is None for c in code), path.name
        assert f"(notebooks/{path.name})" in README, path.name
