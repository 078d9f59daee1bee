"""One command line (issue 20): a short flag means one thing in every command, and
``--budget METRIC=VALUE`` applies wherever a budget does (``solve`` and ``breakeven``
here; ``plan``, ``schedule`` and ``capacity`` beside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
import yaml

from allocator.cli import app
from tests.support.cli_runner import run

ROOT = Path(__file__).resolve().parents[2]
R2 = ROOT / "problems" / "paper-r2.yaml"
R2_CORRELATED = ROOT / "problems" / "paper-r2-correlated.yaml"


def test_each_short_flag_has_one_meaning_across_commands():
    """``-b`` was --batch in evaluate and solve but --baseline in breakeven; ``-n`` was
    --rounds in simulate but --nodes in tree."""
    meaning: dict[str, set[str]] = {}
    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            longs = [o for o in param.opts if o.startswith("--")]
            for opt in param.opts + param.secondary_opts:
                if opt.startswith("-") and not opt.startswith("--"):
                    meaning.setdefault(opt, set()).add(longs[0] if longs else param.name)
    clashes = {short: longs for short, longs in meaning.items() if len(longs) > 1}
    assert clashes == {}


def test_breakeven_baseline_has_no_short_flag_and_simulate_rounds_neither():
    r = run("breakeven", R2_CORRELATED, "-e", "weak-a,weak-b", "-b", "weak-a")
    assert r.exit_code == 2 and r.stderr.startswith("error: -b: no such option")
    r = run("simulate", R2, "-d", "weak-a", "-k", "3", "-n", "10")
    assert r.exit_code == 2 and r.stderr.startswith("error: -n: no such option")


def _with_budget(tmp_path, source: Path, budget: dict) -> Path:
    data = yaml.safe_load(source.read_text())
    data["budget"] = budget
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["solve", "{p}"],
        ["solve", "{p}", "--batch", "4"],
        ["breakeven", "{p}", "-e", "weak-a,weak-b", "--baseline", "weak-a"],
    ],
)
def test_budget_flag_is_the_files_budget(tmp_path, args):
    """``--budget draft_cost_per_round=0.6`` answers what the same file with that budget
    written in answers."""
    source = ROOT / "problems" / ("serving-eagle.yaml" if "--batch" in args else
                                  "paper-r2-correlated.yaml")  # fmt: skip
    if "--batch" in args:
        args = [a.replace("weak-a", "eagle") for a in args]
    caps = {"draft_cost_per_round": 0.2}
    written = _with_budget(tmp_path, source, caps)
    flag = run(*[a.format(p=source) for a in args], "--budget", "draft_cost_per_round=0.2",
               "--json", "-")  # fmt: skip
    file = run(*[a.format(p=written) for a in args], "--json", "-")
    assert flag.exit_code == 0 and file.exit_code == 0, flag.output + file.output
    a, b = json.loads(flag.stdout), json.loads(file.stdout)
    for doc in (a, b):
        doc.pop("seconds", None)
    assert a == b


def test_breakeven_compares_each_side_at_its_best_k_within_the_budget():
    """R2 (alpha 0.5, rho 0.1, paper convention) with draft_cost_per_round <= 0.6: the pair
    may draft k <= 3 (0.2 per position), the single drafter k <= 6. By hand at r = 0:
    pair k = 3: E = 1 + 0.75 + 0.5625 = 2.3125, T = 1.6; single k = 3 (its k* = 3):
    E = 1.75, T = 1.3; gain = (2.3125 / 1.6) / (1.75 / 1.3) - 1."""
    r = run("breakeven", R2_CORRELATED, "-e", "weak-a,weak-b", "--baseline", "weak-a",
            "--budget", "draft_cost_per_round=0.6", "--json", "-")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["gain_at_independence"] == pytest.approx((2.3125 / 1.6) / (1.75 / 1.3) - 1, 1e-12)
    assert doc["baseline_throughput"] == pytest.approx(1.75 / 1.3, 1e-12)


def test_breakeven_budget_no_k_meets_is_one_line():
    r = run("breakeven", R2_CORRELATED, "-e", "weak-a,weak-b", "--baseline", "weak-a",
            "--budget", "draft_cost_per_round=0.05")  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr == (
        "error: budget.draft_cost_per_round: weak-a+weak-b at no k: no configuration meets "
        "draft_cost_per_round <= 0.05 (the lowest in the search space is 0.2)\n"
    )
