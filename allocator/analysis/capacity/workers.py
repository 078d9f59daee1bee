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

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ...exceptions import ParameterError

#: Most local worker processes accepted.
MAX_WORKERS = 256
#: Jobs sent at a time to a Ray cluster, whose size is not asked.
RAY_WAVE = 8


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
        progress: Callable[[int, int], None] | None = None,
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
        #: called with the jobs done so far and the total expected, after each job
        self.progress = progress
        self.done = 0
        self._pool: Any = None
        self._ray: Any = None
        self._remote: dict[Callable, Any] = {}
        self._pool_shared: Any = None
        self._ray_shared: tuple[Any, Any] | None = None
        #: the jobs expected in all (grows as maps are asked for; :meth:`expect`)
        self.total = 0

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
    def wave(self) -> int:
        """Jobs worth sending at a time: one per local worker (on Ray, :data:`RAY_WAVE`)."""
        return RAY_WAVE if self.ray_address is not None else self.workers

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
    def expect(self, jobs: int) -> None:
        """Count ``jobs`` more jobs (negative: fewer) in the total that progress reports:
        the caller's estimate of the work left, kept as exact as it knows."""
        self.total = max(self.done, self.total + int(jobs))
        if self.progress is not None:
            self.progress(self.done, self.total)

    def map(self, fn: Callable[..., Any], jobs: Sequence[Any], shared: Any = None) -> list[Any]:
        """``[fn(job) for job in jobs]`` (with ``shared``: ``[fn(shared, job) ...]``), run
        where this pool runs, in the order given; progress is reported as each job ends,
        in whatever order they end. ``shared`` (the problem and the requests every job
        reads) is sent once to each worker process (its initializer) or put once in Ray's
        object store, not with every job. ``fn`` must be a module-level function (it is
        sent to the workers by name)."""
        jobs = list(jobs)
        if not jobs:
            return []
        if self.total < self.done + len(jobs):
            self.total = self.done + len(jobs)
        if self.ray_address is not None:
            return self._map_ray(fn, jobs, shared)
        if self.workers == 1 or len(jobs) == 1:
            results = []
            for job in jobs:
                results.append(fn(job) if shared is None else fn(shared, job))
                self._tick(1)
            return results
        from concurrent.futures import as_completed

        pool = self._local_pool(shared)
        futures = {pool.submit(_run_shared, fn, job): n for n, job in enumerate(jobs)}
        got: list[Any] = [None] * len(jobs)
        for f in as_completed(futures):
            got[futures[f]] = f.result()
            self._tick(1)
        return got

    def _tick(self, n: int) -> None:
        self.done += n
        self.total = max(self.total, self.done)
        if self.progress is not None:
            self.progress(self.done, self.total)

    def _local_pool(self, shared: Any = None):
        if self._pool is not None and self._pool_shared is not shared:
            self._pool.shutdown(wait=True)  # another context: workers start again with it
            self._pool = None
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            method = "fork" if sys.platform.startswith("linux") else "spawn"
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context(method),
                initializer=_set_shared,
                initargs=(shared,),
            )
            self._pool_shared = shared
        return self._pool

    def _map_ray(self, fn: Callable[..., Any], jobs: list[Any], shared: Any) -> list[Any]:
        ray = self._connect()
        task = fn if shared is None else _run_with
        remote = self._remote.get(task)
        if remote is None:
            remote = ray.remote(task)
            self._remote[task] = remote
        if shared is None:
            refs = [remote.remote(job) for job in jobs]
        else:
            if self._ray_shared is None or self._ray_shared[0] is not shared:
                self._ray_shared = (shared, ray.put(shared))  # once, not with every job
            refs = [remote.remote(fn, self._ray_shared[1], job) for job in jobs]
        index = {ref: n for n, ref in enumerate(refs)}
        got: list[Any] = [None] * len(jobs)
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                got[index[ref]] = ray.get(ref)
                self._tick(1)
        return got

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


#: The context of the jobs on a worker process (:meth:`Workers.map`'s ``shared``).
_SHARED: Any = None


def _set_shared(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _run_shared(fn: Callable[..., Any], job: Any) -> Any:
    return fn(job) if _SHARED is None else fn(_SHARED, job)


def _run_with(fn: Callable[..., Any], shared: Any, job: Any) -> Any:
    return fn(shared, job)


__all__ = ["MAX_WORKERS", "RAY_WAVE", "Workers", "default_workers"]
