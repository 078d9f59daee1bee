"""`solve --export vllm|sglang`: settings a serving system accepts, parsed back."""

import json
import shlex

import pytest
import yaml

from allocator import api
from allocator.engines import export_point, export_text, pick_point
from allocator.exceptions import ParameterError
from allocator.io.spec import Drafter
from tests.support.cli_runner import run

PROBLEM = {
    "name": "exp",
    "convention": "bonus",
    "drafters": [
        {"name": "small", "acceptance": [0.8, 0.7], "unit_cost": 0.05, "model": "org/small-1b"},
        {"name": "tiny", "acceptance": 0.6, "unit_cost": 0.01, "model": "/models/tiny"},
        {"name": "nomodel", "acceptance": 0.75, "unit_cost": 0.2},
    ],
    "search": {"k": {"max": 8}},
}


@pytest.fixture
def single(tmp_path):
    p = dict(PROBLEM, search={"k": {"max": 8}, "m": {"max": 1}, "exclude": ["nomodel"]})
    path = tmp_path / "single.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def front_of(path):
    r = run("solve", path, "--json", "-")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["front"]


def test_vllm_best_point(single):
    front = front_of(single)
    best = max(front, key=lambda p: p["throughput"])
    r = run("solve", single, "--export", "vllm")
    assert r.exit_code == 0, r.output
    cfg = json.loads(r.stdout)  # stdout holds only the JSON
    assert cfg == {
        "method": "draft_model",
        "model": {"small": "org/small-1b", "tiny": "/models/tiny"}[best["drafters"][0]],
        "num_speculative_tokens": best["k"],
    }


def test_vllm_pick(single):
    front = front_of(single)
    for i, p in enumerate(front, 1):
        r = run("solve", single, "--export", "vllm", "--pick", i)
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["num_speculative_tokens"] == p["k"]


def test_sglang_flags(single):
    front = front_of(single)
    r = run("solve", single, "--export", "sglang", "--pick", 1)
    assert r.exit_code == 0, r.output
    argv = shlex.split(r.stdout)
    flags = dict(zip(argv[::2], argv[1::2], strict=True))
    k = front[0]["k"]
    assert flags["--speculative-algorithm"] == "STANDALONE"
    model = {"small": "org/small-1b", "tiny": "/models/tiny"}[front[0]["drafters"][0]]
    assert flags["--speculative-draft-model-path"] == model
    assert int(flags["--speculative-num-steps"]) == k
    assert int(flags["--speculative-eagle-topk"]) == 1
    assert int(flags["--speculative-num-draft-tokens"]) == k + 1


def test_paths_with_spaces_are_quoted():
    point = {"drafters": ["a"], "k": 3, "throughput": 1.0}
    drafter = Drafter(name="a", acceptance=0.5, unit_cost=0.1, model="/models/my draft")
    text = export_text("sglang", point, {"a": drafter})
    assert shlex.split(text)[3] == "/models/my draft"


def test_ensemble_refused(tmp_path):
    """An engine serves one drafter per server: --export solves only what it serves (the
    model's front pooled drafters and the export refused the very point it ranked best),
    and a pooled point handed to an engine is refused, never exported as one drafter."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(dict(PROBLEM, search={"k": {"max": 8}, "exclude": ["nomodel"]})))
    front = front_of(path)
    ens = [i for i, p in enumerate(front, 1) if p["m"] > 1]
    assert ens, "the problem should put an ensemble on the front"
    for target in ("vllm", "sglang"):
        served = json.loads(run("solve", path, "--engine", target, "--json", "-").stdout)
        assert all(p["m"] == 1 for p in served["front"])
        assert "one drafter per server" in served["notes"][0]
        for pick in range(1, len(served["front"]) + 1):
            r = run("solve", path, "--export", target, "--pick", pick)
            assert r.exit_code == 0, r.output
        r = run("solve", path, "--export", target, "--pooled")
        assert r.exit_code == 2 and r.stderr.startswith("error: --pooled:"), r.output
        with pytest.raises(ParameterError) as info:
            export_point(target, front[ens[0] - 1], api.load(path).drafter_map)
        assert "pools 2 drafters" in info.value.message
        assert "cannot serve this ensemble" in info.value.message


def test_drafter_without_model_refused(tmp_path):
    path = tmp_path / "p.yaml"
    p = dict(PROBLEM, search={"k": {"max": 8}, "m": {"max": 1}, "require": ["nomodel"]})
    path.write_text(yaml.safe_dump(p))
    r = run("solve", path, "--export", "vllm")
    assert r.exit_code == 2 and "has no `model`" in r.stderr and r.stdout == ""


def test_bad_pick_and_conflicts(single):
    r = run("solve", single, "--export", "vllm", "--pick", 99)
    assert r.exit_code == 2 and "--pick" in r.stderr
    r = run("solve", single, "--export", "vllm", "--json", "-")
    assert r.exit_code == 2 and "--json -" in r.stderr
    r = run("solve", single, "--export", "tgi")
    assert r.exit_code == 2 and "--export" in r.stderr


def test_paper_convention_is_said(tmp_path):
    path = tmp_path / "p.yaml"
    p = dict(
        PROBLEM,
        convention="paper",
        search={"k": {"max": 8}, "m": {"max": 1}, "exclude": ["nomodel"]},
    )
    path.write_text(yaml.safe_dump(p))
    r = run("solve", path, "--export", "vllm")
    assert r.exit_code == 0
    assert "paper convention" in r.stderr
    json.loads(r.stdout)


def test_pick_point_default_is_best_throughput():
    pts = [{"throughput": 1.0}, {"throughput": 3.0}, {"throughput": 2.0}]
    assert pick_point(pts, None) is pts[1]
    assert pick_point(pts, 3) is pts[2]
