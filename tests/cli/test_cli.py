"""The command line: outputs, and bad input (exit 2, one line, no traceback, no file)."""

import csv
import json
import subprocess
import sys

import pytest

from tests.support.cli_runner import run

GOOD = """\
name: cli-test
drafters:
  - {name: a, acceptance: 0.5, unit_cost: 0.1}
  - {name: b, acceptance: [0.8, 0.6], unit_cost: 0.1, hosting_cost: 2}
search: {k: {max: 8}}
"""


@pytest.fixture
def good(tmp_path):
    p = tmp_path / "good.yaml"
    p.write_text(GOOD)
    return p


def test_solve_json_stdout_is_only_json(good):
    r = run("solve", good, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) >= {
        "problem",
        "strategy",
        "exact",
        "cost_metric",
        "evaluated",
        "seconds",
        "front",
    }
    assert doc["problem"] == "cli-test" and doc["exact"] is True and doc["strategy"] == "exact"
    assert doc["evaluated"] == 3 * 8
    keys = {
        "drafters",
        "m",
        "k",
        "throughput",
        "cost",
        "expected_accepted",
        "pooled_acceptance",
        "round_time",
        "draft_cost_per_round",
        "draft_cost_per_token",
        "hosting_cost",
    }
    assert all(set(p) >= keys for p in doc["front"])
    costs = [p["cost"] for p in doc["front"]]
    assert costs == sorted(costs)


def test_solve_writes_json_and_csv_files(good, tmp_path):
    j, c = tmp_path / "front.json", tmp_path / "front.csv"
    r = run("solve", good, "--json", j, "--csv", c)
    assert r.exit_code == 0, r.output
    doc = json.loads(j.read_text())
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == len(doc["front"])
    assert [float(x["throughput"]) for x in rows] == [p["throughput"] for p in doc["front"]]
    assert "throughput" in r.stdout  # the table was printed too


def test_evaluate_json_is_one_point(good):
    r = run("evaluate", good, "--drafters", "a,b", "--k", "3", "--json", "-")
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    # paper convention: E_3 = 1 + a(1) + a(1)a(2), pooled a = 1 - 0.5*0.2, 1 - 0.5*0.4
    a1, a2 = 1 - 0.5 * 0.2, 1 - 0.5 * 0.4
    assert p["expected_accepted"] == pytest.approx(1 + a1 + a1 * a2)
    assert p["round_time"] == pytest.approx(1 + 3 * 0.2)
    assert p["drafters"] == ["a", "b"] and p["m"] == 2 and p["hosting_cost"] == 2


def test_schema_is_json_schema():
    r = run("schema")
    assert r.exit_code == 0
    s = json.loads(r.stdout)
    assert "drafters" in s["properties"] and "drafters" in s["required"]


def test_paper_json():
    r = run("paper", "--json", "-")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["differs"] == sum(row["status"] == "differs" for row in doc["rows"]) > 0


BAD = [
    ("acceptance: 0.5", "acceptance: 1.5", "drafters[a].acceptance"),
    ("acceptance: 0.5", "acceptance: 0", "drafters[a].acceptance"),
    ("acceptance: [0.8, 0.6]", "acceptance: [0.8, -0.6]", "drafters[b].acceptance"),
    ("unit_cost: 0.1}\n  - {name: b", "unit_cost: -0.1}\n  - {name: b", "drafters[a].unit_cost"),
    ("name: b,", "name: a,", "drafters"),
    ("search: {k: {max: 8}}", "search: {require: [zed]}", "search.require.0"),
    (
        "search: {k: {max: 8}}",
        "budget: {draft_cost_per_round: 0.01}",
        "budget.draft_cost_per_round",
    ),
    ("search: {k: {max: 8}}", "search: {k: {min: 5, max: 2}}", "search.k"),
    ("search: {k: {max: 8}}", "serch: {k: {max: 8}}", "serch"),
    ("search: {k: {max: 8}}", "errors: {model: gaussian}", "errors.matrix"),
    (
        "search: {k: {max: 8}}",
        "errors: {model: gaussian, matrix: [[1, 0.5], [0.4, 1]]}",
        "errors.matrix",
    ),
    (
        "search: {k: {max: 8}}",
        "errors: {model: exchangeable, correlation: -0.2}",
        "errors.correlation",
    ),
    (
        "search: {k: {max: 8}}",
        "pooling: longest-chain\nerrors: {model: exchangeable, correlation: 0.3}",
        "pooling",
    ),
    (
        "search: {k: {max: 8}}",
        "ensembles: [{members: [a, b], acceptance: 0.7}]",
        "ensembles.0.acceptance",
    ),
    ("search: {k: {max: 8}}", "workloads: [{name: chat, weight: 0}]", "workloads[chat].weight"),
    (
        "search: {k: {max: 8}}",
        "verifier: {pass_cost_curve: {tokens: [8, 1], cost: [1, 1.5]}}",
        "verifier.pass_cost_curve",
    ),
]


