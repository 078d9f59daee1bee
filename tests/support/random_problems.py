"""Small random problems in the file format, shared by the exact and contract suites."""

import numpy as np

METRICS = ["draft_cost_per_round", "draft_cost_per_token", "hosting_cost", "drafters"]
CAPS = {"draft_cost_per_round": 0.8, "draft_cost_per_token": 0.3, "hosting_cost": 4, "drafters": 2}


def random_problem(seed, n_max=6, knapsack=False):
    """A small random problem in the file format; ``knapsack`` keeps it in that domain."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, n_max + 1))
    drafters = []
    for i in range(n):
        if not knapsack and rng.random() < 0.4:
            acc = [float(x) for x in np.round(rng.uniform(0.2, 1.0, rng.integers(1, 5)), 3)]
        else:
            acc = float(np.round(rng.uniform(0.1, 1.0), 3))
        drafters.append(
            {
                "name": f"d{i}",
                "acceptance": acc,
                "unit_cost": float(np.round(rng.uniform(0.0, 0.3), 3)),
                "hosting_cost": float(rng.integers(0, 5)),
            }
        )
    p = {
        "name": f"random-{seed}",
        "convention": str(rng.choice(["paper", "bonus"])),
        "drafting": "sequential" if knapsack else str(rng.choice(["sequential", "parallel"])),
        "verifier": {
            "pass_cost": float(np.round(rng.uniform(0.5, 2.0), 3)),
            "token_cost": float(rng.choice([0.0, 0.01, 0.05])),
        },
        "drafters": drafters,
        "cost_metric": str(rng.choice(METRICS)),
        "search": {
            "k": {"min": int(rng.integers(1, 3)), "max": int(rng.integers(3, 10))},
            "m": {
                "min": int(rng.integers(1, 3)) if n >= 2 else 1,
                "max": int(rng.integers(1, n + 1)),
            },
        },
    }
    p["search"]["m"]["max"] = max(p["search"]["m"]["max"], p["search"]["m"]["min"])
    if n >= 3 and rng.random() < 0.3:
        p["search"]["require"] = ["d0"]
        p["search"]["exclude"] = ["d1"]
    if rng.random() < 0.5:
        metric = str(rng.choice(METRICS))
        p["budget"] = {metric: CAPS[metric]}
    return p
