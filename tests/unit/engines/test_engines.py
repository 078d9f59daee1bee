"""Exports checked against the engines' own schemas, as read from their releases.

The rules are transcribed from vLLM 0.33.0 and SGLang 0.5.23 into
:mod:`tests.support.engine_schemas` (files and lines cited there); they are not taken
from ``allocator``.
"""

import json
import re
import shlex
import shutil
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.core.methods import METHODS
from allocator.io.spec import Method, load_problem
from tests.docs.pages import section
from tests.support.cli_runner import run
from tests.support.engine_schemas import SGLangSettings, check_vllm
from tests.support.engine_schemas import check_sglang as sglang_settings

ROOT = Path(__file__).resolve().parents[3]


def check_sglang(argv: list[str], k: int, has_model: bool) -> SGLangSettings:
    """SGLang 0.5.23 takes ``argv`` and drafts a chain of ``k`` with it."""
    settings = sglang_settings(argv)
    assert settings.drafted == k, (settings, k)
    if settings.algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        assert settings.steps == k and settings.topk == 1
    if settings.asked == "NEXTN":
        assert bool(settings.draft_path) == has_model
    if settings.algorithm == "NGRAM":
        # the ngram tree's breadth becomes the top-k: 1 makes a chain of k drafted tokens
        assert settings.topk == 1
    return settings


# ----------------------------------------------------------------- problems


