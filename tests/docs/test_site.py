"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing
anchor or an unresolved API reference fails it), into a scratch folder, and its generated
pages hold what the code says."""

import os
import subprocess
import sys

import pytest

from tests.docs.pages import ROOT

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
pytest.importorskip("material", reason="the docs extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra")
pytest.importorskip("mkdocs_jupyter", reason="the docs extra")


def repository_status() -> str:
    """Every changed, new or ignored file of the working tree, as git lists them."""
    r = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return r.stdout if r.returncode == 0 else "(not a git checkout)"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    before = repository_status()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, before, repository_status()


@pytest.mark.slow
def test_site_builds_strict_and_writes_nothing_into_the_repository(site):
    out, before, after = site
    new = [line for line in after.splitlines() if line not in before.splitlines()]
    # (other tests running beside this one may leave caches: only the build's own count)
    assert not [line for line in new if "__pycache__" not in line and ".pytest" not in line], new
    for page in ("index.html", "guides/capacity/index.html", "reference/cli/index.html"):
        assert (out / page).exists(), page


@pytest.mark.slow
def test_generated_pages_hold_the_commands_the_api_and_the_notebooks(site):
    site = site[0]
    from allocator import api
    from allocator.cli import COMMANDS

    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for module in COMMANDS:
        assert f"Usage: allocator {module.replace('_', '-')} [OPTIONS]" in cli, module
    for page in ("reference/cli", "concepts"):  # a table cell's escaped pipe, shown as |
        assert "\\|" not in (site / page / "index.html").read_text(encoding="utf-8"), page
    ref = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in api.__all__:
        if callable(getattr(api, name)):
            assert f'id="allocator.api.{name}"' in ref, name
    problem = (site / "reference" / "problem-file" / "index.html").read_text(encoding="utf-8")
    assert "<code>drafters</code>" in problem and "<code>acceptance</code>" in problem
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert (site / "notebooks" / nb.stem / "index.html").exists(), nb.name
