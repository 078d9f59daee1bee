"""``estimate``'s drafter names for every format (``--drafter``, ``--rename``), the SGLang
reader's tree and adaptive settings on the command line, and inputs too large to write:
each test here fails before the change (``--format vllm-metrics`` kept the verifier's
``model_name`` with no way to rename it; ``--topk`` and ``--adaptive`` were no options)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.estimate import MAX_POSITIONS, estimate
from tests.support.cli_runner import run
from tests.support.synthetic_logs import (
    sglang_response,
    simulate_chain,
    vllm_exposition,
    vllm_log_line,
)

FIXTURES = Path(__file__).resolve().parents[2] / "support" / "fixtures"


def names(out: Path) -> list[str]:
    return [d["name"] for d in yaml.safe_load(out.read_text())["drafters"]]


def test_vllm_metrics_drafter_is_renamed(tmp_path):
    out = tmp_path / "p.yaml"
    res = run("estimate", FIXTURES / "vllm_metrics.prom", "-f", "vllm-metrics", "-o", out)
    assert res.exit_code == 0, res.output
    (served,) = names(out)  # the verifier's model_name
    for args in (["--drafter", "eagle3"], ["--rename", f"{served}=eagle3"]):
        res = run("estimate", FIXTURES / "vllm_metrics.prom", "-f", "vllm-metrics", "-o", out,
                  "--unit-cost", "eagle3=0.05", "--method", "eagle3=eagle3", *args)  # fmt: skip
        assert res.exit_code == 0, res.output
        data = yaml.safe_load(out.read_text())
        assert names(out) == ["eagle3"] and data["drafters"][0]["unit_cost"] == 0.05
        assert data["drafters"][0]["method"] == "eagle3"
        assert f"drafters renamed: {served} -> eagle3" in out.read_text()


@pytest.mark.parametrize(
    ("fmt", "fixture"),
    [("vllm-log", "vllm_spec.log"), ("vllm-metrics", "vllm_metrics.prom")],
)
def test_every_format_takes_a_drafter_name(tmp_path, fmt, fixture):
    out = tmp_path / "p.yaml"
    res = run("estimate", FIXTURES / fixture, "-f", fmt, "-o", out, "--drafter", "head")
    assert res.exit_code == 0, res.output
    assert names(out) == ["head"]


def test_renaming_outcome_columns(tmp_path):
    rng = np.random.default_rng(0)
    rows = ["round,position,a,b"]
    for r in range(300):
        for j in (1, 2):
            rows.append(f"{r},{j},{int(rng.random() < 0.7)},{int(rng.random() < 0.5)}")
            if rng.random() < 0.3:
                break
    log = tmp_path / "log.csv"
    log.write_text("\n".join(rows) + "\n")
    out = tmp_path / "p.yaml"
    res = run("estimate", log, "-o", out, "--errors", "factor", "--rename", "a=head")
    assert res.exit_code == 0, res.output
    data = yaml.safe_load(out.read_text())
    assert names(out) == ["head", "b"] and set(data["errors"]["loadings"]) == {"head", "b"}
    for args, field, needle in (
        (["--errors", "factor", "--drafter", "x"], "--drafter", "--rename OLD=NEW"),
        (["--errors", "factor", "--rename", "zz=x"], "--rename", "unknown drafter 'zz'"),
        (["--errors", "factor", "--rename", "a=b"], "--rename", "two drafters would be named"),
        (["--rename", "a=head"], "--rename", "the empirical error model reads the log"),
        (["--errors", "factor", "--drafter", "x", "--rename", "a=y"], "--drafter", "--rename"),
        (["--errors", "factor", "--drafter", " "], "--drafter", "is empty"),
    ):
        res = run("estimate", log, "-o", out, *args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert lines[0].startswith(f"error: {field}: ") and needle in lines[0], lines[0]


# ------------------------------------------------------------------ SGLang's settings


def write_jsonl(path: Path, values: list) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in values))
    return path


def test_sglang_tree_and_adaptive_settings_on_the_command_line(tmp_path):
    """A (3, 4, 8) tree proposes 7 nodes a round: with --topk 4 --k 3 the positions are
    the tree's depths; an adaptive run accepting 7 drafts where 3 are proposed is read
    with --adaptive (and its candidate steps with --adaptive-steps)."""
    out = tmp_path / "p.yaml"
    tree = [sglang_response([40, 30, 20, 10], k=7), sglang_response([20, 15, 10, 5], k=7)]
    path = write_jsonl(tmp_path / "tree.jsonl", tree)
    res = run("estimate", path, "-f", "sglang-requests", "-o", out, "--json", "-")
    assert res.exit_code == 2 and "--topk" in res.stderr  # a tree or a chain? it asks
    res = run("estimate", path, "-f", "sglang-requests", "-o", out, "--topk", "4", "--k", "3",
              "--json", "-")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["report"]["mode"] == "tree" and doc["drafters"][0]["positions"] == 3
    # by hand: rounds accepting >= j / rounds accepting >= j - 1 over the summed histogram
    h = np.array([60, 45, 30, 15])
    tail = np.cumsum(h[::-1])[::-1]
    assert doc["drafters"][0]["acceptance"] == pytest.approx(list(tail[1:] / tail[:-1]), abs=1e-6)
    adaptive = [sglang_response([300, 200, 100, 100, 50, 50, 30, 20], k=3)] * 2
    path = write_jsonl(tmp_path / "adaptive.jsonl", adaptive)
    for args in (["--adaptive"], ["--adaptive-steps", "0,1,3,5,7"], []):
        res = run("estimate", path, "-f", "sglang-requests", "-o", out, *args, "--json", "-")
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["report"]["mode"] == "adaptive" and doc["drafters"][0]["positions"] == 7
        assert doc["drafters"][0]["bounded_positions"] == [1, 2, 4, 6]  # steps 0, 1, 3, 5
        assert any("positions 1-2, 4, 6 of draft are only bounded" in n for n in doc["notes"])
    res = run("estimate", path, "-f", "sglang-requests", "-o", out, "--no-adaptive")
    assert res.exit_code == 2 and "declared not adaptive" in res.stderr
    res = run("estimate", path, "-f", "sglang-requests", "-o", out, "--adaptive-steps", "1,x")
    assert res.exit_code == 2 and res.stderr.startswith("error: --adaptive-steps: ")
    assert "vllm-requests" in " ".join(run("estimate", "--help").output.split())


def test_a_histogram_of_100001_entries_is_cut_at_the_stated_limit(tmp_path):
    """Without --k an SGLang histogram of 100,001 entries made a 244 MB problem file; the
    estimate keeps at most MAX_POSITIONS positions and says so."""
    hist = [0] * 100_000 + [40]
    path = write_jsonl(tmp_path / "long.jsonl", [sglang_response(hist)])
    out = tmp_path / "p.yaml"
    res = run("estimate", path, "-f", "sglang-requests", "-o", out, "--json", "-")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["drafters"][0]["positions"] == MAX_POSITIONS == 1024
    assert yaml.safe_load(out.read_text())["search"]["k"]["max"] == MAX_POSITIONS
    assert out.stat().st_size < 200_000
    assert any("keeps the first 1,024" in n for n in doc["notes"])


def test_vllm_requests_and_counters_say_which_positions_are_bounded(tmp_path):
    rng = np.random.default_rng(5)
    per_pos = simulate_chain(rng, [0.8, 0.7, 0.6], 3000, 3)
    line = vllm_log_line(3000, per_pos, drafted=3 * 3000 - 400)
    path = tmp_path / "short.log"
    path.write_text(line + "\n")
    est = estimate(path, "vllm-log", tmp_path / "x.yaml", min_trials=1)
    assert any("only bounded" in n and "vllm-requests" in n for n in est.notes)
    full = vllm_exposition({"m": [(3000, per_pos)]})
    path = tmp_path / "full.prom"
    path.write_text(full)
    est = estimate(path, "vllm-metrics", tmp_path / "x.yaml", min_trials=1)
    assert not any("only bounded" in n for n in est.notes)