def problem(tmp_path, drafter: dict, k_max: int = 5, name: str = "p") -> Path:
    data = {
        "name": name,
        "convention": "bonus",
        "drafters": [{"name": "d", "acceptance": [0.8, 0.7], "unit_cost": 0.02, **drafter}],
        "search": {"k": {"max": k_max}},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


MODEL = {"draft_model": "org/small", "eagle": "org/EAGLE", "eagle3": "org/EAGLE3",
         "medusa": "org/medusa", "mlp_speculator": "org/mlp", "mtp": "org/target",
         "dflash": "org/dflash", "dspark": "org/dspark"}  # fmt: skip
#: What vLLM 0.33.0 has no method for; 0.32.0 is the last release that took them.
GONE_FROM_VLLM = ("medusa", "mlp_speculator")
#: Methods whose model the engines fill in themselves (the target's own layers).
OPTIONAL_MODEL = ("mtp", "dspark")


def test_table_matches_the_problem_file_literal():
    assert METHODS == typing.get_args(Method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("with_model", [True, False])
def test_every_method_exports_to_vllm_schema(tmp_path, method, with_model):
    d = {"method": method, **({"model": MODEL.get(method, method)} if with_model else {})}
    if method == "ngram":
        d.update(prompt_lookup_min=2, prompt_lookup_max=4)
    path = problem(tmp_path, d)
    if with_model and method not in MODEL:  # vLLM names the model itself ("ngram")
        res = run("solve", path, "--export", "vllm")
        assert res.exit_code == 2 and res.stderr.startswith("error: drafters[d].model: ")
        return
    res = run("solve", path, "--export", "vllm")
    if method in GONE_FROM_VLLM:
        # vLLM 0.33.0's SpeculativeMethod has neither; exporting them made a config it refuses
        assert res.exit_code == 2 and res.stdout == ""
        assert len(res.stderr.strip().splitlines()) == 1
        assert f"vLLM 0.33.0 has no method {method}" in res.stderr
        assert "the last release that takes it is 0.32.0" in res.stderr
        return
    front = json.loads(run("solve", path, "--json", "-").stdout)["front"]
    best = max(front, key=lambda p: p["throughput"])
    if not with_model and method not in ("ngram", "suffix", *OPTIONAL_MODEL):
        assert res.exit_code == 2 and res.stdout == ""
        assert res.stderr.startswith("error: --export: ") and "has no `model`" in res.stderr
        return
    assert res.exit_code == 0, res.output
    config = json.loads(res.stdout)
    check_vllm(config, best["k"])
    assert config["method"] == method
    if method == "ngram":
        assert (config["prompt_lookup_min"], config["prompt_lookup_max"]) == (2, 4)


SGLANG_NAMES = {"draft_model": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3",
                "mtp": "NEXTN", "ngram": "NGRAM", "dflash": "DFLASH",
                "dspark": "DSPARK"}  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
def test_every_method_exports_to_sglang_or_is_refused(tmp_path, method):
    d = {"method": method, **({"model": MODEL[method]} if method in MODEL else {})}
    path = problem(tmp_path, d)
    front = json.loads(run("solve", path, "--json", "-").stdout)["front"]
    k = max(front, key=lambda p: p["throughput"])["k"]
    res = run("solve", path, "--export", "sglang")
    if method not in SGLANG_NAMES:
        assert res.exit_code == 2 and res.stdout == ""
        assert len(res.stderr.strip().splitlines()) == 1
        # --export solves what SGLang serves: a problem with none says why, in one line
        assert re.match(
            r"error: drafters: no drafter has a method SGLang serves: d \(method \w+\): "
            r"SGLang has no",
            res.stderr,
        )
        return
    assert res.exit_code == 0, res.output
    settings = check_sglang(shlex.split(res.stdout), k, method in MODEL)
    assert settings.asked == SGLANG_NAMES[method]
    # the batch size is not stated: SGLang's speculative default of 48 running requests is
    # said, not silently kept (speculative_hook.py: "reset to 48 for speculative decoding")
    assert "at most 48 requests" in res.stderr


def test_mtp_without_model_on_sglang_leaves_the_path_to_sglang(tmp_path):
    path = problem(tmp_path, {"method": "mtp"})
    res = run("solve", path, "--export", "sglang", "--pick", 1)
    assert res.exit_code == 0, res.output
    check_sglang(shlex.split(res.stdout), 1, has_model=False)
    assert "NEXTN without a draft path" in res.stderr


def test_method_absent_keeps_draft_model_with_a_note(tmp_path):
    path = problem(tmp_path, {"model": "org/small"})
    res = run("solve", path, "--export", "vllm", "--pick", 1)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["method"] == "draft_model"
    assert "has no method; exported as draft_model" in res.stderr


@pytest.mark.parametrize(
    "drafter,field,needle",
    [
        ({"method": "eagle4"}, "drafters[d].method", "input should be"),
        ({"method": "eagle3", "prompt_lookup_max": 4}, "drafters[d].prompt_lookup_max", "ngram"),
        ({"prompt_lookup_min": 2}, "drafters[d].prompt_lookup_min", "set method: ngram"),
        ({"method": "ngram", "model": "ngram"}, "drafters[d].model", "takes no model"),
        ({"method": "suffix", "model": "x"}, "drafters[d].model", "takes no model"),
        (
            {"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 3},
            "drafters[d].prompt_lookup_min",
            "exceeds prompt_lookup_max",
        ),
        ({"method": "ngram", "prompt_lookup_max": 0}, "drafters[d].prompt_lookup_max", "greater"),
    ],
)
def test_bad_method_fields(tmp_path, drafter, field, needle):
    path = problem(tmp_path, drafter)
    out = tmp_path / "front.json"
    res = run("solve", path, "--json", out)
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith(f"error: {field}: ") and needle in res.stderr, res.stderr
    assert not out.exists()


# ----------------------------------------------------------------- plan --export

PLAN = {
    "name": "routes",
    "convention": "bonus",
    "drafters": [
        {"name": "head", "acceptance": 0.7, "unit_cost": 0.05, "hosting_cost": 1.0,
         "method": "eagle3", "model": "org/EAGLE3"},
        {"name": "pld", "acceptance": 0.4, "unit_cost": 0.002, "hosting_cost": 0.0,
         "method": "ngram", "prompt_lookup_max": 4},
        {"name": "unused", "acceptance": 0.3, "unit_cost": 0.3, "hosting_cost": 5.0,
         "method": "draft_model", "model": "org/big"},
    ],
    "workloads": [
        {"name": "chat", "weight": 0.6, "acceptance": {"pld": 0.2}},
        {"name": "code", "weight": 0.4, "acceptance": {"pld": 0.95, "head": 0.5}},
    ],
    "search": {"k": {"max": 6}, "m": {"max": 1}},
    "budget": {"hosting_cost": 2.0},
}  # fmt: skip


def test_plan_export_sets_sglangs_running_requests_for_the_batch(tmp_path):
    """SGLang 0.5.23 sets --max-running-requests 48 when speculation is on and it is unset
    (a default, not a cap): a plan for 64 sequences per replica sets it; one for 16 needs
    nothing; one for no stated batch size says so."""
    serving = {
        "batch_sizes": [1, 16, 64],
        "memory": {"kv_cache_gb": 80.0, "kv_per_seq_gb": 0.5},
        "step_ms": [
            {"drafters": ["head"], "by_batch": {1: {0: 6.0, 1: 7.0}, 64: {0: 8.0, 1: 9.0}}}
        ],
    }
    data = dict(PLAN, serving=serving)
    path = tmp_path / "routes.yaml"
    path.write_text(yaml.safe_dump(data))
    for batch, running in ((64, 64), (16, 48)):
        res = run("plan", path, "--export", "sglang", "--batch", batch)
        assert res.exit_code == 0, res.output
        for route in json.loads(res.stdout)["routes"]:
            assert sglang_settings(route["flags"]).max_running_requests == running
    res = run("plan", path, "--export", "sglang")
    assert res.exit_code == 0 and "at most 48 requests" in res.stderr


@pytest.mark.parametrize("target", ["vllm", "sglang"])
def test_plan_export_one_config_per_route(tmp_path, target):
    path = tmp_path / "routes.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    plan = json.loads(run("plan", path, "--json", "-").stdout)
    res = run("plan", path, "--export", target)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["engine"] == target
    assert [h["name"] for h in doc["hosted"]] == plan["hosted"]
    assert {w["name"]: (w["drafters"], w["k"]) for w in plan["workloads"]} == {
        r["workload"]: ([r["drafter"]], r["k"]) for r in doc["routes"]
    }
    routes = {r["workload"]: r for r in doc["routes"]}
    assert routes["chat"]["drafter"] == "head" and routes["code"]["drafter"] == "pld"
    for r in doc["routes"]:
        if target == "vllm":
            check_vllm(r["speculative_config"], r["k"])
        else:
            assert shlex.split(r["args"]) == r["flags"]
            check_sglang(r["flags"], r["k"], r["drafter"] == "head")


def test_plan_export_refusals(tmp_path):
    # the plan is of what the engine serves now: no route pools, and drafters without a
    # model are refused by name instead of "cannot serve this ensemble"
    res = run("plan", ROOT / "problems" / "mixed-traffic.yaml", "--export", "vllm")
    assert res.exit_code == 2 and res.stdout == ""
    assert "has no `model`" in res.stderr
    path = tmp_path / "routes.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    for args, needle in (
        (["--export", "tgi"], "'tgi' is not one of vllm, sglang"),
        (["--export", "vllm", "--sweep", "hosting_cost"], "does not apply with --sweep"),
        (["--export", "vllm", "--json", "-"], "--json -"),
        (["--export", "vllm", "--pooled"], "an export serves one drafter per server"),
        (["--export", "vllm", "--engine", "sglang"], "give one engine"),
        (["--engine", "tgi"], "'tgi' is not one of vllm, sglang"),
    ):
        res = run("plan", path, *args)
        assert res.exit_code == 2 and needle in res.stderr, res.output


# ----------------------------------------------------------------- the README's measurements


def measurement_commands() -> list[list[str]]:
    block = re.findall(r"```bash\n(.*?)```", section("From measurements to plans"), re.S)[0]
    words = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    return [w for w in words if w]


def test_readme_measurement_commands_run_on_the_samples(tmp_path, monkeypatch):
    """Every command of the measurement section runs as written on problems/measurements/,
    and what it estimates holds the generator's truth (truth.json)."""
    shutil.copytree(ROOT / "problems", tmp_path / "problems")
    (tmp_path / "scratch").mkdir()  # the README's `mkdir -p scratch`
    monkeypatch.chdir(tmp_path)
    commands = measurement_commands()
    assert len(commands) >= 8
    outputs = {}
    for words in commands:
        assert words[0] == "allocator"
        res = run(*words[1:])
        assert res.exit_code == 0, f"{' '.join(words)}\n{res.output[-2000:]}"
        outputs[" ".join(words[1:])] = res.stdout
    truth = json.loads((tmp_path / "problems/measurements/truth.json").read_text())
    (eagle3,) = load_problem("scratch/eagle3.yaml").drafters
    for (lo, hi), a in zip(
        eagle3.acceptance_interval, truth["vllm-metrics.prom"].popitem()[1], strict=False
    ):
        assert lo <= a <= hi
    (ngram,) = load_problem("scratch/ngram.yaml").drafters
    assert ngram.method == "ngram"
    for (lo, hi), a in zip(
        ngram.acceptance_interval, truth["vllm-ngram.log"]["ngram"], strict=False
    ):
        assert lo <= a <= hi
    vllm = json.loads(outputs["solve scratch/eagle3.yaml --export vllm"])
    check_vllm(vllm, vllm["num_speculative_tokens"])
    assert vllm["method"] == "eagle3" and vllm["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    sglang = shlex.split(outputs["solve scratch/eagle3.yaml --export sglang"])
    check_sglang(sglang, vllm["num_speculative_tokens"], True)
    plan = json.loads(outputs["plan scratch/routes.yaml --export sglang"])
    assert {r["workload"] for r in plan["routes"]} == {"chat", "code"}
    routes = load_problem("scratch/routes.yaml")
    by = {w.name: np.asarray(w.acceptance["eagle3"]) for w in routes.workloads}
    for w, acc in truth["sglang-requests.jsonl"].items():
        assert np.all(np.abs(by[w] - np.asarray(acc)) < 0.04), (w, by[w])
    for name, acc in truth["outcomes.csv"].items():
        d = next(x for x in load_problem("scratch/outcomes.yaml").drafters if x.name == name)
        hits = [lo <= a <= hi for (lo, hi), a in zip(d.acceptance_interval, acc * 5, strict=False)]
        assert np.mean(hits) >= 0.8, (name, hits)
