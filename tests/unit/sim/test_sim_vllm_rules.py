"""Small vLLM 0.33.0 rules the simulator plays, each against a hand-worked case.

* the ``k`` a step verifies comes from the number of requests the previous step scheduled,
  prefill chunks included (``vllm/v1/core/sched/scheduler.py``, ``schedule``, lines
  1710-1713: ``dynamic_sd_lookup[len(num_scheduled_tokens)]``);
* a token budget below ``max_num_seqs`` is refused (``vllm/config/scheduler.py``,
  ``SchedulerConfig.verify_max_model_len``, lines 331-336), in the simulator's
  :class:`~allocator.sim.Scheduler` and in a problem file's ``serving.scheduler``.
"""

from __future__ import annotations

import pytest

from allocator.exceptions import InputError
from allocator.sim import Requests, Scheduler, SpecPolicy, simulate
from tests.unit.analysis import requests_problem as rp


class Recorder:
    """A constant 1 ms step that records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, b, k, ctx, pf):
        self.calls.append((b, k, ctx, pf))
        return 1.0


ONE = [0.0, 1.0]  # one token a step at k = 0


def test_dynamic_k_counts_the_previous_steps_prefill_chunks():
    """k = 0 at batch 1, k = 3 at batches 2-4, one token a step either way. A (prompt 4,
    output 10) prefills in step 1 and decodes from step 2; B (prompt 40) is sent at 1.5 ms,
    seen in step 3, where A decodes 1 token (step 2 scheduled A alone: k = 0) and B
    prefills the 7 tokens left of the budget of 8. Step 4 scheduled 2 requests, A and B's
    chunk, so A verifies k = 3 (4 tokens) though it is still the only decoding request,
    and B's chunk is the 4 tokens left; so again in step 5."""
    pmf3 = [0.0, 1.0, 0.0, 0.0, 0.0]
    pol = SpecPolicy.by_batch_size([(1, 1, 0, ONE), (2, 4, 3, pmf3)])
    rec = Recorder()
    simulate(
        Requests([0.0, 0.0015], [4, 40], [10, 2]),
        pol,
        rec,
        Scheduler(4, 8, 10**4, async_scheduling=False),
    )
    # (decoding requests, k, their mean computed tokens, prompt tokens prefilled)
    assert rec.calls[:5] == [
        (0, 0, 0.0, 4),
        (1, 0, 4.0, 0),
        (1, 0, 5.0, 7),
        (1, 3, 6.0, 4),
        (1, 3, 7.0, 4),
    ]


def test_a_budget_below_max_num_seqs_is_refused():
    Scheduler(8, 8, 1024, async_scheduling=False)  # equal is allowed
    with pytest.raises(InputError) as err:
        Scheduler(8, 7, 1024, async_scheduling=False)
    assert err.value.field == "max_num_batched_tokens"
    assert "max_num_seqs (8)" in str(err.value)


def test_a_problem_files_budget_below_max_num_seqs_is_refused():
    rp.problem(scheduler={"max_num_seqs": 16, "max_num_batched_tokens": 16})
    with pytest.raises(InputError) as err:
        rp.problem(scheduler={"max_num_seqs": 16, "max_num_batched_tokens": 15})
    assert err.value.field == "serving.scheduler.max_num_batched_tokens"
