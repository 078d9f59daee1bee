"""Calibration: a step-time predictor fitted to measured end-to-end throughput
(docs/design.md §8.7 for today's form, §8.12 for the roofline), one module per stage:

- :mod:`.rows`: measured rows (CSV files, the engines' benchmark files) read into
  :class:`~.rows.Measured`, and each row's step time ``1000 · b · E / tokens_per_s``;
- :mod:`.fit`: the two fits, today's form (``max(v0 + v1·b, c·b·t) + k·Σ_i (d0_i +
  d1_i·b) + overhead``, no specs) and the roofline's factors (``serving.hardware`` and
  ``serving.model`` given), every parameter with its standard error and 95% interval or
  said undetermined;
- :mod:`.roofline`: fitting the roofline predictor, which parameters a set of rows
  determines (also used by the profiling plan) and the least squares;
- :mod:`.holdout`: the rows ``--holdout`` keeps out (a seeded fraction, or each ``k`` or
  batch size in turn) and whether the others determine them;
- :mod:`.calibration`: one calibration, :func:`calibrate`: step times, the fit, every
  row predicted and its error, and what is refused (no ``k = 0`` row);
- :mod:`.write`: the calibrated problem file (``serving`` filled in,
  ``serving.calibrated_from``), and the check that no output overwrites an input;
- :mod:`.report`: the command's result, its ``--json`` document and the file's text.

The package sits beside :mod:`allocator.estimate` (whose benchmark-file reader it uses);
it imports the entities, the maths and the file edge, and nothing below it imports it
(the profiling plan, an analysis, does).
"""

from __future__ import annotations

from .calibration import MAX_SEED, Calibration, calibrate, check_seed
from .fit import Fit, StepModel, fit_form, form_of
from .holdout import GROUPS, hold_out_groups, holdout_mask, parse_holdout, predictable
from .report import MODEL_FORM, ROOFLINE_FORM, CalibrationReport, calibration_report
from .roofline_fit import RooflineFit, fit_roofline, identify, log_jacobian, undetermined
from .rows import MAX_ROWS, Measured, concat, read_inputs, read_measured, step_times
from .write import calibrated_from, calibrated_problem_data, check_paths, serving_section

__all__ = [
    "GROUPS",
    "MAX_ROWS",
    "MAX_SEED",
    "MODEL_FORM",
    "ROOFLINE_FORM",
    "Calibration",
    "CalibrationReport",
    "Fit",
    "Measured",
    "RooflineFit",
    "StepModel",
    "calibrate",
    "calibrated_from",
    "calibrated_problem_data",
    "calibration_report",
    "check_paths",
    "check_seed",
    "concat",
    "fit_form",
    "fit_roofline",
    "form_of",
    "hold_out_groups",
    "holdout_mask",
    "identify",
    "log_jacobian",
    "parse_holdout",
    "predictable",
    "read_inputs",
    "read_measured",
    "serving_section",
    "step_times",
    "undetermined",
]
