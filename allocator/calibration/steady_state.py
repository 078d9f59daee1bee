"""The steady-state relation: a closed-loop benchmark run as one measured engine step.

A run that :func:`allocator.estimate.bench_files.read_bench_files` reads as
**steady-state** (a closed loop: ``max_concurrency`` set, ``request_rate`` infinite, no
ramp-up, lengths not known to vary) becomes one :class:`SteadyState` by Little's law
(:func:`steady_state`), and rows of those for the step-time fit
(:func:`calibration_rows`; docs/design.md §8.7). Reading and checking the files is the
estimate package's; turning them into measured steps is calibration's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..estimate.bench_files import BOUND_SLACK, STEADY, BenchRun
from ..exceptions import InputError

#: Relative disagreement past which the two step times of a run get a note.
NOTE_SPREAD = 0.02
#: Relative disagreement past which the two batch sizes of a run get a note.
BATCH_SPREAD = 0.10


@dataclass(frozen=True)
class SteadyState:
    """One measured step of a steady-state run (:func:`steady_state`).

    ``batch``: sequences decoding in an average engine step (a float); ``step_ms``: the
    time of that step, ms; ``mean_accepted`` ``E``: tokens per sequence per step;
    ``tokens_per_s``: decode tokens/s over the batch (first tokens excluded), so that
    ``step_ms = 1000 · batch · E / tokens_per_s`` (the relation calibrate uses,
    docs/design.md §8.7); ``context``: tokens in each sequence's KV cache, on average;
    ``prefill_tokens``: prompt tokens prefilled per step, on average (they share the
    steps under chunked prefill, and ``step_ms`` includes them); ``verified_tokens``: as
    in :class:`BenchRun`. ``step_ms_tpot`` = ``TPOT · E`` and ``batch_from_concurrency``
    are the same quantities reached another way, for checking.
    """

    source: str
    k: int
    batch: float
    step_ms: float
    mean_accepted: float
    tokens_per_s: float
    context: float
    prefill_tokens: float
    verified_tokens: float | None
    step_ms_tpot: float
    batch_from_concurrency: float | None
    notes: tuple[str, ...] = field(default_factory=tuple)


def steady_state(run: BenchRun) -> SteadyState:
    """The measured step of a closed-loop run (``run.kind == "steady-state"``).

    Notation: ``λ`` = ``completed / duration`` requests/s, ``I`` and ``O`` the mean input
    and output tokens, ``TTFT``, ``TPOT``, ``E2EL`` the mean times (ms), ``E`` =
    ``mean_accepted`` (1 with speculation off), ``c`` = ``max_concurrency``.

    - **Decode time per request** ``D = E2EL − TTFT`` when the mean end-to-end latency is
      recorded (SGLang always; vLLM with ``e2el`` in ``--percentile-metrics``), else
      ``TPOT · (O − 1)`` (equal for fixed output lengths: TPOT is the mean over requests of
      ``(latency − TTFT) / (O − 1)``).
    - **Batch**: by Little's law the time-average number of sequences decoding is
      ``b = λ · D / 1000`` — the requests in flight, ``λ · E2EL / 1000`` (``c`` while the
      client keeps ``c`` in flight), less the share of their time spent before the
      first token (queueing and prefill): ``b = c · (1 − TTFT / E2EL)`` for a loop that is
      always full, which is ``batch_from_concurrency``. The Little form also counts the
      ramp-down at the end of a run.
    - **Tokens/s**: the decode tokens, ``λ · (O − 1)`` (each request's first token comes
      from its prefill).
    - **Step**: ``step_ms = 1000 · b · E / tokens_per_s = D · E / (O − 1)``, the time of one
      engine step, each decoding sequence gaining ``E`` tokens per step; for fixed
      lengths that is ``TPOT · E`` (``step_ms_tpot``; for a chain or a tree alike).
    - **Context** ``I + O / 2``: a sequence's KV cache grows from ``I`` to ``I + O`` while
      it decodes. **Prefill per step** ``λ · I · step_ms / 1000`` prompt tokens.

    Assumptions: every running sequence takes part in every engine step (continuous
    batching); the step time is read at the time-average batch and context, exact for a
    step time affine in both; ``E`` is the server's average over the run (SGLang's since
    start or the last ``/flush_cache``); prefill shares the steps (chunked prefill) and
    is inside ``step_ms`` — the row says how much, so a model with a prefill term can
    use it; prefix-cache hits are counted as prefill; the last round's tokens past the
    length limit are ignored.
    """
    if run.kind != STEADY:
        raise InputError(
            run.source,
            "a run at a request rate (or ramp-up, or varied lengths) has no steady state; "
            "it needs the serving simulator",
        )
    notes: list[str] = []
    o, i = run.mean_output, run.mean_input
    if o <= 1.0:
        raise InputError(run.source, f"mean output {o:g} tokens: no decode steps to time")
    if run.mean_accepted is None:
        raise InputError(run.source, "speculation ran but its acceptance length is not recorded")
    e = run.mean_accepted
    tpot = run.tpot_ms.get("mean")
    ttft = run.ttft_ms.get("mean")
    if tpot is None or ttft is None:
        raise InputError(
            run.source, "needs mean_ttft_ms and mean_tpot_ms (--percentile-metrics ttft,tpot)"
        )
    lam = run.completed / run.duration_s
    e2el = run.e2el_ms.get("mean")
    if e2el is not None:
        if e2el < ttft:
            raise InputError(run.source, f"mean end-to-end latency {e2el:g} ms < TTFT {ttft:g}")
        decode_ms = e2el - ttft
    else:
        decode_ms = tpot * (o - 1.0)
    batch = lam * decode_ms / 1000.0
    tokens = lam * (o - 1.0)
    step = 1000.0 * batch * e / tokens
    step_tpot = tpot * e
    full = None
    if run.max_concurrency is not None and decode_ms + ttft > 0:
        c = min(run.max_concurrency, run.num_prompts or run.max_concurrency)
        full = c * decode_ms / (decode_ms + ttft)
        if batch > c * (1 + BOUND_SLACK):
            raise InputError(
                run.source,
                f"{batch:.4g} sequences decoding on average, more than the concurrency {c}: "
                "the times and counts disagree",
            )
        if abs(full - batch) > BATCH_SPREAD * full:
            notes.append(
                f"batch {batch:.4g} from Little's law, {full:.4g} from a full loop of {c}: "
                "the client left slots idle (ramp-down, failures, few prompts)"
            )
    if abs(step_tpot - step) > NOTE_SPREAD * step:
        notes.append(f"TPOT x E gives {step_tpot:.4g} ms, the counts {step:.4g}: lengths vary")
    return SteadyState(
        source=run.source,
        k=run.k,
        batch=batch,
        step_ms=step,
        mean_accepted=e,
        tokens_per_s=tokens,
        context=i + o / 2.0,
        prefill_tokens=lam * i * step / 1000.0,
        verified_tokens=run.verified_tokens,
        step_ms_tpot=step_tpot,
        batch_from_concurrency=full,
        notes=tuple(notes),
    )


def calibration_rows(runs: Sequence[BenchRun]) -> list[dict]:
    """``calibrate``'s measured rows from the steady-state runs (rate runs left out):
    ``drafters`` (the run's ``drafter``, empty at ``k = 0``), ``k``, ``batch`` (a
    float), ``tokens_per_s`` (decode), ``mean_accepted``, plus ``verified_tokens``
    (``k + 1`` for a chain drafting every position; a tree's node count), ``topk``,
    ``context``, ``prefill_tokens`` and ``source``. A speculative run without a drafter
    is refused (name it: ``read_bench_files(..., drafter=NAME)``), and so is an adaptive
    run, whose ``k`` changes from round to round."""
    rows = []
    for run in runs:
        if run.kind != STEADY:
            continue
        if run.k > 0 and run.drafter is None:
            raise InputError(run.source, "a speculative run needs its drafter's name")
        if run.adaptive:
            raise InputError(
                run.source, "an adaptive run drafts a different k from round to round: no row"
            )
        s = steady_state(run)
        rows.append(
            {
                "source": run.source,
                "drafters": run.drafter if run.k > 0 else "",
                "k": run.k,
                "batch": s.batch,
                "tokens_per_s": s.tokens_per_s,
                "mean_accepted": s.mean_accepted,
                "verified_tokens": s.verified_tokens,
                "topk": run.topk,
                "context": s.context,
                "prefill_tokens": s.prefill_tokens,
            }
        )
    return rows


__all__ = ["BATCH_SPREAD", "NOTE_SPREAD", "SteadyState", "calibration_rows", "steady_state"]
