"""``bench --router prefix-affinity|session-affinity``: accepted when the requests carry
keys (a shared prefix, a trace's prefix or session column), refused in one line naming
what to add when they do not; a fleet refuses sessions and shared tokens under prefix
caching (its replicas do not see them yet). Bad input: one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_bench_fleet_cli import problem_file
from tests.support.cli_runner import run

FIXED = ["--input-len", "100", "--output-len", "20", "--num-prompts", "60"]


def session_trace(tmp_path: Path) -> Path:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens,session_id"]
    for i in range(40):
        s = i % 8
        lines.append(f"{1_700_000_000 + 0.2 * i:.3f},{60 + 10 * (i // 8)},12,user{s}")
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_session_affinity_on_a_trace_with_sessions(tmp_path):
    p = problem_file(tmp_path)
    trace = session_trace(tmp_path)
    r = run("bench", p, "--trace", trace, "--replicas", "3", "--router", "session-affinity",
            "--no-prefix-caching", "--json", "-")  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["router"] == "session-affinity"
    counts = [e["num_prompts"] for e in doc["replicas"]]
    assert sum(counts) == 40 and all(c % 5 == 0 for c in counts)  # whole sessions of 5


def test_prefix_affinity_with_a_shared_prefix(tmp_path):
    p = problem_file(tmp_path)
    r = run("bench", p, *FIXED, "--request-rate", "20", "--shared-prefix-len", "48",
            "--replicas", "2", "--router", "prefix-affinity", "--no-prefix-caching",
            "--json", "-")  # fmt: skip
    assert r.exit_code == 0, r.output
    counts = [e["num_prompts"] for e in json.loads(r.stdout)["replicas"]]
    assert sorted(counts) == [0, 60]  # one group: every request on one replica


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--router", "prefix-affinity"],
         "--router: prefix-affinity needs prompts that share a prefix (a prefix group per "
         "request); these requests carry none: give a shared prefix (--shared-prefix-len), "
         "sessions (--turns), or a trace (--trace) with a prefix_id or session_id column"),
        (["--router", "session-affinity", "--shared-prefix-len", "10"],
         "--router: session-affinity needs requests that carry a session id; these requests "
         "carry none: give sessions (--turns), or a trace (--trace) with a session_id column"),
    ],
)  # fmt: skip
def test_bad_input(tmp_path, args, says):
    p = problem_file(tmp_path)
    out = tmp_path / "b.json"
    r = run("bench", p, *FIXED, "--replicas", "2", *args, "--json", out)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.output
    assert not out.exists()


def test_a_bad_session_column_is_one_line(tmp_path):
    p = problem_file(tmp_path)
    trace = tmp_path / "bad.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,session_id\n0,10,2,a\n1,10,2,\n")
    out = tmp_path / "b.json"
    r = run("bench", p, "--trace", trace, "--json", out)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "--trace:" in lines[0] and "row 2: session_id is empty" in lines[0]
    assert not out.exists()
