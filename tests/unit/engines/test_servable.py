"""What an engine can run: one drafter per server, by a method it serves."""

import pytest

from allocator import api
from allocator.engines import POOLED_BOUND, servable
from allocator.exceptions import InfeasibleError, ParameterError

PROBLEM = {
    "name": "three",
    "convention": "bonus",
    "drafters": [
        {"name": "a", "acceptance": 0.7, "unit_cost": 0.05, "method": "eagle3", "model": "m/a"},
        {"name": "b", "acceptance": 0.6, "unit_cost": 0.02, "method": "ngram"},
        {"name": "c", "acceptance": 0.5, "unit_cost": 0.01},
    ],
    "search": {"k": {"min": 1, "max": 8}},
}


def test_one_drafter_per_server_and_the_pooled_bound_labelled():
    problem = api.load(PROBLEM)
    assert problem.m_max == 3
    one, notes = servable(problem, "vllm")
    assert (one.m_min, one.m_max) == (1, 1) and "one drafter per server" in notes[0]
    front = api.solve(one).front
    assert all(int(m.sum()) == 1 for m in front.members)
    pooled, notes = servable(problem, "sglang", pooled=True)
    assert pooled is problem and notes == [POOLED_BOUND]
    # the unrestricted front pools drafters: the restriction is what changes it
    assert any(int(m.sum()) > 1 for m in api.solve(problem).front.members)


def test_a_space_with_no_single_drafter_is_refused_by_name():
    data = dict(PROBLEM, search={"m": {"min": 2}})
    with pytest.raises(InfeasibleError) as info:
        servable(api.load(data), "vllm")
    assert info.value.field == "search.m.min"
    data = dict(PROBLEM, search={"require": ["a", "b"]})
    with pytest.raises(InfeasibleError) as info:
        servable(api.load(data), "vllm")
    assert info.value.field == "search.require"
    with pytest.raises(ParameterError) as info:
        servable(api.load(PROBLEM), "tgi")
    assert info.value.field == "engine"
