"""Bad and extreme values of the workload options of ``bench`` and ``capacity
--request-rate`` (``--random-range-ratio``, ``--lengths-from``, ``--trace``, ``--stages``):
each one line ``error: <flag>: ...`` of bounded length, exit 2, no traceback, no output
file, refused before any simulation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from allocator.exceptions import ParameterError
from allocator.sim.workloads import MAX_STAGES, parse_stages, range_ratios
from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

#: Longest error line accepted: one sentence, whatever the size of the value given.
LONGEST = 300


def problem_file(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(rp.data()))
    return p


def refused(tmp_path: Path, flag: str, *args: object) -> str:
    """Run ``bench`` with ``args``; assert one short error line naming ``flag``, exit 2, no
    traceback and no output file; return the line."""
    p = problem_file(tmp_path)
    before = sorted(x.name for x in tmp_path.iterdir())
    r = run("bench", p, "-d", "eagle", "-k", "2", *args, "--json", tmp_path / "o.json")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}:"), r.stderr[:500]
    assert len(lines[0]) <= LONGEST, lines[0][:500]
    assert "Traceback" not in r.output and r.stdout == ""
    assert sorted(x.name for x in tmp_path.iterdir()) == before
    return lines[0]


@pytest.mark.parametrize("flag", ["--lengths-from", "--trace"])
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_trace_path_is_refused_as_empty(tmp_path, flag, value):
    # Path("") is ".", which was refused as "is a directory, not a file: ."
    line = refused(tmp_path, flag, flag, value, "--num-prompts", "5")
    assert "is empty" in line and "directory" not in line


def test_more_stages_than_the_limit_are_refused_before_any_run(tmp_path):
    # 30,000 one-second stages ran for 46 s against 10 s for one stage of the same span
    # (every stage summarised over the whole run's gaps); the limit is counted, not timed
    many = ",".join(["1:1"] * (MAX_STAGES + 1))
    line = refused(tmp_path, "--stages", "--input-len", "50", "--output-len", "5", "--stages", many)
    assert f"more than {MAX_STAGES:,} stages" in line
    assert len(parse_stages(",".join(["1:1"] * MAX_STAGES))) == MAX_STAGES
    assert len(parse_stages([(1.0, 1.0)] * MAX_STAGES)) == MAX_STAGES
    with pytest.raises(ParameterError, match="more than") as e:
        parse_stages(iter([(1.0, 1.0)] * (10 * MAX_STAGES)))
    assert e.value.field == "stages"


def test_a_long_unreadable_stage_is_quoted_short(tmp_path):
    line = refused(
        tmp_path, "--stages", "--input-len", "50", "--output-len", "5", "--stages", "x" * 100_000
    )
    assert "stage 1: expected RATE:SECONDS" in line


@pytest.mark.parametrize("stages", [5, b"1:10", [1.0], [None], object()])
def test_stages_that_are_not_pairs_are_a_parameter_error(stages):
    with pytest.raises(ParameterError) as e:
        parse_stages(stages)
    assert e.value.field == "stages"


def test_a_range_ratio_mapping_with_many_keys_is_named_briefly(tmp_path):
    text = json.dumps({str(i): 0.1 for i in range(10_000)})
    line = refused(tmp_path, "--random-range-ratio", "--random-range-ratio", text)
    assert "and 9,996 more" in line


@pytest.mark.parametrize("depth", [100_000])
def test_a_deeply_nested_range_ratio_is_refused_not_a_traceback(tmp_path, depth):
    text = "[" * depth + "]" * depth
    refused(tmp_path, "--random-range-ratio", "--random-range-ratio", text)
    inner = '{"input": ' + text + ', "output": 0.1}'
    refused(tmp_path, "--random-range-ratio", "--random-range-ratio", inner)
    with pytest.raises(ParameterError) as e:
        range_ratios(text)
    assert e.value.field == "random_range_ratio"
