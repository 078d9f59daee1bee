"""Where independent simulations run: in this process, on local worker processes, or on a
Ray cluster. The same jobs give the same results wherever they run.

A capacity search (:mod:`allocator.analysis.capacity.by_rate`) is a set of independent jobs (one
configuration searched at one load, one rate bisected, ...), each a pure function of its
arguments: every draw is seeded by the job's own seed. :class:`Workers` runs a list of jobs
and returns their results in the order given, so which worker ran which job never shows in
an answer.

* ``workers = 1``: in this process, one job after the other.
* ``workers = N > 1`` (default: the CPUs this process may use, see :func:`default_workers`):
  a pool of local processes (``concurrent.futures.ProcessPoolExecutor``), forked on Linux:
  a worker starts at once, with what this process has imported, and does not import the
  caller's ``__main__`` again (``spawn`` and ``forkserver`` do, which breaks a script
  without an ``if __name__ == "__main__":`` guard); the jobs run numpy and the simulator
  only. Elsewhere ``spawn``, where a script needs that guard, as Python documents.
* ``ray = ADDRESS``: tasks on a Ray cluster (``ray.init(address=ADDRESS)``; ``"local"``
  starts one on this machine). Needs the optional extra ``allocator[ray]``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from ...exceptions import ParameterError

#: Most local worker processes accepted.
MAX_WORKERS = 256


def default_workers() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one), at
    least 1: simulations are CPU-bound and independent, so one process per CPU keeps every
    CPU busy and no more adds anything."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Workers:
    """Run jobs here, on local processes or on Ray (module docstring). Use as a context
    manager; :meth:`map` may be called many times on one pool."""

    def __init__(
        self,
        workers: int | None = None,
        ray: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise ParameterError("workers", f"must be an integer >= 1, got {workers!r}")
        if workers is not None and workers > MAX_WORKERS:
            raise ParameterError("workers", f"at most {MAX_WORKERS}, got {workers}")
        if ray is not None and workers is not None:
            raise ParameterError("workers", "give local workers or a Ray cluster (ray), not both")
        self.ray_address = ray
        self.workers = default_workers() if workers is None else workers
        #: called with the number of jobs done so far, after each job (a progress bar)
        self.progress = progress
        self.done = 0
        self._pool: Any = None
        self._ray: Any = None
        self._remote: dict[Callable, Any] = {}

    # ------------------------------------------------------------ lifetime
    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    @property
    def where(self) -> str:
        """Where jobs run, for a note: ``in this process``, ``on 4 local processes`` or
        ``on the Ray cluster at ADDRESS``."""
        if self.ray_address is not None:
            return f"on the Ray cluster at {self.ray_address}"
        if self.workers == 1:
            return "in this process"
        return f"on {self.workers} local processes"

    # ------------------------------------------------------------ running
    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> list[Any]:
        """``[fn(job) for job in jobs]``, run where this pool runs, in the order given.
        ``fn`` must be a module-level function (it is sent to the workers by name)."""
        jobs = list(jobs)
        if not jobs:
            return []
        if self.ray_address is not None:
            results = self._map_ray(fn, jobs)
            self._tick(len(results))
            return results
        if self.workers == 1 or len(jobs) == 1:
            it = (fn(job) for job in jobs)
        else:
            it = self._local_pool().map(fn, jobs)
        results = []
        for r in it:  # in the order given, each reported as it is collected
            results.append(r)
            self._tick(1)
        return results

    def _tick(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done)

    def _local_pool(self):
        if self._pool is None:
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context(method)
            )
        return self._pool

    def _map_ray(self, fn: Callable[[Any], Any], jobs: list[Any]) -> list[Any]:
        ray = self._connect()
        remote = self._remote.get(fn)
        if remote is None:
            remote = ray.remote(fn)
            self._remote[fn] = remote
        return list(ray.get([remote.remote(job) for job in jobs]))

    def _connect(self):
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError:
            raise ParameterError(
                "ray",
                "Ray is not installed: install the optional extra, pip install 'allocator[ray]'",
            ) from None
        address = self.ray_address
        try:
            if not ray.is_initialized():
                if address in ("local", ""):
                    ray.init(include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, log_to_driver=False)
        except Exception as exc:  # ray raises ConnectionError, RuntimeError, ValueError ...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ParameterError(
                "ray", f"cannot reach a Ray cluster at {address!r}: {first}"
            ) from None
        self._ray = ray
        return ray


__all__ = ["MAX_WORKERS", "Workers", "default_workers"]
