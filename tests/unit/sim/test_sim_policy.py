"""Speculation policies: k and pmf by decode batch size, vLLM's schedule rules."""

from __future__ import annotations

import numpy as np
import pytest

from allocator.exceptions import InputError
from allocator.sim import SpecPolicy

P3 = [0.0, 0.4, 0.3, 0.2, 0.1]
P2 = [0.0, 0.5, 0.3, 0.2]
P0 = [0.0, 1.0]


def test_off_and_fixed():
    off = SpecPolicy.off()
    assert off.k(1) == off.k(500) == 0 and off.lookahead == 0
    fixed = SpecPolicy.fixed(3, P3)
    assert [fixed.k(b) for b in (1, 7, 1000)] == [3, 3, 3]
    assert np.allclose(fixed.pmf(9), P3, rtol=0, atol=1e-15)
    assert fixed.mean_tokens(1) == pytest.approx(0.4 + 0.6 + 0.6 + 0.4)
    assert fixed.lookahead == 3  # vLLM reserves num_speculative_tokens for EAGLE/draft models
    assert SpecPolicy.fixed(3, P3, lookahead_tokens=0).lookahead == 0  # n-gram


def test_schedule_by_batch_size_like_vllm():
    # vLLM's own example (dynamic/utils.py): [(1, 16, 3), (32, 128, 2)] maps 17-31 to K=3
    pol = SpecPolicy.by_batch_size([(1, 16, 3, P3), (32, 128, 2, P2), (129, 129, 0, P0)])
    expected = {1: 3, 16: 3, 17: 3, 31: 3, 32: 2, 128: 2, 129: 0, 130: 0, 4096: 0}
    assert {b: pol.k(b) for b in expected} == expected
    assert np.allclose(pol.pmf(20), P3, rtol=0, atol=1e-15) and np.allclose(
        pol.pmf(64), P2, rtol=0, atol=1e-15
    )
    assert pol.max_k == 3 and pol.lookahead == 3


@pytest.mark.parametrize(
    "entries, field",
    [
        ([(2, 4, 3, P3)], "policy"),  # must start at 1
        ([(1, 4, 3, P3), (4, 8, 2, P2)], "policy"),  # overlapping
        ([(1, 4, 3, P3), (3, 2, 2, P2)], "policy"),  # end < start
        ([(1, 4, 3, P2)], "pmf"),  # wrong length for k = 3
        ([(1, 4, 2, [0.1, 0.4, 0.3, 0.2])], "pmf"),  # pmf[0] != 0
        ([(1, 4, 2, [0.0, 0.5, 0.3, 0.3])], "pmf"),  # sums to 1.1
        ([(1, 4, 2, [0.0, 1.2, -0.2, 0.0])], "pmf"),  # negative
        ([(1, 4, -1, [0.0])], "k"),
        ([], "policy"),
    ],
)
def test_bad_policies(entries, field):
    with pytest.raises(InputError) as err:
        SpecPolicy.by_batch_size(entries)
    assert err.value.field == field


def test_bad_lookahead():
    with pytest.raises(InputError) as err:
        SpecPolicy.fixed(2, P2, lookahead_tokens=-1)
    assert err.value.field == "lookahead_tokens"


def test_pmf_renormalised_within_tolerance():
    p = np.array(P2) * (1 + 1e-12)
    assert SpecPolicy.fixed(2, p).pmf(1).sum() == pytest.approx(1.0, abs=1e-15)