@pytest.mark.parametrize("old,new,field", BAD)
def test_bad_input_one_line_exit_2_no_file(tmp_path, old, new, field):
    assert old in GOOD
    p = tmp_path / "bad.yaml"
    p.write_text(GOOD.replace(old, new))
    out = tmp_path / "out.json"
    r = run("solve", p, "--json", out, "--csv", tmp_path / "out.csv")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {field}"), lines[0]
    assert "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == [p]


def test_missing_and_malformed_files(tmp_path):
    r = run("solve", tmp_path / "nope.yaml")
    assert r.exit_code == 2 and "file not found" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    r = run("solve", bad)
    assert r.exit_code == 2 and "not valid YAML" in r.stderr
    r = run("evaluate", tmp_path / "nope.yaml", "--drafters", "a", "--k", "2")
    assert r.exit_code == 2


def test_evaluate_unknown_drafter(good):
    r = run("evaluate", good, "--drafters", "a,zed", "--k", "3")
    assert r.exit_code == 2 and r.stderr.startswith("error: --drafters: unknown drafter 'zed'")


def test_python_dash_m_entry_point(good):
    proc = subprocess.run(
        [sys.executable, "-m", "allocator", "solve", str(good), "--json", "-"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["problem"] == "cli-test"


@pytest.mark.parametrize("name", ["paper-r1", "paper-r2", "paper-r3", "paper-r4"])
def test_bundled_paper_problems_solve(problems_dir, name):
    r = run("solve", problems_dir / f"{name}.yaml", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["problem"] == name


def test_output_files_get_the_usual_mode(good, tmp_path):
    import os

    j = tmp_path / "front.json"
    assert run("solve", good, "--json", j).exit_code == 0
    mask = os.umask(0)
    os.umask(mask)
    assert j.stat().st_mode & 0o777 == 0o666 & ~mask


def test_special_files_are_written_not_replaced(good, tmp_path):
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    assert run("solve", good, "--json", fifo).exit_code == 0
    assert json.loads(reader.communicate(timeout=30)[0])["problem"] == "cli-test"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_the_package_imports_no_private_module_of_another_package():
    """typer's click copy (``typer._click``) is private and exists only from typer 0.26,
    while pyproject allows typer >= 0.12: every import of a third-party module must go
    through public names (no path component starting with ``_``)."""
    import ast
    from pathlib import Path

    import allocator

    root = Path(allocator.__file__).parent
    private = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for m in modules:
                top, *rest = m.split(".")
                if top != "allocator" and any(p.startswith("_") for p in rest):
                    private.append(f"{path.relative_to(root)}: {m}")
    assert private == []


def test_usage_errors_of_the_public_typer_bad_parameter_become_one_line():
    """typer's public ``BadParameter`` (click's) is caught and named by its option."""
    import typer

    from allocator.cli import ClickException, UsageError, usage_error_line

    assert issubclass(typer.BadParameter, UsageError)
    assert issubclass(UsageError, ClickException)

    def boom(value: int) -> int:
        raise typer.BadParameter("Seven is Right Out.")

    sub = typer.Typer()

    @sub.command()
    def cmd(n: int = typer.Option(0, "--n", callback=boom)) -> None:
        pass

    with pytest.raises(typer.BadParameter) as info:
        typer.main.get_command(sub).main(["--n", "7"], standalone_mode=False)
    assert usage_error_line(info.value) == "--n: seven is Right Out (see --help)"
