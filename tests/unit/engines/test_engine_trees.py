"""SGLang's EAGLE trees: the expansion written out independently, a Monte Carlo of the
engine's rounds, the search over (num_steps, topk, num_draft_tokens) and the exports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from allocator.engines.sglang import sglang_expected, sglang_tree, sglang_triples
from allocator.model.acceptance import expected_accepted
from tests.support.cli_runner import run


def weights(p: list[list[float]], depth: int) -> list[float]:
    row = p[min(depth - 1, len(p) - 1)]
    out, miss = [], 1.0
    for x in row:
        out.append(x * miss)
        miss *= 1.0 - x
    return out


def engine_paths(p, steps: int, topk: int, tokens: int) -> set[tuple[int, ...]]:
    """SGLang's expansion in plain Python: candidates are rank paths with draft scores.

    Step 0: the root's top-k; later steps: each frontier path gets top-k children scored
    parent * child, all kept as candidates, the best top-k become the frontier; finally the
    tokens - 1 best candidates (ties: earlier candidate first) are verified.
    """
    cands: list[tuple[float, int, tuple[int, ...]]] = []  # (score, order, path)
    w = weights(p, 1) + [0.0] * topk
    frontier = [(w[r], (r + 1,)) for r in range(topk)]
    cands += [(s, len(cands) + i, path) for i, (s, path) in enumerate(frontier)]
    for step in range(1, steps):
        w = weights(p, step + 1) + [0.0] * topk
        expanded = []
        for score, path in frontier:
            for r in range(topk):
                expanded.append((score * w[r], path + (r + 1,)))
        base = len(cands)
        cands += [(s, base + i, path) for i, (s, path) in enumerate(expanded)]
        order = sorted(range(len(expanded)), key=lambda i: (-expanded[i][0], i))[:topk]
        frontier = [expanded[i] for i in order]
    chosen = sorted(cands, key=lambda c: (-c[0], c[1]))[: tokens - 1]
    return {c[2] for c in chosen}


def tree_paths(tree) -> set[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = [()]
    for v in range(1, tree.parents.size):
        paths.append(paths[int(tree.parents[v])] + (int(tree.ranks[v]),))
    return set(paths[1:])


def monte_carlo(p, paths: set[tuple[int, ...]], rounds: int, seed: int) -> np.ndarray:
    """Tokens per step: at each accepted node the verifier tries ranks in order, accepting
    rank r with the conditional p_r; the step goes on while the accepted path is verified."""
    rng = np.random.default_rng(seed)
    width = len(p[0])
    depth = max(len(t) for t in paths)
    out = np.ones(rounds, np.int64)
    for i in range(rounds):
        path: tuple[int, ...] = ()
        for level in range(depth):
            row = p[min(level, len(p) - 1)]
            u = rng.random(width)
            hit = next((r + 1 for r in range(width) if u[r] < row[r]), None)
            if hit is None or path + (hit,) not in paths:
                break
            path = path + (hit,)
            out[i] += 1
    return out


P = [[0.7, 0.35, 0.25, 0.2], [0.6, 0.3, 0.2, 0.2]]


@pytest.mark.parametrize(
    ("steps", "topk", "tokens"), [(1, 3, 4), (3, 2, 6), (4, 3, 10), (5, 4, 16), (6, 1, 7)]
)
def test_tree_is_the_engines_expansion(steps, topk, tokens):
    tree = sglang_tree(np.array(P), steps, topk, tokens)
    assert tree_paths(tree) == engine_paths(P, steps, topk, tokens)
    assert tree.nodes == tokens - 1 and tree.depth <= steps


@pytest.mark.parametrize(("steps", "topk", "tokens", "seed"), [(3, 2, 6, 1), (5, 4, 16, 2)])
def test_engine_tree_against_monte_carlo(steps, topk, tokens, seed):
    tree = sglang_tree(np.array(P), steps, topk, tokens)
    rounds = 40_000
    units = monte_carlo(P, engine_paths(P, steps, topk, tokens), rounds, seed)
    half = 2.576 * units.std(ddof=1) / np.sqrt(rounds)
    assert abs(units.mean() - tree.expected_accepted) < half


def test_expected_for_every_token_count_matches_the_tree():
    p = np.array(P)
    e = sglang_expected(p, 4, 3, 40)
    for t in range(2, 41):
        if np.isnan(e[t - 2]):
            assert t - 1 > 3 + 3 * 9
            continue
        assert e[t - 2] == pytest.approx(sglang_tree(p, 4, 3, t).expected_accepted)


def test_topk_one_is_the_chain():
    p = np.array(P)
    for steps in (1, 3, 7):
        e = sglang_tree(p, steps, 1, steps + 1).expected_accepted
        chain = expected_accepted(p[:, 0][None], steps, "bonus")[0, steps - 1]
        assert e == pytest.approx(chain)


def test_search_covers_the_valid_triples():
    tri = sglang_triples(np.array(P), 3, 2, 8)
    got = set(zip(tri.steps.tolist(), tri.topk.tolist(), tri.tokens.tolist(), strict=True))
    # by hand: topk 1 -> tokens = steps + 1; topk 2 -> tokens - 1 <= min(8, 2 + 4 (steps - 1))
    want = {(s, 1, s + 1) for s in (1, 2, 3)}
    want |= {(s, 2, t) for s in (1, 2, 3) for t in range(2, min(8, 2 + 4 * (s - 1)) + 2)}
    assert got == want


# ---------------------------------------------------------------- command line
PROBLEM = """\
name: engine-trees
convention: bonus
verifier: {pass_cost: 1.0, token_cost: 0.02}
drafters:
  - name: eagle
    acceptance: [0.7, 0.6]  # rank 1 of acceptance_by_rank, so chains and trees agree
    unit_cost: 0.05
    method: eagle3
    model: org/EAGLE3-demo
    acceptance_by_rank: [[0.7, 0.35, 0.25, 0.2], [0.6, 0.3, 0.2, 0.2]]
    draft_ms: {1: 0.5, 64: 0.9}
  - name: nomethod
    acceptance: 0.7
    unit_cost: 0.05
    acceptance_by_rank: [0.7, 0.3]
    draft_ms: {1: 0.4, 64: 0.8}
