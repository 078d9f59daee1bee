"""The README and the site's structure: the set-up commands, the tour and its picture, the
map of the docs, links that resolve, the generated references, the notebooks listed.

The commands the README and the guides show are run by ``test_guides.py``; the site is
built by ``test_site.py``."""

import importlib.util
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.docs.pages import DOCS, ROOT, SITE_PAGES, blocks, commands, section, text

README = text("README.md")


def load_build():
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def setup_commands() -> list[str]:
    return [
        " ".join(c)
        for _, b in blocks(section("Set up", [ROOT / "README.md"]), "bash")
        for c in commands(b)
    ]


def test_setup_commands_are_the_two_documented_ones():
    assert setup_commands() == [
        "pip install -e . && allocator solve problems/paper-r2.yaml",
        "pip install -e .[test] && pytest",
    ]


def test_the_site_home_page_sets_up_the_same_way():
    home = [
        " ".join(c)
        for _, b in blocks(section("Set up", [DOCS / "index.md"]), "bash")
        for c in commands(b)
    ]
    assert home == setup_commands()


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


@pytest.mark.slow  # collects the whole suite: about 30 s
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


def test_readme_is_short_with_one_tour_command_and_one_picture():
    assert len(README.splitlines()) <= 250
    tour = section("A tour", [ROOT / "README.md"])
    shown = [c for _, b in blocks(tour, "bash") for c in commands(b) if c[0] == "allocator"]
    assert [" ".join(c) for c in shown] == ["allocator solve docs/tour.yaml --plot docs/front.png"]
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README) == ["docs/front.png"]


def test_tour_picture_is_committed_and_its_command_documented():
    assert "allocator solve docs/tour.yaml --plot docs/front.png" in README
    data = (ROOT / "docs" / "front.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_readme_maps_every_page_of_the_site():
    """Each guide and reference page is linked from the README's map, and every page is in
    the site's navigation (mkdocs.yml), the design document "for maintainers"."""
    config = yaml.safe_load(
        "\n".join(  # the config's Python tags (none today) would not load safely
            line for line in (ROOT / "mkdocs.yml").read_text().splitlines() if "!!" not in line
        )
    )
    nav = yaml.safe_dump(config["nav"])
    for page in SITE_PAGES:
        name = page.relative_to(DOCS).as_posix()
        assert name in nav, name
        if name.startswith(("guides/", "reference/")):
            assert f"(docs/{name})" in README, name
    assert "design.md" in nav and "(docs/design.md)" in README
    assert "for maintainers" in " ".join(README.split())


# every section of the README before the site, and the page it now lives on
MOVED = {
    "Notebooks": "notebooks-index.md",
    "Commands": "concepts.md",
    "The model in one paragraph": "concepts.md",
    "Definitions": "concepts.md",
    "Python API": "reference/api.md",
    "The problem file": "guides/fronts.md",
    "Correlated errors, simulation and the break-even correlation": "guides/correlated-errors.md",
    "Plans for mixed traffic": "guides/fronts.md",
    "Capacity: a fleet for a load under a latency target": "guides/capacity.md",
    "Requests and SLOs: a simulated `vllm bench serve`": "guides/requests.md",
    "From measurements to plans": "guides/measurements.md",
    "Engines: drafter methods and what each engine runs": "guides/engines.md",
    "Serving under load": "guides/serving.md",
    "Calibration: step times from measured throughput": "guides/calibration.md",
    "Profiling plan: the fewest benchmark runs": "guides/calibration.md",
    "Token trees": "guides/trees.md",
    "Search at scale": "guides/fronts.md",
    "Stored studies: secrets, seeding, time and size limits": "guides/fronts.md",
    "Benchmarks": "guides/fronts.md",
    "The paper, recomputed": "guides/correlated-errors.md",
    "Limits": "concepts.md",
    "Command line": "reference/cli.md",
    "Problem file": "reference/problem-file.md",
    "Layout": "maintainers.md",
}


@pytest.mark.parametrize("title", list(MOVED))
def test_each_section_of_the_old_readme_has_a_page(title):
    assert section(title, [DOCS / MOVED[title]]).strip(), title


def links(page) -> list[str]:
    body = re.sub(r"^```.*?^```", "", text(page), flags=re.S | re.M)
    return [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", body) if "://" not in t]


def test_local_links_resolve():
    for target in links(ROOT / "README.md"):
        assert (ROOT / target).exists(), target
    for page in SITE_PAGES:
        for target in links(page):
            resolved = (page.parent / target).resolve()
            assert resolved.exists(), (page.name, target)
            # a site page links inside the site (mkdocs would not copy the target)
            assert resolved.is_relative_to(DOCS.resolve()) or "notebooks" in target, target


def test_generated_reference_pages_hold_their_markers_and_the_hook_fills_them():
    build = load_build()
    assert "docs/build.py" in (ROOT / "mkdocs.yml").read_text()
    for page, name in (("cli.md", "cli-reference"), ("problem-file.md", "problem-reference")):
        body = text(DOCS / "reference" / page)
        assert f"<!-- {name} -->" in body
        assert f"<!-- {name} -->" not in build.expand(body)
    assert build.expand("<!-- problem-reference -->") == build.problem_reference()
    # docstrings' Sphinx roles are dropped from the rendered API page, the code kept
    assert build.on_page_content("see :func:<code>api.solve</code>", None, None, None) == (
        "see <code>api.solve</code>"
    )
    cell = "<td><code>--json PATH\\|-</code></td>"
    assert build.on_page_content(cell, None, None, None) == "<td><code>--json PATH|-</code></td>"


def test_problem_reference_names_every_schema_field():
    from allocator.io.spec import problem_json_schema

    section_ = load_build().problem_reference()
    schema = problem_json_schema()
    for obj in [schema, *schema["$defs"].values()]:
        for field in obj.get("properties", {}):
            assert f"| `{field}` |" in section_, field


def test_cli_reference_names_every_command_option_and_help():
    import typer

    from allocator.cli import app

    build = load_build()
    section_ = build.cli_reference()
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        assert f"## `allocator {name}`" in section_
        assert f"    Usage: allocator {name} [OPTIONS]" in section_, name
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("-") and opt != "--help":
                    assert opt in section_, (name, opt)


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
        "10-serving-front",
    ]
    listing = text(DOCS / "notebooks-index.md")
    nav = (ROOT / "mkdocs.yml").read_text()
    assert (DOCS / "notebooks").resolve() == (ROOT / "notebooks").resolve()
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code, path.name
        assert all(not c.outputs and c.execution_count is None for c in code), path.name
        assert f"(notebooks/{path.name})" in listing, path.name
        assert f"notebooks/{path.name}" in nav, path.name


def named_code() -> tuple[set[str], set[str]]:
    """The files (``allocator/…``) and dotted names (``allocator.x.y``) the pages name."""
    body = "\n".join(text(p) for p in [ROOT / "README.md", *SITE_PAGES])
    paths = set(re.findall(r"\ballocator/[\w/]*\w(?:\.py)?", body))
    dotted = set(re.findall(r"\ballocator(?:\.[A-Za-z_]\w*)+", body))
    return paths, dotted


def test_the_code_the_pages_name_exists():
    """A module moved or a function renamed fails here until the pages follow it."""
    import importlib

    paths, dotted = named_code()
    assert len(paths) >= 20 and len(dotted) >= 5
    for path in paths:
        assert (ROOT / path).exists(), path
    for name in sorted(dotted):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr, None)
                assert obj is not None, name
            break
        else:
            raise AssertionError(name)
