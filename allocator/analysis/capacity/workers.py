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

**A Ray address fails fast.** Before ``ray.init`` (which retries a refused or silent
address for minutes, logging as it goes), the address's host is resolved and its port
(``HOST:PORT``; ``ray://HOST[:10001]`` for Ray Client; the GCS port 6379 when none is
given) connected to, each within :data:`RAY_PROBE_S` seconds
(:func:`probe_ray_address`): a refused, unroutable or unresolvable address is one
:class:`ParameterError` naming ``ray`` within :data:`RAY_PROBE_S` · 2 seconds. A port
that answers but is not Ray's ends ``ray.init`` after :data:`RAY_INIT_S` seconds
(``SIGALRM``, in the main thread). Ray's Python logging is turned down to errors, what
its C++ core writes to stderr while ``ray.init`` runs is dropped, and only the first line
of its error is kept. A
``user:password@`` in the address is never shown (:func:`~allocator.io.quoting.
mask_userinfo`).

**No worker outlives its parent.** Each local worker process, on Linux, asks the kernel
to send it ``SIGTERM`` when its parent dies (``prctl(PR_SET_PDEATHSIG)``, even after a
``SIGKILL`` of the parent), checks that its parent is still the process that started it
(the parent may have died before the request), takes ``SIGTERM``'s default action (the
parent's handler is not inherited) and ignores ``SIGINT`` (a Ctrl-C reaches the whole
process group: the parent ends the pool). When :meth:`Workers.map` is left by an
exception (a ``KeyboardInterrupt``, the ``SystemExit`` of the command line's ``SIGTERM``
handler), the pool's processes are terminated rather than waited on.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from ...exceptions import ParameterError
from ...io.quoting import mask_userinfo
from ...validate import whole

#: Most local worker processes accepted.
MAX_WORKERS = 256
#: Seconds a Ray address's host may take to resolve, and its port to answer.
RAY_PROBE_S = 5.0
#: Seconds ``ray.init`` may take to join a cluster whose port answered.
RAY_INIT_S = 30.0
#: Ray's ports when the address gives none: the GCS's, and Ray Client's (``ray://``).
RAY_GCS_PORT = 6379
RAY_CLIENT_PORT = 10001
#: Addresses ``ray.init`` resolves itself (a cluster on this machine), not probed.
RAY_LOCAL = ("", "local", "auto")
_PR_SET_PDEATHSIG = 1


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """The ``(host, port)`` a Ray ``address`` connects to first (``None`` for
    :data:`RAY_LOCAL`): ``HOST:PORT``, ``[IPv6]:PORT``, ``HOST`` (the GCS port) or
    ``ray://[USER@]HOST[:PORT]`` (Ray Client's port); a ``ParameterError`` naming ``ray``
    for anything else."""
    text = address.strip()
    if text in RAY_LOCAL:
        return None
    client = text.startswith("ray://")
    rest = text.removeprefix("ray://").split("/", 1)[0].rpartition("@")[2]
    default = RAY_CLIENT_PORT if client else RAY_GCS_PORT
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail.removeprefix(":") if tail.startswith(":") else ("" if not tail else "x")
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host, port_text = rest, ""
    try:
        port = int(port_text) if port_text else default
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536 or any(c.isspace() for c in host):
        raise ParameterError(
            "ray",
            f"{mask_userinfo(address)!r} is not a Ray address: HOST:PORT, ray://HOST:PORT "
            "or 'local'",
        )
    return host, port


def probe_ray_address(address: str, timeout: float = RAY_PROBE_S) -> None:
    """Resolve the host of ``address`` and connect to its port (:func:`ray_endpoint`),
    each within ``timeout`` seconds; a ``ParameterError`` naming ``ray`` saying why not
    (unresolvable, refused, no answer). Nothing is sent: the connection is closed at
    once."""
    endpoint = ray_endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    shown = mask_userinfo(address)
    found: list[Any] = []

    def resolve() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            found.append(exc)

    thread = threading.Thread(target=resolve, daemon=True)  # getaddrinfo has no timeout
    thread.start()
    thread.join(timeout)
    if not found:
        raise ParameterError(
            "ray",
            f"cannot reach a Ray cluster at {shown!r}: {host} did not resolve within {timeout:g} s",
        )
    if isinstance(found[0], BaseException):
        raise ParameterError(
            "ray", f"cannot reach a Ray cluster at {shown!r}: cannot resolve host {host!r}"
        )
    why = "no address"
    for family, kind, proto, _, where in found[0][:2]:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(where)
            return
        except ConnectionRefusedError:
            why = f"connection refused at port {port} (is the head node's Ray started?)"
        except TimeoutError:
            why = f"no answer from port {port} within {timeout:g} s (unroutable or filtered)"
        except OSError as exc:
            why = f"port {port}: {exc.strerror or exc}"
        finally:
            sock.close()
    raise ParameterError("ray", f"cannot reach a Ray cluster at {shown!r}: {why}")


