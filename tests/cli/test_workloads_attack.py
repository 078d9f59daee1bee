"""Bad and extreme values of the workload options of ``bench`` and ``capacity
--request-rate`` (``--random-range-ratio``, ``--lengths-from``, ``--trace``, ``--stages``):
each one line ``error: <flag>: ...`` of bounded length, exit 2, no traceback, no output
file, refused before any simulation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.exceptions import ParameterError
from allocator.sim.workloads import (
    MAX_DRAWS,
    MAX_STAGES,
    lengths_from,
    parse_stages,
    random_lengths,
    range_ratios,
    staged_arrivals,
)
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


# The library's face of the same options (allocator.sim.workloads): a ParameterError naming
# the parameter, never numpy's own error, an allocation of terabytes or a loop that grows
# until the process is killed.


@pytest.mark.parametrize("seed", [-1, 1.5, "3"])
def test_a_bad_seed_is_named(seed):
    for call in (
        lambda: random_lengths(5, 10, 10, seed=seed),
        lambda: lengths_from(np.array([3]), np.array([4]), 5, seed=seed),
        lambda: staged_arrivals([(1.0, 10.0)], 1.0, seed=seed),
    ):
        with pytest.raises(ParameterError) as e:
            call()
        assert e.value.field == "seed"


def test_draws_past_the_limit_are_refused_before_allocating():
    with pytest.raises(ParameterError) as e:
        random_lengths(10**12, 10, 10)
    assert e.value.field == "num_prompts"
    with pytest.raises(ParameterError) as e:
        lengths_from(np.array([3]), np.array([4]), 10**12)
    assert e.value.field == "num_prompts"
    with pytest.raises(ParameterError, match="expect") as e:
        staged_arrivals([(1e3, 1e8)], 1.0)  # 1e11 requests expected, no max_requests given
    assert e.value.field == "stages"
    assert len(random_lengths(MAX_DRAWS // 100, 10, 10)[0]) == MAX_DRAWS // 100


@pytest.mark.parametrize("shape", [1e-300, 1e-9])
def test_a_gamma_shape_whose_gaps_underflow_is_refused_not_looped(shape):
    # gaps of 0 never reach the stage's end: chunks of them piled up until the process
    # was killed; 1e6 such arrivals are more than max_requests, refused as drawn
    with pytest.raises(ParameterError, match="drew more than") as e:
        staged_arrivals([(1.0, 10.0)], shape, seed=0, max_requests=1000)
    assert e.value.field == "stages"


@pytest.mark.parametrize(
    "prompts",
    [np.array([0, 5]), np.array([1.5, 5]), np.array(["a", "b"]), np.array([np.nan, 5]), [[1, 2]]],
)
def test_lengths_that_are_not_token_counts_are_named(prompts):
    with pytest.raises(ParameterError) as e:
        lengths_from(prompts, np.array([4, 4]), 3)
    assert e.value.field == "lengths_from"


def test_lengths_drawn_are_rows_of_the_table():
    # whole floats are taken as token counts; each draw is one row, its two lengths together
    p, o = lengths_from([3.0, 7.0, 11.0], [4, 8, 12], 500, seed=1)
    assert p.dtype == o.dtype == np.int64
    assert set(zip(p.tolist(), o.tolist(), strict=True)) == {(3, 4), (7, 8), (11, 12)}


def test_many_stages_are_one_short_note(tmp_path):
    """Past ten stages the staged-load note summarises (count, rate range, time) instead of
    listing each stage, so a thousand stages stay one short line; ten are still listed."""
    p = problem_file(tmp_path)
    for n, listed in ((10, True), (40, False)):
        stages = ",".join(f"{1 + i % 3}:2" for i in range(n))
        r = run("bench", p, "--input-len", "50", "--output-len", "5", "--stages", stages)
        assert r.exit_code == 0, r.output
        (note,) = [line for line in r.output.splitlines() if line.startswith("staged load")]
        assert ("3 req/s for 2 s:" in note) is listed
        if not listed:
            assert f"{n} stages at 1 to 3 req/s over {2 * n} s" in note and len(note) < 200
