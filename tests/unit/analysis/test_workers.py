"""Workers: results in the order given wherever they run, and progress counted per job."""

from __future__ import annotations

import pytest

from allocator.analysis.capacity.workers import Workers
from allocator.exceptions import ParameterError


def square(x: int) -> int:
    return x * x


@pytest.mark.parametrize("workers", [1, 2])
def test_results_in_order_and_progress_counts_every_job(workers):
    seen: list[int] = []
    with Workers(workers, progress=lambda done, total: seen.append(done)) as pool:
        assert pool.map(square, range(7)) == [x * x for x in range(7)]
        assert pool.map(square, [3]) == [9]
        assert pool.map(square, []) == []
    # one call per job, counting across maps, never skipping or repeating a count
    assert seen == list(range(1, 9))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 257])
def test_bad_worker_counts_are_refused_by_name(bad):
    with pytest.raises(ParameterError) as exc:
        Workers(bad)
    assert exc.value.field == "workers"
