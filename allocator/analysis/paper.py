"""The paper's §4–§5 recomputed from the model, beside the values it prints.

Every number here comes out of :mod:`allocator.model`; the paper's printed values
are kept as the strings the paper shows, so that "differs" means "differs beyond
the paper's own rounding" (half a unit in its last printed digit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._lazy import lazy_module
from ..core.problem import Problem
from ..model.metrics import evaluate_configs, evaluate_subsets

if TYPE_CHECKING:
    from scipy import optimize
else:
    optimize = lazy_module("scipy.optimize")


@dataclass(frozen=True)
class PaperRow:
    """One recomputed quantity. ``paper`` is the printed value (``None``: not printed)."""

    case: str
    section: str
    quantity: str
    value: float
    paper: str | None = None

    @property
    def status(self) -> str:
        if self.paper is None:
            return "new"
        return "ok" if abs(self.value - float(self.paper)) <= rounding(self.paper) else "differs"

    def as_dict(self) -> dict:
        return {
            "case": self.case,
            "section": self.section,
            "quantity": self.quantity,
            "value": self.value,
            "paper": None if self.paper is None else float(self.paper),
            "paper_printed": self.paper,
            "status": self.status,
        }


@dataclass(frozen=True)
class PaperReport:
    """Every recomputed quantity (:func:`reproduce`); ``differs``: how many differ from
    the paper beyond its rounding."""

    rows: list[PaperRow]

    @property
    def differs(self) -> int:
        return sum(r.status == "differs" for r in self.rows)

    def to_dict(self) -> dict:
        """The ``paper --json`` document."""
        return {"rows": [r.as_dict() for r in self.rows], "differs": self.differs}


def rounding(printed: str) -> float:
    """Half a unit in the last printed digit of ``printed`` (plus float slack)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10.0**-decimals * (1 + 1e-9)


def identical_drafters(
    alpha: float, rho: float, m: int, nu: float = 1.0, k_max: int = 64
) -> Problem:
    """``m`` identical independent drafters (acceptance ``alpha``, unit cost ``rho``)."""
    return Problem(
        name=f"{m}x(alpha={alpha}, rho={rho})",
        names=tuple(f"d{i + 1}" for i in range(m)),
        acceptance=np.full((m, 1), alpha),
        unit_cost=np.full(m, rho),
        hosting_cost=np.zeros(m),
        pass_cost=nu,
        k_max=k_max,
    )


def _all(problem: Problem) -> np.ndarray:
    return np.ones((1, problem.n), bool)


def at_k(problem: Problem, k: int) -> dict[str, float]:
    """Metrics of the all-drafters configuration at draft length ``k``."""
    met = evaluate_configs(problem, _all(problem), np.array([k]))
    return {name: float(v[0]) for name, v in met.items()}


def best_k(problem: Problem) -> tuple[int, float]:
    """``(k*, S(k*))`` of the all-drafters configuration over ``problem.k_values``."""
    s = evaluate_subsets(problem, _all(problem))["throughput"][0]
    i = int(np.argmax(s))
    return int(problem.k_values[i]), float(s[i])


def continuous_k_star(alpha: float, rho: float, nu: float) -> float:
    """Real ``k > 0`` solving §4.2's condition.

    ``alpha^k = rho / (rho + (-ln alpha)(rho k + nu))``: the stationary point of
    ``(1 - alpha^k) / (rho k + nu)``.
    """
    lam = -np.log(alpha)

    def g(k: float) -> float:
        return alpha**k - rho / (rho + lam * (rho * k + nu))

    hi = 1.0
    while g(hi) > 0:
        hi *= 2.0

    return float(optimize.brentq(g, 0.0, hi, xtol=1e-13))


