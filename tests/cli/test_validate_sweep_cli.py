"""``allocator validate --sweep``: the files as consecutive runs of one server, so a prompt
the earlier run (or the warm-up request) left cached is prefilled from its last cached
block (time to first token by hand from :mod:`requests_problem`'s prefill table); runs of
different concurrency limits refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.cli_runner import run
from tests.unit.analysis import requests_problem as rp

DOC = {
    "model_id": "example/verifier", "num_prompts": 1, "request_rate": "inf",
    "burstiness": 1.0, "max_concurrency": None, "duration": 1.0, "completed": 1,
    "failed": 0, "total_input_tokens": 1000, "total_output_tokens": 20,
    "request_throughput": 1.0, "output_throughput": 20.0, "mean_ttft_ms": 10.0,
}  # fmt: skip


def files(tmp_path: Path, *changes: dict) -> list[Path]:
    d = rp.data()
    d["serving"]["scheduler"]["block_size"] = 256
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(d))
    out = []
    for i, change in enumerate(changes):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({**DOC, **change}))
        out.append(path)
    return out


def test_sweep_prefills_only_the_uncached_block(tmp_path):
    runs = files(tmp_path, {}, {})
    out = tmp_path / "v.json"
    r = run("validate", tmp_path / "p.yaml", *runs, "--sweep", "--json", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    warm = rp.prefill_ms(1000 - 3 * 256)  # 3 blocks of 256 cached, 232 tokens prefilled
    got = [x["metrics"]["mean_ttft_ms"]["predicted"] for x in doc["runs"]]
    assert got == pytest.approx([warm, warm], rel=1e-6)
    r = run("validate", tmp_path / "p.yaml", *runs, "--json", out)
    got = [x["metrics"]["mean_ttft_ms"]["predicted"] for x in json.loads(out.read_text())["runs"]]
    assert got == pytest.approx([rp.prefill_ms(1000)] * 2, rel=1e-6)


def test_sweep_of_different_concurrency_limits_is_refused(tmp_path):
    runs = files(tmp_path, {}, {"max_concurrency": 1})
    out = tmp_path / "v.json"
    r = run("validate", tmp_path / "p.yaml", *runs, "--sweep", "--json", out)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run1.json:"), r.output
    assert not out.exists()
