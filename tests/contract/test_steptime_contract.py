"""The contract every step-time predictor keeps (docs/design.md §8), run on each one the
registry holds.

To add a predictor: register its class (``allocator.model.steptime.register``) and give
it a factory here (:data:`FACTORIES`, name → a callable returning a small instance with
``N`` drafters), or a classmethod ``example()`` on the class; a registered predictor with
neither fails :func:`test_every_registered_predictor_has_a_factory`. The suite only uses
inputs inside the instance's :meth:`domain` (the grid below is clipped to it), so a
predictor of measured tables passes by returning NaN outside them and numbers inside.
"""

from collections.abc import Callable

import numpy as np
import pytest

from allocator.model.steptime import AXES, PREDICTORS, StepTimePredictor

#: name → factory of a small instance, for predictors without an ``example()`` classmethod.
FACTORIES: dict[str, Callable[[], StepTimePredictor]] = {}


def _factory(name: str) -> Callable[[], StepTimePredictor] | None:
    if name in FACTORIES:
        return FACTORIES[name]
    return getattr(PREDICTORS[name], "example", None)


@pytest.fixture(params=sorted(PREDICTORS))
def predictor(request) -> StepTimePredictor:
    make = _factory(request.param)
    if make is None:
        pytest.fail(f"no factory for the registered predictor {request.param!r}")
    return make()


def _n(p: StepTimePredictor) -> int:
    """The drafters the instance knows (``members`` columns)."""
    for attr in ("drafters", "names"):
        v = getattr(p, attr, None)
        if v is not None:
            return len(v)
    return 1


def _clip(p: StepTimePredictor, axis: str, values: np.ndarray) -> np.ndarray:
    lo, hi = p.domain().get(axis, (-np.inf, np.inf))
    return np.clip(values, lo, hi)


def _grid(p: StepTimePredictor, size: int = 64, seed: int = 0):
    """Random rows inside the domain: speculating rows use drafter 0 as a chain."""
    rng = np.random.default_rng(seed)
    n = _n(p)
    k = _clip(p, "k", rng.integers(0, 6, size).astype(float)).astype(int)
    members = np.zeros((size, n), bool)
    members[:, 0] = k > 0
    return dict(
        members=members,
        draft_steps=k,
        verified=k + 1,
        decode_seqs=_clip(p, "decode_seqs", rng.integers(1, 128, size).astype(float)),
        context=_clip(p, "context", rng.uniform(0, 16000, size)),
        prefill=_clip(p, "prefill", rng.choice([0.0, 0.0, 256.0, 2048.0], size)),
    )


def _call(p, g):
    return p.step_ms(
        g["members"], g["draft_steps"], g["verified"], g["decode_seqs"], g["context"], g["prefill"]
    )


def test_every_registered_predictor_has_a_factory():
    missing = [n for n in PREDICTORS if _factory(n) is None]
    assert not missing, f"add a factory to FACTORIES or an example() classmethod: {missing}"


def test_registry_key_is_the_class_name_attribute():
    for name, cls in PREDICTORS.items():
        assert cls.name == name and issubclass(cls, StepTimePredictor)


def test_shape_b_out_for_b_in(predictor):
    for size in (1, 7, 64):
        out = _call(predictor, _grid(predictor, size))
        assert isinstance(out, np.ndarray) and out.shape == (size,)
        assert out.dtype.kind == "f"


def test_nan_or_positive(predictor):
    out = _call(predictor, _grid(predictor, 256, seed=1))
    ok = np.isnan(out) | (out > 0)
    assert ok.all() and np.isfinite(out[~np.isnan(out)]).all()
    assert (~np.isnan(out)).any(), "the predictor gives no step time anywhere in its domain"


