"""Extreme inputs to ``estimate``'s readers end in one line, exit 2, no file written (they
were tracebacks: 5,000-digit integers past Python's digit limit, 100,000-deep JSON past the
recursion limit; a NUL byte in an outcome log was read as text)."""

from __future__ import annotations

import json

import pytest
import yaml

from allocator import api
from allocator.exceptions import InputError
from tests.support.cli_runner import run

DIGITS = "9" * 5000
DEEP = "[" * 100_000 + "]" * 100_000
SPEC = "SpecDecoding metrics: Mean acceptance length: 2.00, "
RATES = "Per-position acceptance rate: 0.500, 0.300, 0.200"

CASES = [
    ("deep.jsonl", DEEP + "\n", "sglang-requests", []),
    (
        "digits.jsonl",
        '{"meta_info": {"spec_verify_ct": ' + DIGITS + ', "spec_correct_drafts_histogram": [1]}}\n',
        "sglang-requests",
        [],
    ),
    ("deep.jsonl", DEEP + "\n", "vllm-requests", []),
    ("a.log", f"{SPEC}Accepted: {DIGITS} tokens, Drafted: 30 tokens, {RATES}\n", "vllm-log", []),
    ("d.log", f"{SPEC}Accepted: 10 tokens, Drafted: {DIGITS} tokens, {RATES}\n", "vllm-log", []),
    (
        "r.log",
        f"{SPEC}Accepted: 10 tokens, Drafted: 30 tokens, Per-position acceptance rate: "
        f"0.{DIGITS}, 0.300\n",
        "vllm-log",
        [],
    ),  # fmt: skip
    ("deep.jsonl", '{"position": 1, "a": ' + DEEP + "}\n", "outcomes", ["--errors", "factor"]),
    ("digits.jsonl", '{"position": ' + DIGITS + ', "a": 1}\n', "outcomes", ["--errors", "factor"]),
    ("nul.csv", "round,position,a\nr\x001,1,1\nr\x001,2,0\n", "outcomes", []),
    (
        "nul.jsonl",
        '{"round": "r\\u0000", "position": 1, "a": 1}\n',
        "outcomes",
        ["--errors", "factor"],
    ),  # fmt: skip
]


@pytest.mark.parametrize(("name", "text", "fmt", "extra"), CASES)
def test_extreme_input_is_one_line(tmp_path, name, text, fmt, extra):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "-f", fmt, "-o", out, *extra)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output[-500:]
    assert lines[0].startswith(f"error: {name}"), lines[0]
    assert len(lines[0]) < 300 and "Traceback" not in res.output
    assert not out.exists()


def test_a_nul_byte_in_the_problems_outcome_log_is_refused(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("position,a,workload\n1,1,chat\x00\n1,0,chat\n")
    data = {
        "name": "p",
        "drafters": [{"name": "a", "acceptance": 0.5, "unit_cost": 0.1}],
        "errors": {"model": "empirical", "outcomes": str(log)},
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as info:
        api.load(path)
    assert info.value.field == "errors.outcomes" and "NUL" in info.value.message
    res = run("solve", path)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1


def test_the_readers_still_read_ordinary_json(tmp_path):
    path = tmp_path / "ok.jsonl"
    rows = [{"round": r, "position": j, "a": int((r + j) % 3 > 0)} for r in range(60)
            for j in (1, 2)]  # fmt: skip
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    res = run("estimate", path, "-o", tmp_path / "p.yaml", "--errors", "factor")
    assert res.exit_code == 0, res.output
