"""Token trees take their step time from the step-time contract: the component model
(as before) and, new, the roofline, whose tree step is worked by hand here."""

from __future__ import annotations

import pytest

from allocator import api

BW = 3.35e12
FLOPS = 989.5e12


def roofline_tree_problem() -> dict:
    return {
        "name": "tree",
        "convention": "bonus",
        "drafters": [
            {
                "name": "d",
                "method": "eagle3",
                "model": "org/head",
                "acceptance": [0.78, 0.72],
                "acceptance_by_rank": [[0.78, 0.36, 0.24], [0.72, 0.33, 0.22]],
                "unit_cost": 0.05,
            }
        ],
        "serving": {
            "batch_sizes": [1, 32],
            "hardware": {"gpu": "h100-sxm"},
            "model": {
                "params_b": 3.35,
                "layers": 32,
                "hidden": 4096,
                "heads": 32,
                "kv_heads": 8,
                "head_dim": 128,
            },
            "roofline": {"overhead_ms": 0.1, "drafters": {"d": {"fixed_ms": 0.25}}},
        },
    }


def hand_tree_step(b: int, nodes: int, depth: int) -> float:
    """One H100 at peak, context 0: memory W + κ·b·(n + 1) (the KV written), compute
    φ·b·(n + 1); W = 6.7e9 / 3.35e12 s = 2 ms, κ = 131,072 / 3.35e12 s per token, φ =
    6.7e9 / 989.5e12 s per token; plus depth drafting passes of 0.25 ms and 0.1 ms of
    speculation's overhead."""
    t = nodes + 1
    memory = 2.0 + 1e3 * 131072 / BW * b * t
    compute = 1e3 * 6.7e9 / FLOPS * b * t
    return max(memory, compute) + depth * 0.25 + 0.1


def test_tree_serving_rows_come_from_the_roofline():
    prob = api.load(roofline_tree_problem())
    front = api.tree_front(prob, "d", max_nodes=12, depth=4)
    assert front.serving is not None and [row.batch for row in front.serving] == [1, 32]
    for row in front.serving:
        want = hand_tree_step(row.batch, row.nodes, row.depth)
        assert row.metrics["step_ms"] == pytest.approx(want, rel=1e-12)
    assert any("not calibrated" in n for n in front.serving_notes)
    # at 32 sequences the compute side binds sooner: the tree of most tokens/s is smaller
    one, many = front.serving
    assert many.nodes <= one.nodes
