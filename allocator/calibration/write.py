"""The calibrated problem file: the problem with its ``serving`` section filled in by the
fit (docs/design.md §8.7), and the check that no output overwrites an input.

**The file is the fit**: every value the fit used is written, to :data:`DIGITS`
significant digits, determined or not (a parameter the rows cannot separate is written
at the fit's value; the report says which combination the rows determine), so that the
file read back predicts every row as the fit did (:mod:`.report` checks it before
anything is written).

**Today's form**: the problem's ``serving`` section with ``verify_ms`` (the fitted
verifier at every measured batch size and every integer token count ``1..m_max·k_max +
1``), each fitted drafter's ``draft_ms`` at the measured batch sizes, and
``overhead_ms``, reproducing the fitted step times at every measured batch size and
every ``k`` up to ``k_max`` (the fit keeps the verifier's and each drafter's fixed time at
least :data:`~.fit.MIN_MS`, the format needing them positive). A fractional batch size
of a benchmark run (Little's law) is written as the whole batch sizes either side of it,
between which the tables are linear. **The roofline form**: every factor the fit used in
``serving.roofline`` (fitted, or held at the input file's value or the default), and the
pass times of every drafter a speculative row measures. Both forms record
``serving.calibrated_from``: the measured batch sizes, ``k``, contexts and the
speculative rows' batch sizes, so later commands note when they plan outside them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..core.problem import Problem
from ..exceptions import ParameterError
from ..io.build import problem_from_spec
from ..io.spec import load_problem, parse_problem
from .calibration import Calibration
from .fit import MIN_MS
from .rows import Measured

__all__ = [
    "DIGITS",
    "MIN_MS",
    "calibrated_from",
    "calibrated_problem_data",
    "check_paths",
    "serving_section",
]

#: Significant digits of every value written: the file read back predicts every row
#: within 10⁻⁶ relative of the fit (the check of :mod:`.report`) with room to spare.
DIGITS = 12


def _table_batches(data: Measured) -> tuple[np.ndarray, list[str]]:
    """The whole batch sizes the tables are written at: the measured ones, and for a
    fractional one the whole batch sizes either side of it."""
    b = np.unique(np.maximum(np.concatenate([np.floor(data.batch), np.ceil(data.batch)]), 1.0))
    notes = []
    if not np.all(data.batch == np.rint(data.batch)):
        notes.append(
            "benchmark runs give fractional mean batch sizes (Little's law): the calibrated "
            "tables are written at the whole batch sizes either side of each "
            f"({', '.join(str(int(x)) for x in b)})"
        )
    return b, notes


def serving_section(
    problem: Problem, cal: Calibration, previous: dict | None = None
) -> tuple[dict, dict[str, dict[int, float]], int]:
    """Today's form as the ``serving`` section (shared format) and each fitted drafter's
    ``draft_ms``.

    Tables cover every measured batch size (held-out rows included) and every verified
    token count ``1..m_max·k_max + 1``, ``k_max`` the largest measured ``k``. ``previous``:
    the problem's own ``serving`` (its ``gpu_cost_per_hour`` and ``memory`` are kept).
    Returns ``(serving, draft_ms by drafter name, k_max)``.
    """
    model = cal.model
    assert model is not None
    batches, _ = _table_batches(cal.data)
    k_max = max(int(cal.data.k.max()), 1)
    m_max = int(problem.m_max or problem.n)
    tokens = np.arange(1, m_max * k_max + 2)
    ms = model.verify_ms(batches[:, None], tokens[None, :])
    serving: dict = {"batch_sizes": [int(b) for b in batches]}
    for key in ("gpu_cost_per_hour", "memory"):
        if previous and previous.get(key) is not None:
            serving[key] = previous[key]
    serving["verify_ms"] = {
        "batch": [int(b) for b in batches],
        "tokens": [int(t) for t in tokens],
        "ms": [[_round(v) for v in row] for row in ms],
    }
    serving["overhead_ms"] = _round(model.overhead, floor=0.0)
    draft = model.draft_ms(batches)
    draft_ms = {
        problem.names[i]: {int(b): _round(draft[j, i]) for j, b in enumerate(batches)}
        for i in np.flatnonzero(model.fitted)
    }
    return serving, draft_ms, k_max


def _round(v: float, floor: float = MIN_MS, digits: int = DIGITS) -> float:
    out = float(f"{float(v):.{digits}g}")
    return max(out, floor)


def calibrated_from(cal: Calibration) -> dict:
    """The measured domain of the fitted rows (``serving.calibrated_from``)."""
    d = cal.data.take(~cal.held_out if cal.holdout_by is None else np.ones(len(cal.data), bool))
    out: dict = {
        "batch": [float(d.batch.min()), float(d.batch.max())],
        "k": [float(d.k.min()), float(d.k.max())],
    }
    if d.has_context:
        out["context"] = [float(d.ctx.min()), float(d.ctx.max())]
    spec = d.k > 0
    if spec.any():
        out["speculative_batch"] = [float(d.batch[spec].min()), float(d.batch[spec].max())]
        out["speculative_k"] = [float(d.k[spec].min()), float(d.k[spec].max())]
    out["rows"] = len(d)
    return {k: [_round(x, 0.0, 6) for x in v] if isinstance(v, list) else v for k, v in out.items()}


def _roofline_section(problem: Problem, cal: Calibration, previous: dict) -> tuple[dict, list[str]]:
    """The roofline form's ``serving``: the problem's, its tables dropped, every factor the
    fit used written in ``serving.roofline`` (module docstring)."""
    notes: list[str] = []
    serving = {k: v for k, v in previous.items() if k not in ("step_ms", "verify_ms")}
    for key in ("step_ms", "verify_ms"):
        if previous.get(key):
            notes.append(f"serving.{key} dropped: the calibrated roofline replaces it")
    old = dict(previous.get("roofline") or {})
    roof = {k: v for k, v in old.items() if k != "drafters"}
    drafters = {n: dict(v) for n, v in (old.get("drafters") or {}).items()}
    for p in cal.parameters:
        name, written = p["name"], p.get("written")
        if written is None:
            continue
        if name.startswith("draft."):
            _, dname, key = name.split(".", 2)
            if key in ("fixed_ms", "seq_ms"):
                drafters.setdefault(dname, {})[key] = _round(written, 0.0)
        elif name in (
            "mem_eff",
            "compute_eff",
            "comm_eff",
            "prefill_eff",
            "fixed_ms",
            "seq_ms",
            "overhead_ms",
            "p",
        ):
            lo = 1e-4 if name.endswith("_eff") else 0.0
            v = _round(written, lo)
            roof[name] = min(v, 1.0) if name.endswith("_eff") else v
    if drafters:
        roof["drafters"] = drafters
    serving["roofline"] = roof
    return serving, notes


def _confounded_note(cal: Calibration) -> list[str]:
    """The note naming the parameters written at the fit's values though the rows do not
    determine them, each with the combination the rows do determine."""
    shown = [
        p["name"]
        + (f" (determined: {p['determined_combination']})" if p["determined_combination"] else "")
        for p in cal.parameters
        if p["value"] is None and p.get("written") is not None
    ]
    if not shown:
        return []
    return [
        "not separately determined by the rows, written at the fit's values (the file "
        "predicts every fitted row as the fit does): " + "; ".join(shown)
    ]


def calibrated_problem_data(
    problem: Problem,
    cal: Calibration,
    out_path: str | Path | None,
    source: str | Path,
) -> tuple[dict, list[str]]:
    """The problem file ``P2`` as plain data: ``P`` (the file ``source``, which ``problem``
    was built from) with ``serving`` filled in.

    Everything else of ``P`` is kept as written (a pydantic dump of what the file set;
    comments are not kept). Changes, each returned as a note. Today's form: ``serving``
    replaced (its ``gpu_cost_per_hour`` and ``memory`` kept, measured ``step_ms`` tables
    dropped, its ``batch_sizes`` the measured ones), the fitted drafters' ``draft_ms`` set
    and other drafters' removed, ``search.k.max`` lowered to the largest measured ``k``.
    The roofline form: ``serving.roofline`` set to the fitted factors (tables dropped,
    the fitted drafters' ``draft_ms`` removed: their pass times are in
    ``serving.roofline.drafters``). Both: ``serving.calibrated_from``, and
    ``errors.outcomes`` rewritten relative to the new file's folder (``out_path``; ``None``:
    the folder of ``source``). The result is validated before it is returned.
    """

    spec = load_problem(source)
    base_dir = Path(source).resolve().parent
    data = spec.model_dump(mode="python", exclude_unset=True)
    notes: list[str] = []
    previous = data.get("serving")
    if cal.form == "today":
        if previous and previous.get("step_ms"):
            notes.append(
                "serving.step_ms (measured tables) dropped: the calibrated model replaces them"
            )
        serving, draft_ms, k_max = serving_section(problem, cal, previous)
        notes += _table_batches(cal.data)[1]
        planned = list(previous.get("batch_sizes") or []) if previous else []
        if planned and planned != serving["batch_sizes"]:
            notes.append(
                f"serving.batch_sizes {planned} replaced by the measured batch sizes "
                f"{serving['batch_sizes']}: the calibrated tables cover those"
            )
        serving["calibrated_from"] = calibrated_from(cal)
        data["serving"] = serving
        for d in data["drafters"]:
            if d["name"] in draft_ms:
                d["draft_ms"] = draft_ms[d["name"]]
            elif d.get("draft_ms"):
                del d["draft_ms"]
                notes.append(
                    f"drafters.{d['name']}.draft_ms removed: not in the measured rows, its "
                    "times belong to another calibration"
                )
        search = data.setdefault("search", {})
        krange = search.setdefault("k", {})
        if problem.k_max > k_max:
            krange["max"] = k_max
            if problem.k_min > k_max:
                krange["min"] = 1
            notes.append(
                f"search.k.max lowered from {problem.k_max} to {k_max}, the largest measured "
                "k (the calibrated tables do not extrapolate)"
            )
    else:
        assert previous is not None
        serving, roof_notes = _roofline_section(problem, cal, previous)
        notes += roof_notes
        serving["calibrated_from"] = calibrated_from(cal)
        data["serving"] = serving
        fitted = set(serving["roofline"].get("drafters") or {})
        for d in data["drafters"]:
            if d["name"] in fitted and d.get("draft_ms"):
                del d["draft_ms"]
                notes.append(
                    f"drafters.{d['name']}.draft_ms removed: its calibrated pass times are in "
                    "serving.roofline.drafters"
                )
    new_dir = base_dir if out_path is None else Path(out_path).resolve().parent
    outcomes = (data.get("errors") or {}).get("outcomes")
    if outcomes and base_dir is not None:
        target = (base_dir / outcomes).resolve()
        rel = Path(os.path.relpath(target, new_dir)).as_posix()
        if rel != outcomes:
            data["errors"]["outcomes"] = rel
            notes.append(f"errors.outcomes rewritten as {rel} (relative to the new file)")
    if cal.form == "roofline":
        _relocate_configs(data, base_dir, new_dir)
    notes += _confounded_note(cal)
    parse_problem(data, source="out")
    problem_from_spec(parse_problem(data), base_dir=new_dir)
    return data, notes


def _relocate_configs(data: dict, base_dir: Path, new_dir: Path) -> None:
    """``config`` paths of the architectures, relative to the new file's folder."""
    places = [data.get("serving", {}).get("model")]
    places += [d.get("architecture") for d in data.get("drafters", [])]
    for arch in places:
        if isinstance(arch, dict) and arch.get("config") and not Path(arch["config"]).is_absolute():
            target = (base_dir / arch["config"]).resolve()
            arch["config"] = Path(os.path.relpath(target, new_dir)).as_posix()


