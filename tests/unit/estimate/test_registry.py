"""The reader registry (``allocator.estimate.READERS``): registering, looking up, a new
reader used by ``estimate`` end to end, and the contract suite
(``tests/contract/test_readers_contract.py``) failing a reader that breaks it."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from allocator.estimate import (
    FORMATS,
    READERS,
    Estimate,
    Reader,
    ReadOptions,
    check_options,
    estimate,
    estimate_problem,
    format_options,
    get_reader,
    register,
)
from allocator.estimate.base import quote
from allocator.estimate.counts import DrafterCounts
from allocator.exceptions import InputError, ParameterError
from tests.contract import test_readers_contract as contract


class Toy(Reader):
    """One drafter, a line ``S/N`` per position: S of N rounds reaching it accepted."""

    name = "toy"
    reads = "S/N lines, one per position"
    options = ("k",)

    def read(self, path: Path, options: ReadOptions) -> Estimate:
        lines = [x.strip() for x in path.read_text().splitlines() if x.strip()]
        if not lines:
            raise InputError(path.name, "no S/N lines")
        pairs = []
        for i, line in enumerate(lines, start=1):
            s, _, n = line.partition("/")
            if not (s.isdigit() and n.isdigit()) or int(s) > int(n) or len(line) > 20:
                raise InputError(f"{path.name} line {i}", f"{quote(line)} is not S/N")
            pairs.append((int(s), int(n)))
        s_, n_ = (np.array(x, np.int64) for x in zip(*pairs, strict=True))
        return Estimate(
            source=self.name,
            drafters=[DrafterCounts(options.drafter, s_, n_)],
            k_max=options.k,
            notes=[f"read {len(pairs)} position(s)"],
        )


def toy_example(folder: Path) -> contract.Example:
    path = folder / "toy.txt"
    path.write_text("80/100\n50/80\n20/50\n")
    counts = {"d": ([80, 50, 20], [100, 80, 50])}
    return contract.Example(path, ReadOptions(out=folder / "p.yaml", drafter="d"), counts)


@pytest.fixture
def toy(monkeypatch) -> Toy:
    """The toy reader registered for one test (and its example given to the contract)."""
    reader = Toy()
    monkeypatch.setitem(READERS, reader.name, reader)
    monkeypatch.setitem(contract.EXAMPLES, reader.name, toy_example)
    return reader


def test_the_package_registers_its_formats_in_order():
    assert FORMATS == (
        "outcomes",
        "vllm-metrics",
        "vllm-log",
        "vllm-requests",
        "sglang-requests",
        "sglang-log",
    )
    assert all(get_reader(n) is READERS[n] for n in FORMATS)


def test_unknown_format_is_refused_naming_format():
    with pytest.raises(ParameterError) as exc:
        get_reader("csv")
    assert exc.value.field == "format"
    assert exc.value.message == "'csv' is not one of " + ", ".join(FORMATS)
    with pytest.raises(ParameterError) as exc:
        check_options("csv", "p.yaml")
    assert exc.value.field == "format"


def test_register_refuses_a_taken_name_and_unknown_options(monkeypatch):
    monkeypatch.setattr("allocator.estimate.READERS", dict(READERS))
    with pytest.raises(ValueError, match="already registered"):
        register(type("Other", (Toy,), {"name": "outcomes"})())
    with pytest.raises(ValueError, match="unknown option"):
        register(type("Odd", (Toy,), {"name": "odd", "options": ("window",)})())
    same = READERS["outcomes"]
    assert register(same) is same  # registering the same reader again is harmless


def test_a_registered_reader_is_used_by_estimate(toy, tmp_path):
    example = toy_example(tmp_path)
    est = estimate(example.path, "toy", tmp_path / "p.yaml", drafter_name="d", k=3)
    assert est.drafters[0].trials.tolist() == [100, 80, 50] and est.k_max == 3
    report = estimate_problem(example.path, tmp_path / "p.yaml", "toy", unit_cost=["draft=0.05"])
    assert report.fmt == "toy" and report.data["drafters"][0]["name"] == "draft"
    assert report.data["drafters"][0]["acceptance"] == pytest.approx([0.8, 0.625, 0.4])


def test_options_follow_the_registered_readers(toy, tmp_path):
    assert format_options()["k"] == ("sglang-requests", "sglang-log", "toy")
    assert check_options("toy", tmp_path / "p.yaml", k=2).k == 2
    with pytest.raises(ParameterError) as exc:
        check_options("toy", tmp_path / "p.yaml", topk=2)
    assert exc.value.field == "topk"


def test_the_toy_reader_passes_the_contract(toy, tmp_path):
    contract.check_declaration("toy", toy)
    example = toy_example(tmp_path)
    contract.check_counts(toy, example)
    contract.check_refuses(toy, example, tmp_path)


def test_a_reader_registered_without_an_example_fails(monkeypatch):
    monkeypatch.setitem(READERS, "toy", Toy())
    with pytest.raises(AssertionError, match="without an example: \\['toy'\\]"):
        contract.test_every_reader_has_an_example()


class Overcounts(Toy):
    """Reports more accepted rounds than reached the position."""

    def read(self, path, options):
        est = super().read(path, options)
        est.drafters[0].successes = est.drafters[0].trials + 1
        return est


class Prints(Toy):
    """Prints the file it reads."""

    def read(self, path, options):
        print(path.read_text())
        return super().read(path, options)


class Random(Toy):
    """Notes something different on every read."""

    def read(self, path, options):
        est = super().read(path, options)
        est.notes.append(f"run {random.random()}")
        return est


class TakesAnything(Toy):
    """Returns counts for a file it cannot read."""

    def read(self, path, options):
        try:
            return super().read(path, options)
        except InputError:
            return super().read(Path(__file__).with_name("__init__.py"), options)


class Crashes(Toy):
    """Lets ``int()``'s ValueError out of a file it cannot read."""

    def read(self, path, options):
        if "/" not in path.read_text():
            int(path.read_text())
        return super().read(path, options)


