"""What start-up's shortcuts must not change (docs/design.md §9; the times themselves are
measured by benchmarks/startup.py, never here): the problem-file models, built when they
first validate, refuse bad input as before, whichever model a process validates first;
importing the commands leaves the garbage collector as it found it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: A drafter with a probability out of range, a boolean for a number and an unknown key.
BAD_DRAFTER = {"name": "a", "acceptance": 1.5, "unit_cost": True, "colour": "red"}

#: Run in a fresh process (so that no model has been built yet): validate the models in
#: the order given, print each refusal as pydantic's (type, location) pairs and the
#: problem's one-line error; pydantic's error as its (type, field) pairs.
FRESH = """
import json, sys
from pydantic import ValidationError
from allocator.exceptions import InputError
from allocator.io import spec

bad = json.loads(sys.argv[1])
out = {}
for name in sys.argv[2:]:
    try:
        if name == "problem":
            spec.parse_problem({"name": "p", "drafters": [bad]})
        else:
            getattr(spec, name).model_validate(bad)
    except ValidationError as e:
        out[name] = sorted({(err["type"], str(err["loc"][0])) for err in e.errors()})
    except InputError as e:
        out[name] = str(e)
print(json.dumps(out))
"""


def _fresh(*order: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", FRESH, json.dumps(BAD_DRAFTER), *order],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("order", [("Drafter", "problem"), ("problem", "Drafter")])
def test_a_model_refuses_bad_input_whichever_is_built_first(order):
    """The nested model validated first (its validator built for it alone) or the problem
    first (the nested model built inside it): the same refusals. Expected: pydantic's
    documented error types for the three faults (the range check raises ``ValueError``,
    strict mode refuses a bool for a float, ``extra="forbid"``), and the one-line message
    naming the field that tests/unit/io checks."""
    got = _fresh(*order)
    assert got["Drafter"] == [
        ["extra_forbidden", "colour"],
        ["float_type", "unit_cost"],
        ["list_type", "acceptance"],  # acceptance: a probability or a list of them
        ["value_error", "acceptance"],
    ]
    assert got["problem"].startswith("drafters[a].colour: unknown field")
    assert "\n" not in got["problem"]


def test_the_same_refusals_in_either_order():
    assert _fresh("Drafter", "problem") == _fresh("problem", "Drafter")


GC_STATE = """
import gc, sys
from allocator.cli import uncollected_imports

for before in (True, False):
    (gc.enable if before else gc.disable)()
    frozen = gc.get_freeze_count()
    with uncollected_imports():
        during = gc.isenabled()
        import allocator.io.spec
    print(before, during, gc.isenabled(), gc.get_freeze_count() > frozen)
    sys.modules.pop("allocator.io.spec")
"""


def test_importing_the_commands_restores_the_collector():
    """Off while importing, back to what it was after (on or off), what was imported
    frozen (``gc.freeze``: skipped by later collections)."""
    r = subprocess.run([sys.executable, "-c", GC_STATE], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["True False True True", "False False False True"]
