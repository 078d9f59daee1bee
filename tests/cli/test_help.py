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

ROOT = Path(__file__).resolve().parents[2]


def help_of(*args: str, columns: int = 70) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "allocator", *args, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
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