serving:
  batch_sizes: [1, 64]
  gpu_cost_per_hour: 4.0
  verify_ms:
    batch: [1, 64]
    tokens: [1, 8, 32]
    ms: [[10.0, 10.5, 12.0], [14.0, 20.0, 44.0]]
  overhead_ms: 0.2
"""


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM)
    return path


def test_engine_search_and_serving(problem):
    r = run(
        "tree",
        problem,
        "-d",
        "eagle",
        "--engine",
        "sglang",
        "--nodes",
        "24",
        "--depth",
        "6",
        "--json",
        "-",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # the chosen triple has the best throughput of every triple, recomputed by hand
    tri = sglang_triples(np.array(P), 6, 4, 24)
    t = tri.steps * 0.05 + 1.0 + 0.02 * (tri.tokens - 1)
    assert doc["throughput"] == pytest.approx(np.max(tri.expected_accepted / t))
    assert doc["expected_accepted"] <= doc["optimal_same_size"] + 1e-12
    by_batch = {row["batch"]: row for row in doc["serving"]}
    row = by_batch[64]
    tokens = row["num_draft_tokens"]
    verify = np.interp(tokens, [1, 8, 32], [14.0, 20.0, 44.0])
    assert row["step_ms"] == pytest.approx(verify + row["num_steps"] * 0.9 + 0.2)
    assert row["tokens_per_s"] == pytest.approx(
        64 * 1000 * row["expected_accepted"] / row["step_ms"]
    )
    # a bigger batch makes verification dearer: the tree does not grow
    assert row["num_draft_tokens"] <= by_batch[1]["num_draft_tokens"]


def test_engine_rounds_simulate_the_picked_setting(problem):
    """--engine picks one setting; --rounds plays that tree (it was refused without
    --nodes). The Monte Carlo of its paths, written independently, agrees."""
    r = run(
        "tree", problem, "-d", "eagle", "--engine", "sglang", "--rounds", "40000", "--json", "-"
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    sim = doc["simulation"]
    assert sim["rounds"] == 40000 and sim["model_accepted"] == doc["expected_accepted"]
    assert sim["ci_low"] <= doc["expected_accepted"] <= sim["ci_high"]
    paths = engine_paths(P, doc["num_steps"], doc["topk"], doc["num_draft_tokens"])
    played: list[tuple[int, ...]] = [()]
    for v in range(1, len(doc["parents"])):
        played.append(played[doc["parents"][v]] + (doc["ranks"][v],))
    assert set(played[1:]) == paths  # the simulated tree is the engine's for that setting
    units = monte_carlo(P, paths, 40_000, 3)
    half = 2.576 * units.std(ddof=1) / np.sqrt(units.size)
    assert abs(units.mean() - doc["expected_accepted"]) < half


def test_eagle_topk_beyond_the_measured_ranks_is_noted(problem):
    """P measures 4 ranks: at topk 6 ranks 5 and 6 weigh 0, so E is that of topk 4 with
    the same steps and tokens (the zero-scored candidates are never chosen ahead)."""
    r = run("tree", problem, "-d", "eagle", "--eagle", "2,6,5", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert any("beyond the 4 measured ranks" in n for n in doc["notes"])
    # by hand from the expansion written out above: ranks 5, 6 weigh nothing
    e = 1.0
    for path in engine_paths(P, 2, 6, 5):
        w = [(weights(P, d + 1) + [0.0, 0.0])[r - 1] for d, r in enumerate(path)]
        e += float(np.prod(w))
    assert doc["expected_accepted"] == pytest.approx(e)
    r = run("tree", problem, "-d", "eagle", "--eagle", "2,6,5")
    assert r.exit_code == 0 and "beyond the 4 measured ranks" in " ".join(r.output.split())
    r = run("tree", problem, "-d", "eagle", "--eagle", "2,4,5", "--json", "-")
    assert "notes" not in json.loads(r.stdout)


WIDE = """
name: wide
convention: bonus
verifier: {pass_cost: 1.0, token_cost: 0.02}
drafters:
  - name: eagle
    acceptance: 0.5
    unit_cost: 0.05
    acceptance_by_rank: [0.5, %s]