def _same(a: str | Path, b: str | Path) -> bool:
    pa, pb = Path(a), Path(b)
    if pa.exists() and pb.exists():
        return pa.samefile(pb)
    return pa.resolve() == pb.resolve()


def check_paths(
    measured: str | Path | Sequence[str | Path],
    problem: str | Path,
    out: str | Path | None,
    json: str | None = None,
) -> None:
    """Refuse outputs that would overwrite an input: ``out`` (the calibrated problem,
    ``.yaml`` or ``.yml``) and ``json`` (a document path; ``"-"`` is stdout) must be
    neither ``problem`` nor a measured file (nor, for ``json``, ``out``). Raises
    :class:`~allocator.exceptions.ParameterError` naming ``out`` or ``json``."""
    files = [measured] if isinstance(measured, str | Path) else list(measured)
    if out is not None:
        if Path(out).suffix.lower() not in (".yaml", ".yml"):
            raise ParameterError("out", "write the calibrated problem as .yaml or .yml")
        for name, path_ in [("--problem", problem), *(("FILE", f) for f in files)]:
            if _same(out, path_):
                raise ParameterError(
                    "out", f"is the same file as {name} ({path_}); inputs are never overwritten"
                )
    if json not in (None, "-"):
        others = [("--problem", str(problem)), *(("FILE", str(f)) for f in files)]
        if out is not None:
            others.append(("--out", str(out)))
        for name, other in others:
            if _same(json, other):
                raise ParameterError("json", f"is the same file as {name} ({other})")
