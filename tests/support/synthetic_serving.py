"""A known roofline step-time model and the bonus-convention acceptance it is paired with:
the truth that synthetic measured rows (``allocator calibrate`` input) are drawn from.

Step times are in ms; ``b`` is the batch size (sequences), ``k`` the draft length.
"""

from __future__ import annotations

PROBLEM = """\
name: synth
convention: bonus
drafters:
  - {name: a, acceptance: [0.8, 0.7, 0.6], unit_cost: 0.05}
  - {name: b, acceptance: 0.6, unit_cost: 0.1}
search: {k: {max: 16}}
"""

#: verifier: fixed ms, ms per sequence, compute ms per verified token; overhead ms per
#: speculative step
V0, V1, C, OVH = 6.0, 0.03, 0.02, 0.3
#: drafting ms per step: (fixed, per sequence) for each drafter
DRAFT = {"a": (0.5, 0.004), "b": (1.2, 0.01)}
#: acceptance by position, as in PROBLEM
ACC = {"a": [0.8, 0.7, 0.6], "b": [0.6]}


def true_expected(names: list[str], k: int) -> float:
    """Bonus-convention tokens per step, independent errors, by a plain loop."""
    total, surv = 1.0, 1.0
    for j in range(k):
        fail = 1.0
        for n in names:
            fail *= 1.0 - ACC[n][min(j, len(ACC[n]) - 1)]
        surv *= 1.0 - fail
        total += surv
    return total


def true_step(
    names: list[str], k: int, b: int, draft: dict[str, tuple[float, float]] = DRAFT
) -> float:
    """Step time (ms) of drafters ``names`` at draft length ``k`` and batch size ``b``:
    the larger of the verifier's fixed and compute-bound times over ``len(names)·k + 1``
    tokens per sequence, plus ``k`` drafting steps and the overhead (``k > 0``)."""
    t = len(names) * k + 1
    verify = max(V0 + V1 * b, C * b * t)
    return verify + k * sum(draft[n][0] + draft[n][1] * b for n in names) + (OVH if k else 0.0)
