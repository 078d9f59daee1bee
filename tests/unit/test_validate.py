"""allocator.validate: each check's accepting and refusing edges, its one message shape, and
one MAX_SEED in the package."""

import ast
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from allocator import validate
from allocator.exceptions import InputError, ParameterError
from allocator.validate import MAX_SEED, finite, probability, rate, seed, whole

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "allocator"
SHAPE = re.compile(r"^must be .+, got .+$")

NOT_NUMBERS = [True, False, np.bool_(True), "5", "inf", b"5", None, [1], 1 + 0j]


def refused(check, value, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        check(value, *args, **kwargs)
    assert SHAPE.match(info.value.message), info.value.message
    return info.value


# ------------------------------------------------------------------------------ whole
@pytest.mark.parametrize("value", [0, 7, -3, 2**63, np.int8(7), np.int64(-3), np.uint64(2**64 - 1)])
def test_whole_takes_ints_and_numpy_ints_as_int(value):
    got = whole(value, "n")
    assert type(got) is int and got == int(value)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 3.0, -0.0, np.float64(2.0), math.nan, math.inf])
def test_whole_refuses_what_is_not_an_integer(value):
    err = refused(whole, value, "num_prompts")
    assert type(err) is ParameterError and err.field == "num_prompts"
    assert err.message.startswith("must be an integer, got ")


@pytest.mark.parametrize("value", [3.0, -0.0, np.float64(2.0), np.float32(5.0), 1e15])
def test_whole_with_floats_takes_whole_floats(value):
    got = whole(value, "n", floats=True)
    assert type(got) is int and got == value
    assert str(whole(-0.0, "n", floats=True)) == "0"


@pytest.mark.parametrize("value", [2.5, math.nan, math.inf, -math.inf, True, "3"])
def test_whole_with_floats_refuses_the_rest(value):
    refused(whole, value, "n", floats=True)


def test_whole_bounds_are_inclusive_and_named():
    assert whole(1, "n", lo=1, hi=3) == 1 and whole(3, "n", lo=1, hi=3) == 3
    err = refused(whole, 0, "num_prompts", lo=1, hi=200_000)
    assert err.message == "must be an integer in 1..200,000, got 0"
    assert refused(whole, 4, "n", hi=3).message == "must be an integer <= 3, got 4"
    assert refused(whole, -1, "n", lo=0).message == "must be an integer >= 0, got -1"
    assert refused(whole, -1, "n", lo=0, hi=2**53).message.startswith(
        "must be an integer in 0..2**53,"
    )
    assert refused(whole, -1, "n", lo=0, hi=2**32).message.startswith(
        "must be an integer in 0..4,294,"
    )
    assert refused(whole, np.int64(-1), "n", lo=0).message.endswith("got -1")  # not np.int64(-1)


def test_whole_raises_the_class_asked_for():
    err = refused(whole, 0, "serving.hardware.count", lo=1, error=InputError)
    assert type(err) is InputError and err.field == "serving.hardware.count"


# ------------------------------------------------------------------------------- seed
@pytest.mark.parametrize("value", [0, 1, MAX_SEED, np.int64(MAX_SEED), np.uint64(5)])
def test_seed_takes_zero_to_max_seed(value):
    assert seed(value) == int(value)


@pytest.mark.parametrize(
    "value", [-1, 2**63, np.uint64(2**63), *NOT_NUMBERS, 1.0, -0.0, math.nan, math.inf]
)
def test_seed_refuses_the_rest_naming_seed(value):
    err = refused(seed, value)
    assert type(err) is ParameterError and err.field == "seed"
    assert err.message.startswith("must be an integer in 0..2**63 - 1, got ")


def test_seed_names_the_field_given():
    assert refused(seed, -1, "calibration.seed", error=InputError).field == "calibration.seed"


def test_max_seed_is_the_largest_int64():
    assert MAX_SEED == np.iinfo(np.int64).max


# ------------------------------------------------------------------------------- rate
@pytest.mark.parametrize("value", [1, 0.5, 5e-324, 1e308, np.float32(2.5), np.int64(3)])
def test_rate_takes_positive_finite_numbers_as_float(value):
    got = rate(value, "request_rate")
    assert type(got) is float and got == float(value)


@pytest.mark.parametrize("value", [0, 0.0, -0.0, -1, math.nan, math.inf, -math.inf, *NOT_NUMBERS])
def test_rate_refuses_the_rest(value):
    err = refused(rate, value, "request_rate")
    assert err.field == "request_rate" and err.message.startswith("must be a finite number > 0")


def test_rate_takes_inf_only_where_allowed():
    assert rate(math.inf, "request_rate", inf=True) == math.inf
    assert rate(np.float64("inf"), "request_rate", inf=True) == math.inf
    for value in (-math.inf, math.nan, 0, "inf"):
        err = refused(rate, value, "request_rate", inf=True, unit="requests/s")
        assert err.message.startswith("must be a number > 0 requests/s (or inf), got ")
    assert refused(rate, math.nan, "r").message == "must be a finite number > 0, got nan"


