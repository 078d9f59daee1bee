"""``allocator capacity --request-rate R --slo ... --disaggregated``: the fewest prefill and
decode replicas (``P + D``) serving ``R`` requests/s with every SLO met, each split
simulated (:mod:`allocator.analysis.disagg_bench`), for one decode configuration.

**Sustains.** A split ``(P, D)`` sustains ``R`` when its run at ``R`` meets every SLO (as
capacity reads them, :mod:`allocator.analysis.capacity.slo`) and the same requests sent at
once (``request_rate = inf``) complete at ``R`` requests/s or more (its saturation
throughput, so that a latency ceiling met over a finite run cannot hide a queue growing
without bound), as capacity for a rate defines it for one replica.

**Search.** Exhaustive over the splits with ``P + D ≤ max_total``, by total: every split
of the smallest total ``T`` is simulated before any of ``T + 1``, and the answer is a
split of the smallest ``T`` that has one that sustains ``R`` (ties: the least largest ratio
of an SLO's value to its ceiling, then fewer prefill replicas). No monotonicity is
assumed. One bound prunes without simulating: a prefill replica's steps prefill ``c``
tokens in ``step_ms(0, 0, 0, c)`` at best, so it completes at most ``1000 / (mean prompt ·
min_c step_ms(0, 0, 0, c) / c)`` requests/s, and ``P`` below ``R`` over that is left out
(not when prompts share tokens: a prefix-cache hit computes fewer).
The simulations run in this process, one after another.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..exceptions import InputError, ParameterError
from ..sim import metric
from ..validate import whole
from .bench import plain_metrics
from .capacity.slo import SLO, clock_ms
from .disagg_bench import bench_disagg
from .replica import Configuration, replica

if TYPE_CHECKING:
    from ..core.problem import Problem
    from .bench import BenchResult
    from .request_source import RequestSource

#: Most replicas (prefill and decode together) the search tries by default.
DEFAULT_MAX_TOTAL = 16


@dataclass
class DisaggCapacity:
    """The split found: ``prefill_replicas``, ``decode_replicas``, its run at the rate
    (``metrics`` under bench's keys, ``ttft_parts_ms``), ``tried``: every split simulated,
    in order, each ``{prefill_replicas, decode_replicas, meets_slo, sustains,
    worst_slo_ratio}``; ``bench_command`` the ``allocator bench`` line giving the run."""

    prefill_replicas: int
    decode_replicas: int
    gpus_per_replica: int
    cost_per_hour: float | None
    metrics: dict
    ttft_parts_ms: dict
    tried: list[dict]
    bench_command: str
    notes: list[str] = field(default_factory=list)

    def document(self) -> dict:
        total = self.prefill_replicas + self.decode_replicas
        return {
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "gpus": total * self.gpus_per_replica,
            "cost_per_hour": self.cost_per_hour,
            "metrics": self.metrics,
            "ttft_parts_ms": self.ttft_parts_ms,
            "tried": self.tried,
            "bench_command": self.bench_command,
            "notes": list(self.notes),
        }


def worst_ratio(result: BenchResult, slos: Sequence[SLO]) -> tuple[bool, float]:
    """Whether the run meets every SLO, and the largest ratio of a value to its ceiling."""
    clock = clock_ms(result.result)
    ok, worst = True, 0.0
    for s in slos:
        value = metric(result.result, s.key)
        ok = ok and s.met(value, clock)
        worst = max(worst, value / s.ceiling_ms)
    return ok, worst


def least_prefill_replicas(
    problem: Problem, source: RequestSource, rate: float, seqs: int | None
) -> int:
    """The prefill replicas below which the prefill pool cannot complete ``rate``
    requests/s (module docstring), at least 1."""
    rep = replica(problem, Configuration.off(problem.names), seqs)
    pre = np.asarray(rep.step.pre, dtype=float)[1:]
    tokens = np.arange(1, pre.size + 1)
    ok = np.isfinite(pre) & (pre > 0)
    if not ok.any() or not math.isfinite(rate) or source.content is not None:
        return 1  # (prompts sharing tokens may hit the prefix cache: no bound)
    ms_per_token = float((pre[ok] / tokens[ok]).min())
    per_replica = 1000.0 / (float(np.mean(source.prompt_tokens)) * ms_per_token)
    return max(1, math.ceil(rate / per_replica * (1 - 1e-12)))


def disagg_bench_command(
    problem_path: str, config: Configuration, p: int, d: int, rate: float, source: RequestSource,
    n: int, seed: int, p_seqs: int | None, d_seqs: int | None, link: str | None, router: str | None,
) -> str:  # fmt: skip
    """The ``allocator bench`` command that gives a split's run."""
    words = ["allocator", "bench", problem_path]
    if config.speculative:
        words += ["--drafters", ",".join(config.drafters)]
        words += ["--k", str(config.k)] if config.k is not None else ["--schedule"]
    words += ["--request-rate", repr(float(rate))]
    if source.trace is not None:
        words += ["--trace", source.trace]
    elif source.lengths:
        words += [*source.lengths, "--burstiness", repr(float(source.burstiness))]
    else:
        words += [
            "--input-len", str(int(source.prompt_tokens[0])),
            "--output-len", str(int(source.output_tokens[0])),
            "--burstiness", repr(float(source.burstiness)),
        ]  # fmt: skip
    words += list(source.flags)
    words += ["--num-prompts", str(n), "--seed", str(seed)]
    words += ["--prefill-replicas", str(p), "--decode-replicas", str(d)]
    if p_seqs is not None:
        words += ["--prefill-max-num-seqs", str(p_seqs)]
    if d_seqs is not None:
        words += ["--decode-max-num-seqs", str(d_seqs)]
    if link is not None:
        words += ["--kv-link", link]
    if router is not None:
        words += ["--router", router]
    return shlex.join(words)


def size_disaggregated(
    problem: Problem,
    source: RequestSource,
    config: Configuration,
    rate: float,
    slos: Sequence[SLO],
    *,
    max_total: int = DEFAULT_MAX_TOTAL,
    prefill_max_num_seqs: int | None = None,
    decode_max_num_seqs: int | None = None,
    kv_link: str | None = None,
    router: str | None = None,
    seed: int = 0,
    problem_path: str = "PROBLEM",
) -> DisaggCapacity:
    """The fewest ``P + D`` sustaining ``rate`` requests/s (module docstring) with the
    decode pool running ``config``. ``InputError`` on ``slo`` when no split within
    ``max_total`` does, naming the closest; ``ParameterError`` on ``max_total`` (an integer
    from 2)."""
    if not slos:
        raise ParameterError("slo", "missing: at least one SLO, KEY=MS")
    top = whole(max_total, "max_total", lo=2, hi=1024)
    p_min = least_prefill_replicas(problem, source, rate, prefill_max_num_seqs)
    tried: list[dict] = []
    found: list[tuple[float, int, int, BenchResult]] = []
    closest: tuple[float, int, int] | None = None

    def run(p: int, d: int, r: float) -> BenchResult:
        return bench_disagg(
            problem, source, config, r, prefill_replicas=p, decode_replicas=d,
            kv_link_name=kv_link, router=router, prefill_max_num_seqs=prefill_max_num_seqs,
            decode_max_num_seqs=decode_max_num_seqs, seed=seed,
        )  # fmt: skip

    for total in range(max(2, p_min + 1), top + 1):
        for p in range(p_min, total):
            d = total - p
            res = run(p, d, rate)
            meets, worst = worst_ratio(res, slos)
            sustains = False
            if meets:
                saturated = run(p, d, math.inf)
                sustains = float(saturated.metrics["request_throughput"]) >= rate
            tried.append(
                {
                    "prefill_replicas": p,
                    "decode_replicas": d,
                    "meets_slo": meets,
                    "sustains": sustains,
                    "worst_slo_ratio": worst,
                }
            )
            if sustains:
                found.append((worst, p, d, res))
            elif closest is None or worst < closest[0]:
                closest = (worst, p, d)
        if found:
            break
    if not found:
        where = "" if closest is None else (
            f"; the closest, {closest[1]} prefill + {closest[2]} decode, reaches "
            f"{closest[0]:.3g} times a ceiling (or misses the rate at saturation)"
        )  # fmt: skip
        raise InputError(
            "slo",
            f"no split of at most {top} replicas (prefill at least {p_min} for the rate) "
            f"sustains {rate:g} requests/s with every SLO met{where}",
        )
    worst, p, d, res = min(found, key=lambda f: (f[0], f[1]))
    serving = problem.serving
    price = None if serving is None else serving.gpu_cost_per_hour
    gpus = 1 if serving is None else int(serving.gpus_per_replica)
    assert res.disagg is not None
    return DisaggCapacity(
        prefill_replicas=p,
        decode_replicas=d,
        gpus_per_replica=gpus,
        cost_per_hour=None if price is None else (p + d) * float(price),
        metrics=plain_metrics(res.metrics),
        ttft_parts_ms=res.disagg["ttft_parts_ms"],
        tried=tried,
        bench_command=disagg_bench_command(
            problem_path,
            config,
            p,
            d,
            rate,
            source,
            len(res.result.requests),
            seed,
            prefill_max_num_seqs,
            decode_max_num_seqs,
            kv_link,
            router,
        ),  # fmt: skip
        notes=[
            f"disaggregated: {p} prefill + {d} decode replicas, the fewest of "
            f"{len(tried)} splits simulated (every split of each total up to the answer's; "
            f"prefill replicas from {p_min}, below which the prefill pool cannot complete "
            "the rate)"
        ],
    )


__all__ = [
    "DEFAULT_MAX_TOTAL",
    "DisaggCapacity",
    "disagg_bench_command",
    "least_prefill_replicas",
    "size_disaggregated",
    "worst_ratio",
]
