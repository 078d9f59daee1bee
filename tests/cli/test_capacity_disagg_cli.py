"""``allocator capacity --request-rate R --slo ... --disaggregated``: the P:D split for the
answer's configuration in the JSON, its ``bench`` command the split's; bad input is one
line, exit 2, nothing written."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.support.cli_runner import run
from tests.unit.analysis.test_disagg_capacity import DATA

ARGS = [
    "--request-rate", "40", "--slo", "p90_ttft_ms=150", "--slo", "mean_tpot_ms=14",
    "--input-len", "1500", "--output-len", "40", "--num-prompts", "120", "--workers", "1",
]  # fmt: skip


def problem_file(tmp_path: Path) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(DATA))
    return p


def test_the_split_for_the_answers_configuration(tmp_path):
    p = problem_file(tmp_path)
    r = run("capacity", p, *ARGS, "--disaggregated", "--kv-link", "roce-400g", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    dis = doc["disaggregated"]
    total = dis["prefill_replicas"] + dis["decode_replicas"]
    assert dis["gpus"] == 2 * total
    assert any(t["sustains"] for t in dis["tried"])
    assert all(t["prefill_replicas"] + t["decode_replicas"] <= total for t in dis["tried"])
    words = shlex.split(dis["bench_command"])
    assert words[words.index("--decode-max-num-seqs") + 1] == str(doc["max_num_seqs"])
    assert words[words.index("--kv-link") + 1] == "roce-400g"
    again = run(*words[1:], "--json", "-")
    assert again.exit_code == 0, again.output
    bench = json.loads(again.stdout)
    assert bench["mean_ttft_ms"] == dis["metrics"]["mean_ttft_ms"]
    assert bench["disaggregated"]["prefill_replicas"] == dis["prefill_replicas"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--disaggregated", "--kv-link", "pcie5-x16"], "--kv-link: not an inter-node link"),
        (["--kv-link", "ib-ndr"], "--kv-link: only with --disaggregated"),
        (["--disaggregated", "--turns", "2"], "--turns: sessions are not modelled"),
    ],
)
def test_bad_input(tmp_path, args, says):
    p = problem_file(tmp_path)
    out = tmp_path / "c.json"
    r = run("capacity", p, *ARGS, *args, "--json", out)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.output
    assert not out.exists()