# ------------------------------------------------------------------------ probability
@pytest.mark.parametrize("value", [0, 0.0, -0.0, 1, 1.0, 0.5, np.float32(0.25), np.int64(1)])
def test_probability_takes_zero_to_one(value):
    got = probability(value, "acceptance")
    assert type(got) is float and got == float(value)
    assert math.copysign(1.0, probability(-0.0, "p")) == 1.0  # -0.0 comes back as 0.0


@pytest.mark.parametrize("value", [-1e-12, 1 + 1e-12, math.nan, math.inf, -math.inf, *NOT_NUMBERS])
def test_probability_refuses_the_rest(value):
    err = refused(probability, value, "acceptance")
    assert err.message.startswith("must be a number in [0, 1], got ")


def test_probability_open_ends():
    assert probability(0.5, "robust", zero=False, one=False) == 0.5
    for value in (0, 1, -0.0, 1.0):
        err = refused(probability, value, "robust", zero=False, one=False)
        assert err.message.startswith("must be a number in (0, 1), got ")
    assert refused(probability, 0, "p", zero=False).message == "must be a number in (0, 1], got 0"
    assert refused(probability, 1, "p", one=False).message == "must be a number in [0, 1), got 1"


# ----------------------------------------------------------------------------- finite
@pytest.mark.parametrize("value", [0, -0.0, -1e308, 1e308, np.float16(1.5), np.int64(2**62)])
def test_finite_takes_finite_numbers_as_float(value):
    got = finite(value, "context")
    assert type(got) is float and got == float(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, *NOT_NUMBERS])
def test_finite_refuses_the_rest(value):
    assert refused(finite, value, "context").message.startswith("must be a finite number, got ")


def test_finite_bounds_are_inclusive_and_named():
    assert finite(-0.0, "context", lo=0) == 0.0 and finite(2, "x", lo=0, hi=2) == 2.0
    err = refused(finite, -1, "context", lo=0, unit="tokens")
    assert err.message == "must be a finite number >= 0 tokens, got -1"
    assert refused(finite, 3, "x", lo=0, hi=2).message == "must be a finite number in [0, 2], got 3"
    assert refused(finite, 3, "x", hi=2.5).message == "must be a finite number <= 2.5, got 3"


# -------------------------------------------------------------------------- the shape
@pytest.mark.parametrize(
    "value,text",
    [
        ("fast", "'fast'"),
        ("\x1b[31m\u202e", "'\\x1b[31m\\u202e'"),  # escaped, never obeyed
        ("x" * 1000, "text of 1,000 characters (not shown)"),
        ("PASSWORD=hunter2", "text of 16 characters (not shown)"),
        ("user:secret@host", "text of 16 characters (not shown)"),
        (b"5", "a bytes"),
        ({"TOKEN": "abc"}, "a dict"),
        ([1, 2], "a list"),
        (None, "None"),
        (True, "True"),
        (np.int64(-3), "-3"),
        (np.float32(0.5), "0.5"),
        (-0.0, "-0.0"),
        (math.nan, "nan"),
        (2**63, "9223372036854775808"),
        (10**5000, "an integer of 16,610 bits"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_a_refused_value_is_shown_safely(value, text):
    """Text that may hold a secret (KEY=VALUE, user:password@) or runs long is not echoed;
    an integer too long for repr does not fail the message."""
    assert validate.shown(value) == text
    assert (
        refused(whole, value, "n", lo=1, hi=1).message == f"must be an integer in 1..1, got {text}"
    )


def test_the_message_holds_the_field_once_in_str():
    assert str(refused(seed, -1)) == "seed: must be an integer in 0..2**63 - 1, got -1"


# -------------------------------------------------------------------- one definition
def test_validate_imports_only_the_standard_library_numpy_and_the_exceptions():
    tree = ast.parse((PACKAGE / "validate.py").read_text(encoding="utf-8"))
    reached = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            reached.add(("." * node.level) + (node.module or ""))
        elif isinstance(node, ast.Import):
            reached |= {a.name for a in node.names}
    allowed = set(sys.stdlib_module_names) | {"__future__", "numpy", ".exceptions"}
    assert reached <= allowed, reached - allowed


def _defines_max_seed(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign | ast.AugAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "MAX_SEED" for t in targets):
            return True
    return False


def test_max_seed_is_defined_once_in_the_package():
    defining = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if _defines_max_seed(path)
    }
    assert "allocator/validate.py" in defining
    again = sorted(defining - {"allocator/validate.py"})
    assert not again, f"MAX_SEED defined again in {again}: import it from allocator.validate"
