"""``auto``: pick a strategy from the error model and the size of the space, and say why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.space import count_subsets
from ..model.errors import gaussian
from .dominance import pruning_blocker
from .knapsack import knapsack_blocker

if TYPE_CHECKING:
    from ..core.problem import Problem

#: Error models whose pooled acceptance for every subset is cheap (closed form,
#: subset sums, quadrature or a zeta transform).
CHEAP_MODELS = ("independent", "exchangeable", "factor", "empirical")
#: Enumerate up to this many subsets under a cheap model (2**22: N = 22, m free) ...
EXACT_MAX_SUBSETS = 1 << 22
#: ... and up to this many under an expensive one (a multivariate normal CDF each).
EXACT_MAX_SUBSETS_EXPENSIVE = 20_000
#: Prefer the knapsack programme to enumeration above this many subsets.
KNAPSACK_FROM = 1 << 16


def scientific(n: int) -> str:
    """A non-negative integer of any size in 3 significant digits (``1.80e+308``):
    Python integers beyond ~1.8e308 (2**1024) overflow ``float``."""
    digits = str(n)
    if len(digits) <= 3:
        return digits
    lead = round(int(digits[:4]) / 10)  # three significant digits, rounded
    exponent = len(digits) - 1
    if lead >= 1000:  # 9995... rounds up to 1000
        lead, exponent = lead // 10, exponent + 1
    text = str(lead)
    return f"{text[0]}.{text[1:]}e+{exponent:02d}"


def choose_strategy(problem: Problem) -> tuple[str, str]:
    """``(name, reason)``: the strategy ``auto`` runs for ``problem``."""
    n_sub = count_subsets(problem)
    k = len(problem.k_values)
    model = getattr(problem.errors, "name", "independent")
    count = f"{n_sub:,}" if n_sub < 10**12 else scientific(n_sub)
    space = f"{count} subsets x {k} draft lengths"
    if n_sub > KNAPSACK_FROM and knapsack_blocker(problem) is None:
        return "knapsack", (
            f"knapsack: {space}; independent errors with one acceptance per drafter make the "
            "Pareto programme over drafters exact and faster than enumeration"
        )
    limit = EXACT_MAX_SUBSETS if model in CHEAP_MODELS else EXACT_MAX_SUBSETS_EXPENSIVE
    if model == "gaussian" and n_sub <= limit:
        integrals, each = gaussian.integration_estimate(problem)
        if integrals * each > gaussian.MAX_SECONDS:
            return "optuna", (
                f"optuna: {space} under gaussian errors need {integrals:,} multivariate normal "
                f"integrals, ~{integrals * each / 60:.0f} min at the ~{each:.2g} s each "
                f"measured (exact search is chosen up to {gaussian.MAX_SECONDS / 60:.0f} min); "
                "the front is heuristic (exact: false)"
            )
    if n_sub <= limit:
        how = "with dominance pruning" if pruning_blocker(problem) is None else "every subset"
        return "exact", f"exact: {space} under {model} errors can be enumerated ({how})"
    return "optuna", (
        f"optuna: {space} under {model} errors are beyond exact enumeration (limit {limit:,}); "
        "the front is heuristic (exact: false)"
    )


__all__ = [
    "CHEAP_MODELS",
    "EXACT_MAX_SUBSETS",
    "EXACT_MAX_SUBSETS_EXPENSIVE",
    "KNAPSACK_FROM",
    "choose_strategy",
    "scientific",
]