"""


def test_engine_caps_the_default_width_at_16(tmp_path, monkeypatch):
    """A drafter with 200 measured ranks: --engine searched every topk up to 200 by
    default (minutes); it now stops at 16 unless --width asks for more."""
    import allocator.analysis.trees as trees  # where the engine search calls it

    path = tmp_path / "wide.yaml"
    path.write_text(WIDE % ", ".join(["0.01"] * 199))
    seen: list[int] = []
    original = trees.sglang_triples

    def spy(p, max_steps, max_topk, max_nodes):
        seen.append(max_topk)
        return original(p, max_steps, max_topk, max_nodes)

    monkeypatch.setattr(trees, "sglang_triples", spy)
    args = ("tree", path, "-d", "eagle", "--engine", "sglang", "--nodes", "6", "--depth", "2")
    r = run(*args, "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert seen == [16] and doc["topk"] <= 16
    assert any("up to 16 of the 200 measured ranks" in n for n in doc["notes"])
    r = run(*args, "--width", "20", "--json", "-")
    assert r.exit_code == 0 and seen[-1] == 20
    assert not any("measured ranks" in n for n in json.loads(r.stdout)["notes"])
    help_text = " ".join(run("tree", "--help").output.split())
    assert "up to 16" in help_text


def test_export_sglang(problem):
    r = run("tree", problem, "-d", "eagle", "--eagle", "4,3,10", "--export", "sglang")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == (
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path org/EAGLE3-demo "
        "--speculative-num-steps 4 --speculative-eagle-topk 3 --speculative-num-draft-tokens 10"
    )


def test_export_vllm_says_it_takes_no_tree(problem):
    r = run("tree", problem, "-d", "eagle", "--eagle", "3,2,5", "--export", "vllm")
    assert r.exit_code == 0, r.output
    assert "0.33.0 has no token-tree setting" in r.stderr
    # the legacy string gave the depth where vLLM <= 0.20.2 needed the node count, for a
    # tree its level-uniform proposer could not draft and its sampler verified as a chain
    # (vllm/v1/spec_decode/llm_base_proposer.py, v1/sample/rejection_sampler.py in 0.20.2)
    assert "[(" not in r.output and "0.20.2" in r.stderr


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--eagle", "3,1,6"], "--eagle"),
        (["--eagle", "2,2,9"], "--eagle"),
        (["--eagle", "2,x,3"], "--eagle"),
        # too large to plan: refused by name (topk 10^5 ran out of memory and blamed
        # search.m.max; 1000 steps went past the optimal tree's depth cap)
        (["--eagle", "3,100000,10"], "--eagle"),
        (["--eagle", "1000,2,10"], "--eagle"),
        (["--eagle", "65,2,10"], "--eagle"),
        (["--eagle", "3,65,10"], "--eagle"),
        (["--export", "trt"], "--export"),
        # --engine searches, --eagle names one setting: together one of them was ignored
        (["--engine", "sglang", "--eagle", "3,2,5"], "--eagle"),
        (["--engine", "sglang", "--eagle", "3,2,5", "--json", "-"], "--eagle"),
        # --engine takes the engine's name now; the old bare switch is refused with a pointer
        (["--engine", "--eagle", "3,2,5"], "--engine"),
        (["--engine", "--export", "sglang"], "--engine"),
        (["--engine", "vllm"], "--engine"),
        (["--engine", "tgi"], "--engine"),
    ],
)
def test_bad_engine_input(problem, extra, field):
    r = run("tree", problem, "-d", "eagle", *extra)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), r.output


@pytest.mark.parametrize("method", [None, "draft_model", "ngram", "medusa", "dflash"])
@pytest.mark.parametrize("target", ["sglang", "vllm"])
def test_export_needs_an_eagle_method(problem, tmp_path, method, target):
    path = problem
    if method is not None:
        path = tmp_path / "method.yaml"
        model = "" if method == "ngram" else "    model: org/draft\n"
        text = problem.read_text().replace(
            "    acceptance_by_rank: [0.7, 0.3]\n",
            f"    acceptance_by_rank: [0.7, 0.3]\n    method: {method}\n{model}",
        )
        path.write_text(text)
    r = run("tree", path, "-d", "nomethod", "--eagle", "2,2,4", "--export", target)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: drafters[nomethod].method:"), r.output
    assert "eagle, eagle3, mtp" in lines[0]


def test_export_vllm_method_name(problem):
    r = run("tree", problem, "-d", "eagle", "--eagle", "3,2,5", "--export", "vllm")
    assert r.exit_code == 0, r.output
    config = json.loads(r.stdout)
    assert config == {"method": "eagle3", "num_speculative_tokens": 3, "model": "org/EAGLE3-demo"}


def test_front_per_batch_size_with_serving(problem, tmp_path):
    r = run("tree", problem, "-d", "eagle", "--max-nodes", "30", "--depth", "6", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    from allocator.model.token_tree import TreeProgramme

    e = TreeProgramme(np.array(P), 30, 6).values()
    for row in doc["serving"]:
        b, n, d = row["batch"], row["nodes"], row["depth"]
        verify = {1: [10.0, 10.5, 12.0], 64: [14.0, 20.0, 44.0]}[b]
        draft = {1: 0.5, 64: 0.9}[b]
        ms = np.interp(n + 1, [1, 8, 32], verify) + d * draft + 0.2
        assert row["step_ms"] == pytest.approx(ms)
        assert row["expected_accepted"] == pytest.approx(e[d - 1, n])
        # the serving metrics by hand: plain decoding is verify_ms(b, 1)
        per_seq = 1000 * e[d - 1, n] / ms
        assert row["tokens_per_s_per_seq"] == pytest.approx(per_seq)
        assert row["tokens_per_s"] == pytest.approx(b * per_seq)
        assert row["tpot_ms"] == pytest.approx(ms / e[d - 1, n])
        assert row["speedup"] == pytest.approx(per_seq / (1000 / verify[0]))
        assert row["cost_per_mtok"] == pytest.approx(4.0 / 3600 / (b * per_seq) * 1e6)
        # no other size and depth inside the table does better, by hand
        for dd in range(1, 7):
            for nn in range(1, 31):
                other = (
                    1000
                    * e[dd - 1, nn]
                    / (np.interp(nn + 1, [1, 8, 32], verify) + dd * draft + 0.2)
                )
                assert other <= row["tokens_per_s_per_seq"] + 1e-9
    out = tmp_path / "front.png"
    r = run("tree", problem, "-d", "eagle", "--max-nodes", "30", "--plot", out)
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


CHAIN_TABLE = "  step_ms:\n    - drafters: [eagle]\n      by_batch: {1: {0: 10.0, 2: 11.0}}\n"


def no_verify_table(text: str) -> str:
    """A measured chain table alone: trees verify nodes + 1 tokens, which it does not cover."""
    return text[: text.index("  verify_ms:")].replace("[1, 64]", "[1]") + CHAIN_TABLE


def no_draft_time(text: str) -> str:
    """eagle measured by a step_ms table, so the file may omit its draft_ms; trees need it."""
    return text.replace("    draft_ms: {1: 0.5, 64: 0.9}\n", "") + CHAIN_TABLE


@pytest.mark.parametrize(
    ("change", "missing"), [(no_verify_table, "verify_ms"), (no_draft_time, "draft_ms")]
)
def test_serving_without_the_component_model_is_refused(problem, tmp_path, change, missing):
    bad = tmp_path / "bad.yaml"
    bad.write_text(change(problem.read_text()))
    r = run("tree", bad, "-d", "eagle", "--max-nodes", "10")
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: serving:") and missing in lines[0]


def test_draft_time_outside_its_batch_sizes_is_not_extrapolated(problem, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(problem.read_text().replace("draft_ms: {1: 0.5, 64: 0.9}", "draft_ms: {1: 0.5}"))
    r = run("tree", bad, "-d", "eagle", "--max-nodes", "10")
    assert r.exit_code == 2
    assert r.output.startswith("error: serving: batch 64:"), r.output


@pytest.mark.parametrize(("memory_gb", "batches"), [(5.0, [1, 64]), (10.0, [1])])
def test_memory_caps_the_batch_of_per_batch_trees(problem, tmp_path, memory_gb, batches):
    # 40 GB of KV cache at 0.5 GB a sequence: 80 sequences; hosting 5 GB leaves room for
    # (40 - 5) / 0.5 = 70 >= 64, hosting 10 GB for (40 - 10) / 0.5 = 60 < 64
    path = tmp_path / "memory.yaml"
    text = problem.read_text().replace(
        "    draft_ms: {1: 0.5, 64: 0.9}\n",
        f"    draft_ms: {{1: 0.5, 64: 0.9}}\n    memory_gb: {memory_gb}\n",
    )
    path.write_text(text + "  memory: {kv_cache_gb: 40.0, kv_per_seq_gb: 0.5}\n")
    for extra in (["--max-nodes", "12"], ["--engine", "sglang", "--nodes", "12"]):
        r = run("tree", path, "-d", "eagle", "--depth", "4", *extra, "--json", "-")
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert [row["batch"] for row in doc["serving"]] == batches
        left_out = [n for n in doc.get("notes", []) if "left out" in n]
        if batches == [1]:
            assert left_out == [
                "batch 64 left out: hosting 'eagle' (drafters[].memory_gb) leaves KV-cache "
                "room for 60 sequences (serving.memory)"
            ]
        else:
            assert left_out == []


@pytest.mark.parametrize("target", ["sglang", "vllm"])
def test_export_needs_the_heads_model(problem, tmp_path, target):
    # SGLang's EAGLE and vLLM's eagle3 both load the head from a path: no model, no export
    path = tmp_path / "nomodel.yaml"
    path.write_text(problem.read_text().replace("    model: org/EAGLE3-demo\n", ""))
    r = run("tree", path, "-d", "eagle", "--eagle", "3,2,5", "--export", target)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --export:") and "model" in lines[0]