class EchoesTheFile(Toy):
    """Quotes the whole file it cannot read."""

    def read(self, path, options):
        try:
            return super().read(path, options)
        except InputError:
            raise InputError(path.name, f"cannot read {path.read_text()!r}") from None


class NamesNoFile(Toy):
    """Refuses a file without naming it."""

    def read(self, path, options):
        try:
            return super().read(path, options)
        except InputError:
            raise InputError("input", "unreadable") from None


class OptionError(Toy):
    """Blames an option for a file it cannot read."""

    def read(self, path, options):
        try:
            return super().read(path, options)
        except InputError:
            raise ParameterError("k", "cannot read the file") from None


class WrongDrafter(Toy):
    """Ignores the drafter name it is given."""

    def read(self, path, options):
        est = super().read(path, options)
        est.drafters[0].name = "draft"
        return est


@pytest.mark.parametrize(
    ("broken", "fails", "raised"),
    [
        (Overcounts, contract.check_counts, AssertionError),
        (Prints, contract.check_counts, AssertionError),
        (Random, contract.check_counts, AssertionError),
        (WrongDrafter, contract.check_counts, AssertionError),
        (TakesAnything, contract.check_refuses, AssertionError),
        (EchoesTheFile, contract.check_refuses, AssertionError),
        (NamesNoFile, contract.check_refuses, AssertionError),
        (OptionError, contract.check_refuses, AssertionError),
        (Crashes, contract.check_refuses, ValueError),
    ],
)
def test_a_reader_breaking_the_contract_fails_it(broken, fails, raised, monkeypatch, tmp_path):
    reader = broken()
    monkeypatch.setitem(READERS, "toy", reader)
    example = toy_example(tmp_path)
    args = (reader, example, tmp_path) if fails is contract.check_refuses else (reader, example)
    with pytest.raises(raised) as exc:
        fails(*args)
    assert not isinstance(exc.value, InputError)


def test_a_reader_misnamed_in_the_registry_fails_its_declaration(monkeypatch):
    reader = Toy()
    monkeypatch.setitem(READERS, "toy-2", reader)
    with pytest.raises(AssertionError):
        contract.check_declaration("toy-2", reader)