@pytest.mark.parametrize(
    "axis, bump", [("decode_seqs", 5.0), ("context", 700.0), ("prefill", 300.0), ("verified", 1)]
)
def test_monotone_non_decreasing_in_each_load_axis(predictor, axis, bump):
    g = _grid(predictor, 128, seed=2)
    before = _call(predictor, g)
    moved = dict(g)
    moved[axis] = g[axis] + bump
    if axis != "verified":
        moved[axis] = _clip(predictor, axis, moved[axis])
    else:
        # one more verified token: a speculating row verifies a longer tree of the same depth
        moved["members"] = g["members"].copy()
        moved["members"][:, 0] = True
        moved["draft_steps"] = np.maximum(g["draft_steps"], 1)
        before = _call(
            predictor, dict(g, members=moved["members"], draft_steps=moved["draft_steps"])
        )
    after = _call(predictor, moved)
    both = ~np.isnan(before) & ~np.isnan(after)
    assert np.all(after[both] >= before[both] * (1 - 1e-12)), axis


def test_a_step_with_prefill_is_no_faster(predictor):
    g = _grid(predictor, 128, seed=3)
    without = _call(predictor, dict(g, prefill=np.zeros_like(g["prefill"])))
    with_pf = _call(predictor, dict(g, prefill=_clip(predictor, "prefill", g["prefill"] + 512)))
    both = ~np.isnan(without) & ~np.isnan(with_pf)
    assert np.all(with_pf[both] >= without[both] * (1 - 1e-12))


def test_no_drafting_and_one_token_is_the_plain_decoding_step(predictor):
    g = _grid(predictor, 64, seed=4)
    n = _n(predictor)
    plain = dict(g, draft_steps=np.zeros(64, int), verified=np.ones(64, int))
    anyone = _call(predictor, dict(plain, members=np.ones((64, n), bool)))
    nobody = _call(predictor, dict(plain, members=np.zeros((64, n), bool)))
    np.testing.assert_allclose(anyone, nobody, rtol=1e-12)
    assert (~np.isnan(nobody)).any()


def test_batch_axis_broadcasting(predictor):
    g = _grid(predictor, 16, seed=5)
    full = _call(predictor, g)
    # scalar arguments broadcast along the batch axis
    i = 3
    scalar = predictor.step_ms(
        g["members"][i],
        int(g["draft_steps"][i]),
        int(g["verified"][i]),
        float(g["decode_seqs"][i]),
        float(g["context"][i]),
        float(g["prefill"][i]),
    )
    assert scalar.shape == (1,)
    np.testing.assert_allclose(scalar, full[i : i + 1], rtol=1e-12)
    # one members row for every configuration; scalars beside (B,) arrays
    row = g["members"][i]
    mixed = predictor.step_ms(
        row, int(g["draft_steps"][i]), int(g["verified"][i]), g["decode_seqs"], 0.0, 0.0
    )
    each = predictor.step_ms(
        np.broadcast_to(row, (16, row.size)),
        np.full(16, g["draft_steps"][i]),
        np.full(16, g["verified"][i]),
        g["decode_seqs"],
        np.zeros(16),
        np.zeros(16),
    )
    assert mixed.shape == (16,)
    np.testing.assert_allclose(mixed, each, rtol=1e-12)


def test_bad_shapes_and_values_are_refused(predictor):
    n = _n(predictor)
    m = np.zeros((4, n), bool)
    ok = (m, np.zeros(4, int), np.ones(4, int), np.full(4, 8.0), np.zeros(4), np.zeros(4))
    predictor.step_ms(*ok)
    bad = [
        (np.zeros((4, n, 1), bool),) + ok[1:],  # members 3-D
        (np.zeros((4, n + 1), bool),) + ok[1:],  # a column too many
        (m.astype(int),) + ok[1:],  # members not bool
        ok[:1] + (np.zeros(3, int),) + ok[2:],  # lengths differ
        ok[:2] + (np.ones((4, 1), int),) + ok[3:],  # (B, 1) instead of (B,)
        ok[:3] + (np.full(4, -1.0),) + ok[4:],  # negative sequences
        ok[:2] + (np.zeros(4, int),) + ok[3:],  # verified < 1
        ok[:1] + (np.full(4, 1.5),) + ok[2:],  # fractional draft steps
        ok[:4] + (np.full(4, np.nan),) + ok[5:],  # NaN context
    ]
    for args in bad:
        with pytest.raises(ValueError):
            predictor.step_ms(*args)


def test_domain_names_known_axes_with_ordered_bounds(predictor):
    dom = predictor.domain()
    assert isinstance(dom, dict)
    for axis, (lo, hi) in dom.items():
        assert axis in AXES and lo <= hi
