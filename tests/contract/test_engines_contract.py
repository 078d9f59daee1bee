"""The contract every serving engine keeps (docs/design.md §8.8), run on each one the
registry (:data:`allocator.engines.ENGINES`) holds.

To add an engine: register it in ``ENGINES`` and give its output a parser here
(:data:`PARSERS`: the exported text → the settings as a dict of names to values, checked
against the engine's own schema as transcribed, version-pinned, in
:mod:`tests.support.engine_schemas`); a registered engine without one fails
:func:`test_every_engine_has_a_parser`. What an engine serves is its column of the method
table (:data:`allocator.core.methods.TABLE`, the attribute named like the engine).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable

import numpy as np
import pytest

from allocator.core.methods import METHODS, TABLE
from allocator.core.problem import DrafterInfo
from allocator.engines import (
    ENGINES,
    TARGETS,
    Engine,
    export_plan,
    export_point,
    export_schedule,
    export_tree,
    get_engine,
    settings,
)
from allocator.engines.sglang import sglang_tree
from allocator.exceptions import InputError, ParameterError
from tests.support.engine_schemas import check_sglang, check_vllm

KS = range(1, 9)


def parse_vllm(text: str) -> dict[str, object]:
    """``--speculative-config``: one JSON object vLLM 0.33.0's ``SpeculativeConfig``
    takes as written (:func:`tests.support.engine_schemas.check_vllm`)."""
    return check_vllm(json.loads(text))


def parse_sglang(text: str) -> dict[str, object]:
    """``launch_server`` flags: ``--flag value`` pairs that shlex round-trips and that SGLang
    0.5.23 takes as written (:func:`tests.support.engine_schemas.check_sglang`)."""
    words = shlex.split(text)
    assert shlex.join(words) + "\n" == text
    assert len(words) % 2 == 0, words
    flags, values = words[0::2], words[1::2]
    assert all(f.startswith("--") for f in flags), words
    assert not any(v.startswith("--") for v in values), words
    assert len(set(flags)) == len(flags), words
    check_sglang(words)
    return dict(zip(flags, values, strict=True))


#: engine name → parser of its exported text
PARSERS: dict[str, Callable[[str], dict[str, object]]] = {
    "vllm": parse_vllm,
    "sglang": parse_sglang,
}


def drafter(method: str | None, name: str | None = None, model: bool = True) -> DrafterInfo:
    """A drafter of ``method`` with the fields its method takes (a ``model`` where it
    takes one, prompt lookup for ``ngram``)."""
    takes = method is None or TABLE[method].model != "none"
    lookup = method == "ngram"
    return DrafterInfo(
        name=name or f"d-{method}",
        method=method,
        model="org/draft-model" if takes and model else None,
        prompt_lookup_min=2 if lookup else None,
        prompt_lookup_max=4 if lookup else None,
    )


@pytest.fixture(params=TARGETS)
def engine(request) -> Engine:
    return ENGINES[request.param]


def test_every_engine_has_a_parser():
    assert set(PARSERS) == set(ENGINES)


def test_registry_names_each_engine_by_its_name():
    assert TARGETS == tuple(ENGINES)
    for key, e in ENGINES.items():
        assert isinstance(e, Engine) and e.name == key and e.label
        assert get_engine(key) is e
    with pytest.raises(ParameterError) as exc:
        get_engine("no-such-engine")
    assert exc.value.field == "export"


def test_served_methods_are_the_engines_column_of_the_method_table(engine):
    column = {m for m in METHODS if getattr(TABLE[m], engine.name) is not None}
    assert set(engine.methods) == column
    assert all(engine.serves(m) == (m in column) for m in METHODS)


@pytest.mark.parametrize("k", KS)
def test_every_served_method_exports(engine, k):
    parse = PARSERS[engine.name]
    for method in engine.methods:
        d = drafter(method)
        value, notes = engine.chain_settings(d, k)
        text = engine.text(value)
        assert text.endswith("\n") and "\n" not in text[:-1]
        assert all(isinstance(n, str) and n.startswith("note:") for n in notes)
        parsed = parse(text)
        assert export_point(engine.name, {"drafters": [d.name], "k": k}, {d.name: d}) == (
            text,
            notes,
        )
        assert settings(engine.name, d, k) == (value, notes)
        if engine.name == "vllm":
            assert parsed["method"] == TABLE[method].vllm
            assert parsed["num_speculative_tokens"] == k
        elif engine.name == "sglang":
            assert parsed["--speculative-algorithm"] == TABLE[method].sglang
            assert check_sglang(shlex.split(text)).drafted == k


def test_a_drafter_without_method_exports_as_the_default_with_a_note(engine):
    d = drafter(None, "plain")
    value, notes = engine.chain_settings(d, 3)
    PARSERS[engine.name](engine.text(value))
    assert any("has no method" in n for n in notes)


def test_refused_methods_raise_a_parameter_error_naming_export(engine):
    for method in (m for m in METHODS if not engine.serves(m)):
        d = drafter(method)
        with pytest.raises(ParameterError) as exc:
            engine.chain_settings(d, 3)
        assert exc.value.field == "export" and engine.label in exc.value.message
        with pytest.raises(ParameterError) as exc:
            export_point(engine.name, {"drafters": [d.name], "k": 3}, {d.name: d})
        assert exc.value.field == "export"


def test_a_missing_required_model_is_refused(engine):
    for method in (m for m in engine.methods if TABLE[m].model == "required"):
        with pytest.raises(ParameterError) as exc:
            engine.chain_settings(drafter(method, model=False), 3)
        assert exc.value.field == "export" and "model" in exc.value.message


def test_a_pooled_configuration_is_refused(engine):
    a, b = drafter("eagle", "a"), drafter("eagle3", "b")
    drafters = {"a": a, "b": b}
    with pytest.raises(ParameterError) as exc:
        engine.check(["a", "b"], drafters)
    assert exc.value.field == "export" and engine.label in exc.value.message
    with pytest.raises(ParameterError) as exc:
        export_point(engine.name, {"drafters": ["a", "b"], "k": 3}, drafters)
    assert exc.value.field == "export"
    plan = {
        "problem": "p",
        "hosted": ["a", "b"],
        "workloads": [{"name": "w", "weight": 1.0, "drafters": ["a", "b"], "k": 3}],
    }
    with pytest.raises(ParameterError) as exc:
        export_plan(engine.name, plan, drafters)
    assert exc.value.field == "export"
    assert engine.check(["a"], drafters) is a


def test_settings_are_deterministic(engine):
    for method in engine.methods:
        d = drafter(method)
        for k in KS:
            first = engine.chain_settings(d, k)
            assert engine.chain_settings(d, k) == first
            assert engine.text(first[0]) == engine.text(engine.chain_settings(d, k)[0])


def test_plan_export_has_a_route_per_workload(engine):
    a, b = drafter("eagle", "a"), drafter("draft_model", "b")
    plan = {
        "problem": "p",
        "hosted": ["a", "b"],
        "workloads": [
            {"name": "chat", "weight": 0.7, "drafters": ["a"], "k": 4},
            {"name": "code", "weight": 0.3, "drafters": ["b"], "k": 2},
        ],
    }
    doc, _ = export_plan(engine.name, plan, {"a": a, "b": b})
    assert doc["engine"] == engine.name and [r["drafter"] for r in doc["routes"]] == ["a", "b"]
    json.dumps(doc)
    assert export_plan(engine.name, plan, {"a": a, "b": b}) == (doc, _)


P = np.array([[0.78, 0.36, 0.24], [0.72, 0.33, 0.22]])


def test_tree_export(engine):
    tree = sglang_tree(P, 3, 2, 5)
    d = drafter("eagle3")
    if not engine.has_trees:
        with pytest.raises(ParameterError) as exc:
            export_tree(engine.name, d, tree, 3, 2, 5)
        assert exc.value.field == "export"
        return
    text, notes = export_tree(engine.name, d, tree, 3, 2, 5)
    assert export_tree(engine.name, d, tree, 3, 2, 5) == (text, notes)
    parsed = PARSERS[engine.name](text)
    if engine.name == "vllm":  # no tree setting: the chain of the tree's depth
        assert parsed["num_speculative_tokens"] == tree.depth
        assert any("no token-tree setting" in n for n in notes)
        assert not any("[(" in n for n in notes)  # no legacy tree string (vllm.py docstring)
    elif engine.name == "sglang":
        assert parsed["--speculative-num-steps"] == "3"
        assert parsed["--speculative-eagle-topk"] == "2"
        assert parsed["--speculative-num-draft-tokens"] == "5"
        # topk > 1 with page size > 1 needs one of these backends (speculative_hook.py)
        assert any("flashinfer, fa3, triton" in n for n in notes)
    # NEXTN runs on SGLang's EAGLE worker and takes top-k > 1: mtp trees export too
    mtp_text, _ = export_tree(engine.name, drafter("mtp"), tree, 3, 2, 5)
    PARSERS[engine.name](mtp_text)
    for method in (m for m in METHODS if m not in ("eagle", "eagle3", "mtp")):
        other = drafter(method, "x")
        with pytest.raises(InputError) as exc:
            export_tree(engine.name, other, tree, 3, 2, 5)
        assert exc.value.field == "drafters[x].method"


ROWS = [
    {"batch": 1, "k": 4, "drafters": ["a"]},
    {"batch": 16, "k": 2, "drafters": ["a"]},
    {"batch": 64, "k": 0, "drafters": []},
]


def test_schedule_export(engine):
    drafters = {"a": drafter("eagle", "a"), "b": drafter("eagle", "b")}
    if not engine.has_schedule:
        with pytest.raises(ParameterError) as exc:
            export_schedule(engine.name, ROWS, drafters)
        assert exc.value.field == "export"
        return
    text, notes = export_schedule(engine.name, ROWS, drafters)
    assert export_schedule(engine.name, ROWS, drafters) == (text, notes)
    parsed = PARSERS[engine.name](text)
    if engine.name == "vllm":
        assert parsed["num_speculative_tokens"] == 4
        assert parsed["num_speculative_tokens_per_batch_size"] == [
            [1, 15, 4],
            [16, 63, 2],
            [64, 64, 0],
        ]
    pooled = [dict(ROWS[0], drafters=["a", "b"]), *ROWS[1:]]
    with pytest.raises(ParameterError) as exc:
        export_schedule(engine.name, pooled, drafters)
    assert exc.value.field == "export"


@pytest.mark.parametrize("field", ["engine", "export"])
def test_a_schedule_is_planned_only_for_an_engine_that_takes_one(engine, field):
    """``has_schedule`` is what the planner, the export and the simulator ask: an engine
    without it is refused on the parameter that named it, in one line."""
    from allocator.analysis.schedule import check_schedule_engine, schedule_engines

    assert (engine.name in schedule_engines()) == engine.has_schedule
    if engine.has_schedule:
        assert check_schedule_engine(engine.name, field) == engine.name
        return
    with pytest.raises(ParameterError) as exc:
        check_schedule_engine(engine.name, field)
    assert exc.value.field == field and "\n" not in exc.value.message
    assert exc.value.message.startswith(f"{engine.label} takes no k schedule by batch size")


@pytest.mark.parametrize("batch", [None, 1, 48, 49, 256])
def test_settings_for_a_stated_batch_size_stay_valid(engine, batch):
    """Every export for ``batch`` concurrent sequences still parses; SGLang's speculative
    default of 48 running requests (a default, not a cap) is raised to the batch size when
    it is above, left alone at or below, and said when the batch size is not stated."""
    parse = PARSERS[engine.name]
    for method in engine.methods:
        d = drafter(method)
        value, notes = engine.chain_settings(d, 3, batch=batch)
        parse(engine.text(value))
        if engine.name != "sglang":
            continue
        running = check_sglang(shlex.split(engine.text(value))).max_running_requests
        assert running == (max(48, batch) if batch is not None else 48)
        assert any("at most 48 requests" in n for n in notes) == (batch is None)
    tree = sglang_tree(P, 3, 2, 5)
    if engine.has_trees:
        text, _ = export_tree(engine.name, drafter("eagle3"), tree, 3, 2, 5, batch)
        parse(text)
    plan = {
        "problem": "p",
        "hosted": ["a"],
        "workloads": [{"name": "w", "weight": 1.0, "drafters": ["a"], "k": 3}],
    }
    doc, _ = export_plan(engine.name, plan, {"a": drafter("eagle", "a")}, batch)
    for route in doc["routes"]:
        parse(engine.text(route.get("speculative_config", route.get("flags"))))


def test_the_schedule_is_one_vllm_takes(engine):
    """The schedule's ranges pass vLLM 0.33.0's own validation (dynamic/utils.py) for any
    planned batch sizes, and a method whose schedule vLLM drops says so."""
    if not engine.has_schedule:
        return
    rng = np.random.default_rng(3)
    for _ in range(50):
        batches = np.unique(rng.integers(1, 300, size=rng.integers(1, 8)))
        ks = rng.integers(0, 6, size=batches.size)
        ks[0] = max(int(ks[0]), 1)
        rows = [
            {"batch": int(b), "k": int(k), "drafters": ["a"] if k else []}
            for b, k in zip(batches, ks, strict=True)
        ]
        text, _ = export_schedule(engine.name, rows, {"a": drafter("eagle3", "a")})
        PARSERS[engine.name](text)
    rows = [{"batch": 1, "k": 3, "drafters": ["s"]}, {"batch": 8, "k": 1, "drafters": ["s"]}]
    _, notes = export_schedule(engine.name, rows, {"s": drafter("suffix", "s")})
    assert any("V1 model runner" in n and "discards the schedule" in n for n in notes)
    assert any("--data-parallel-size" in n for n in notes)
    assert not any("VLLM_USE_V2_MODEL_RUNNER" in n for n in notes)
