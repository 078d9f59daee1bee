"""``--help`` and the generated command-line reference (issue 20): no ``<bool>`` type on
flags, and help paragraphs wrapped by the terminal, not at the docstring's own line
breaks (which broke sentences in the middle)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from allocator.cli import COMMANDS, app, reflow
from tests.support.cli_runner import runner

ROOT = Path(__file__).resolve().parents[2]


def help_of(*args: str, columns: int = 70) -> str:
    """``allocator ARGS --help`` in-process: the group with every command loaded prints
    each command's help as ``python -m allocator CMD --help`` does (the group's own
    listing, shown without loading the commands, is held equal to it by
    :func:`test_group_help_lists_each_commands_own_summary`)."""
    r = runner.invoke(
        app, [*args, "--help"], env={"COLUMNS": str(columns), "TERM": "dumb"}, color=False
    )
    assert r.exit_code == 0, r.output
    assert "Usage: allocator" in r.stdout and "--help" in r.stdout
    return r.stdout


def test_reflow_joins_lines_keeps_paragraphs_and_list_items():
    text = """First line
    goes on here.

    Second paragraph
    continues.
    - an item
      that wraps
    - another

    \b
    kept
    as is"""
    assert reflow(text) == (
        "First line goes on here.\n\nSecond paragraph continues.\n- an item that wraps\n"
        "- another\n\n\b\nkept\nas is"
    )


# COMMANDS lists the command modules; a command's name has dashes (profile_plan: profile-plan)
NAMES = [c.replace("_", "-") for c in COMMANDS]


@pytest.mark.parametrize("command", [None, *NAMES])
def test_help_shows_no_bool_type_on_flags(command):
    text = help_of(*([command] if command else []))
    assert "<bool>" not in text


@pytest.mark.parametrize("command", NAMES)
def test_help_paragraphs_are_wrapped_by_the_terminal(command):
    """Each paragraph of a command's help is one line in the command's definition, so the
    terminal's wrapping is the only wrapping: at 70 columns no help line stops short
    while its paragraph goes on (the docstring's line breaks gave lines like 'the
    schedule' followed by 'has k = 0 at every larger ...')."""
    cmd = typer.main.get_command(app).commands[command]
    for para in (cmd.help or "").split("\n\n"):
        lines = para.splitlines()
        assert len(lines) == 1 or all(
            line.lstrip().startswith(("-", "*", "\b")) for line in lines[1:]
        ), para


def test_generated_reference_has_no_bool_and_whole_paragraphs():
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    text = build.cli_reference()
    assert "<bool>" not in text
    # simulate's second paragraph, whole, on one line
    assert (
        "Reports the mean accepted units per round with a 99% interval beside the closed form "
        "(model_accepted), and the throughputs they imply."
    ) in text.splitlines()


def test_group_help_lists_each_commands_own_summary():
    """``allocator --help`` lists the commands from SUMMARIES without importing them: each
    summary is its command's own first help paragraph, and the listing is the one the
    group prints with every command loaded."""
    from allocator.cli import SUMMARIES

    group = typer.main.get_command(app)
    for module in COMMANDS:
        real = group.commands[module.replace("_", "-")].help or ""
        assert SUMMARIES[module] == real.split("\n\n")[0], module
    env = {"COLUMNS": "100", "TERM": "dumb"}
    # the listing without the commands needs a fresh process (main() registers them as
    # summaries on the group); the loaded group is this process's own
    quick = subprocess.run(
        [sys.executable, "-m", "allocator", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    loaded = runner.invoke(app, ["--help"], env=env, color=False)
    assert quick.returncode == 0 and loaded.exit_code == 0

    def lines(text: str) -> list[str]:
        text = text.replace("python -m allocator", "allocator")
        return [line.rstrip() for line in text.splitlines()]

    assert "Usage: allocator" in loaded.stdout and "schema" in loaded.stdout
    assert lines(quick.stdout) == lines(loaded.stdout)


def test_a_command_run_imports_only_its_own_module():
    """``allocator schema`` imports the schema command alone, not the others (start-up)."""
    code = (
        "import sys; sys.argv = ['allocator', 'schema']\n"
        "from allocator.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.startswith('allocator.cli.') and m not in "
        "('allocator.cli.schema', 'allocator.cli.group', 'allocator.cli.common')], "
        "file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr[-500:]