class _Late(BaseException):
    """Raised in the main thread when :func:`_deadline` passes."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Within (in the main thread, where there is ``SIGALRM``): :class:`_Late` is raised
    after ``seconds``: ``ray.init`` retries an open port that is not Ray's for minutes."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def late(signum: int, frame: object) -> None:
        raise _Late

    before = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Within: the process's stderr (descriptor 2) goes to ``/dev/null``: Ray's C++ core
    logs a line per retry there, whatever Python's logging level."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _worker_start(parent: int) -> None:
    """Run first in each local worker (module docstring): die with the parent."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


#: Jobs sent at a time to a Ray cluster before it is joined (then: one per CPU it has).
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
        if workers is not None:
            workers = whole(workers, "workers", lo=1, hi=MAX_WORKERS)
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
        self._ray_cpus = 0
        #: the jobs expected in all (grows as maps are asked for; :meth:`expect`)
        self.total = 0

    # ------------------------------------------------------------ lifetime
    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(terminate=kind is not None)

    def close(self, terminate: bool = False) -> None:
        """Shut the local pool down: waiting for its processes, or (``terminate``, when
        leaving on an exception) ending them at once."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        if terminate:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                if proc.is_alive():
                    proc.terminate()
        # waiting is quick once they are ended, and lets the pool's own thread finish
        # before the interpreter's exit handlers run (else one writes to a closed pipe)
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except RuntimeError:  # ended while the pool was starting its thread: none to join
            pool.shutdown(wait=False, cancel_futures=True)

    @property
    def wave(self) -> int:
        """Jobs worth sending at a time: one per local worker; on Ray, one per CPU of the
        cluster once joined (:data:`RAY_WAVE` before; the pruning of a search is exact, so
        its answer does not depend on it)."""
        if self.ray_address is not None:
            return self._ray_cpus or RAY_WAVE
        return self.workers

    @property
    def where(self) -> str:
        """Where jobs run, for a note: ``in this process``, ``on 4 local processes`` or
        ``on the Ray cluster at ADDRESS``."""
        if self.ray_address is not None:
            return f"on the Ray cluster at {mask_userinfo(self.ray_address)}"
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

        pool = self._local_pool(shared)
        futures = {pool.submit(_run_shared, fn, job): n for n, job in enumerate(jobs)}
        got: list[Any] = [None] * len(jobs)
        try:
            for f in as_completed(futures):  # each reported as it ends
                got[futures[f]] = f.result()
                self._tick(1)
        except BaseException:
            self.close(terminate=True)  # an interrupt: the workers end with it
            raise
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
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context(method),
                initializer=_worker_init,
                initargs=(os.getpid(), shared),
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
        assert self.ray_address is not None
        probe_ray_address(self.ray_address)  # before Ray's minutes of retries
        try:
            import ray
        except ImportError:
            raise ParameterError(
                "ray",
                "Ray is not installed: install the optional extra, pip install 'allocator[ray]'",
            ) from None

        address = self.ray_address
        assert address is not None
        quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
        try:
            if not ray.is_initialized():
                with _deadline(RAY_INIT_S), _quiet_stderr():
                    if address.strip() in ("local", ""):
                        ray.init(include_dashboard=False, **quiet)
                    else:
                        ray.init(address=address, **quiet)
        except _Late:
            raise ParameterError(
                "ray",
                f"cannot reach a Ray cluster at {mask_userinfo(address)!r}: its port answers "
                f"but no Ray cluster did within {RAY_INIT_S:g} s (is it Ray's GCS port?)",
            ) from None
        except Exception as exc:  # ray raises ConnectionError, RuntimeError, ValueError ...
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            first = mask_userinfo(first.replace(address, mask_userinfo(address)))
            raise ParameterError(
                "ray", f"cannot reach a Ray cluster at {mask_userinfo(address)!r}: {first}"
            ) from None
        self._ray = ray
        self._ray_cpus = max(1, int(ray.cluster_resources().get("CPU", RAY_WAVE)))
        return ray


#: The context of the jobs on a worker process (:meth:`Workers.map`'s ``shared``).
_SHARED: Any = None


def _worker_init(parent: int, shared: Any) -> None:
    """A local worker's initializer: die with the parent (:func:`_worker_start`), then
    keep the jobs' shared context (:meth:`Workers.map`)."""
    _worker_start(parent)
    _set_shared(shared)


def _set_shared(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _run_shared(fn: Callable[..., Any], job: Any) -> Any:
    return fn(job) if _SHARED is None else fn(_SHARED, job)


def _run_with(fn: Callable[..., Any], shared: Any, job: Any) -> Any:
    return fn(shared, job)


__all__ = [
    "MAX_WORKERS",
    "RAY_INIT_S",
    "RAY_PROBE_S",
    "RAY_WAVE",
    "Workers",
    "default_workers",
    "probe_ray_address",
    "ray_endpoint",
]
