"""The one crossings finder of both capacity sweeps, against a brute-force walk."""

import numpy as np
import pytest

from allocator.analysis.capacity.crossings import crossings


def brute_force(xs, with_spec, without, axis):
    """Walk the points with both sides priced; record each change of the cheaper side."""
    out, last, prev_x = [], None, None
    for x, a, b in zip(xs, with_spec, without, strict=True):
        if np.isnan(a) or np.isnan(b):
            continue
        side = "speculation" if b > a else "no speculation" if a > b else "equal"
        if last is not None and side != last:
            out.append({f"from_{axis}": float(prev_x), f"to_{axis}": float(x), "cheaper": side})
        last, prev_x = side, x
    return out


@pytest.mark.parametrize("axis", ["tokens_per_s", "request_rate"])
@pytest.mark.parametrize("seed", range(20))
def test_crossings_match_a_brute_force_walk(axis, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))
    xs = np.sort(rng.uniform(1, 1000, n))
    # few prices, so ties and repeated sides are common; some points have no fleet
    with_spec = rng.choice([10.0, 20.0, 30.0], n)
    without = rng.choice([10.0, 20.0, 30.0], n)
    with_spec[rng.random(n) < 0.2] = np.nan
    without[rng.random(n) < 0.2] = np.nan
    assert crossings(xs, with_spec, without, axis) == brute_force(xs, with_spec, without, axis)


def test_a_sweep_with_no_change_has_no_crossing():
    xs = np.array([1.0, 2.0, 3.0])
    assert crossings(xs, np.array([1.0, 1.0, 1.0]), np.array([2.0, 3.0, np.nan])) == []


def test_crossings_by_hand():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    a = np.array([1.0, 1.0, np.nan, 3.0, 2.0])
    b = np.array([2.0, 1.0, 5.0, 2.0, 2.0])
    assert crossings(x, a, b) == [
        {"from_tokens_per_s": 1.0, "to_tokens_per_s": 2.0, "cheaper": "equal"},
        {"from_tokens_per_s": 2.0, "to_tokens_per_s": 4.0, "cheaper": "no speculation"},
        {"from_tokens_per_s": 4.0, "to_tokens_per_s": 5.0, "cheaper": "equal"},
    ]
