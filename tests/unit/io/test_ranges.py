"""The one ``LO:HI:STEPS`` parser: ``plan --sweep`` is capped like ``capacity --sweep-load``
(issue 20: ``hosting_cost=0:1:1000000000`` had no cap on its steps)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from allocator.exceptions import ParameterError
from allocator.io.ranges import (
    MAX_SWEEP_STEPS,
    parse_hosting_range,
    parse_load_range,
    parse_range,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("parse", [parse_load_range, lambda t: parse_hosting_range(t, t)])
def test_both_sweeps_share_one_cap(parse):
    assert MAX_SWEEP_STEPS == 10_000
    assert parse(f"1:2:{MAX_SWEEP_STEPS}").size == MAX_SWEEP_STEPS
    with pytest.raises(ParameterError) as info:
        parse("1:2:1000000000")
    assert info.value.message == "STEPS must be 1..10,000 (got 1,000,000,000)"


def test_hosting_range_field_and_values():
    with pytest.raises(ParameterError) as info:
        parse_hosting_range("0:1:0", "hosting_cost=0:1:0")
    assert info.value.field == "sweep"
    assert np.array_equal(parse_hosting_range("0:4:5", "x"), [0.0, 1.0, 2.0, 3.0, 4.0])
    assert np.array_equal(parse_hosting_range("0:4:1", "x"), [4.0])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1:0:3", "the range 1:0 must satisfy 0 <= LO <= HI"),
        ("-1:2:3", "the range -1:2 must satisfy 0 <= LO <= HI"),
        ("0:inf:3", "the range 0:inf must satisfy 0 <= LO <= HI"),
        ("0:1", "expected LO:HI:STEPS, got '0:1'"),
        ("0:1:1.5", "expected LO:HI:STEPS, got '0:1:1.5'"),
        ("0:1:" + "9" * 5000, "expected LO:HI:STEPS, got '0:1:" + "9" * 5000 + "'"),
    ],
)
def test_malformed_ranges_name_the_rule(text, message):
    with pytest.raises(ParameterError) as info:
        parse_range(text, "r", positive=False)
    assert info.value.message == message


def test_cli_plan_sweep_of_a_billion_steps_is_refused_at_once():
    r = subprocess.run(
        [sys.executable, "-m", "allocator", "plan", str(ROOT / "problems" / "mixed-traffic.yaml")]
        + ["--sweep", "hosting_cost=0:1:1000000000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr == "error: --sweep: STEPS must be 1..10,000 (got 1,000,000,000)\n"
