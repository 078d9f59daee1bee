"""Writing an :class:`~.counts.Estimate` as a problem file (docs/design.md §5), with comments.

Costs are not in any log: they come from ``--unit-cost name=value`` options or a
costs file (:func:`read_costs`). A drafter without a cost is written with
``unit_cost: null`` and a ``FILL IN`` comment, so the file deliberately does not
validate until a cost is filled in (``solve`` then stops with
``drafters.<i>.unit_cost: …``): a made-up cost such as 0 would silently favour
every drafter. Everything else in the file is validated before it is written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from ..exceptions import ParameterError
from ..io.inputs import parse_document, read_input_text
from ..io.spec import parse_problem
from ..validate import finite
from .counts import DrafterCounts, Estimate

FILL_IN = "FILL IN"
DIGITS = 6


def parse_assignments(items: list[str], option: str) -> dict[str, str]:
    """``["a=0.1", "b=0.2"]`` → ``{"a": "0.1", "b": "0.2"}``."""
    out: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        if not sep or not name.strip() or not value.strip():
            raise ParameterError(option, f"{item!r} is not NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def _cost(value, where: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(where, f"{value!r} is not a number") from None
    return finite(v, where, lo=0)


def read_costs(path: str | Path | None, unit_costs: list[str]) -> dict:
    """Costs from a YAML file and ``--unit-cost`` options (the options win).

    The file holds ``unit_cost: {name: value}``, optional ``hosting_cost: {name: value}``
    and optional ``verifier: {pass_cost: …, token_cost: …}``. Returns
    ``{"unit_cost": {...}, "hosting_cost": {...}, "verifier": {...}}``.
    """
    data: dict = {}
    if path is not None:
        p = Path(path)
        text = read_input_text(p, "costs")
        parsed = parse_document(text, "costs", str(p), json_format=p.suffix.lower() == ".json")
        data = {} if parsed is None else parsed  # type: ignore[assignment]
        if not isinstance(data, dict):
            raise ParameterError("costs", "must hold a mapping (unit_cost: {name: value}, ...)")
        unknown = set(data) - {"unit_cost", "hosting_cost", "verifier"}
        if unknown:
            raise ParameterError(
                "costs",
                f"unknown key(s) {sorted(unknown)} (use unit_cost, hosting_cost, verifier)",
            )
    out: dict = {"unit_cost": {}, "hosting_cost": {}, "verifier": {}}
    for key in ("unit_cost", "hosting_cost"):
        section = data.get(key) or {}
        if not isinstance(section, dict):
            raise ParameterError(f"costs: {key}", "must map drafter names to numbers")
        out[key] = {str(n): _cost(v, f"costs: {key}.{n}") for n, v in section.items()}
    verifier = data.get("verifier") or {}
    if not isinstance(verifier, dict):
        raise ParameterError("costs: verifier", "must be a mapping (pass_cost, token_cost)")
    out["verifier"] = dict(verifier)
    for n, v in parse_assignments(unit_costs, "unit_cost").items():
        out["unit_cost"][n] = _cost(v, f"unit_cost {n}")
    return out


def _round(x: np.ndarray) -> list[float]:
    return [float(round(v, DIGITS)) for v in np.asarray(x, dtype=float)]


def _acceptance(c: DrafterCounts, by_position: bool = False) -> float | list[float]:
    """The acceptance as written: a list by position, or one number when one position was
    read from a source that does not count by position (``by_position`` false). A list of
    one says that only position 1 was measured, so answers past it are noted as resting on
    its repetition (``DrafterInfo.positions``)."""
    acc = _round(c.acceptance)
    acc = [min(max(a, 10.0**-DIGITS), 1.0) for a in acc]
    return acc[0] if len(acc) == 1 and not by_position else acc


def _interval(c: DrafterCounts, by_position: bool = False) -> list:
    """``[lo, hi]`` per position, rounded outward to :data:`DIGITS` decimals: the written
    interval still holds the computed one, and stays ``lo < hi`` when the counts are so
    large that the interval is narrower than the last decimal (nearest rounding then
    wrote ``lo == hi``, a file that does not validate)."""
    lo, hi = (np.asarray(v, dtype=float) for v in c.interval)
    scale = 10.0**DIGITS
    lo_out = np.clip(np.floor(lo * scale) / scale, 0.0, 1.0)
    hi_out = np.clip(np.ceil(hi * scale) / scale, 0.0, 1.0)
    pairs = [[float(a), float(b)] for a, b in zip(lo_out, hi_out, strict=True)]
    return pairs[0] if len(pairs) == 1 and not by_position else pairs


def _by_rank(c: DrafterCounts) -> tuple[list, list]:
    """``acceptance_by_rank`` and its intervals: one list, or one list per depth."""
    assert c.ranks is not None
    acc = np.clip(np.round(c.ranks.acceptance, DIGITS), 10.0**-DIGITS, 1.0)
    lo, hi = c.ranks.interval
    rows = [[float(a) for a in row] for row in acc]
    ivs = [
        [[float(round(a, DIGITS)), float(round(b, DIGITS))] for a, b in zip(lr, hr, strict=True)]
        for lr, hr in zip(lo, hi, strict=True)
    ]
    return (rows[0], ivs[0]) if len(rows) == 1 else (rows, ivs)


def build_problem(
    est: Estimate,
    name: str,
    costs: dict,
    models: dict[str, str],
    methods: dict[str, str] | None = None,
) -> tuple[dict, list[str], list[str]]:
    """The problem as plain data, the header comments, and the drafters lacking a cost.

    ``methods``: a drafter's serving ``method`` (``--method``), validated with the file."""
    methods = methods or {}
    known = [c.name for c in est.drafters]
    for key in ("unit_cost", "hosting_cost"):
        for n in costs[key]:
            if n not in known:
                raise ParameterError(
                    "unit_cost" if key == "unit_cost" else f"costs: {key}",
                    f"unknown drafter {n!r} (drafters: {', '.join(known)})",
                )
    for option, given in (("model", models), ("method", methods)):
        for n in given:
            if n not in known:
                raise ParameterError(
                    option, f"unknown drafter {n!r} (drafters: {', '.join(known)})"
                )
    drafters = []
    missing = []
    # the engines' counters are by position up to k: one kept position of k > 1 is a
    # measurement of position 1 only, written as a list of one
    listed = bool(est.k_max and est.k_max > 1)
    for c in est.drafters:
        by_pos = listed and c.summary is None  # a log of means gives one value for all
        d: dict = {"name": c.name, "acceptance": _acceptance(c, by_pos)}
        if c.name in costs["unit_cost"]:
            d["unit_cost"] = costs["unit_cost"][c.name]
        else:
            d["unit_cost"] = None
            missing.append(c.name)
        if c.name in costs["hosting_cost"]:
            d["hosting_cost"] = costs["hosting_cost"][c.name]
        model = models.get(c.name, c.model)
        if model:
            d["model"] = model
        if c.name in methods:
            d["method"] = methods[c.name]
        d["acceptance_interval"] = _interval(c, by_pos)
        if c.ranks is not None:
            d["acceptance_by_rank"], d["acceptance_by_rank_interval"] = _by_rank(c)
        drafters.append(d)
    data: dict = {"name": name, "convention": est.convention}
    if costs["verifier"]:
        data["verifier"] = costs["verifier"]
    data["drafters"] = drafters
    if est.errors:
        data["errors"] = est.errors
    if est.workloads:
        data["workloads"] = [
            {
                "name": w.name,
                "weight": float(round(w.weight, DIGITS)),
                "acceptance": {
                    c.name: _acceptance(c, listed and c.summary is None) for c in w.drafters
                },
            }
            for w in est.workloads
        ]
    if est.k_max:
        data["search"] = {"k": {"max": int(est.k_max)}}
    header = [f"generated by `allocator estimate --format {est.source}`", *est.notes]
    if missing:
        header.append(
            f"{FILL_IN}: unit_cost of {', '.join(missing)} (draft cost per unit, in units of "
            "the verifier's per-unit cost); this file does not validate until it is given"
        )
    if not costs["verifier"]:
        header.append("verifier: pass_cost 1, token_cost 0 (defaults); replace with measured costs")
    return data, header, missing


def check_problem(data: dict) -> None:
    """Validate the file's content; missing costs are checked with a stand-in of 0."""
    stand_in = dict(data)
    stand_in["drafters"] = [
        {**d, "unit_cost": 0.0 if d["unit_cost"] is None else d["unit_cost"]}
        for d in data["drafters"]
    ]
    parse_problem(stand_in, source="output")


def render(data: dict, header: list[str]) -> str:
    """YAML text: header comments, then the data (short lists inline)."""
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    lines = []
    for line in body.splitlines():
        if line.strip().endswith("unit_cost: null"):
            line += f"  # {FILL_IN}: draft cost per unit (verifier per-unit cost = 1)"
        lines.append(line)
    comments: list[str] = []
    for h in header:
        comments.extend("# " + part if part else "#" for part in h.splitlines())
    return "\n".join(comments + lines) + "\n"


__all__ = [
    "DIGITS",
    "FILL_IN",
    "build_problem",
    "check_problem",
    "parse_assignments",
    "read_costs",
    "render",
]
