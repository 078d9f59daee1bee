"""``allocator calibrate``'s report: the fit (:class:`~.calibration.Calibration`) and the
calibrated problem as one result, its ``--json`` document (:meth:`CalibrationReport.to_dict`)
and the file's text (:meth:`CalibrationReport.text`), and :func:`calibration_report`, the
command's whole run: read, fit, build the file, read it back (docs/design.md §8.7).

**Read back.** The file's text is written to a temporary file beside ``out`` (removed
again), read by the loader every command uses (:func:`~allocator.io.build.
problem_from_file`), and its step-time predictor evaluated at every row as the fit read
them (:func:`read_back`; today's tables start at batch 1, so a benchmark run's
Little's-law batch below 1 is read at 1 by both). Where the written fit's step time and
the file's differ by more than :data:`READ_BACK_RTOL` relative, nothing is written (a
:class:`~allocator.exceptions.InputError` naming ``out``). The rows' predictions and
errors reported are the file's (under ``--holdout by-k``/``by-batch`` the held-out rows'
are the other groups' fits, as before; the file is still checked on every row).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from ..exceptions import InputError
from ..io.build import problem_from_file
from ..io.inputs import shown_paths
from ..model.under_load import predictor, tokens_per_s
from .calibration import Calibration, calibrate, check_seed
from .holdout import parse_holdout
from .rows import read_inputs
from .write import calibrated_problem_data, check_paths

__all__ = [
    "READ_BACK_RTOL",
    "calibrated_text",
    "MODEL_FORM",
    "ROOFLINE_FORM",
    "CalibrationReport",
    "calibration_report",
]


#: Largest relative difference between the fit's step time and the written file's at any
#: row; above it the file is not written.
READ_BACK_RTOL = 1e-6

#: The step-time model's form, as ``calibrate --json`` states it (today's form).
MODEL_FORM = {
    "verify": "max(verify_fixed_ms + verify_per_seq_ms * batch, "
    "compute_ms_per_token * batch * tokens)",
    "step": "verify(batch, m*k + 1) + k * draft(batch) + overhead_ms (k > 0)",
}
#: The roofline's form, as ``calibrate --json`` states it (docs/design.md §8.12).
ROOFLINE_FORM = {
    "pass": "max([W + X*cov(n) + kv*(b*C + n)] / mem_eff + fixed_ms + seq_ms*b, "
    "[flop*b*t + attn*b*t*C] / compute_eff) + [flop*P + attn*P(P+1)/2] / prefill_eff, "
    "n = b*t + P",
    "step": "pass + k * draft pass + overhead_ms (speculative)",
}


def calibrated_text(data: dict, problem: str, measured: str | list[str], how: str = "") -> str:
    """A calibrated problem file: a two-line comment naming what it was fitted from
    (``measured`` files, ``how`` they were fitted, the ``problem`` file), then ``data`` as
    YAML."""
    src = Path(problem).name
    files = [measured] if isinstance(measured, str) else measured
    shown = ", ".join(shown_paths(files)[:3]) + (", ..." if len(files) > 3 else "")
    header = (
        f"# {data['name']}: calibrated by `allocator calibrate` from {shown}\n"
        f"# {how}and {src}; the comments of {src} are not kept.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@dataclass
class CalibrationReport:
    """``allocator calibrate``: the fit (:class:`Calibration`) and the calibrated problem.

    problem, measured, out : the paths as given (``measured``: one path, or a list when
    several files were read; ``out``: ``None`` when no file is to be written); holdout,
    seed : as asked; data : the calibrated problem file ``P2`` as plain data
    (:func:`calibrated_problem_data`); notes : the inputs', the fit's, then the file's.
    """

    calibration: Calibration
    names: tuple[str, ...]
    problem: str
    measured: str | list[str]
    out: str | None
    holdout: float | str | None
    seed: int
    data: dict
    notes: list[str]

    def text(self) -> str:
        """The calibrated problem file to write: a two-line comment, then YAML."""

        return calibrated_text(self.data, self.problem, self.measured)

    def to_dict(self) -> dict:
        """The ``calibrate --json`` document."""
        cal, names = self.calibration, self.names
        bench = any(not s.split(" line ")[0].lower().endswith(".csv") for s in cal.data.sources)
        rows = []
        for r in range(len(cal.data)):
            row = {
                "drafters": [n for n, on in zip(names, cal.data.members[r], strict=True) if on],
                "k": int(cal.data.k[r]),
                "batch": _json_batch(cal.data.batch[r]),
            }
            if cal.data.has_context:
                row["context"] = float(cal.data.ctx[r])
            ok = cal.predictable is None or bool(cal.predictable[r])
            row.update(
                {
                    "expected_accepted": float(cal.expected[r]),
                    "measured_tokens_per_s": float(cal.data.tokens_per_s[r]),
                    "predicted_tokens_per_s": float(cal.predicted_tps[r]) if ok else None,
                    "error_pct": float(cal.error_pct[r]) if ok else None,
                    "measured_step_ms": float(cal.measured_step[r]),
                    "predicted_step_ms": float(cal.predicted_step[r]) if ok else None,
                    "held_out": bool(cal.held_out[r]),
                }
            )
            if cal.holdout_by is not None:
                row["predictable"] = ok
            if bench:
                row["source"] = cal.data.sources[r]
            rows.append(row)
        held = bool(cal.held_out.any())
        if cal.holdout_by is not None:
            holdout = {
                "by": cal.holdout_by,
                "groups": cal.groups,
                "rows": int(cal.reported.sum()),
                "not_predictable": int((~cal.predictable).sum())
                if cal.predictable is not None
                else 0,
            }
        elif held:
            holdout = {"fraction": self.holdout, "seed": self.seed, "rows": int(cal.held_out.sum())}
        else:
            holdout = None
        doc = {
            "problem": self.problem,
            "measured": self.measured,
            "out": self.out,
            "model": self._model(),
            "rows_fitted": len(cal.data) if cal.holdout_by else int((~cal.held_out).sum()),
            "holdout": holdout,
            "evaluated_on": "held-out rows" if held else "fitted rows (in-sample)",
            "median_abs_error_pct": _finite(cal.median_abs_error_pct),
            "max_abs_error_pct": _finite(cal.max_abs_error_pct),
            "predicted_from": "the other groups' fits (held-out rows)"
            if cal.holdout_by is not None
            else "the written file, read back",
            "rows": rows,
            "parameters": cal.parameters,
            "calibrated_from": self.data.get("serving", {}).get("calibrated_from"),
            "notes": self.notes,
        }
        return doc

    def _model(self) -> dict:
        cal, names = self.calibration, self.names
        m = cal.model
        if m is None:
            assert cal.predictor is not None
            r = cal.predictor
            return {
                "form": "roofline",
                **ROOFLINE_FORM,
                **{
                    p["name"]: p["value"]
                    for p in cal.parameters
                    if not p["name"].startswith("draft.")
                },
                "drafting": r.drafting,
                "drafters": {
                    d.name: {
                        key: next(
                            (
                                p["value"]
                                for p in cal.parameters
                                if p["name"] == f"draft.{d.name}.{key}"
                            ),
                            None,
                        )
                        for key in ("fixed_ms", "seq_ms")
                    }
                    for d in r.drafters
                },
            }
        # a parameter the rows leave undetermined is reported with no value (null), as the
        # roofline form has it: the fit's number for it is one point of a flat direction
        undetermined = {p["name"] for p in cal.parameters if p["value"] is None}

        def value(name: str, v: float) -> float | None:
            return None if name in undetermined else float(v)

        return {
            **MODEL_FORM,
            "verify_fixed_ms": value("verify_fixed_ms", m.verify_fixed),
            "verify_per_seq_ms": value("verify_per_seq_ms", m.verify_per_seq),
            "compute_ms_per_token": value("compute_ms_per_token", m.compute_per_token),
            "overhead_ms": value("overhead_ms", m.overhead),
            "drafting": m.drafting,
            "drafters": {
                names[i]: {
                    "fixed_ms": value(f"drafters.{names[i]}.fixed_ms", m.draft_fixed[i]),
                    "per_seq_ms": value(f"drafters.{names[i]}.per_seq_ms", m.draft_per_seq[i]),
                }
                for i in range(len(names))
                if m.fitted[i]
            },
        }


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _json_batch(b: float) -> int | float:
    return int(b) if float(b).is_integer() else float(b)


def read_back(report: CalibrationReport, folder: Path) -> np.ndarray:
    """The written file's step time at every row ``(R,)`` ms (module docstring, "Read
    back"): its text staged in ``folder`` (the file's own, so its relative paths resolve
    as they will), read by :func:`~allocator.io.build.problem_from_file`, removed.
    Raises :class:`InputError` naming ``out`` (a refusal, exit status 2) where it differs
    from the fit by more than :data:`READ_BACK_RTOL`."""

    cal = report.calibration
    assert cal.inputs is not None and cal.predictor is not None
    x = cal.inputs
    if cal.form == "today":  # the tables start at batch 1: a Little's-law batch below it
        x = replace(x, decode_seqs=np.maximum(x.decode_seqs, 1.0))  # is read there
    fitted = cal.predictor.step_ms_of(x)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".calibrate-", suffix=".yaml", dir=folder)
    except OSError as exc:
        raise InputError("out", f"cannot write in {folder}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(report.text())
        step = predictor(problem_from_file(tmp)).step_ms_of(x)
    finally:
        Path(tmp).unlink(missing_ok=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(step / fitted - 1.0)
    bad = np.flatnonzero(~(rel <= READ_BACK_RTOL))
    if bad.size:
        r = int(bad[np.argmax(np.where(np.isfinite(rel[bad]), rel[bad], np.inf))])
        raise InputError(
            "out",
            f"the calibrated file, read back, gives {cal.data.sources[r]} a step of "
            f"{step[r]:.6g} ms where the fit gives {fitted[r]:.6g} ms: the file "
            "would not be the fit, so it is not written",
        )
    return step


def _from_file(cal: Calibration, step: np.ndarray) -> None:
    """The rows' predictions and errors from the file's step times ``step (R,)`` (all but
    the held-out rows of a leave-one-group-out, whose predictions are other fits')."""
    if cal.holdout_by is not None:
        return
    cal.predicted_step = step
    cal.predicted_tps = tokens_per_s(cal.expected, step, cal.data.batch)
    cal.error_pct = 100.0 * (cal.predicted_tps / cal.data.tokens_per_s - 1.0)


def calibration_report(
    measured: str | Path | Sequence[str | Path],
    problem: str | Path,
    out: str | Path | None = None,
    holdout: float | str | None = None,
    seed: int = 0,
    drafters: str | None = None,
) -> CalibrationReport:
    """Read the problem file ``problem`` and the rows of ``measured`` (CSV and benchmark
    files, :func:`read_inputs`), fit, and build the calibrated problem for the file
    ``out`` (:func:`check_paths` first; ``out=None``: for no file, paths kept relative to
    ``problem``'s folder). ``drafters``: the drafter of the speculative benchmark runs."""

    files = [measured] if isinstance(measured, str | Path) else list(measured)
    check_paths(files, problem, out)
    holdout = parse_holdout(holdout)
    check_seed(seed)
    prob = problem_from_file(problem)
    data, input_notes = read_inputs(files, prob, drafters)
    cal = calibrate(prob, data, holdout=holdout, seed=seed)
    p2, file_notes = calibrated_problem_data(prob, cal, out, problem)
    report = CalibrationReport(
        cal,
        prob.names,
        str(problem),
        str(files[0]) if len(files) == 1 else [str(f) for f in files],
        None if out is None else str(out),
        holdout,
        seed,
        p2,
        input_notes + cal.notes + file_notes,
    )
    folder = Path(out if out is not None else problem).resolve().parent
    _from_file(cal, read_back(report, folder))
    return report
