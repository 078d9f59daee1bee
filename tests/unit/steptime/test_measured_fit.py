"""The measured-table comparison script (``measured_fit.py``) still runs: one table, one
form, in sample. Its numbers are reported, not asserted (issue 18, "Accuracy")."""

import importlib.util
import sys
from pathlib import Path

import numpy as np


def _script():
    path = Path(__file__).resolve().parents[2] / "support" / "measured_fit.py"
    spec = importlib.util.spec_from_file_location("measured_fit", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("measured_fit", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_measured_tables_load_and_fit():
    m = _script()
    cases = {c.name: c for c in m.cases()}
    assert len(cases) == 4
    case = next(c for n, c in cases.items() if "batch <= 16" in n)
    assert len(case.rows) == 6 and np.all(case.step_ms > 0)
    fit = m.fit(case, "max", np.ones(len(case.rows), bool))
    errors = m.errors_pct(case, fit.model, np.arange(len(case.rows)))
    assert np.all(np.isfinite(errors))
    assert "overhead_ms" in fit.undetermined  # every EAGLE-3 row is at k = 3