def reproduce() -> list[PaperRow]:
    """Every number of the paper's §4.1–§4.6, §5 (R1–R5) and §6's neighbours."""
    rows: list[PaperRow] = []

    def add(case, section, quantity, value, paper=None):
        rows.append(PaperRow(case, section, quantity, float(value), paper))

    # R1: one strong drafter (§4.1-4.3, §6)
    r1 = identical_drafters(0.8, 0.1, 1)
    add("R1", "4.1", "E_7[A] (alpha=0.8)", at_k(r1, 7)["expected_accepted"], "3.951424")
    add("R1", "4.2", "alpha^7 (left side at k=7)", 0.8**7, "0.2097152")
    lam = -np.log(0.8)
    add("R1", "4.2", "-ln(0.8)", lam, "0.22314355")
    denominator = 0.1 + lam * (0.1 * 7 + 1)
    add("R1", "4.2", "0.1 + (-ln 0.8)(0.1*7 + 1)", denominator, "0.47934404")
    add("R1", "4.2", "right side at k=7", 0.1 / denominator, "0.208618")
    add("R1", "4.2", "|left - right| at k=7", abs(0.8**7 - 0.1 / denominator), "0.001097")
    add("R1", "4.2", "real-valued k* (continuous condition)", continuous_k_star(0.8, 0.1, 1.0))
    add("R1", "4.3", "E_8[A]", at_k(r1, 8)["expected_accepted"], "4.1611392")
    add("R1", "6", "S(6)", at_k(r1, 6)["throughput"], "2.305800")
    add("R1", "4.3", "S(7)", at_k(r1, 7)["throughput"], "2.324367")
    add("R1", "4.3", "S(8)", at_k(r1, 8)["throughput"], "2.311744")
    k1, s1 = best_k(r1)
    add("R1", "4.3", "k*", k1, "7")
    add("R1", "4.3", "S_max", s1, "2.324367")

    # R2: one weak drafter against two (§4.4)
    single, pair = identical_drafters(0.5, 0.1, 1), identical_drafters(0.5, 0.1, 2)
    for k, shown in ((2, "1.250000"), (3, "1.346154"), (4, "1.339286")):
        add("R2", "4.4", f"single S({k})", at_k(single, k)["throughput"], shown)
    ks, ss = best_k(single)
    add("R2", "4.4", "single k*", ks, "3")
    add("R2", "4.4", "S_single", ss, "1.346154")
    add("R2", "4.4", "pooled alpha_2", at_k(pair, 1)["pooled_acceptance"], "0.75")
    add("R2", "4.4", "ensemble E_5[A]", at_k(pair, 5)["expected_accepted"], "3.05078125")
    for k, shown in ((3, "1.445313"), (4, "1.519097"), (5, "1.525391"), (6, "1.494585")):
        add("R2", "4.4", f"ensemble S({k})", at_k(pair, k)["throughput"], shown)
    ke, se = best_k(pair)
    add("R2", "4.4", "ensemble k*", ke, "5")
    add("R2", "4.4", "S_ens", se, "1.525391")
    add("R2", "4.4", "S_rel (own optimal k)", se / ss, "1.133147")
    add("R2", "4.4", "relative gain, % (own optimal k)", 100 * (se / ss - 1), "13.3")

    # R3, R4: three drafters at fixed k = 4 (§4.5, §4.6), and at their own optimal k
    for case, section, alpha, printed in (
        (
            "R3",
            "4.5",
            0.6,
            dict(
                a3="0.936",
                a34="0.767544169216",
                e4="3.632122356",
                ens="2.270076473",
                single="1.813333",
                rel="1.251877",
            ),
        ),
        (
            "R4",
            "4.6",
            0.4,
            dict(
                a3="0.784",
                a34="0.377802",
                e4="2.880546",
                ens="1.800341",
                single="1.353333",
                rel="1.330302",
            ),
        ),
    ):
        trio, one = identical_drafters(alpha, 0.05, 3), identical_drafters(alpha, 0.05, 1)
        ens4, one4 = at_k(trio, 4), at_k(one, 4)
        a3 = ens4["pooled_acceptance"]
        add(case, section, "pooled alpha_3", a3, printed["a3"])
        add(case, section, "alpha_3^4", a3**4, printed["a34"])
        add(case, section, "E_4[A] ensemble", ens4["expected_accepted"], printed["e4"])
        add(case, section, "S_ens (k=4)", ens4["throughput"], printed["ens"])
        add(case, section, "S_single (k=4)", one4["throughput"], printed["single"])
        add(
            case,
            section,
            "S_rel (k=4, as printed)",
            ens4["throughput"] / one4["throughput"],
            printed["rel"],
        )
        ke, se = best_k(trio)
        ks, ss = best_k(one)
        add(case, "3.3", "ensemble k* (own optimum)", ke)
        add(case, "3.3", "S_ens at own k*", se)
        add(case, "3.3", "single k* (own optimum)", ks)
        add(case, "3.3", "S_single at own k*", ss)
        add(case, "3.3", "S_rel (own optimal k, as §3.3 defines)", se / ss)

    # R5: the optimal draft length rises with pooled acceptance
    add("R5", "5", "k* single -> pair (R2): increase", best_k(pair)[0] - best_k(single)[0], "2")
    return rows


__all__ = [
    "PaperReport",
    "PaperRow",
    "at_k",
    "best_k",
    "continuous_k_star",
    "identical_drafters",
    "reproduce",
    "rounding",
]
